"""The book as a reader meets it: listings that fit, short paragraphs, referenced figures,
and a built HTML book that needs no network (MathJax served from the book itself)."""

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

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
    directives, that are not tables, headings, lists, math or directive options."""
    fence = None
    block: list[str] = []
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if fence is None and re.match(r"^(`{3,}|:{3,})", stripped):
            fence = re.match(r"^(`{3,}|:{3,})", stripped).group(1)
            block = []
            # a directive whose body is prose (admonitions, dropdowns) is still prose
            if re.match(r"^(`{3,}|:{3,})\{(admonition|note|important|figure)\}", stripped):
                fence = None
            continue
        if fence is not None:
            if stripped == fence:
                fence = None
            continue
        if stripped:
            block.append(stripped)
            continue
        if block and not re.match(r"^(\||#|\$\$|:|\(|- |\d+\. |\* |```)", block[0]):
            yield " ".join(block)
        block = []


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
    for page in (html_dir / "book" / "ch01-hardware.html",
                 html_dir / "zh_CN" / "book" / "ch01-hardware.html"):
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text()))
        for r in rows:
            sm80, tpb = r["sm_80"], kernels[r["kernel"]].threads_per_block
            o = occupancy(tpb, sm80["registers"], sm80["shared_bytes"], (8, 0))
            name = r["kernel"] + ("" if r["arguments"] is None else
                                  f"({', '.join(map(str, r['arguments']))})")
            row = (f"{name} {tpb} {sm80['registers']} {sm80['shared_bytes']:,} B "
                   f"{o.blocks_per_sm} {occupancy_text(o.occupancy)}")
            assert row in text, (page.name, row)
