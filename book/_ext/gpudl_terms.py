"""Glossary links: the first use of each glossary term in a chapter's or a lab's running prose
links to the term's row of the glossary (appendix B, book/appendix-glossary.md).

- Each row of the glossary's table gets an anchor made from its English cell (``term-warp``,
  ``term-l1-cache-l2-cache``), the same in both editions (:func:`row_anchor`).
- The English edition matches each English name of a term (`gpudl_glossary.terms`) as the
  translations' term check finds it (`gpudl_po_checks`): longest first (a ``thread block`` is
  not also a ``thread``), a plural in -s or -es, case-insensitive unless the name has a
  capital (``GPU``, ``SM``; a capital first letter at a sentence's start); a hyphenated
  compound (``warp-level``) or a unit (``flop/s``) is not a use. Here a hyphen may also stand
  for a space of the term (``tensor-core``), and a line break for a space.
- The Chinese edition matches each term's Chinese (the glossary's 中文 column, its notes in
  （） left out) and the bare names that the translation keeps as they are (``GPU``, ``SM``),
  only in a paragraph whose English (its message) uses the term, never inside an English
  gloss （warp）; where two rows share a Chinese (反向传播), the gloss that follows it,
  中文（English）, or the paragraph's English says which.
- Only running prose: not headings, captions, code, math, links, a lab's outputs, nor what a
  directive drew from data; not the glossary itself. A message whose translator exempted a term
  because it means something else there (``# terms: request (a client's request to the
  server, not a memory request)``) does not link it, in either edition.
- The link is quiet (``a.gpudl-term`` in book/_static/gpudl.css: a dotted underline), and its
  title is the term's meaning, in the edition's language (the glossary's third column).

It runs as a post-transform of the HTML builders, on each page's final doctree (the Chinese one
translated)."""

import fnmatch
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import gpudl_glossary
from docutils import nodes
from gpudl_po_checks import exemptions as exemption_comments
from gpudl_po_checks import other_meaning
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

GLOSSARY_DOC = "book/appendix-glossary"
#: The pages whose prose links the glossary's terms: the chapters and the labs.
TERM_PAGES = ("book/ch*", "notebooks/*")
CATALOGUES = Path(__file__).resolve().parents[2] / "locales" / "zh_CN" / "LC_MESSAGES"

logger = logging.getLogger(__name__)

#: No link inside these: headings, captions, code, math, links and what is not prose.
EXCLUDED = (nodes.title, nodes.subtitle, nodes.rubric, nodes.caption, nodes.legend,
            nodes.thead, nodes.term, nodes.literal, nodes.literal_block, nodes.doctest_block,
            nodes.math, nodes.math_block, nodes.raw, nodes.reference, nodes.target,
            nodes.footnote_reference, nodes.citation_reference, nodes.footnote, nodes.citation,
            nodes.label, nodes.topic, nodes.abbreviation, nodes.acronym, nodes.problematic,
            nodes.system_message, nodes.comment, addnodes.pending_xref, addnodes.desc,
            addnodes.toctree, addnodes.download_reference)
NOT_PROSE = ("cell_output", "output")  # a lab's outputs (myst-nb's containers)
_ENGLISH_PARENS = re.compile(r"\s*\([^)]*\)")
_GLOSS = re.compile(r"\s*[（(]([^）)]*)[）)]")
_LATIN_PARENS = re.compile(r"[（(][^（）()\u3400-\u9fff]*[）)]")  # （warp）, not （线程束）


@dataclass(frozen=True)
class Entry:
    """One name of a glossary term (`gpudl_glossary.Term`) and the row that defines it."""

    term: gpudl_glossary.Term
    row: int  # the row's index in the glossary's table
    anchor: str

    @property
    def key(self) -> tuple[int, str]:
        """The term, whichever of its names is used (``GPU``, ``graphics processing unit``):
        a page links it once."""
        return self.row, self.term.chinese


def row_anchor(english: str) -> str:
    """A row's anchor, from its English cell: ``term-`` and its names less any parenthesis,
    in lower case, joined by hyphens (``GPU (graphics processing unit)``: ``term-gpu``)."""
    name = _ENGLISH_PARENS.sub("", english).replace("α", "alpha").replace("β", "beta")
    return "term-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@cache
def entries(text: str | None = None) -> tuple[Entry, ...]:
    """Every name of every term (`gpudl_glossary.terms`), with the first row that names it."""
    rows = gpudl_glossary.rows(text)
    names = [{t.english for t in gpudl_glossary.terms("| " + " | ".join(row) + " |\n")}
             for row in rows]
    found = []
    for term in gpudl_glossary.terms(text):
        row = next(i for i, row_names in enumerate(names) if term.english in row_names)
        found.append(Entry(term, row, row_anchor(rows[row][0])))
    return tuple(found)


def _english(name: str) -> str:
    """``name`` in English prose, as `gpudl_po_checks` finds it (with its case where it has
    capitals, its first letter either way), a hyphen or a line break for a space."""
    pieces = [re.escape(p).replace("'", "['’]") for p in re.split(r"[\s-]+", name)]
    core = r"[\s\u00a0-]+".join(pieces)
    if name == name.lower():
        core = f"(?i:{core})"
    elif name[0].islower():  # split-KV decoding, Split-KV decoding
        core = f"[{name[0]}{name[0].upper()}]{core[1:]}"
    return rf"(?<![\w-])(?<!\w/){core}(?:e?s)?(?![\w-]|/\w)"


def _chinese(name: str) -> str:
    core = r"\s*".join(re.escape(p) for p in name.split())
    if re.match(r"\w", name[0], re.A):  # a Latin word's edge; a CJK character has none
        core = rf"(?<![A-Za-z0-9_-]){core}"
    if re.match(r"\w", name[-1], re.A):
        core = rf"{core}(?:e?s)?(?![A-Za-z0-9_-])"
    return core


class Matcher:
    """The glossary's terms in a text, as the edition writes them (``chinese``: the Chinese
    edition): :meth:`find` yields each use, the longest term at its place."""

    def __init__(self, found: tuple[Entry, ...], chinese: bool = False):
        alternatives: dict[str, tuple[str, list[Entry]]] = {}  # pattern: (name, entries)
        for entry in found:
            term = entry.term
            names = [term.english]
            if chinese:  # the Chinese, and a bare name the translation keeps as it is (GPU)
                names = [term.chinese] + ([term.english] if term.bare else [])
            for name in filter(None, names):
                pattern = _chinese(name) if chinese else _english(name)
                alternatives.setdefault(pattern, (name, []))[1].append(entry)
        # longest first: at each place the longest term that is there wins
        order = sorted(alternatives, key=lambda p: -len(alternatives[p][0]))
        self.candidates = [alternatives[p][1] for p in order]
        self.regex = re.compile("|".join(f"(?P<t{i}>{p})" for i, p in enumerate(order)))

    def find(self, text: str, keys: set | None = None):
        """(start, end, entry) of each use of a term in ``text``, in order. With ``keys`` (the
        terms that the English of a Chinese paragraph uses: `Entry.key`), only those: the
        Chinese word of a term can mean something else (通道, a lane or a channel). An English
        gloss in parentheses, 线程束（warp）, is not a use."""
        glosses = [g.span() for g in _LATIN_PARENS.finditer(text)] if keys is not None else []
        for match in self.regex.finditer(text):
            if any(start <= match.start() < end for start, end in glosses):
                continue
            candidates = self.candidates[int(match.lastgroup[1:])]
            if keys is not None:
                candidates = [c for c in candidates if c.key in keys]
            if not candidates:
                continue
            entry = candidates[0]
            gloss = _GLOSS.match(text, match.end())
            if len(candidates) > 1 and gloss:  # 反向传播（backpropagation）
                glossed = {g.strip().lower() for g in re.split(r"[，,、]", gloss.group(1))}
                entry = next((c for c in candidates if c.term.english.lower() in glossed),
                             entry)
            yield match.start(), match.end(), entry


@cache
def matcher(chinese: bool) -> Matcher:
    return Matcher(entries(), chinese)


@cache
def _exemptions(path: Path, mtime: float) -> dict[str, set[str]]:
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f)
    found = {m.id: {name for name, reason in exemption_comments(m.user_comments).items()
                    if other_meaning(reason)} for m in catalog if m.id}
    return {msgid: names for msgid, names in found.items() if names}


def exemptions(docname: str) -> dict[str, set[str]]:
    """The terms a page's translators exempted because the message means something else by
    them (``# terms: register (a verb)``), by message; not those exempted only from the
    first-use gloss (``a title: glossed below``)."""
    path = CATALOGUES / f"{docname}.po"
    return _exemptions(path, path.stat().st_mtime) if path.exists() else {}


_TEX = [(r"\\times", "×"), (r"\\cdot", "·"), (r"\\approx", "≈"), (r"\\le(q)?\b", "≤"),
        (r"\\ge(q)?\b", "≥"), (r"\\infty", "∞"), (r"\\sum_?", "Σ"), (r"\\bmod", "mod"),
        (r"\\[,;!: ]", " "), (r"\\([a-zA-Z]+)", r"\1"), (r"[{}]", "")]


def plain_text(node: nodes.Node) -> str:
    """A cell's text with its math as plain text (``a × b + c``), for a title attribute."""
    if isinstance(node, nodes.math):
        tex = node.astext()
        for pattern, repl in _TEX:
            tex = re.sub(pattern, repl, tex)
        return re.sub(r"\s+", " ", tex).strip()
    if isinstance(node, nodes.Text):
        return str(node)
    return "".join(plain_text(child) for child in node.children)


def _glossary_rows(document: nodes.document) -> list[nodes.row]:
    table = next(document.findall(nodes.table), None)
    body = next(table.findall(nodes.tbody), None) if table is not None else None
    return [row for row in body.children if isinstance(row, nodes.row)] if body else []


_meanings: dict[tuple[int, str], dict[int, str]] = {}


def meanings(env) -> dict[int, str]:
    """Each glossary row's meaning (its third cell) in the edition's language."""
    key = (id(env), env.config.language or "")
    if key not in _meanings:
        rows = _glossary_rows(env.get_doctree(GLOSSARY_DOC))
        _meanings[key] = {i: re.sub(r"\s+", " ", plain_text(row.children[2])).strip()
                          for i, row in enumerate(rows) if len(row.children) >= 3}
    return _meanings[key]


def _merge_texts(document: nodes.document) -> None:
    """Join the adjacent Text nodes of each paragraph's elements: MyST makes each line break
    of the source a Text node of its own, which would hide a term broken across two lines
    (``fused`` / ``multiply-add``)."""
    for paragraph in document.findall(nodes.paragraph):
        for element in paragraph.findall(nodes.Element):
            children, merged = element.children, []
            for child in children:
                if isinstance(child, nodes.Text) and merged and isinstance(merged[-1],
                                                                             nodes.Text):
                    merged[-1] = nodes.Text(merged[-1] + child)
                else:
                    merged.append(child)
            if len(merged) < len(children):
                element.children = []
                element.extend(merged)


def _prose(text: nodes.Text) -> nodes.paragraph | None:
    """The paragraph of running prose that ``text`` is in, or None."""
    paragraph, node = None, text.parent
    while node is not None:
        if isinstance(node, EXCLUDED) or node.get("gpudl_generated"):
            return None
        if isinstance(node, nodes.container) and set(node["classes"]) & set(NOT_PROSE):
            return None
        if paragraph is None and isinstance(node, nodes.paragraph):
            paragraph = node
        node = node.parent
    return paragraph


class GlossaryLinks(SphinxPostTransform):
    """The glossary's row anchors, and each chapter's and lab's first use of each term linked
    to its row."""

    default_priority = 800  # after the references are resolved (a link is not linked again)
    formats = ("html",)

    def run(self, **kwargs) -> None:
        docname = self.env.docname
        if docname == GLOSSARY_DOC:
            self.anchor_rows()
        elif GLOSSARY_DOC in self.env.found_docs and any(
                fnmatch.fnmatch(docname, p) for p in TERM_PAGES):
            self.link_terms(docname)

    def anchor_rows(self) -> None:
        rows, found = _glossary_rows(self.document), gpudl_glossary.rows()
        if len(rows) != len(found):
            logger.warning("the glossary's table has %d rows, gpudl_glossary reads %d: its "
                           "terms are not linked to the right rows", len(rows), len(found),
                           location=self.document, type="gpudl", subtype="terms")
            return
        for row, (english, *_) in zip(rows, found, strict=True):
            row["ids"].append(row_anchor(english))

    def link_terms(self, docname: str) -> None:
        chinese = bool(self.config.language and self.config.language.startswith("zh"))
        find, english = matcher(chinese).find, matcher(False).find
        exempt = exemptions(docname)
        glossary = self.app.builder.get_relative_uri(docname, GLOSSARY_DOC)
        meaning = meanings(self.env)
        linked: set[tuple[int, str]] = set()
        english_keys: dict[int, set] = {}  # a paragraph's (id): the terms its English uses
        _merge_texts(self.document)
        for text in list(self.document.findall(nodes.Text)):
            paragraph = _prose(text)
            if paragraph is None:
                continue
            source = paragraph.rawsource.replace("\n", " ").strip()
            skip = exempt.get(source, set())
            # a Chinese paragraph links the terms its English (its message) uses
            keys = None
            if chinese:
                if id(paragraph) not in english_keys:
                    english_keys[id(paragraph)] = {e.key for _, _, e in english(source)}
                keys = english_keys[id(paragraph)]
            parts, done = [], 0
            for start, end, entry in find(str(text), keys):
                if entry.key in linked or entry.term.english.lower() in skip:
                    continue
                linked.add(entry.key)
                if start > done:
                    parts.append(nodes.Text(text[done:start]))
                parts.append(nodes.reference(
                    "", text[start:end], internal=True, refuri=f"{glossary}#{entry.anchor}",
                    reftitle=meaning.get(entry.row, ""), classes=["gpudl-term"]))
                done = end
            if parts:
                if done < len(text):
                    parts.append(nodes.Text(text[done:]))
                parent = text.parent  # by identity: equal Text nodes compare equal
                index = next(i for i, child in enumerate(parent.children) if child is text)
                parent[index:index + 1] = parts


def _glossary_changed(app, env, added, changed, removed) -> list[str]:
    """A changed glossary changes every page's links (their anchors and titles): an
    incremental build writes them again."""
    if GLOSSARY_DOC not in added | changed:
        return []
    return [d for d in env.found_docs if any(fnmatch.fnmatch(d, p) for p in TERM_PAGES)]


def setup(app):
    app.add_post_transform(GlossaryLinks)
    app.connect("env-get-outdated", _glossary_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
