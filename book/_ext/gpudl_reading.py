"""The preface's table of how long each chapter takes to read (its words at an assumed pace) and
how long its lab took when last executed (recorded in the notebook's metadata by
``python -m gpudl notebooks``). The directive ``{gpudl-lab-times}`` (``gpudl_directives.LabTimes``)
renders :func:`reading_and_lab_times`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


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


#: The preface's table in the Chinese edition: its headers, and how a lab's run reads.
LAB_TIMES_ZH = {"header": ["章", "正文词数（英文原文）", "阅读时间", "其实验上次执行的耗时"],
                "none": "未记录", "minutes": "{minutes} 分钟",
                "took": "{minutes} 分钟，{backend}，{threads} 个 CPU 线程，{date}",
                "backend": {"simulator": "模拟器（simulator）", "cuda": "GPU（CUDA）"}}


def reading_and_lab_times(book: Path, notebooks: Path, language: str = "en") -> list[str]:
    """A table, one row per chapter: its words and the minutes they take at
    :data:`WORDS_PER_MINUTE`, and the minutes its lab took when last executed, with the
    backend and the CPU threads of that run (or that no run recorded its time). With
    ``language`` ``"zh_CN"`` its words are Chinese (:data:`LAB_TIMES_ZH`), its numbers the same."""
    if language not in ("en", "zh_CN"):
        raise ValueError(f"language must be 'en' or 'zh_CN', got {language!r}")
    zh = LAB_TIMES_ZH if language == "zh_CN" else None
    rows = []
    for md in sorted(book.glob("ch[0-9][0-9]-*.md")):
        number = int(md.name[2:4])
        words = prose_words(md.read_text())
        lab = next(iter(sorted(notebooks.glob(f"{number:02d}-*.ipynb"))), None)
        run = json.loads(lab.read_text())["metadata"].get("gpudl") if lab else None
        minutes = f"{words / WORDS_PER_MINUTE:.0f}"
        if run is None:
            took = zh["none"] if zh else "not recorded"
        elif zh:
            took = zh["took"].format(minutes=f"{run['seconds'] / 60:.0f}",
                                     backend=zh["backend"].get(run["backend"], run["backend"]),
                                     threads=run["cpu_threads"], date=run["date"])
        else:
            took = (f"{run['seconds'] / 60:.0f} min on the {run['backend']}, "
                    f"{run['cpu_threads']} CPU threads, {run['date']}")
        reading = zh["minutes"].format(minutes=minutes) if zh else f"{minutes} min"
        rows.append([f"{number}", f"{words:,}", reading, took])
    header = zh["header"] if zh else ["chapter", "words of prose", "reading",
                                      "its lab, last executed"]
    return _table(header, rows)
