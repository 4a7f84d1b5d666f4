"""The glossary (book/appendix-glossary.md) read as the Chinese edition's dictionary.

Each row gives one or more English terms and their Chinese: terms separated by `` / `` pair up
in order (``rank / world size`` with ``进程 / 进程总数``), an English parenthesis is the
term's expansion or acronym (``streaming multiprocessor (SM)``: both are terms), a Chinese
parenthesis （…） is a note or another name that the translation does not use. Two uses:
the search index's dictionary for jieba (`search_dictionary`), and the term check of
`gpudl_po` (`terms`): a term rendered otherwise than the glossary says is reported."""

import re
from dataclasses import dataclass
from pathlib import Path

GLOSSARY = Path(__file__).resolve().parents[1] / "appendix-glossary.md"
CJK = re.compile(r"[\u3400-\u9fff]+")
_ENGLISH_PARENS = re.compile(r"\s*\(([^)]*)\)")
_CHINESE_PARENS = re.compile(r"（[^）]*）")


@dataclass(frozen=True)
class Term:
    """One English term and the Chinese the translation uses for it."""

    english: str
    chinese: str
    cell: str = ""  # the row's whole Chinese cell, notes included

    @property
    def name_like(self) -> bool:
        """Holds an acronym or a name (``GPU``, ``KV cache``, ``C ≈ 6ND``), or is kept in
        English by its Chinese cell (``token``, ``gloo``): found in the English with its case."""
        return bool(re.search(r"[A-Z0-9≈]", self.english)) or self.english in self.cell

    @property
    def bare(self) -> bool:
        """A bare acronym or name (``GPU``, ``SM``, ``NVLink``, ``Adam``, ``token``, a formula
        ``C ≈ 6ND``): the translation may keep it as it is, and need not gloss it. A longer term
        that holds one (``KV cache``, ``CUDA core``, ``L1 cache``) is translated and glossed."""
        return self.name_like and (" " not in self.english or "≈" in self.english)


def rows(text: str | None = None) -> list[tuple[str, str, str]]:
    """The glossary's rows: (English, 中文, meaning) cells, the header left out."""
    text = GLOSSARY.read_text() if text is None else text
    cells = [[c.strip() for c in line.strip().strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| ")]
    return [tuple(c[:3]) for c in cells if len(c) >= 3 and c[0] != "English"]


def terms(text: str | None = None) -> list[Term]:
    """Every English term with its Chinese: a row's `` / `` parts pair up; an English
    parenthesis holds more names of the same term (``GPU (graphics processing unit)``,
    ``matrix multiply (GEMM, SGEMM)``), each paired with the same Chinese."""
    found: dict[str, Term] = {}  # a name with a row of its own keeps that row's Chinese
    for english, chinese, _ in rows(text):
        english_parts = english.split(" / ")
        chinese_parts = [_CHINESE_PARENS.sub("", c).strip() for c in chinese.split(" / ")]
        if len(chinese_parts) != len(english_parts):
            chinese_parts = [_CHINESE_PARENS.sub("", chinese).strip()] * len(english_parts)
        for part, zh in zip(english_parts, chinese_parts, strict=True):
            names = [_ENGLISH_PARENS.sub("", part).strip()]
            for inner in _ENGLISH_PARENS.findall(part):
                if inner.startswith("of "):  # "recomputation (of attention)": a note
                    continue
                pieces = inner.split(", ")  # "(GEMM, SGEMM)", not "(single ..., multiple ...)"
                names += pieces if all(" " not in p for p in pieces) else [inner]
            for name in filter(None, names):
                found.setdefault(name, Term(name, zh, chinese))
    return list(found.values())


def search_dictionary(text: str | None = None) -> list[str]:
    """The Chinese words of the glossary (each term's, and the other names in its notes) for
    jieba's user dictionary: without them the search index cuts 线程束分化 into pieces that
    no query finds."""
    words = [w for term in terms(text) for w in CJK.findall(term.chinese)]
    notes = [n for _, chinese, _ in rows(text) for n in re.findall(r"（([^）]*)）", chinese)]
    words += [n for n in notes if CJK.fullmatch(n) and "的" not in n]
    return list(dict.fromkeys(w for w in words if len(w) > 1))
