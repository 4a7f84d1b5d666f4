"""The book's CJK font travels with the repository (book/_ext/gpudl_fonts.py): it has every
character the book uses, the figures draw their Chinese with it on a machine that has no CJK
font of its own, a character no font has fails the drawing, and the HTML editions serve it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
# the book's tools need Sphinx's babel and fontTools, which a lent GPU machine's image lacks
pytest.importorskip("babel")
pytest.importorskip("fontTools")

import gpudl_fonts  # noqa: E402

HIDE = ROOT / ".ci" / "hide-cjk-fonts"


def test_the_font_has_every_character_the_book_uses():
    used = gpudl_fonts.used_characters()
    assert len(used) > 500 and "线" in used and "（" in used  # the catalogues were read
    assert gpudl_fonts.missing() == [], "run `make cjk-font`"


def test_a_character_the_font_lacks_is_named():
    assert gpudl_fonts.missing({"线", "\U00020000", "鿿"}) == ["鿿", "\U00020000"]


def test_the_web_font_holds_the_same_characters_and_both_are_small_and_licensed():
    pytest.importorskip("brotli", reason="reading WOFF2 needs brotli (pip install -e '.[dev]')")
    otf = gpudl_fonts.font_characters(gpudl_fonts.OTF)
    assert gpudl_fonts.font_characters(gpudl_fonts.WOFF2) == otf
    # ASCII, Latin-1, CJK punctuation, the full-width forms, and the symbols of the figures'
    # words (the minus of a log axis's ticks, ×, ≈, ≤, α) are drawn in this font
    kept = [(0x20, 0x7E), (0xA0, 0xFF), (0x3000, 0x303F), (0xFF01, 0xFF5E)]
    assert {chr(c) for first, last in kept for c in range(first, last + 1)} <= otf
    assert set("\u2212×≈≤≥αβμπ·–—…→") <= otf
    files = list(gpudl_fonts.FONTS.iterdir())
    assert sum(p.stat().st_size for p in files) < 3_000_000, [p.name for p in files]
    licence = (gpudl_fonts.FONTS / "OFL.txt").read_text()
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and gpudl_fonts.FAMILY in licence
    from fontTools.ttLib import TTFont

    with TTFont(gpudl_fonts.OTF) as font:
        names = {r.nameID: r.toUnicode() for r in font["name"].names}
    # a Modified Version: its own name, never the reserved one, with the copyright and licence
    assert names[1] == gpudl_fonts.FAMILY and "Source" not in names[1] + names[4]
    assert "Adobe" in names[0] and "Open Font License" in names[13]


def test_the_stylesheets_declare_the_font_for_the_cjk_characters_only():
    import gpudl_editions

    css = (ROOT / "book" / "_static" / "gpudl.css").read_text()
    face = re.search(r"@font-face\s*\{([^}]*)\}", css).group(1)
    assert f'"{gpudl_fonts.FAMILY}"' in face and 'url("fonts/NotoSansSC-gpudl.woff2")' in face
    assert f"unicode-range: {gpudl_fonts.UNICODE_RANGE};" in face
    assert re.search(rf'--pst-font-family-base: "{gpudl_fonts.FAMILY}"', css)
    landing = gpudl_editions.LANDING
    assert "_static/fonts/NotoSansSC-gpudl.woff2" in landing
    assert gpudl_fonts.UNICODE_RANGE in landing and gpudl_fonts.FAMILY in landing
    # the regular expression and the unicode-range name the same characters
    for first, last in re.findall(r"U\+([0-9A-F]+)-([0-9A-F]+)", gpudl_fonts.UNICODE_RANGE):
        for code in (int(first, 16), int(last, 16)):
            assert gpudl_fonts.CJK.fullmatch(chr(code))
        assert not gpudl_fonts.CJK.fullmatch(chr(int(first, 16) - 1))


def _system_cjk_fonts() -> str:
    done = subprocess.run(["fc-list", ":lang=zh", "--format=%{file}\n"], capture_output=True,
                          text=True)
    return done.stdout.strip()


#: Figures with every kind of Chinese text: a title and axis labels, words beside math and a
#: log axis's ticks (mathtext, drawn in the CJK font alone), Chinese names on a categorical
#: axis, a legend. `make book` draws all of them the same way (`.ci/run`: with the system's
#: CJK fonts hidden), where a missing glyph fails the build.
DRAWN = ("roofline-h100.png", "warp-sectors.png", "adam-traffic.png", "ring-model.png")


@pytest.mark.timeout(240)
def test_chinese_figures_draw_on_a_machine_without_a_cjk_font(tmp_path):
    """In a process that sees no system CJK font (.ci/hide-cjk-fonts: the font folders hidden in
    a private mount namespace, a fresh matplotlib cache), figures of the book (:data:`DRAWN`)
    are drawn in English and in Chinese; any character drawn as an empty box ("Glyph ...
    missing") fails it (gpudl_figure_text.save)."""
    if not Path("/usr/bin/fc-list").exists() and not _system_cjk_fonts():
        pytest.skip("no fontconfig here to ask for CJK fonts")
    draw = f"""
import logging, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / "book" / "_ext")!r})
from matplotlib import font_manager
cjk = [p for p in font_manager.findSystemFonts() if 'CJK' in p.upper() or 'WQY' in p.upper()]
assert not cjk, cjk
import gpudl_figures
gpudl_figures.GENERATED = Path({str(tmp_path)!r})
assert gpudl_figures.draw(logging.getLogger("figures"), {DRAWN!r}) == 0
"""
    done = subprocess.run(["bash", str(HIDE), sys.executable, "-c", draw], cwd=ROOT,
                          capture_output=True, text=True, timeout=200,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode == 3 and "needs root" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "hide-cjk-fonts:" in done.stdout  # it said what it hid, or that there was nothing
    english = sorted(p.name for p in tmp_path.glob("*.png") if ".zh_CN." not in p.name)
    chinese = sorted(p.name.replace(".zh_CN", "") for p in tmp_path.glob("*.zh_CN.png"))
    assert english == sorted(DRAWN) and chinese == english


def test_a_character_no_font_has_fails_the_drawing(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import gpudl_figure_text
    import matplotlib.pyplot as plt

    fig, (text_axis, math_axis) = plt.subplots(1, 2)
    text_axis.set_title("One warp")
    with pytest.raises(RuntimeError, match=r"empty boxes.*Glyph 131072"):
        gpudl_figure_text.save_chinese(fig, tmp_path / "a.png", {"One warp": "线程束 \U00020000"})
    math_axis.set_xlabel("$n^2$ flops")  # words beside math: drawn by mathtext, logged
    with pytest.raises(RuntimeError, match=r"empty boxes.*does not have a glyph"):
        zh = {"$n^2$ flops": "$n^2$ 次\U00020000", "One warp": "一个线程束"}
        gpudl_figure_text.save_chinese(fig, tmp_path / "b.png", zh)
    plt.close(fig)
    assert gpudl_figure_text.localized(tmp_path / "a.png").name == "a.zh_CN.png"
