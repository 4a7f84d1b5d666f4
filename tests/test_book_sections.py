"""Every module's "Book section" names sections the book has: a chapter number (or an appendix
letter) with quoted titles is checked against that chapter's headings, so a renamed section
fails here rather than leaving a reader looking for a title that is not there."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CHAPTERS = {int(p.name[2:4]): p for p in BOOK.glob("ch[0-9][0-9]-*.md")}
CHAPTERS[0] = BOOK / "preface.md"
#: The appendices that modules name by letter.
CHAPTERS["D"] = BOOK / "appendix-code.md"
CHAPTERS["E"] = BOOK / "appendix-profiles.md"
#: Quoted names in a "Book section" that are not headings: the GPU boxes' title.
NOT_HEADINGS = {"Measured on a GPU", "Measured on GPUs"}


def headings(path: Path) -> set[str]:
    """The page's headings, an appendix's title without its "Appendix E: "."""
    return {re.sub(r"^Appendix [A-Z]: ", "", re.sub(r"\s+", " ", m.group(1).strip()))
            for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(), re.M)}


def book_sections(doc: str) -> list[tuple[int, str]]:
    """``(chapter, title)`` for each quoted title in the first sentence of the docstring's
    "Book section", after the chapter (or preface, or appendix) it follows; chapter 0 is the
    preface, an appendix is its letter. What follows "after" (a source's title) or "README" is
    not a section of the book."""
    start = doc.find("Book section")
    if start < 0:
        return []
    paragraph = re.sub(r"\s+", " ", doc[start:].split("\n\n")[0]) + " "
    paragraph = re.split(r"\.\s| after |README", paragraph)[0]
    found, chapter = [], None
    for m in re.finditer(r'Chapter (\d+)|Preface|[Aa]ppendix ([A-Z])\b|"([^"]+)"', paragraph):
        if m.group(0) == "Preface":
            chapter = 0
        elif m.group(1):
            chapter = int(m.group(1))
        elif m.group(2):
            chapter = m.group(2)
        elif chapter is not None and m.group(3) not in NOT_HEADINGS:
            found.append((chapter, m.group(3)))
    return found


def docstrings(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


SECTIONS = sorted({(str(p.relative_to(ROOT)), chapter, title)
                   for p in (ROOT / "gpudl").rglob("*.py")
                   for doc in docstrings(p) for chapter, title in book_sections(doc)},
                  key=str)


def test_the_sections_are_read():
    assert ("gpudl/backend.py", 0, "Three ways to use this book") in SECTIONS
    assert len(SECTIONS) > 40
    assert book_sections('Book section: *Chapter 3, "A"* and "B"; Preface, "C". "D"') == [
        (3, "A"), (3, "B"), (0, "C")]
    assert book_sections('Book section: Chapter 3, "A", after X, "Title".') == [(3, "A")]
    assert book_sections('Book section: Chapter 1, "A"; appendix D, "B" and "C"') == [
        (1, "A"), ("D", "B"), ("D", "C")]


@pytest.mark.parametrize("module, chapter, title", SECTIONS)
def test_every_named_section_is_a_heading_of_its_chapter(module, chapter, title):
    assert chapter in CHAPTERS, f"{module}: there is no chapter {chapter}"
    assert title in headings(CHAPTERS[chapter]), (
        f"{module} names {title!r}, not a heading of {CHAPTERS[chapter].name}")
