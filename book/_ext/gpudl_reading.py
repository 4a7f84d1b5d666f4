"""The preface's table of how long each chapter takes to read (its words at an assumed pace) and
how long its lab took when last executed (recorded in the notebook's metadata by
``python -m gpudl notebooks``). The directive ``{gpudl-lab-times}`` (``gpudl_directives.LabTimes``)
renders :func:`reading_and_lab_times`. Its words are the edition's (``gpudl_extension_text``:
the Chinese ones from ``locales/zh_CN/extensions.po``); its numbers are the same in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from gpudl_extension_text import Words, edition, message, tr, translated


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


#: The reading pace the preface's estimates assume, in words of prose per minute (an assumed
#: pace for technical text with formulas and code, not a measurement).
WORDS_PER_MINUTE = 150


def prose_words(text: str) -> int:
    """The words of a chapter's MyST source outside its code and directive fences (the prose a
    reader reads; listings and figures are not counted)."""
    words, fence = 0, None
    for line in text.splitlines():
        marker = re.match(r"^\s*(`{3,}|:{3,})", line)
        if marker and fence is None:
            admonition = re.match(r"^\s*(`{3,}|:{3,})\{(admonition|note|figure)\}", line)
            fence = None if admonition else marker.group(1)
            continue
        if fence is not None:
            fence = None if line.strip() == fence else fence
            continue
        words += len(line.split())
    return words


#: The backends a lab's run records (``python -m gpudl notebooks``), as the table names them.
BACKENDS = (message("simulator"), message("cuda"))


def reading_and_lab_times(book: Path, notebooks: Path, language: str = "en",
                          on_missing: Callable[[str], None] | None = None) -> list[str]:
    """A table, one row per chapter: its words and the minutes they take at
    :data:`WORDS_PER_MINUTE`, and the minutes its lab took when last executed, with the
    backend and the CPU threads of that run (or that no run recorded its time). Its words
    are in ``language`` (``"en"`` or ``"zh_CN"``), its numbers the same; ``on_missing`` is
    called with each text the Chinese catalogue lacks (by default, an error)."""
    if language not in ("en", "zh_CN"):
        raise ValueError(f"language must be 'en' or 'zh_CN', got {language!r}")
    words = Words(language) if on_missing is None else Words(language, on_missing)
    with edition(words):
        rows = [_row(md, notebooks) for md in sorted(book.glob("ch[0-9][0-9]-*.md"))]
        header = [tr("chapter"), tr("words of prose"), tr("reading"),
                  tr("its lab, last executed")]
    return _table(header, rows)


def _row(md: Path, notebooks: Path) -> list[str]:
    number = int(md.name[2:4])
    words = prose_words(md.read_text())
    lab = next(iter(sorted(notebooks.glob(f"{number:02d}-*.ipynb"))), None)
    run = json.loads(lab.read_text())["metadata"].get("gpudl") if lab else None
    if run is None:
        took = tr("not recorded")
    else:
        backend = translated(run["backend"]) if run["backend"] in BACKENDS else run["backend"]
        took = tr("{minutes} min on the {backend}, {threads} CPU threads, {date}",
                  minutes=f"{run['seconds'] / 60:.0f}", backend=backend,
                  threads=run["cpu_threads"], date=run["date"])
    reading = tr("{minutes} min", minutes=f"{words / WORDS_PER_MINUTE:.0f}")
    return [f"{number}", f"{words:,}", reading, took]
