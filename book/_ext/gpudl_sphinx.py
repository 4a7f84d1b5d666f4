"""Local Sphinx extension for the book: it wires the book's extensions, one module per concern
(all in book/_ext).

- puts the repository on sys.path, for autodoc and for the figures below;
- draws the prose's model figures (``gpudl_figures``) into book/_generated/ when the build
  starts, so a figure in the text is always the package's current answer;
- ``{literalinclude}`` as the chapters show code (``gpudl_listings``: no registry decorators,
  docstrings without reST markup, and the ``:no-checks:`` flag);
- each chapter's and lab's first use of each glossary term linked to its row of the glossary
  (``gpudl_terms``);
- the ``{gpudl-specs}`` and ``{gpudl-kernel-registers}`` tables (``gpudl_tables``), the
  ``{gpudl-measured}`` boxes and the preface's ``{gpudl-lab-times}`` (``gpudl_directives``, whose
  content ``gpudl_measured``, ``gpudl_views`` and ``gpudl_reading`` make);
- the words those directives write, in the edition being built (``gpudl_extension_text``: the
  Chinese ones from locales/zh_CN/extensions.po);
- references to re-exported names, and to types documented elsewhere (``gpudl_references``);
- ships the package as a wheel beside the labs, linked from the preface and from each lab's
  download menu (``gpudl_wheel``);
- serves the book's stylesheet (book/_static/gpudl.css: code boxes that hold
  ``gpudl_listings.LISTING_COLUMNS`` characters at 1280 px, captions in WCAG AA contrast, quiet
  glossary links) and a script that gives every search result an excerpt, also in a book
  opened from the disk, without TeX (book/_static/gpudl-search.js, with each page's text
  written by ``gpudl_search``), and shows the repository and launch buttons only when
  ``repository.url`` is set in _config.yml."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# book/_ext, beside this file: one module per concern
from gpudl_directives import LabTimes, MeasuredBox  # noqa: E402
from gpudl_listings import Listing  # noqa: E402
from gpudl_references import ignore_external, resolve_reexported  # noqa: E402
from gpudl_search import write_page_text  # noqa: E402
from gpudl_tables import KernelRegisters, SpecsTable  # noqa: E402
from gpudl_wheel import setup as ship_wheel  # noqa: E402


def _draw_figures(app) -> None:
    if app.config.gpudl_model_figures:
        from gpudl_figures import draw
        from sphinx.util import logging

        draw(logging.getLogger(__name__))


def _buttons_from_repository(app, config) -> None:
    """Repository, issue and launch buttons only when ``repository.url`` is set: a book built
    from a fork that has not set it links to nothing it does not own. Only the book's theme
    (sphinx-book-theme) has these buttons; other themes are left alone."""
    if config.html_theme != "sphinx_book_theme":
        return
    options = config.html_theme_options
    has_repository = bool(options.get("repository_url"))
    options["use_repository_button"] = has_repository
    options["use_issues_button"] = has_repository
    if not has_repository:
        options.pop("launch_buttons", None)
        options.pop("repository_url", None)


def setup(app):
    app.add_config_value("gpudl_results", str(ROOT / "results"), "env")
    # `make book` draws the figures once (`make figures`), then builds both editions at once
    app.add_config_value("gpudl_model_figures", os.environ.get("GPUDL_MODEL_FIGURES") != "0",
                         "env")
    app.connect("config-inited", _buttons_from_repository)
    app.add_directive("literalinclude", Listing, override=True)
    app.config.html_static_path.append(str(Path(__file__).resolve().parents[1] / "_static"))
    app.add_css_file("gpudl.css")
    app.add_js_file("gpudl-search.js")
    app.connect("html-page-context", write_page_text)
    app.setup_extension("gpudl_terms")
    app.add_directive("gpudl-measured", MeasuredBox)
    app.add_directive("gpudl-specs", SpecsTable)
    app.add_directive("gpudl-kernel-registers", KernelRegisters)
    app.add_directive("gpudl-lab-times", LabTimes)
    app.connect("builder-inited", _draw_figures)
    ship_wheel(app)
    app.connect("missing-reference", resolve_reexported)
    app.connect("missing-reference", ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
