"""The Chinese edition: one source, two builds (Sphinx's gettext; CONTRIBUTING.md,
"Translations"). The English book is built by `jupyter-book build`, the Chinese one by
`sphinx-build -t zh_CN` with the root conf.py (`make book`); the catalogues live in
``locales/zh_CN/LC_MESSAGES/<page>.po``, one per page.

What this extension does, in every build:

- keeps out of the catalogues what must not be translated: display math (a translated
  ``$$`` block comes back wrapped in reST ``::`` and is destroyed), the API appendix's
  docstrings and object descriptions (their messages give hundreds of "inconsistent term
  references", and their field names come out already translated), and what a
  ``{gpudl-measured}`` box draws from stored results (it changes at every GPU run);
- gives the cells of a table inside an admonition the source that MyST leaves out (without
  it Sphinx neither extracts nor translates them);
- drops the empty caption that sphinx-external-toc gives a chapter's toctree (it puts a
  second ``msgid ""`` into the chapter's catalogue, which msgfmt rejects as a duplicate);
- translates the toctree's part captions, which sphinx-external-toc inserts after Sphinx's
  own translation has run;
- makes Sphinx's Chinese search index linear in the book's size (`_TermSet`);
- keeps the anchors of a translated paragraph that cites one key twice (`CitationIds`);
- sets up ``gpudl_editions``: the language switch, the landing page, the Chinese labs'
  downloads, and the configuration's and the theme's words in Chinese.

In the Chinese build it also fails (a warning, and the build runs with ``-W``) on any message
of a translated page that has no translation, or only a fuzzy one, and on a translation whose
message no page has any more; and it marks the API appendix's module docstrings
(``gpudl-docstring``), which stay in the code's English, as tests/test_zh_pages.py reads them."""

import fnmatch
import logging
from functools import cache
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging as sphinx_logging
from sphinx.util.nodes import extract_messages

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = "zh_CN"
CATALOGUES = ROOT / "locales" / LANGUAGE / "LC_MESSAGES"
PENDING = ROOT / "locales" / LANGUAGE / "pending.txt"
#: The class of a module docstring's nodes in the Chinese build's API appendix.
DOCSTRING_CLASS = "gpudl-docstring"

logger = sphinx_logging.getLogger(__name__)


def write_search_dictionary(folder: Path) -> Path:
    """jieba's user dictionary, the glossary's Chinese terms, into ``folder``: Sphinx's
    Chinese search index (``html_search_options``) cuts its text with it."""
    from gpudl_glossary import search_dictionary

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "jieba-glossary.txt"
    path.write_text("".join(f"{word}\n" for word in search_dictionary()), encoding="utf-8")
    return path


def pending() -> list[str]:
    """The pages (glob patterns of docnames) whose translation is still to be written."""
    if not PENDING.exists():
        return []
    lines = (line.split("#", 1)[0].strip() for line in PENDING.read_text().splitlines())
    return [line for line in lines if line]


def is_pending(docname: str) -> bool:
    return any(fnmatch.fnmatch(docname, pattern) for pattern in pending())


def catalogue_path(docname: str) -> Path:
    return CATALOGUES / f"{docname}.po"


@cache
def _read(path: Path, mtime: float) -> dict[str, str]:
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def translations(docname: str) -> dict[str, str]:
    """``docname``'s translated messages (fuzzy ones are not translations), msgid -> msgstr."""
    path = catalogue_path(docname)
    return _read(path, path.stat().st_mtime) if path.exists() else {}


class KeepUntranslatable(SphinxTransform):
    """Display math and the docstrings of the API appendix stay out of the catalogues (in
    the Chinese build, a module docstring's text is marked with :data:`DOCSTRING_CLASS`); so
    do the alt texts of a measured box's figures in the catalogue build."""

    default_priority = 15  # before Sphinx's Locale (20)

    def apply(self, **kwargs) -> None:
        for node in self.document.findall(nodes.math_block):
            node["translatable"] = False
        for node in self.document.findall(nodes.Element):
            if "docstring of" in (node.source or ""):
                if isinstance(node, nodes.TextElement):
                    node["translatable"] = False
                if self.config.language == LANGUAGE:
                    node["classes"].append(DOCSTRING_CLASS)
        for desc in self.document.findall(addnodes.desc):  # its field names too ("Parameters")
            for node in desc.findall(nodes.TextElement):
                node["translatable"] = False
        if self.app.builder.name == "gettext":
            for node in self.document.findall(nodes.image):
                if node.get("gpudl_generated"):
                    node.attributes.pop("alt", None)


class SourceNestedTables(SphinxTransform):
    """MyST gives the cells of a table inside an admonition (the chapters' "What the source
    articles claimed" boxes) no source, and Sphinx skips a message without one, in the
    catalogues and in the translation: each such cell takes the source and line of the
    nearest element above it that has them. The tables that directives draw from data (the
    specs, the lab times) have no source either, and keep none: they stay English."""

    default_priority = 15  # before Sphinx's Locale (20)

    def apply(self, **kwargs) -> None:
        for box in self.document.findall(nodes.Admonition):
            for node in (n for table in box.findall(nodes.table)
                         for n in table.findall(nodes.TextElement)):
                above = node.parent
                while not node.source and above is not None:
                    node.source, node.line = above.source, above.line
                    above = above.parent


def generated_nodes(state, lines: list[str], source: str, offset: int) -> list[nodes.Node]:
    """``lines`` of markdown that a directive drew from data (a measured box's table, not the
    author's text), parsed and marked as not for translation."""
    parent = nodes.Element()
    state.nested_parse(StringList(lines, source=source), offset, parent)
    for node in parent.findall(nodes.Element):
        node["gpudl_generated"] = True
        if isinstance(node, nodes.TextElement):
            node["translatable"] = False
    return parent.children


class RecordMessages(SphinxTransform):
    """The Chinese build's freshness check, first half: a page's English messages, as they are
    just before Locale translates them (`_check_untranslated` has the second half)."""

    default_priority = 19

    def apply(self, **kwargs) -> None:
        if self.config.language == LANGUAGE:
            self.env.temp_data["gpudl_messages"] = [
                (node, msg) for node, msg in extract_messages(self.document)
                if not node.get("gpudl_generated")]


class TranslateCaptions(SphinxTransform):
    """Translate the part captions ("Chapters") that sphinx-external-toc inserts (priority
    100) after Locale has run."""

    default_priority = 105

    def apply(self, **kwargs) -> None:
        if self.config.language != LANGUAGE:
            return
        captions = [t for t in self.document.findall(addnodes.toctree) if t.get("rawcaption")]
        translated = translations(self.env.docname)
        for toctree in captions:
            self.env.temp_data.setdefault("gpudl_messages", []).append(
                (toctree, toctree["rawcaption"]))
            toctree["caption"] = translated.get(toctree["rawcaption"], toctree["caption"])


class CitationIds(SphinxTransform):
    """Sphinx's Locale gives every citation of a translated message the ids of the last
    citation of the same key in the English (`update_pending_xrefs` keeps one node per
    target), so a paragraph that cites a key twice loses the first one's anchor, which the
    bibliography's back link points at, and repeats the second's. Before Locale this records
    each such message's citation ids in order (``stage`` "record"); after it, it gives them
    back to its translated citations, key by key in the same order (``stage`` "restore")."""

    stage, default_priority = "record", 18

    def apply(self, **kwargs) -> None:
        if self.config.language != LANGUAGE:
            return
        recorded = self.env.temp_data.setdefault("gpudl_citation_ids", {})
        for node in list(self.document.findall(nodes.TextElement)):
            cites = [x for x in node.children if isinstance(x, addnodes.pending_xref)
                     and x.get("refdomain") == "cite" and x.get("ids")]
            keys = [x["reftarget"] for x in cites]
            if self.stage == "record" and len(set(keys)) < len(keys):
                recorded[id(node)] = (node, [(x["reftarget"], list(x["ids"])) for x in cites])
            elif self.stage == "restore" and id(node) in recorded:
                queue = recorded.pop(id(node))[1]
                for cite in cites:
                    ids = next((i for k, i in queue if k == cite["reftarget"]), None)
                    if ids is not None:
                        queue.remove((cite["reftarget"], ids))
                        cite["ids"] = ids
                        self.document.ids.update(dict.fromkeys(ids, cite))


class RestoreCitationIds(CitationIds):
    stage, default_priority = "restore", 21


def _check_untranslated(app, doctree) -> None:
    """Every message of a translated page has a translation (not a fuzzy one). The messages
    counted are those still in the page once every transform has run, as the catalogue
    builder sees them (a notebook's metadata, say, is gone by then); they are kept for
    `_check_obsolete`."""
    env = app.env
    found = env.temp_data.pop("gpudl_messages", None)
    if found is None:
        return
    final = {id(node) for node in doctree.findall(nodes.Element)}
    found = [(node, msg) for node, msg in found if id(node) in final]
    _messages(env)[env.docname] = {msg for _, msg in found}
    if is_pending(env.docname):
        return
    translated = translations(env.docname)
    for node, msg in found:
        if msg not in translated:
            logger.warning("untranslated message %r: run `make po`, then translate it in %s",
                           msg[:70], catalogue_path(env.docname).relative_to(ROOT),
                           location=node, type="gpudl", subtype="i18n")


def _messages(env) -> dict[str, set[str]]:
    if not hasattr(env, "gpudl_messages"):
        env.gpudl_messages = {}
    return env.gpudl_messages


def _purge(app, env, docname) -> None:
    _messages(env).pop(docname, None)


def _merge(app, env, docnames, other) -> None:
    for docname in docnames:
        _messages(env)[docname] = _messages(other).get(docname, set())


def _check_obsolete(app, env) -> None:
    """A translation whose message no page has any more is obsolete: `make po` keeps it in the
    translation memory and drops it from the page's catalogue."""
    if app.config.language != LANGUAGE:
        return
    for docname, messages in sorted(_messages(env).items()):
        for msgid in sorted(set(translations(docname)) - messages):
            logger.warning("obsolete translation of %r in %s: run `make po`", msgid[:70],
                           catalogue_path(docname).relative_to(ROOT), type="gpudl",
                           subtype="i18n")


def _drop_empty_captions(app, doctree) -> None:
    for toctree in doctree.findall(addnodes.toctree):
        if not toctree.get("rawcaption"):
            toctree.attributes.pop("rawcaption", None)


class _TermSet(set):
    """A set that takes ``extend``: Sphinx's Chinese search keeps every Latin word it has seen
    in a list and tests membership in it for each word it stems, which is quadratic (about
    half of the Chinese build's time on this book); a set makes each test constant."""

    def extend(self, words) -> None:
        self.update(words)


def _chinese_search(app, config) -> None:
    if config.language == LANGUAGE:
        import jieba
        from sphinx.search.zh import SearchChinese

        jieba.setLogLevel(logging.WARNING)  # its "Building prefix dict" lines
        SearchChinese.latin_terms = _TermSet()


def setup(app):
    app.connect("config-inited", _chinese_search)
    app.add_transform(KeepUntranslatable)
    app.add_transform(SourceNestedTables)
    app.add_transform(RecordMessages)
    app.add_transform(TranslateCaptions)
    app.connect("doctree-read", _drop_empty_captions, priority=400)  # before the toc copy
    app.connect("doctree-read", _check_untranslated, priority=800)  # after the docinfo goes
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_obsolete)
    app.add_transform(CitationIds)
    app.add_transform(RestoreCitationIds)
    app.setup_extension("gpudl_editions")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
