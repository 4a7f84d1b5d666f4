"""What counts as an English sentence in a page of the Chinese edition, and the visible text of a
built page that is held to having none (tests/test_zh_pages.py, tests/test_bench.py).

An English sentence is a run of :data:`WORDS` or more English words, or of
:data:`WORDS_WITH_STOP` or more ending in a full stop, outside parentheses. What passes, on
purpose: a kernel's or a function's name, an acronym, a unit, a product's name ("RTX A6000",
"Jetson Nano"), authors cited as "Korthikanti et al.", a quoted title of up to three words, and
the English gloss of a term in 中文（English） form, however long (the parentheses hold it).

The visible text of a page leaves out what the Chinese edition keeps in the code's or the
run's own words (CONTRIBUTING.md, "What stays English"): :data:`KEPT_TAGS` and the elements
of :data:`KEPT_CLASSES`, each with its reason.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

#: A run of this many English words is a sentence, or of :data:`WORDS_WITH_STOP` before a full
#: stop.
WORDS, WORDS_WITH_STOP = 4, 3
_WORD = r"[A-Za-z][A-Za-z0-9_'’.\-/]*"
_RUN = re.compile(rf"{_WORD}(?:[ \t\n\xa0,;:]+{_WORD})*")
_AUTHORS = re.compile(r"\bet al\.")  # "Korthikanti et al.": a name, as authors are cited
_PARENTHESES = re.compile("（[^（）\u2029]*）|\\([^()\u2029]*\\)")

#: Elements whose text is code, maths or what a script writes: code and its comments stay
#: English in both editions.
KEPT_TAGS = {"pre", "code", "kbd", "script", "style", "math", "svg", "head", "template"}
#: Classes whose element's text is not the book's prose, and why it stays English.
KEPT_CLASSES = {
    "highlight": "a listing (code)",
    "cell_output": "a lab's cell output, as the code printed it",
    "output": "a cell's output",
    "pasted-text": "a value glued from a lab's output ({glue:text})",
    "math": "inline and display maths",
    "citation-list": "the bibliography: each work under its own title",
    "py": "the API appendix's generated signatures and docstrings (the code's own text)",
    "gpudl-docstring": "a module docstring in the API appendix (the code's own text)",
    "gpudl-record": "a name or note a stored GPU run gives (a row, a kernel, a GPU)",
}
#: Elements that end a run of words: a table's cells, a list's items, paragraphs, headings.
_BLOCKS = {"address", "article", "aside", "blockquote", "button", "caption", "dd", "details",
           "div", "dl", "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5",
           "h6", "header", "li", "main", "nav", "ol", "p", "section", "summary", "table", "td",
           "th", "tr", "ul"}
_BREAK = "\u2029"  # a paragraph separator: no run of words goes through it
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
         "source", "track", "wbr"}


def english_sentences(text: str) -> list[str]:
    """The English sentences of ``text`` (see the module's docstring)."""
    previous, text = None, _AUTHORS.sub(" ", text)
    while previous != text:  # innermost parentheses first
        previous, text = text, _PARENTHESES.sub(" ", text)
    found = []
    for run in _RUN.finditer(text):
        words = [w for w in re.split("[ \t\n\xa0,;:]+", run.group(0)) if w]
        stop = words[-1].endswith(".") or text[run.end():run.end() + 1] == "."
        if len(words) >= WORDS or (stop and len(words) >= WORDS_WITH_STOP):
            found.append(run.group(0))
    return found


class VisibleText(HTMLParser):
    """The text a reader sees on a page (and the images' alt texts), less what
    :data:`KEPT_TAGS` and :data:`KEPT_CLASSES` keep in English."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._open: list[tuple[str, bool]] = []
        self._kept = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "img" and found.get("alt") and not self._kept:
            self.texts += [_BREAK, found["alt"], _BREAK]
        if tag in _BLOCKS or tag == "br":
            self.texts.append(_BREAK)
        if tag in _VOID:
            return
        classes = set((found.get("class") or "").split())
        kept = tag in KEPT_TAGS or bool(classes & set(KEPT_CLASSES))
        self._open.append((tag, kept))
        self._kept += kept

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS:
            self.texts.append(_BREAK)
        if tag in _VOID or not any(t == tag for t, _ in self._open):
            return
        while self._open:
            name, kept = self._open.pop()
            self._kept -= kept
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self._kept:
            self.texts.append(data)


def page_sentences(html: str) -> list[str]:
    """The English sentences in the visible text of the page ``html``."""
    parser = VisibleText()
    parser.feed(html)
    return english_sentences("".join(parser.texts))
