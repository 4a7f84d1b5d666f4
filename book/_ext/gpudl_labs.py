"""The labs' first code cell, and the Chinese labs: ``notebooks/zh_CN/<lab>.ipynb`` made from
``notebooks/<lab>.ipynb`` and its catalogue (``locales/zh_CN/LC_MESSAGES/notebooks/<lab>.po``).

Every English lab's first code cell is written here (`first_cell`, `write_first_cells`), never
by hand. On Colab it installs ``gpudl`` from the wheel the built book ships (`gpudl_wheel`) where
the reader uploaded it, else from ``git+`` the address that ``repository.url`` in _config.yml
gives (the book's one setting for where it is published; while it is empty the cell says in one
line how to upload the wheel), then runs ``python -m gpudl toolchain --install``: the GPU, the
driver and the CUDA version it runs, the CUDA compiler pieces that suit it, installed, and one
line saying whether they fit. Anywhere else it prints one line, the same on every machine
(`NOT_ON_COLAB`, its stored output).

Markdown cells are translated message by message (a paragraph, a heading, a table cell: the
messages Sphinx's gettext extracts, found with the same markdown parser), and their relative
links point one folder up; code cells, outputs and metadata are copied unchanged, so the
Chinese lab computes and prints exactly what the English one does, and nbval runs only the
English one. ``python book/_ext/gpudl_po.py notebooks`` writes them; tests/test_i18n.py
checks that they are in sync."""

import copy
import json
import re
import textwrap
from pathlib import Path

from gpudl_po_checks import markdown_parser
from gpudl_wheel import wheel_name

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ZH_NOTEBOOKS = NOTEBOOKS / "zh_CN"
#: What the first cell prints off Colab (its stored output, on both backends).
NOT_ON_COLAB = "Not on Colab: this cell installs nothing (gpudl must already be importable)."
_HEADER = """\
# On Colab (choose a GPU runtime) this cell installs the book's package, gpudl, then the
# CUDA compiler pieces that suit the GPU's driver, and prints the GPU, the driver, those
# pieces and one line saying whether they fit. Elsewhere it does nothing.
# (Written by book/_ext/gpudl_labs.py from _config.yml: do not edit.)
"""
_INSTALL = "    !{sys.executable} -m gpudl toolchain --install\n"


def repository_url() -> str:
    """``repository.url`` of _config.yml: where the book is published (empty: nowhere yet)."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return ((config.get("repository") or {}).get("url") or "").strip().rstrip("/")


def _print(message: str) -> str:
    """A ``print`` of ``message`` (one line) written in lines that fit a code listing."""
    pieces = textwrap.wrap(message, 80, drop_whitespace=False)
    return "    print(" + "\n          ".join(f'"{piece}"' for piece in pieces) + ")\n"


def first_cell(url: str, wheel: str) -> str:
    """The source of every lab's first code cell. On Colab it installs the book's wheel
    (``wheel``, the file the built book ships) if the reader uploaded it to /content, else
    ``git+url`` (the repository's address), or, with ``url`` empty, says how to upload it."""
    source = (_HEADER + "import glob\nimport sys\n\n"
              + 'if "google.colab" not in sys.modules:\n' + _print(NOT_ON_COLAB)
              + 'elif wheels := sorted(glob.glob("/content/gpudl-*.whl")):  # the book\'s wheel\n'
              "    %pip install --quiet {wheels[-1]}\n" + _INSTALL + "else:\n")
    if url:
        return source + f'    %pip install --quiet "gpudl @ git+{url}"\n' + _INSTALL.rstrip("\n")
    upload = (f"Upload {wheel} (the book offers it in its preface and in each lab page's "
              "download menu) to /content with Colab's Files pane, then run this cell again: "
              f"it then runs %pip install /content/{wheel}")
    return source + _print(upload).rstrip("\n")


def first_code_cell(notebook: dict) -> dict:
    """A lab's first code cell (after its title and introduction): the install cell."""
    return next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")


def write_first_cells() -> list[Path]:
    """Give every English lab the first code cell `first_cell` makes from _config.yml, with the
    output it prints off Colab; the labs changed."""
    source = _source_lines(first_cell(repository_url(), wheel_name()))
    outputs = [{"name": "stdout", "output_type": "stream", "text": [NOT_ON_COLAB + "\n"]}]
    changed = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = json.loads(path.read_text())
        cell = first_code_cell(notebook)
        if (cell["source"], cell["outputs"]) != (source, outputs):
            cell.update(source=source, outputs=outputs,
                        execution_count=cell.get("execution_count") or 1)
            path.write_text(dumps(notebook))
            changed.append(path)
    return changed
_RELATIVE_LINK = re.compile(r"(\]\()(?!https?:|mailto:|#|/)([^)\s]+\))")


def _message(inline) -> str:
    return inline.content.replace("\n", " ").strip()


def translate_markdown(source: str, translated: dict[str, str]) -> tuple[str, list[str]]:
    """``source`` with every message that ``translated`` holds replaced by its translation,
    and the messages found in it (translated or not), in order."""
    lines = source.split("\n")
    tokens = markdown_parser().parse(source)
    found: list[str] = []
    edits: list[tuple[int, int, list[str]]] = []  # (first line, end line, new lines)
    row: list = []
    for i, token in enumerate(tokens):
        if token.type == "tr_open":
            row = []
        elif token.type == "inline" and tokens[i - 1].type in ("th_open", "td_open"):
            row.append(token)
        elif token.type == "tr_close" and row:
            found += [_message(cell) for cell in row]
            if any(_message(cell) in translated for cell in row):
                cells = [translated.get(_message(cell), cell.content) for cell in row]
                edits.append((row[0].map[0], row[0].map[1], ["| " + " | ".join(cells) + " |"]))
        elif token.type == "inline" and token.map and tokens[i - 1].type in (
                "paragraph_open", "heading_open"):
            message = _message(token)
            found.append(message)
            if message in translated:
                first = lines[token.map[0]]
                prefix = first[: first.index(token.content.split("\n")[0])]
                edits.append((token.map[0], token.map[1], [prefix + translated[message]]))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new
    return "\n".join(lines), found


def _source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def zh_notebook(english: dict, translated: dict[str, str]) -> tuple[dict, list[str]]:
    """The Chinese lab made from the notebook ``english``, and the messages of its markdown."""
    notebook = copy.deepcopy(english)
    found = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text, messages = translate_markdown("".join(cell["source"]), translated)
        found += messages
        cell["source"] = _source_lines(_RELATIVE_LINK.sub(r"\1../\2", text))
    return notebook, found


def dumps(notebook: dict) -> str:
    """A notebook as Jupyter writes it (one-space indentation, non-ASCII kept)."""
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
