"""The book's CJK font, kept in the repository (CONTRIBUTING.md, "Translations").

A machine without a Chinese font draws every Chinese word as an empty box, in a figure and in a
browser alike. The book therefore carries its own: Noto Sans CJK SC Regular (SIL Open Font
License 1.1, ``book/_static/fonts/OFL.txt``), subset to the characters the book uses plus the
most common ones, renamed ``Noto Sans SC gpudl``, as an OpenType file that matplotlib draws the
Chinese figures with (`gpudl_figure_text`) and a WOFF2 file that the HTML editions declare with
``@font-face`` (``book/_static/gpudl.css``). No system font is ever looked for.

    python book/_ext/gpudl_fonts.py check      # every character the book uses is in the font
    python book/_ext/gpudl_fonts.py subset     # `make cjk-font`: subset again (Debian's
                                               # fonts-noto-cjk, or --source FILE)

Run ``make cjk-font`` when a translation adds a character the font lacks (the check, in
``make test``, names it)."""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FONTS = ROOT / "book" / "_static" / "fonts"
OTF = FONTS / "NotoSansSC-gpudl.otf"
WOFF2 = FONTS / "NotoSansSC-gpudl.woff2"
FAMILY = "Noto Sans SC gpudl"
#: The characters drawn in the CJK font rather than the page's or the figure's Latin font:
#: CJK radicals, punctuation, kana and ideographs, compatibility ideographs and forms, and the
#: full-width forms (，：（）). ``@font-face``'s unicode-range in gpudl.css says the same.
CJK = re.compile("[\u2e80-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
UNICODE_RANGE = "U+2E80-9FFF, U+F900-FAFF, U+FE30-FE4F, U+FF00-FFEF"
#: Besides the characters the book uses, the most frequent Chinese characters (by the word
#: frequencies of jieba's dictionary), so that most new translations need no new subset.
MARGIN = 2500
#: What a Chinese figure draws in the CJK font besides Chinese: the words of a text with
#: ``$...$`` (and a log axis's ticks, ``$\\mathdefault{10^{-1}}$``) are drawn in the first font
#: of its family alone, so the font also holds ASCII, Latin-1, Greek, punctuation (U+2212, the
#: minus sign), arrows, mathematical operators, CJK punctuation and the full-width forms.
SYMBOLS = "".join(chr(c) for first, last in (
    (0x20, 0x7E), (0xA0, 0xFF), (0x391, 0x3C9), (0x2010, 0x2044), (0x2070, 0x209F),
    (0x2190, 0x21FF), (0x2200, 0x22FF), (0x3000, 0x303F), (0xFF01, 0xFF5E))
    for c in range(first, last + 1))
#: Where the book's characters are: every catalogue, the pages (the glossary's 中文 column, the
#: language switch), the configuration and the extensions.
SOURCES = ("locales/**/*.po", "book/**/*.md", "_config.yml", "conf.py", "book/_ext/*.py",
           "book/_static/*.js", "notebooks/zh_CN/*.ipynb")
#: Noto Sans CJK SC Regular in Debian's package; in the collection, the SC face is number 2.
DEBIAN_PACKAGE = "fonts-noto-cjk"
COLLECTION = "usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"
SC_FACE = 2


def used_characters() -> set[str]:
    """Every character of :data:`CJK` in the book's sources (:data:`SOURCES`)."""
    found: set[str] = set()
    for pattern in SOURCES:
        for path in ROOT.glob(pattern):
            if "_build" not in path.parts:
                found.update(CJK.findall(path.read_text(encoding="utf-8")))
    return found


def common_characters(count: int = MARGIN) -> list[str]:
    """The ``count`` most frequent Chinese characters, by the summed frequencies of the words of
    jieba's dictionary that hold them."""
    import jieba

    frequency: collections.Counter = collections.Counter()
    dictionary = Path(jieba.__file__).with_name("dict.txt")
    for line in dictionary.read_text(encoding="utf-8").splitlines():
        word, times, *_ = line.split()
        for character in word:
            if "\u4e00" <= character <= "\u9fff":
                frequency[character] += int(times)
    return [c for c, _ in frequency.most_common(count)]


def font_characters(path: Path = OTF) -> set[str]:
    """The characters the font file at ``path`` has a glyph for."""
    from fontTools.ttLib import TTFont

    with TTFont(path) as font:
        return {chr(code) for code in font.getBestCmap()}


def missing(characters: set[str] | None = None, path: Path = OTF) -> list[str]:
    """The characters of ``characters`` (the book's, by default) that the font lacks."""
    wanted = used_characters() if characters is None else characters
    return sorted(wanted - font_characters(path))


def _debian_source(folder: Path) -> Path:
    """Download Debian's fonts-noto-cjk into ``folder`` and unpack it; the collection's path."""
    subprocess.run(["apt-get", "download", DEBIAN_PACKAGE], cwd=folder, check=True)
    package = next(folder.glob(f"{DEBIAN_PACKAGE}_*.deb"))
    subprocess.run(["dpkg", "-x", str(package), str(folder / "unpacked")], check=True)
    return folder / "unpacked" / COLLECTION


def _rename(font) -> None:
    """Give the subset its own family name (the OFL's Modified Version), keeping the copyright,
    licence and designer records."""
    names = font["name"]
    full = f"{FAMILY} Regular"
    for record in names.names:
        if record.nameID in (1, 16):
            record.string = FAMILY
        elif record.nameID in (3, 6):
            record.string = "NotoSansSC-gpudl-Regular"
        elif record.nameID == 4:
            record.string = full
    names.names = [r for r in names.names if r.nameID != 17 or r.string != "Regular"]
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = ["NotoSansSC-gpudl-Regular"]
        top = cff.topDictIndex[0]
        top.FamilyName, top.FullName = FAMILY, full


def subset(source: Path, face: int = SC_FACE) -> set[str]:
    """Write :data:`OTF` and :data:`WOFF2` from the font (or collection, face ``face``) at
    ``source``: the book's characters, the :data:`MARGIN` commonest and :data:`SYMBOLS`. Returns
    the characters kept."""
    from fontTools import subset as fonttools_subset

    wanted = used_characters() | set(common_characters()) | set(SYMBOLS)
    FONTS.mkdir(parents=True, exist_ok=True)
    for flavor, path in ((None, OTF), ("woff2", WOFF2)):
        options = fonttools_subset.Options()
        options.font_number = face
        options.flavor = flavor
        options.layout_features = ["*"]
        options.name_IDs = ["*"]
        options.hinting = False
        font = fonttools_subset.load_font(str(source), options)
        subsetter = fonttools_subset.Subsetter(options)
        subsetter.populate(unicodes=[ord(c) for c in wanted])
        subsetter.subset(font)
        _rename(font)
        fonttools_subset.save_font(font, str(path), options)
    return font_characters()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="fail if the book uses a character the font lacks")
    make = commands.add_parser("subset", help="subset the font again (`make cjk-font`)")
    make.add_argument("--source", type=Path, help="Noto Sans CJK SC (an .otf, or the .ttc "
                      "collection with --face); default: Debian's fonts-noto-cjk, downloaded")
    make.add_argument("--face", type=int, default=SC_FACE, help="the SC face of a collection")
    args = parser.parse_args(argv)
    if args.command == "check":
        lacking = missing()
        if lacking:
            print(f"{OTF.relative_to(ROOT)} lacks {len(lacking)} character(s) the book uses: "
                  f"{''.join(lacking)} (run `make cjk-font`)", file=sys.stderr)
            return 1
        print(f"{OTF.relative_to(ROOT)}: every one of the book's {len(used_characters())} "
              "CJK characters is in the font")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        source = args.source or _debian_source(Path(folder))
        kept = subset(source, args.face if args.source else SC_FACE)
    print(f"{len(kept)} characters: {OTF.relative_to(ROOT)} {OTF.stat().st_size:,} bytes, "
          f"{WOFF2.relative_to(ROOT)} {WOFF2.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
