"""Local Sphinx extension for the book.

- puts the repository on sys.path, for autodoc and for the figures below;
- draws the prose's model figures (`gpudl_figures`) into book/_generated/ when the build
  starts, so a figure in the text is always the package's current answer;
- the ``{gpudl-specs}`` and ``{gpudl-kernel-registers}`` directives render tables from the
  package (`gpudl_tables`);
- ``{literalinclude}`` drops the kernel registry's decorators (``@registry.kernel``), and
  takes one more flag, ``:no-checks:``, which shows a function's teaching core: its input
  checks (``if ...: raise`` blocks and ``check_*`` calls) become one comment line, and stay
  in the source;
- serves the book's stylesheet (book/_static/gpudl.css: code boxes that hold
  ``LISTING_COLUMNS`` characters at 1280 px) and a script that shows the search page's
  snippets without TeX (book/_static/gpudl-search.js), and shows the repository and launch
  buttons only when ``repository.url`` is set in _config.yml;
- the ``{gpudl-lab-times}`` directive renders the preface's reading and lab times;
- the ``{gpudl-measured}`` directive renders a "Measured on a GPU" box from the stored
  ``results/<topic>-cuda.json`` (a table or figure, the speed goals, the GPU and commit), or
  says *not yet measured* where none is stored (`gpudl_measured`);
- resolves a reference to a name a package re-exports (``gpudl.hardware.describe``, the path
  the book teaches) to the module that defines it and where the API appendix documents it
  (``gpudl.hardware.device.describe``);
- drops missing references to types documented elsewhere (NumPy, torch, numba, matplotlib)
  so that `-n` (nitpicky) warns only about the book's own broken references."""

import ast
import os
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpudl_tables import KernelRegisters, SpecsTable  # noqa: E402  (book/_ext, beside this file)

EXTERNAL_TARGET_PREFIXES = (
    "numpy", "np.", "torch", "numba", "matplotlib", "pathlib", "concurrent", "collections.abc",
    "argparse"
)


#: The widest listing line (characters) that the code box holds at a window 1280 px wide:
#: measured in headless Chromium with book/_static/gpudl.css, 100 characters of DejaVu Sans
#: Mono (the widest common monospace font) in the text, in a list and in a solution's
#: dropdown alike, less three for other fonts and scroll bars.
LISTING_COLUMNS = 97

CHECKS_OMITTED = "# (input checks omitted here; they are in the source)"


def _is_check(statement: ast.stmt) -> bool:
    """An input check: ``if ...: raise ...`` without ``else``, a bare ``check_*(...)``, or a
    loop or ``if`` whose body holds nothing but checks (left in, it would show an empty
    body)."""
    if isinstance(statement, ast.If) and not statement.orelse and all(
            isinstance(s, ast.Raise) for s in statement.body):
        return True
    if isinstance(statement, ast.For | ast.While | ast.If) and not statement.orelse:
        return all(_is_check(s) for s in statement.body)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name.startswith(("check_", "_check"))
    return False


def strip_checks(code: str) -> str:
    """``code`` with each run of input checks replaced by one :data:`CHECKS_OMITTED` line."""
    lines = code.splitlines()
    tree = ast.parse(textwrap.dedent(code))
    runs: list[tuple[int, int]] = []  # (first line, last line), 0-based, inclusive
    previous_block = None
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for statement in block:
                if not _is_check(statement):
                    continue
                first, last = statement.lineno - 1, statement.end_lineno - 1
                if runs and runs[-1][1] + 1 == first and block is previous_block:
                    runs[-1] = (runs[-1][0], last)
                else:
                    runs.append((first, last))
                previous_block = block
    # a check inside a loop or if that is itself omitted goes with it
    runs = [run for run in runs
            if not any(o != run and o[0] <= run[0] and run[1] <= o[1] for o in runs)]
    for first, last in sorted(runs, reverse=True):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [indent + CHECKS_OMITTED]
    return "\n".join(lines) + ("\n" if code.endswith("\n") else "")


def strip_registration(code: str) -> str:
    """``code`` without its ``@registry.kernel(...)`` and ``@registry.factory(...)``
    decorators: the kernel registry's bookkeeping (names, signatures), not what a listing
    teaches."""
    lines, kept, depth = code.split("\n"), [], 0
    for line in lines:
        if depth == 0 and line.lstrip().startswith(("@registry.kernel(", "@registry.factory(")):
            depth = line.count("(") - line.count(")")
            continue
        if depth > 0:
            depth += line.count("(") - line.count(")")
            continue
        kept.append(line)
    return "\n".join(kept)


def listing_text(path: Path, options: dict) -> str:
    """The text a ``{literalinclude}`` of ``path`` with ``options`` shows (for the tests)."""
    reader = LiteralIncludeReader(str(path), options, SimpleNamespace(source_encoding="utf-8"))
    text, _ = reader.read()
    text = strip_registration(text)
    return strip_checks(text) if "no-checks" in options else text


class Listing(LiteralInclude):
    """``{literalinclude}`` without the kernel registry's decorators
    (:func:`strip_registration`), and with a ``:no-checks:`` flag (see :func:`strip_checks`)."""

    option_spec = {**LiteralInclude.option_spec, "no-checks": directives.flag}

    def run(self):
        result = super().run()
        for block in result[0].findall(nodes.literal_block):
            text = strip_registration(block.astext())
            if "no-checks" in self.options:
                text = strip_checks(text)
            block.rawsource = text
            block.children = [nodes.Text(text)]
        return result


def _draw_figures(app) -> None:
    if app.config.gpudl_model_figures:
        from gpudl_figures import draw
        from sphinx.util import logging

        draw(logging.getLogger(__name__))


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


def _resolve_reexported(app, env, node, contnode):
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


def _ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba)."""
    target = node.get("reftarget", "")
    type_variable = target.rsplit(".", 1)[-1] == "T"  # a TypeVar in a signature
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or type_variable or target == "Path":
        return contnode
    return None


#: The specs tables' headers in the Chinese edition (the glossary's terms).
def _buttons_from_repository(app, config) -> None:
    """Repository, issue and launch buttons only when ``repository.url`` is set: a book built
    from a fork that has not set it links to nothing it does not own. Only the book's theme
    (sphinx-book-theme) has these buttons; other themes are left alone."""
    if config.html_theme != "sphinx_book_theme":
        return
    options = config.html_theme_options
    has_repository = bool(options.get("repository_url"))
    options["use_repository_button"] = has_repository
    options["use_issues_button"] = has_repository
    if not has_repository:
        options.pop("launch_buttons", None)
        options.pop("repository_url", None)


class MeasuredBox(SphinxDirective):
    """``{gpudl-measured} TOPIC VIEW``: a "Measured on a GPU" box. Its content says what is
    measured; below it, the ``VIEW`` of ``results/TOPIC-cuda.json`` (``gpudl_results`` in the
    Sphinx config) with the goals it is held to and its provenance, or *not yet measured*
    where no such file exists. Without arguments the box has no benchmark behind it yet. A
    stored file that fails the schema of stored results (``gpudl.bench.results.load_record``:
    it must also hold a ``cuda`` record of its topic, with a commit) or that the view cannot
    draw is an error of the build naming the file and the field."""

    optional_arguments = 2
    has_content = True
    option_spec = {"title": directives.unchanged, "measured-by": directives.unchanged}

    def run(self):
        from gpudl_i18n import generated_nodes
        from gpudl_measured import box_markdown

        from gpudl.bench.results import load_record

        topic, view = (list(self.arguments) + [None, None])[:2]
        record = None
        try:
            if topic is not None:
                path = Path(self.config.gpudl_results) / f"{topic}-cuda.json"
                if path.exists():
                    self.env.note_dependency(str(path))
                    record = load_record(path)
            # figures beside the page: its _generated/ folder (book/_generated for the book)
            page = Path(self.env.doc2path(self.env.docname)).parent
            measured = box_markdown(topic, view, record, page / "_generated",
                                    self.options.get("measured-by"),
                                    self.config.language or "en")
        except Exception as err:  # noqa: BLE001  (any stored file the book cannot show is an
            # error of the build, naming the file and the field, never a crash of Sphinx)
            raise self.error(f"gpudl-measured {topic} {view}: {err}") from None
        box = nodes.admonition(classes=["important"])
        title = self.options.get("title", "Measured on a GPU")
        box += nodes.title(title, title)
        box[0].source, box[0].line = self.get_source_info()  # a message to translate
        source = f"gpudl-measured {topic} {view}"
        self.state.nested_parse(StringList(list(self.content), source=source),
                                self.content_offset, box)
        box += generated_nodes(self.state, measured, source, self.content_offset)
        return [box]


class LabTimes(SphinxDirective):
    """``{gpudl-lab-times}``: the preface's table of reading times (derived from each chapter's
    words) and lab times (as recorded in each notebook's metadata when it was last executed)."""

    def run(self):
        from gpudl_reading import reading_and_lab_times

        for path in (ROOT / "notebooks").glob("*.ipynb"):
            self.env.note_dependency(str(path))
        language = "zh_CN" if self.config.language == "zh_CN" else "en"
        lines = reading_and_lab_times(ROOT / "book", ROOT / "notebooks", language)
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="gpudl-lab-times"), 0, container)
        return container.children


def setup(app):
    app.add_config_value("gpudl_results", str(ROOT / "results"), "env")
    # `make book` draws the figures once (`make figures`), then builds both editions at once
    app.add_config_value("gpudl_model_figures", os.environ.get("GPUDL_MODEL_FIGURES") != "0",
                         "env")
    app.connect("config-inited", _buttons_from_repository)
    app.add_directive("literalinclude", Listing, override=True)
    app.config.html_static_path.append(str(Path(__file__).resolve().parents[1] / "_static"))
    app.add_css_file("gpudl.css")
    app.add_js_file("gpudl-search.js")
    app.add_directive("gpudl-measured", MeasuredBox)
    app.add_directive("gpudl-specs", SpecsTable)
    app.add_directive("gpudl-kernel-registers", KernelRegisters)
    app.add_directive("gpudl-lab-times", LabTimes)
    app.connect("builder-inited", _draw_figures)
    app.connect("missing-reference", _resolve_reexported)
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
