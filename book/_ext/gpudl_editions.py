"""The two editions side by side (CONTRIBUTING.md, "Translations"), and the words that the
extensions and the theme put around a page's text, in each edition.

- a language switch in every page's header, to the same page of the other edition (the
  anchor the reader is at kept), and an ``hreflang`` link in its head: each edition's switch
  speaks the other edition's language ("English" on a Chinese page, 中文 on an English one);
- the landing page that offers both editions (the English build's index.html);
- the Chinese labs: each served for download as ``notebooks/zh_CN/<lab>.ipynb``, with its
  Colab and Binder buttons pointed at it;
- in the Chinese build, the configuration's and the theme's words in Chinese: the title, the
  author, the search box, the dropdowns' and the hidden cells' hints, the footer's copyright;
- :func:`edition_words`: a directive's words (``gpudl_extension_text``), a text without a
  Chinese translation being a warning of the build.

Every Chinese word here comes from ``locales/zh_CN/extensions.po`` (``gpudl_extension_text``)."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

from gpudl_extension_text import Words, edition, message, tr, translated
from sphinx.util import logging

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = "zh_CN"
ZH_NOTEBOOKS = ROOT / "notebooks" / LANGUAGE

logger = logging.getLogger(__name__)


def _warn_missing(location: object = None):
    def missing(text: str) -> None:
        logger.warning("%r has no Chinese translation in locales/zh_CN/extensions.po: run "
                       "`make po`, then translate it", text, location=location,
                       type="gpudl", subtype="i18n")
    return missing


def edition_words(directive: object) -> Words:
    """The words of the edition a ``directive`` (a ``SphinxDirective``) builds: a text the
    Chinese catalogue lacks is a warning at the directive (the build runs with ``-W``)."""
    return Words(directive.config.language or "en", _warn_missing(directive.get_location()))


def chinese() -> Words:
    """The Chinese edition's words, wherever they are written (the English build's switch
    and landing page too)."""
    return Words(LANGUAGE, _warn_missing())


# --- the language switch ------------------------------------------------------------------------


def other_edition(pagename: str, language: str | None) -> str:
    """The URL, relative to ``pagename``'s page, of the same page in the other edition
    (English at the root of the built book, Chinese under ``zh_CN/``)."""
    up = "../" * pagename.count("/")
    return f"{up}../{pagename}.html" if language == LANGUAGE else f"{up}{LANGUAGE}/{pagename}.html"


def _page_context(app, pagename, templatename, context, doctree) -> None:
    """The language switch (a header button that keeps the anchor) and, in the Chinese
    build, the labs' launch buttons pointed at the Chinese notebooks."""
    language = app.config.language
    url = other_edition(pagename, language)
    hreflang = "en" if language == LANGUAGE else "zh-CN"
    context["metatags"] = context.get("metatags", "") + (
        f'\n<link rel="alternate" hreflang="{hreflang}" href="{html.escape(url)}" />')
    buttons = context.get("header_buttons")
    if buttons is None:
        return
    with edition(chinese()):
        text, tooltip = (("English", "Read this page in English") if language == LANGUAGE
                         else (tr("Chinese"), tr("Read this page in Chinese")))
    buttons.insert(0, {
        "type": "javascript", "label": "language-switch",
        "javascript": f"window.location.href='{url}'+window.location.hash",
        "text": text, "tooltip": tooltip,
    })
    if language == LANGUAGE:
        for group in buttons:
            if group.get("label") == "launch-buttons":
                zh_launch_urls(group["buttons"], pagename)


def zh_launch_urls(buttons: list[dict], pagename: str) -> None:
    """Point a lab's Colab and Binder buttons at its Chinese notebook."""
    folder, _, name = pagename.rpartition("/")
    if (ZH_NOTEBOOKS / f"{name}.ipynb").exists() and folder == "notebooks":
        for button in buttons:
            button["url"] = button["url"].replace(f"{pagename}.ipynb",
                                                  f"notebooks/{LANGUAGE}/{name}.ipynb")


# --- the landing page ---------------------------------------------------------------------------


LANDING = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<title>{title_en} · {title_zh}</title>
<style>
@font-face {{ font-family: "Noto Sans SC gpudl"; font-display: swap;
             src: url("_static/fonts/NotoSansSC-gpudl.woff2") format("woff2");
             unicode-range: U+2E80-9FFF, U+F900-FAFF, U+FE30-FE4F, U+FF00-FFEF; }}
body {{ font-family: "Noto Sans SC gpudl", system-ui, sans-serif; max-width: 40rem;
       margin: 4rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }}
a.edition {{ display: block; margin: 1rem 0; padding: 1rem 1.25rem; border: 1px solid #ccc;
            border-radius: 6px; text-decoration: none; color: inherit; }}
a.edition:hover {{ border-color: #2a6db2; }}
a.edition strong {{ display: block; font-size: 1.25rem; color: #2a6db2; }}
</style>
</head>
<body>
<h1>{title_en}<br /><span lang="zh-CN">{title_zh}</span></h1>
<a class="edition" href="{root}.html" hreflang="en"><strong>Read in English</strong>
The book and its labs, in the language they are written in.</a>
<a class="edition" href="{zh}/{root}.html" hreflang="zh-CN" lang="zh-CN"><strong>{read_zh}</strong>
{about_zh}</a>
</body>
</html>
"""


def landing_page(title: str, root: str, pending: bool) -> str:
    """The landing page of the book called ``title`` (in English), whose first page is
    ``root``; ``pending``: some pages are not translated yet."""
    with edition(chinese()):
        about = (tr("Built from the same sources, its translation updated with the English "
                    "text (the translation is still under way: the pages not yet translated "
                    "show in English); every page's header switches the language.") if pending
                 else tr("Built from the same sources, its translation updated with the "
                         "English text; every page's header switches the language."))
        return LANDING.format(
            title_en=html.escape(title), title_zh=html.escape(translated(title)), root=root,
            zh=LANGUAGE, read_zh=tr("Read in Chinese"), about_zh=about)


def _finish(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from gpudl_i18n import pending

    outdir = Path(app.outdir)
    if app.config.language == LANGUAGE:
        for notebook in sorted(ZH_NOTEBOOKS.glob("*.ipynb")):
            target = outdir / "_sources" / "notebooks" / notebook.name
            if target.exists():  # the lab's download button: the Chinese notebook
                shutil.copyfile(notebook, target)
        return
    (outdir / "index.html").write_text(
        landing_page(app.config.html_title, app.config.root_doc, bool(pending())),
        encoding="utf-8")


# --- the Chinese build's configuration and theme ------------------------------------------------


def _chinese_configuration(app, config) -> None:
    """In the Chinese build: the book's title and author, the search box's text, the
    dropdowns' hints and the footer's copyright in Chinese (before sphinx-togglebutton reads
    its hints, at the same event)."""
    if config.language != LANGUAGE:
        return
    with edition(chinese()):
        config.html_title = translated(config.html_title)
        config.project = translated(config.project)
        config.author = translated(config.author)
        config.togglebutton_hint = tr("Click to show")
        config.togglebutton_hint_hide = tr("Click to hide")
        options = dict(config.html_theme_options)
        options["search_bar_text"] = tr("Search...")
        # the theme's "© Copyright 2026." has no Chinese: the footer's extra item says it
        items = options.get("footer_content_items", ["author.html", "copyright.html",
                                                     "last-updated.html", "extra-footer.html"])
        options["footer_content_items"] = [
            "extra-footer.html" if i == "copyright.html" else i for i in items
            if i != "extra-footer.html"]
        options["extra_footer"] = '<p class="copyright">{}</p>'.format(
            html.escape(tr("© Copyright {year}.", year=config.copyright)))
        config.html_theme_options = options


#: The hints of a hidden cell's part: myst-nb's "Show code cell {type}" and "Hide code cell
#: {type}", for each part it hides.
CELL_PROMPTS = (message("Show code cell content"), message("Hide code cell content"),
                message("Show code cell source"), message("Hide code cell source"),
                message("Show code cell output"), message("Hide code cell output"),
                message("Show code cell outputs"), message("Hide code cell outputs"))


def _cell_prompts(app, doctree, docname) -> None:
    """A hidden cell's hints ("Show code cell output"), in Chinese."""
    if app.config.language != LANGUAGE:
        return
    from myst_nb.sphinx_ import HideCodeCellNode

    with edition(chinese()):
        for node in doctree.findall(HideCodeCellNode):
            for key in ("prompt_show", "prompt_hide"):
                node[key] = translated(node[key])


def setup(app):
    app.connect("config-inited", _chinese_configuration, priority=400)
    app.connect("doctree-resolved", _cell_prompts)
    app.connect("html-page-context", _page_context, priority=502)  # after the theme's buttons
    app.connect("build-finished", _finish, priority=400)  # before the toc's index redirect
    return {"parallel_read_safe": True, "parallel_write_safe": True}
