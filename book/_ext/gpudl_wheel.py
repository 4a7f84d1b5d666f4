"""The book ships its package: each edition's build writes ``gpudl-<version>-py3-none-any.whl``
beside the labs (``notebooks/`` of the built HTML), so a reader can install ``gpudl`` on any
GPU runtime from the book alone (the labs' first cell on Colab, `gpudl_labs.first_cell`).

The wheel is made from the working tree with the standard library only (no build backend, no
network): the package's modules and its package data, and the metadata pyproject.toml
declares (name, version, dependencies and extras, the ``gpudl`` command), written the same at
every build (fixed file times and order). The ``{gpudl-wheel}`gpudl``` role links to it with
its file name as the text (the preface), and every lab page's download menu offers it next to
the notebook. ``python book/_ext/gpudl_wheel.py FOLDER`` writes it into FOLDER."""

import base64
import hashlib
import sys
import tomllib
import zipfile
from functools import cache
from pathlib import Path

from docutils import nodes
from gpudl_editions import chinese
from gpudl_extension_text import ENGLISH, LANGUAGE, edition, tr

ROOT = Path(__file__).resolve().parents[2]
#: Where, in each edition's built HTML, the wheel lies: beside the labs.
FOLDER = "notebooks"
_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip file records: the same bytes at every build


@cache
def project() -> dict:
    """pyproject.toml's tables."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def wheel_name() -> str:
    """The wheel's file name, ``gpudl-<version>-py3-none-any.whl``."""
    meta = project()["project"]
    return f"{meta['name']}-{meta['version']}-py3-none-any.whl"


def requires_dist() -> list[str]:
    """The ``Requires-Dist`` lines of the metadata: the dependencies, then each extra's."""
    meta = project()["project"]
    lines = list(meta["dependencies"])
    for extra, requirements in meta.get("optional-dependencies", {}).items():
        for requirement in requirements:
            spec, _, marker = requirement.partition(";")
            condition = f'({marker.strip()}) and extra == "{extra}"' if marker else \
                f'extra == "{extra}"'
            lines.append(f"{spec.strip()}; {condition}")
    return lines


def _metadata() -> str:
    meta = project()["project"]
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}",
             f"Summary: {meta['description']}", f"License: {meta['license']['text']}",
             f"Requires-Python: {meta['requires-python']}"]
    lines += [f"Provides-Extra: {extra}" for extra in meta.get("optional-dependencies", {})]
    lines += [f"Requires-Dist: {line}" for line in requires_dist()]
    return "\n".join(lines) + "\n"


def _files() -> dict[str, bytes]:
    """The package's files (every module, and the package data pyproject.toml names) and the
    dist-info's, by their path in the wheel; RECORD is added when the wheel is written."""
    setuptools = project()["tool"]["setuptools"]
    name, version = project()["project"]["name"], project()["project"]["version"]
    package = ROOT / name
    paths = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    for pattern in setuptools.get("package-data", {}).get(name, []):
        paths += sorted(package.glob(pattern))
    files = {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in paths}
    info = f"{name}-{version}.dist-info"
    scripts = project()["project"].get("scripts", {})
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: gpudl_wheel (book/_ext)\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
        f"{command} = {target}\n" for command, target in scripts.items())).encode()
    return files


def _digest(data: bytes) -> str:
    """A RECORD line's hash: SHA-256, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(folder: Path) -> Path:
    """Write the wheel into ``folder`` (created if need be); its path."""
    files = _files()
    info = next(path.split("/")[0] for path in files if path.endswith(".dist-info/METADATA"))
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / wheel_name()
    partial = target.with_name(f".{target.name}.part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, _TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    partial.replace(target)
    return target


def _relative(docname: str) -> str:
    """The wheel's URL from the page ``docname`` (the html builder: one file per page)."""
    return "../" * docname.count("/") + f"{FOLDER}/{wheel_name()}"


def wheel_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{gpudl-wheel}`gpudl```: a link to the wheel the build ships, its file name as text."""
    package = project()["project"]["name"]
    if text != package:
        message = inliner.reporter.error(f"{{gpudl-wheel}} names the package {package!r}, not "
                                         f"{text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    docname = inliner.document.settings.env.docname
    link = nodes.reference(rawtext, "", refuri=_relative(docname))
    link += nodes.literal(wheel_name(), wheel_name())
    return [link], []


def _download_entry(app, pagename, templatename, context, doctree) -> None:
    """A lab page's download menu offers the wheel beside its notebook."""
    if not pagename.startswith(f"{FOLDER}/"):
        return
    words = chinese() if app.config.language == LANGUAGE else ENGLISH
    with edition(words):
        tooltip = tr("The book's package, gpudl (install it on any GPU runtime)")
    for group in context.get("header_buttons") or []:
        if group.get("label") == "download-buttons":
            group["buttons"].insert(1, {
                "type": "link", "url": _relative(pagename), "text": ".whl",
                "icon": "fas fa-box", "label": "download-wheel-button", "tooltip": tooltip})


def _ship(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        build(Path(app.outdir) / FOLDER)


def setup(app) -> None:
    app.add_role("gpudl-wheel", wheel_role)
    app.connect("html-page-context", _download_entry, priority=503)  # after the theme's buttons
    app.connect("build-finished", _ship)


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "wheel"))
