"""The book as a reader meets it: listings that fit, short paragraphs, referenced figures,
and a built HTML book that needs no network (MathJax served from the book itself)."""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

# The book's extension needs Sphinx and docutils; where they are not installed (the lent GPU
# machine's image) this module is skipped rather than breaking the collection of the others.
pytest.importorskip("docutils", reason="the book's tests need docutils (pip install -e '.[dev]')")
pytest.importorskip("sphinx", reason="the book's tests need Sphinx (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from gpudl_listings import (  # noqa: E402
    CHECKS_OMITTED,
    LISTING_COLUMNS,
    listing_text,
    plain_docstrings,
    strip_checks,
    strip_registration,
)

CHAPTERS = sorted((ROOT / "book").glob("*.md"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
INCLUDE = re.compile(r"```\{literalinclude\}\s+(\S+)\n((?:[ \t]*:[\w-]+:.*\n)*)")
MAX_WORDS = 120


def literalincludes():
    for md in CHAPTERS:
        for match in INCLUDE.finditer(md.read_text()):
            options = {k: v.strip().strip('"') for k, v in
                       re.findall(r":([\w-]+):[ \t]*(.*)", match.group(2))}
            if "dedent" in options:  # an int, or None (strip the common indent), as Sphinx's
                options["dedent"] = int(options["dedent"]) if options["dedent"] else None
            yield pytest.param(md.parent / match.group(1), options,
                               id=f"{md.stem}:{match.group(1).rsplit('/', 1)[-1]}:"
                                  f"{options.get('pyobject', options.get('start-after', ''))}")


@pytest.mark.parametrize(("path", "options"), list(literalincludes()))
def test_every_listing_line_fits_the_code_box(path, options):
    text = listing_text(path.resolve(), options)
    assert text.strip(), f"{path}: empty listing for {options}"
    too_wide = [line for line in text.splitlines() if len(line) > LISTING_COLUMNS]
    assert not too_wide, f"lines wider than {LISTING_COLUMNS} characters: {too_wide}"
    assert "@registry." not in text, f"{path}: a listing shows the registry's bookkeeping"


def test_listings_drop_the_registry_s_three_decorators_and_keep_the_code():
    code = ('@registry.variant("vector_add", "v1_naive",\n                  bytes_per_element=12)\n'
            "def launch(a):\n    return a\n\n"
            '@registry.kernel("k", "void()")\n@cuda.jit\ndef k():\n    pass\n'
            '@registry.factory("f", [((1,), "void()")])\ndef make(n):\n    return n\n')
    assert strip_registration(code) == ("def launch(a):\n    return a\n\n@cuda.jit\n"
                                        "def k():\n    pass\ndef make(n):\n    return n\n")


REST_MARKUP = re.compile(r":[\w:]+:`|``")


def test_every_listing_shows_its_docstrings_without_rest_markup():
    """No ``:func:`...``` or double backquote in any listing of the book: a listing shows the
    package's docstrings as plain text (the package's source keeps its markup for autodoc)."""
    listings = [p.values for p in literalincludes()]
    assert len(listings) > 100
    shown = [(path, listing_text(path.resolve(), options)) for path, options in listings]
    marked = [(path.name, m) for path, text in shown for m in REST_MARKUP.findall(text)]
    assert not marked, marked[:10]
    sources = "".join(path.resolve().read_text() for path, _ in listings)
    assert REST_MARKUP.search(sources)  # the package's source still has the markup


def test_plain_docstrings_reads_roles_and_literals_and_leaves_the_code():
    code = ('def f(x):\n'
            '    """Like :func:`gpudl.kernels.attention.traffic` and :meth:`sgd_step`, for a\n'
            '    :class:`gpudl.models.EncoderBlock`, :data:`~gpudl.hardware.SPECS` or\n'
            '    :func:`the plan <gpudl.parallel.plan>`: ``x`` is ``(row, col)``."""\n'
            '    #: an :exc:`ValueError` of ``x``\n'
            '    return x + 1  # ``x``\n')
    assert plain_docstrings(code) == (
        'def f(x):\n'
        '    """Like `traffic()` and `sgd_step()`, for a\n'
        '    `EncoderBlock`, SPECS or\n'
        '    the plan: `x` is `(row, col)`."""\n'
        '    #: an `ValueError` of `x`\n'
        '    return x + 1  # `x`\n')
    # a part of a statement, which Python cannot tokenize, is read as text
    assert plain_docstrings('    """:func:`a.b` and\n') == '    """`b()` and\n'


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_lab_code_line_fits_the_code_box(path):
    cells = json.loads(path.read_text())["cells"]
    too_wide = [line for c in cells if c["cell_type"] == "code"
                for line in "".join(c["source"]).splitlines() if len(line) > LISTING_COLUMNS]
    assert not too_wide, f"lines wider than {LISTING_COLUMNS} characters: {too_wide}"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_every_code_block_line_fits_the_code_box(md):
    blocks = re.findall(r"^```(?:text|bash|python|console)\n(.*?)^```", md.read_text(),
                        re.M | re.S)
    too_wide = [line for b in blocks for line in b.splitlines() if len(line) > LISTING_COLUMNS]
    assert not too_wide, f"lines wider than {LISTING_COLUMNS} characters: {too_wide}"


def test_no_checks_keeps_the_code_and_drops_only_the_checks():
    code = (
        "def f(x, n):\n"
        '    """Doc."""\n'
        "    check_int('n', n, 1)\n"
        "    if x.ndim != 1:\n"
        "        raise ValueError('x must be 1-D')\n"
        "    if n > 3:\n"
        "        n = 3\n"
        "    return x * n\n"
    )
    stripped = strip_checks(code).splitlines()
    assert stripped == ["def f(x, n):", '    """Doc."""', "    " + CHECKS_OMITTED,
                        "    if n > 3:", "        n = 3", "    return x * n"]


def test_no_checks_drops_a_loop_of_checks_whole_and_keeps_what_follows():
    code = (
        "def f(x, items):\n"
        "    for name, value in items:\n"
        "        if value < 0:\n"
        "            raise ValueError(name)\n"
        "        check_int(name, value, 0)\n"
        "    y = 1\n"
        "    for k in x:\n"
        "        check_int('k', k, 0)\n"
        "        y += k\n"
        "    return y\n"
    )
    assert strip_checks(code).splitlines() == [
        "def f(x, items):", "    " + CHECKS_OMITTED, "    y = 1", "    for k in x:",
        "        " + CHECKS_OMITTED, "        y += k", "    return y"]


def test_each_glossary_term_appears_once():
    rows = [line.split("|")[1].strip() for line in
            (ROOT / "book" / "appendix-glossary.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| English")]
    normalised = [re.sub(r"[^a-z0-9]", "", term.lower().replace("≈", "=")) for term in rows]
    repeated = {t for t in normalised if normalised.count(t) > 1}
    assert len(rows) > 50 and not repeated, repeated


def prose_paragraphs(text: str):
    """Paragraphs of running prose: blocks between blank lines, outside code fences and
    directives, that are not tables, headings, lists, math or directive options. The body of
    a directive whose body is prose (an admonition, a dropdown, a figure's caption) is prose,
    and its closing fence closes it (it opens nothing)."""
    fence = None
    prose_fences: list[str] = []  # the open prose directives, innermost last
    block: list[str] = []
    opening = re.compile(r"^(`{3,}|:{3,})")
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if fence is None and prose_fences and stripped == prose_fences[-1]:
            prose_fences.pop()
            stripped = ""  # ends the paragraph before it
        elif fence is None and opening.match(stripped):
            marks = opening.match(stripped).group(1)
            block = []
            if re.match(r"^(`{3,}|:{3,})\{(admonition|note|important|tip|warning|figure)\}",
                        stripped):
                prose_fences.append(marks)
            else:
                fence = marks
            continue
        if fence is not None:
            if stripped == fence:
                fence = None
            continue
        if stripped:
            if prose_fences and not block and re.match(r"^:[\w-]+:(\s|$)", stripped):
                continue  # a directive option (:class: dropdown), not prose
            block.append(stripped)
            continue
        if block and not re.match(r"^(\||#|\$\$|:|\(|- |\d+\. |\* |```)", block[0]):
            yield " ".join(block)
        block = []


def test_prose_paragraphs_read_past_an_admonition_and_skip_code():
    text = ("One.\n\n```{admonition} Title\n:class: dropdown\nInside the box.\n```\n\n"
            "After the box.\n\n```python\nx = 1\n```\n\nLast.\n")
    assert list(prose_paragraphs(text)) == ["One.", "Inside the box.", "After the box.",
                                            "Last."]


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_paragraphs_are_short(md):
    long = [p[:80] for p in prose_paragraphs(md.read_text()) if len(p.split()) > MAX_WORDS]
    assert not long, f"paragraphs over {MAX_WORDS} words: {long}"


def test_paragraph_counter_sees_long_paragraphs():
    text = "word " * 130 + "\n\n```python\n" + "code " * 200 + "\n```\n\nshort one\n"
    assert [len(p.split()) for p in prose_paragraphs(text)] == [130, 2]


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_every_figure_is_named_and_referenced(md):
    text = md.read_text()
    figures = re.findall(r"```\{figure\}[^\n]*\n((?::[\w-]+:.*\n)*)", text)
    names = [re.search(r":name:\s*(\S+)", f) for f in figures]
    assert all(names), f"{md.name}: a figure without :name: cannot be numbered"
    for name in (n.group(1) for n in names):
        assert f"{{numref}}`{name}`" in text, f"{md.name}: {name} is never referenced"


CHAPTER_FIGURES = {f"ch0{k}": 2 for k in range(1, 8)}


@pytest.mark.parametrize(("stem", "least"), CHAPTER_FIGURES.items())
def test_each_chapter_has_figures(stem, least):
    md = next(p for p in CHAPTERS if p.stem.startswith(stem))
    assert md.read_text().count("```{figure}") >= least


# ------------------------------------------------------------------------------------------
# The built book
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def html_dir(built) -> Path:
    """The built HTML book, both editions (tests/conftest.py)."""
    return built


class _Resources(HTMLParser):
    """Everything a page makes the browser load: scripts, stylesheets, images, frames."""

    def __init__(self):
        super().__init__()
        self.loaded: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "embed") and attrs.get("src"):
            self.loaded.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.loaded.append(attrs["href"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def _parse(page: Path) -> _Resources:
    parser = _Resources()
    parser.feed(page.read_text())
    return parser


def _external(url: str) -> bool:
    return bool(re.match(r"^(https?:)?//", url))


def test_built_pages_load_nothing_from_outside_the_book(html_dir):
    pages = sorted(html_dir.rglob("*.html"))
    assert len(pages) >= 12
    for page in pages:
        outside = [u for u in _parse(page).loaded if _external(u)]
        assert not outside, f"{page.relative_to(html_dir)} loads {outside}"
    for css in html_dir.joinpath("_static").rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text(errors="replace")), css


def test_mathjax_is_served_from_the_book(html_dir):
    page = html_dir / "book" / "ch01-hardware.html"
    scripts = [u for u in _parse(page).loaded if "mathjax" in u.lower()]
    assert scripts == ["../_static/mathjax/tex-chtml.js"]
    assert (page.parent / scripts[0]).resolve().stat().st_size > 100_000
    # its fonts travel with it
    assert list(html_dir.joinpath("_static", "mathjax").rglob("*.woff"))


def _repository_url() -> str:
    config = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\n(?:\s+.*\n)*?\s+url:\s*(\S*)", config, re.M)
    return match.group(1).strip("\"'") if match else ""


def test_repository_and_launch_buttons_follow_the_one_setting(html_dir):
    url = _repository_url()
    lab = _parse(html_dir / "notebooks" / "01-hardware.html").links
    launch = [u for u in lab if "colab.research" in u or "mybinder" in u]
    if not url:
        assert not launch, "launch buttons point at a repository nobody configured"
        assert not [u for u in lab if "github.com" in u]
    else:
        assert launch and all(url.rsplit("github.com/", 1)[-1] in u for u in launch)


def test_every_page_has_one_search_box_a_favicon_and_search_snippets_without_tex(html_dir):
    page = (html_dir / "book" / "ch01-hardware.html").read_text()
    sidebar = page[page.index('id="pst-primary-sidebar"'):page.index('class="bd-main"')]
    assert "search-button-field" not in sidebar  # the header's search field is the only one
    assert 'rel="icon"' in page and (html_dir / "_static" / "favicon.ico").stat().st_size > 0
    assert "gpudl-search.js" in (html_dir / "search.html").read_text()
    script = (html_dir / "_static" / "gpudl-search.js").read_text()
    assert "htmlToText" in script and "\\\\times" in script


def test_chapter_1_shows_each_launched_kernel_s_registers_and_occupancy(html_dir):
    """One row per kernel that declares its block size (per build, for a factory's), with the
    registers gpudl.resources stored for sm_80 and the exact occupancy gpudl.hardware.occupancy
    gives them, in both editions."""
    from gpudl_tables import occupancy_text

    from gpudl import registry, resources
    from gpudl.hardware import occupancy

    assert [occupancy_text(x) for x in (1.0, 0.4375, 0.625, 0.5)] == ["1", "0.4375", "0.625",
                                                                       "0.5"]
    kernels = registry.load_all()
    rows = [r for r in resources.load()["kernels"] if kernels[r["kernel"]].threads_per_block]
    assert len(rows) >= 20 and any(r["arguments"] for r in rows)
    assert any("num_warps" in r for r in rows)  # Triton's kernels too
    for page in (html_dir / "book" / "ch01-hardware.html",
                 html_dir / "zh_CN" / "book" / "ch01-hardware.html"):
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text()))
        for r in rows:
            sm80, tpb = r["sm_80"], resources.threads_per_block(r, kernels[r["kernel"]])
            o = occupancy(tpb, sm80["registers"], sm80["shared_bytes"], (8, 0))
            name = r["kernel"] + ("" if r["arguments"] is None else
                                  f"({', '.join(map(str, r['arguments']))})")
            row = (f"{name} {tpb} {sm80['registers']} {sm80['shared_bytes']:,} B "
                   f"{o.blocks_per_sm} {occupancy_text(o.occupancy)}")
            assert row in text, (page.name, row)


# ------------------------------------------------------------------------------------------
# Captions: WCAG AA contrast, from the colours book/_static/gpudl.css sets
# ------------------------------------------------------------------------------------------

WCAG_AA = 4.5  # normal text


def _css_blocks(css: str) -> list[tuple[str, dict[str, str]]]:
    """(selector, {property: value}) of each rule, in order (an @media's rules included)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [(" ".join(selector.split()),
             {k.strip(): v.strip() for k, v in re.findall(r"([\w-]+)\s*:\s*([^;]+)", body)})
            for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)]


def _theme_colours(blocks, mode: str) -> dict[str, str]:
    """The custom properties that ``html[data-theme=<mode>]`` rules set, later ones winning."""
    found: dict[str, str] = {}
    for selector, props in blocks:
        if re.fullmatch(rf"html\[data-theme=\"?{mode}\"?\]", selector):
            found.update({k: v for k, v in props.items() if k.startswith("--")})
    return found


def _resolve(value: str, colours: dict[str, str]) -> str:
    while (var := re.fullmatch(r"var\((--[\w-]+)\)", value.strip())):
        value = colours[var.group(1)]
    return value


def relative_luminance(colour: str) -> float:
    hex_digits = colour.lstrip("#")
    if len(hex_digits) == 3:
        hex_digits = "".join(c * 2 for c in hex_digits)
    channels = [int(hex_digits[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2's contrast ratio of two colours (#rgb or #rrggbb)."""
    light, dark = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_contrast_ratio_is_wcag_s():
    assert contrast_ratio("#fff", "#000") == pytest.approx(21)
    assert contrast_ratio("#777", "#fff") == pytest.approx(4.48, abs=0.01)  # just below AA


def test_captions_reach_wcag_aa_contrast_in_light_and_dark_mode():
    """Figure and table captions and their numbers, against each background the theme puts
    text on (the page, an admonition's, a surface), with the colours gpudl.css sets and the
    themes' backgrounds (pydata-sphinx-theme, overridden by sphinx-book-theme)."""
    pydata = pytest.importorskip("pydata_sphinx_theme")
    book = pytest.importorskip("sphinx_book_theme")
    themes = [Path(pydata.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" /
              "styles" / "pydata-sphinx-theme.css",
              Path(book.__file__).parent / "theme" / "sphinx_book_theme" / "static" /
              "styles" / "sphinx-book-theme.css"]
    theme_blocks = [b for css in themes for b in _css_blocks(css.read_text())]
    ours = _css_blocks((ROOT / "book" / "_static" / "gpudl.css").read_text())
    captions = [(sel, props) for sel, props in ours if "caption" in sel and "color" in props]
    selectors = " ".join(sel for sel, _ in captions)
    for part in ("figure figcaption", "table caption", "caption-number"):
        assert part in selectors, f"gpudl.css sets no colour for {part}"
    for mode in ("light", "dark"):
        colours = {**_theme_colours(theme_blocks, mode), **_theme_colours(ours, mode)}
        backgrounds = [_resolve(colours[f"--pst-color-{name}"], colours)
                       for name in ("background", "on-background", "surface")]
        for selector, props in captions:
            colour = _resolve(props["color"], colours)
            for background in backgrounds:
                ratio = contrast_ratio(colour, background)
                assert ratio >= WCAG_AA, (mode, selector, colour, background, round(ratio, 2))
            assert props.get("font-weight", "400") not in ("100", "200", "300"), selector


# ------------------------------------------------------------------------------------------
# Glossary links (book/_ext/gpudl_terms.py)
# ------------------------------------------------------------------------------------------

_VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
_NOT_PROSE = {"h1", "h2", "h3", "h4", "h5", "h6", "code", "pre", "figcaption", "caption",
              "thead", "script", "style", "dt", "nav"}


class _Article(HTMLParser):
    """A built page's article: its glossary links, each with the tags it is inside, and the
    text of its running prose (in a paragraph, not in a heading, caption, code, math or other
    link), each run with the glossary link it is in (or None)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []  # (tag, class)
        self.links: list[dict] = []
        self.prose: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = attrs.get("class") or ""
        if tag == "a" and "gpudl-term" in classes.split():
            self.links.append({"href": attrs.get("href"), "title": attrs.get("title"),
                               "inside": [t for t, _ in self.stack], "text": "",
                               "in_math": any("math" in c.split() for _, c in self.stack)})
        if tag not in _VOID:
            self.stack.append((tag, classes))

    def handle_endtag(self, tag):
        if any(t == tag for t, _ in self.stack):  # closes what is open, not a stray end tag
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data):
        if not any(t == "article" for t, _ in self.stack):
            return
        term = next((c for t, c in reversed(self.stack) if t == "a"), None)
        if term is not None and "gpudl-term" in term.split():
            self.links[-1]["text"] += data
        tags = [t for t, _ in self.stack]
        if ("p" not in tags or set(tags) & _NOT_PROSE
                or any("math" in c.split() for _, c in self.stack)
                or (term is not None and "gpudl-term" not in term.split())):
            return
        self.prose.append((data, self.links[-1]["href"] if term is not None else None))


def _article(page: Path) -> _Article:
    parser = _Article()
    parser.feed(page.read_text())
    return parser


def _term_pages(root: Path) -> list[Path]:
    return sorted(root.joinpath("book").glob("ch*.html")) + sorted(
        root.joinpath("notebooks").glob("*.html"))


def _first_use(article: _Article, word: str, longer: list[str]) -> str | None:
    """The glossary link (href) around the first use of ``word`` in the prose, not inside one
    of the ``longer`` terms (``warp`` in ``warp divergence``)."""
    for text, href in article.prose:
        for match in re.finditer(word, text):
            if not any(text[match.start():].lower().startswith(x) for x in longer):
                return href
    raise AssertionError(f"no {word} in the prose")


def test_glossary_terms_are_found_longest_first_in_their_plural_and_hyphenated_forms():
    from gpudl_glossary import rows
    from gpudl_terms import matcher, row_anchor

    def found(text, chinese=False, keys=None):
        return [(text[a:b], e.anchor) for a, b, e in matcher(chinese).find(text, keys)]

    assert found("Thread blocks of threads run a tensor-core warp-level kernel on GPUs, "
                 "not gpus, and a fused\nmultiply-add (FMA) per-thread.") == [
        ("Thread blocks", "term-thread-block"), ("threads", "term-thread"),
        ("tensor-core", "term-tensor-core"), ("kernel", "term-kernel"), ("GPUs", "term-gpu"),
        ("fused\nmultiply-add", "term-fma"), ("FMA", "term-fma")]
    assert found("Little’s law and the L2 cache")[1] == ("L2 cache", "term-l1-cache-l2-cache")
    # Chinese: the glossary's Chinese, longest first, not inside an English gloss; with keys
    # (the terms of the paragraph's English) only those, a shared Chinese told by its gloss
    text = "线程束分化（warp divergence）让线程束（warp）的 SM 做反向传播（backpropagation）"
    assert found(text, chinese=True) == [
        ("线程束分化", "term-warp-divergence"), ("线程束", "term-warp"),
        ("SM", "term-streaming-multiprocessor"), ("反向传播", "term-backpropagation")]
    warp = next(e.key for _, _, e in matcher(False).find("warp"))
    assert found(text, chinese=True, keys={warp}) == [("线程束", "term-warp")]
    assert found("逐通道缩放因子；32 个通道", chinese=True)[0][1] == "term-per-channel-scale"
    anchors = [row_anchor(english) for english, _, _ in rows()]
    assert len(set(anchors)) == len(anchors) and "term-warp" in anchors


def test_chapter_1_links_its_first_warp_to_the_glossary_in_both_editions(html_dir):
    from gpudl_glossary import terms

    longer = [(t.english.lower(), t.chinese) for t in terms()
              if "warp" in t.english and t.english != "warp"]
    assert len(longer) >= 2  # warp divergence, warp shuffle
    english = _article(html_dir / "book" / "ch01-hardware.html")
    href = _first_use(english, r"(?i)(?<![\w-])warps?(?![\w-])", [e for e, _ in longer])
    assert href == "appendix-glossary.html#term-warp"
    chinese = _article(html_dir / "zh_CN" / "book" / "ch01-hardware.html")
    assert _first_use(chinese, "线程束", [z for _, z in longer]) == href
    for article in (english, chinese):
        warp = [link for link in article.links if link["href"] == href]
        assert len(warp) == 1 and warp[0]["title"].startswith(("32 threads", "SM 每次"))


@pytest.mark.parametrize("edition", ["", "zh_CN"])
def test_glossary_links_are_once_per_term_in_prose_only_and_lead_to_the_term_s_row(
        html_dir, edition):
    """Every chapter and lab links terms; none twice (a row of two terms, ``L1 cache / L2
    cache``, twice at most), none in a heading, caption, code, math or link; each to a row
    of the glossary page, by an anchor that exists. The glossary and the preface link none."""
    from gpudl_glossary import rows
    from gpudl_terms import row_anchor

    root = html_dir / edition if edition else html_dir
    glossary = root / "book" / "appendix-glossary.html"
    anchors = {row_anchor(english): english.count(" / ") + 1 for english, _, _ in rows()}
    ids = set(re.findall(r'<tr[^>]* id="([^"]+)"', glossary.read_text()))
    assert set(anchors) <= ids, set(anchors) - ids
    pages = _term_pages(root)
    assert len(pages) >= 18
    for page in pages:
        links = _article(page).links
        assert len(links) >= 5, page.name
        hrefs = [link["href"] for link in links]
        for link in links:
            target, _, anchor = link["href"].partition("#")
            assert (page.parent / target).resolve() == glossary.resolve(), link
            assert anchor in anchors and link["title"] and link["text"].strip(), link
            assert not set(link["inside"]) & (_NOT_PROSE | {"a"}), (page.name, link)
            assert not link["in_math"], (page.name, link)
            assert hrefs.count(link["href"]) <= anchors[anchor], (page.name, link["href"])
    for page in (glossary, root / "book" / "preface.html"):
        assert not _article(page).links, page


# ------------------------------------------------------------------------------------------
# Search results with excerpts (book/_ext/gpudl_search.py, book/_static/gpudl-search.js)
# ------------------------------------------------------------------------------------------


def test_a_page_s_search_text_keeps_its_sections_and_words_and_drops_the_rest():
    from gpudl_search import page_text

    body = ('<section id="coalescing"><h2>Coalescing<a class="headerlink" href="#c">#</a></h2>'
            '<p>A <em>warp</em> reads <code>a[i]</code>;</p><p>then</p><script>x()</script>'
            '<style>p{}</style><img src="a.png" alt="fig"><p>&lt;32 &amp; more</p></section>')
    assert page_text(body) == ('<div role="main"><section id="coalescing"> Coalescing A warp '
                               'reads a[i]; then &lt;32 &amp; more </section></div>')


@pytest.mark.parametrize("edition", ["", "zh_CN"])
def test_every_page_has_its_search_text(html_dir, edition):
    root = html_dir / edition if edition else html_dir
    for page in sorted((root / "book").glob("*.html")) + sorted(
            (root / "notebooks").glob("*.html")):
        name = page.relative_to(root).with_suffix("").as_posix()
        script = (root / "_search" / f"{name}.js").read_text()
        call = re.fullmatch(r'gpudlSearchText\((".*?"), (".*")\);\n', script, re.S)
        assert call and json.loads(call.group(1)) == name, name
        text = json.loads(call.group(2))
        assert text.startswith('<div role="main"><section id=') and len(text) > 1000, name
        assert not re.search(r"<(?!/?(section|div)\b)", text), name  # words, no markup


def _chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)


@pytest.mark.parametrize(("edition", "query", "stem"), [("", "coalescing", "coalesc"),
                                                        ("zh_CN", "合并访问", "合并访问")])
def test_search_results_show_excerpts_in_a_book_opened_from_the_disk(html_dir, edition,
                                                                     query, stem):
    """The search page of a book opened as a file (file://, where a page cannot be fetched)
    in headless Chromium: every page found has an excerpt with the query (its stem: a page
    with "coalesced" is found) in it."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium to run the search page in")
    page = (html_dir / edition / "search.html").resolve()
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom",
             f"{page.as_uri()}?q={quote(query)}"], capture_output=True, text=True, timeout=120)
    results = done.stdout[done.stdout.find('id="search-results"'):]
    items = re.findall(r"<li>(.*?)</li>", results, re.S)
    pages = [item for item in items if "<span> (" not in item]  # not an API object
    assert len(pages) >= 5, done.stdout[-2000:]
    for item in pages:
        excerpt = re.search(r'<p class="context">(.*?)</p>', item, re.S)
        assert excerpt and stem in re.sub(r"<[^>]+>", "", excerpt.group(1)).lower(), item
