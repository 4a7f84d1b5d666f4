"""Cross-references: a name a package re-exports (``gpudl.hardware.describe``, the path the book
teaches) resolves to the module that defines it and where the API appendix documents it
(``gpudl.hardware.device.describe``); a missing reference to a type documented elsewhere (NumPy,
torch, numba, matplotlib) is dropped, so that ``-n`` (nitpicky) warns only about the book's own
broken references. ``gpudl_sphinx`` connects both to Sphinx's ``missing-reference`` event.
"""

EXTERNAL_TARGET_PREFIXES = (
    "numpy", "np.", "torch", "numba", "matplotlib", "pathlib", "concurrent", "collections.",
    "argparse", "dist."
)


def _defining_name(name: str) -> str | None:
    """Where the object importable as ``name`` (``gpudl.pkg.obj``, or ``gpudl.pkg.Cls.meth``)
    is defined, when that is another module (a package's re-export, or a name one module
    imports from another): the defining module's path to it; else None."""
    import importlib
    import inspect
    import pkgutil

    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module
        try:
            module = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    else:
        return None
    package, attr, rest = ".".join(parts[:cut]), parts[cut], parts[cut + 1:]
    obj = getattr(module, attr, None)
    if obj is None:
        return None
    if inspect.isclass(obj) or inspect.isroutine(obj):
        home = obj.__module__
        return ".".join([home, obj.__qualname__, *rest]) if home != package else None
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):  # data: which module's?
        inner = importlib.import_module(f"{package}.{info.name}")
        if attr in getattr(inner, "__all__", ()) and vars(inner).get(attr) is obj:
            return ".".join([package, info.name, attr, *rest])
    return None


def resolve_reexported(app, env, node, contnode):
    """Resolve ``gpudl.pkg.obj`` (or ``obj`` inside a module of ``gpudl.pkg``) to where ``obj``
    is defined and documented."""
    if node.get("refdomain") != "py":
        return None
    target, module = node.get("reftarget", ""), node.get("py:module") or ""
    for name in (target, f"{module}.{target}", f"{module.rpartition('.')[0]}.{target}"):
        if not name.startswith("gpudl.") or "." not in name:
            continue
        defined = _defining_name(name)
        if defined and defined != name:
            found = env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder,
                                                      node["reftype"], defined, node, contnode)
            if found is not None:
                return found
    return None


def _type_alias(module: str, target: str) -> bool:
    """Whether ``target``, seen in a signature of ``module``, is a type alias that module uses
    (``Events = list[tuple[str, int]]``): an annotation, not a documented object."""
    import importlib
    import typing

    try:
        obj = getattr(importlib.import_module(module), target.rsplit(".", 1)[-1], None)
    except ImportError:
        return False
    return obj is not None and typing.get_origin(obj) is not None


def ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba), and to a
    module's type aliases in its signatures."""
    target = node.get("reftarget", "")
    type_variable = target.rsplit(".", 1)[-1] == "T"  # a TypeVar in a signature
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or type_variable or target == "Path":
        return contnode
    module = node.get("py:module") or ""
    if module.startswith("gpudl") and _type_alias(module, target):
        return contnode
    return None
