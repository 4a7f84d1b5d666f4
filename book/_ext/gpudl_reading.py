"""The preface's table of how long each chapter takes to read (its words at an assumed pace) and
how many seconds its lab took when last executed (recorded in the notebook's metadata by
``python -m gpudl notebooks``). The directive ``{gpudl-lab-times}`` (``gpudl_directives.LabTimes``)
renders :func:`reading_and_lab_times`. Its words are the edition's (``gpudl_extension_text``:
the Chinese ones from ``locales/zh_CN/extensions.po``); its numbers are the same in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

from gpudl_extension_text import Words, edition, message, tr, translated


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


#: The reading pace the preface's estimates assume, in words of prose per minute (an assumed
#: pace for technical text with formulas and code, not a measurement).
WORDS_PER_MINUTE = 150

#: The directives whose body is prose that a reader reads: the admonitions (the dropdowns of
#: solutions and of "How this is checked" among them) and a figure's caption. Every other
#: directive's body is code (``literalinclude``), maths or what the book's own directives
#: write from data (``gpudl-measured``, ``gpudl-specs``), and is not counted.
PROSE_DIRECTIVES = frozenset({
    "admonition", "note", "tip", "hint", "important", "seealso", "warning", "attention",
    "caution", "danger", "error", "dropdown", "figure",
})
#: A word: a run of characters between spaces with at least one letter or digit in it (a
#: dash or a bar alone is not a word).
WORD = re.compile(r"\S*\w\S*")
#: The words a role without a title shows: ``{numref}`fig` `` is "Fig. 2.3", ``{eq}`` "(2.1)",
#: a glued value one number; ``{cite}`` shows a bracketed number, not read as a word.
ROLE_WORDS = {"numref": 2, "eq": 1, "cite": 0}
_TITLE = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)
_LABEL = re.compile(r"^\(([\w-]+)\)=\s*\n#+\s+(.+)$", re.M)


@cache
def _parser():
    """MyST's own markdown parser, with the extensions the book enables (``_config.yml``)."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    config = MdParserConfig(enable_extensions={"colon_fence", "dollarmath", "amsmath",
                                               "deflist", "substitution"})
    return create_md_parser(config, RendererHTML)


def section_titles(pages: list[str]) -> dict[str, str]:
    """The title of each labelled section of ``pages`` (MyST sources), label -> title: the
    words a ``{ref}`` without a title of its own shows."""
    return {label: title.strip() for text in pages for label, title in _LABEL.findall(text)}


def _role_text(name: str, content: str, titles: dict[str, str]) -> str:
    titled = _TITLE.match(content)
    if titled and name not in ("cite", "glue:text", "glue"):
        return titled.group(1)
    if name == "ref":
        return titles.get(content, "section")
    if name.startswith("glue"):
        return "0"
    return " ".join(["w"] * ROLE_WORDS.get(name, len(WORD.findall(content))))


def _inline_words(children, titles: dict[str, str]) -> int:
    """The words of one paragraph, heading or table cell as it reads: its text, the titles of
    its references, without inline code, maths or images."""
    parts = []
    for child in children:
        if child.type == "text":
            parts.append(child.content)
        elif child.type == "myst_role":
            parts.append(" " + _role_text(child.meta["name"], child.content, titles) + " ")
        elif child.type in ("softbreak", "hardbreak", "code_inline", "math_inline",
                            "math_inline_double", "image", "html_inline"):
            parts.append(" ")
    return len(WORD.findall("".join(parts)))


def _directive_body(content: str) -> str:
    """A directive's body without its options (``:name: value`` lines, or a YAML block)."""
    lines = content.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        return "\n".join(lines[end + 1:])
    while lines and re.match(r"^\s*:[\w-]+:", lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def prose_words(text: str, titles: dict[str, str] | None = None) -> int:
    """The words of prose in a page's MyST source, as MyST's own parser reads it: paragraphs,
    headings, lists, tables, admonitions (dropdowns included) and figure captions; not code,
    maths, or what the book's directives draw from data. A ``{ref}`` without a title counts
    the words of the section it names (``titles``, from :func:`section_titles`; by default the
    page's own)."""
    titles = section_titles([text]) if titles is None else titles
    words = 0
    for token in _parser().parse(text):
        if token.type == "inline":
            words += _inline_words(token.children or [], titles)
        elif token.type in ("fence", "colon_fence"):
            directive = re.match(r"^\{([\w:-]+)\}\s*(.*)$", token.info.strip())
            if directive and directive.group(1) in PROSE_DIRECTIVES:
                if directive.group(1) != "figure":  # a figure's argument is its file
                    words += len(WORD.findall(directive.group(2)))
                words += prose_words(_directive_body(token.content), titles)
    return words


#: The backends a lab's run records (``python -m gpudl notebooks``), as the table names them.
BACKENDS = (message("simulator"), message("cuda"))


def reading_and_lab_times(book: Path, notebooks: Path, language: str = "en",
                          on_missing: Callable[[str], None] | None = None) -> list[str]:
    """A table, one row per chapter: its words of prose (:func:`prose_words`) and the minutes
    they take at :data:`WORDS_PER_MINUTE`, and the seconds its lab took when last executed,
    with the backend and the CPU threads of that run (or that no run recorded its time). Its
    words are in ``language`` (``"en"`` or ``"zh_CN"``), its numbers the same; ``on_missing``
    is called with each text the Chinese catalogue lacks (by default, an error)."""
    if language not in ("en", "zh_CN"):
        raise ValueError(f"language must be 'en' or 'zh_CN', got {language!r}")
    words = Words(language) if on_missing is None else Words(language, on_missing)
    titles = section_titles([md.read_text() for md in sorted(book.glob("*.md"))])
    with edition(words):
        rows = [_row(md, notebooks, titles) for md in sorted(book.glob("ch[0-9][0-9]-*.md"))]
        header = [tr("chapter"), tr("words of prose"), tr("reading"),
                  tr("its lab, last executed")]
    return _table(header, rows)


def _row(md: Path, notebooks: Path, titles: dict[str, str]) -> list[str]:
    number = int(md.name[2:4])
    words = prose_words(md.read_text(), titles)
    lab = next(iter(sorted(notebooks.glob(f"{number:02d}-*.ipynb"))), None)
    run = json.loads(lab.read_text())["metadata"].get("gpudl") if lab else None
    if run is None:
        took = tr("not recorded")
    else:
        backend = translated(run["backend"]) if run["backend"] in BACKENDS else run["backend"]
        took = tr("{seconds} s on the {backend}, {threads} CPU threads, {date}",
                  seconds=f"{run['seconds']:,.0f}", backend=backend,
                  threads=run["cpu_threads"], date=run["date"])
    reading = tr("{minutes} min", minutes=f"{words / WORDS_PER_MINUTE:.0f}")
    return [f"{number}", f"{words:,}", reading, took]
