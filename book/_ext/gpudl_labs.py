"""The Chinese labs: ``notebooks/zh_CN/<lab>.ipynb`` made from ``notebooks/<lab>.ipynb`` and
the lab's catalogue (``locales/zh_CN/LC_MESSAGES/notebooks/<lab>.po``).

Markdown cells are translated message by message (a paragraph, a heading, a table cell: the
messages Sphinx's gettext extracts, found with the same markdown parser), and their relative
links point one folder up; code cells, outputs and metadata are copied unchanged, so the
Chinese lab computes and prints exactly what the English one does, and nbval runs only the
English one. ``python book/_ext/gpudl_po.py notebooks`` writes them; tests/test_i18n.py
checks that they are in sync."""

import copy
import json
import re
from pathlib import Path

from gpudl_po_checks import markdown_parser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ZH_NOTEBOOKS = NOTEBOOKS / "zh_CN"
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
