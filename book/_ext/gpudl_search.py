"""The search page's excerpts, wherever the book is read from.

Sphinx 7.4's search page shows a result's excerpt by downloading the result's page with
``fetch``, which a browser refuses for a book opened from the disk (``file://``, as `make book`
tells its reader to): every result then shows its title alone. So the HTML build also writes,
for each page, ``_search/<page>.js``: a script that hands the page's text (its sections, with
their anchors, and their words; no markup, code as text) to book/_static/gpudl-search.js, which
the search page loads with a ``<script>`` tag, as it loads the search index, in place of the
page. The excerpt comes from the page's own text, never from the theme's navigation around it."""

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

FOLDER = "_search"
#: Tags whose end separates words (a paragraph's last word from the next one's first).
_BLOCKS = {"p", "div", "li", "dt", "dd", "td", "th", "tr", "pre", "br", "h1", "h2", "h3",
           "h4", "h5", "h6", "figcaption", "caption", "table", "ul", "ol", "dl", "blockquote",
           "section", "details", "summary"}
_SKIPPED = {"script", "style", "template"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


class _Text(HTMLParser):
    """A page body's sections (``<section id>``, nested as they are) and their words."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skipping: list[str] = []  # the open tags whose content is not text

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.skipping and tag in _VOID:
            return
        if self.skipping or tag in _SKIPPED or "headerlink" in (attrs.get("class") or ""):
            self.skipping.append(tag)
            return
        if tag == "section":
            anchor = f' id="{html.escape(attrs["id"])}"' if attrs.get("id") else ""
            self.out.append(f"<section{anchor}>")
        elif tag in _BLOCKS:
            self.out.append(" ")

    def handle_endtag(self, tag):
        if self.skipping:
            if tag == self.skipping[-1]:
                self.skipping.pop()
            return
        if tag == "section":
            self.out.append("</section>")
        elif tag in _BLOCKS:
            self.out.append(" ")

    def handle_startendtag(self, tag, attrs):
        if not self.skipping and tag in _BLOCKS:
            self.out.append(" ")

    def handle_data(self, data):
        if not self.skipping:
            self.out.append(html.escape(data, quote=False))


def page_text(body: str) -> str:
    """The HTML that the search page reads a page's excerpts from: a ``role="main"`` element
    (where Sphinx's searchtools looks) holding the page body's sections and words."""
    parser = _Text()
    parser.feed(body)
    parser.close()
    text = re.sub(r"\s+", " ", "".join(parser.out))
    return f'<div role="main">{text.strip()}</div>'


def write_page_text(app, pagename, templatename, context, doctree) -> None:
    """``_search/<page>.js`` beside the built page (html-page-context)."""
    if doctree is None or app.builder.format != "html" or "body" not in context:
        return
    path = Path(app.builder.outdir, FOLDER, f"{pagename}.js")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"gpudlSearchText({json.dumps(pagename)}, "
                    f"{json.dumps(page_text(context['body']), ensure_ascii=False)});\n",
                    encoding="utf-8")
