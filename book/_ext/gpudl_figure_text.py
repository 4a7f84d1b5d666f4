"""The words inside the book's figures, in Chinese (CONTRIBUTING.md, "Translations").

Each figure is drawn once, in English, by the English build. It is then saved a second time
with every text that holds a word (a title, an axis label, a legend, an annotation, a tick
label such as a kernel's name) replaced by its translation from ``locales/zh_CN/figures.po``,
in the book's own CJK font (`gpudl_fonts`), as ``<name>.zh_CN.png`` beside the English file;
Sphinx's ``figure_language_filename`` then shows that file in the Chinese edition. Numbers
alone (the ticks of a numeric axis, ``$10^{6}$``) are left as they are.

A model figure's text with no translation, or only a fuzzy one, is a warning of the English
build (which runs with ``-W``): a figure cannot change its words without its translation.
``python book/_ext/gpudl_po.py figures`` (part of `make po`) draws every figure and updates the
catalogue: new texts untranslated, changed ones with the old translation marked fuzzy.
The font travels with the repository, so every machine draws the same Chinese figures; a
character it lacks is an error naming it, never an empty box."""

from __future__ import annotations

import logging
import re
import warnings
from functools import cache
from pathlib import Path

import gpudl_fonts
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po
from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.text import Text

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = "zh_CN"
CATALOGUE = ROOT / "locales" / LANGUAGE / "figures.po"
#: What matplotlib says when it draws a character as an empty box: a warning for text, a log
#: record of ``matplotlib.mathtext`` for a text with ``$...$`` (whose words are drawn in the
#: first font of the text's family alone, hence the book's CJK font first).
_GLYPH_MISSING = re.compile(r"Glyph \d+ .* missing from font|does not have a glyph for")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
_MATH = re.compile(r"\$[^$]*\$")
_WORD = re.compile(r"[A-Za-z]{2,}")


def localized(path: Path) -> Path:
    """Where the Chinese version of the figure ``path`` is saved (Sphinx's default
    ``figure_language_filename``, ``{root}.{language}{ext}``)."""
    return path.with_name(f"{path.stem}.{LANGUAGE}{path.suffix}")


def has_words(text: str) -> bool:
    """Whether ``text`` needs a translation: two letters in a row outside ``$...$`` math."""
    return bool(_WORD.search(_MATH.sub("", text)))


@cache
def cjk_family() -> str:
    """The family name of the book's CJK font, added to matplotlib's fonts from the repository
    (`gpudl_fonts`); no system font is looked for."""
    font_manager.fontManager.addfont(str(gpudl_fonts.OTF))
    return gpudl_fonts.FAMILY


def _tick_labels(fig: Figure) -> list[tuple[object, bool, list[Text]]]:
    """Each axis of ``fig``, major then minor, with its ticks' labels (bottom or left, in the
    order of the tick locations; then top or right)."""
    out = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for minor in (False, True):
                locations = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
                ticks = (axis.get_minor_ticks if minor else axis.get_major_ticks)(len(locations))
                out.append((axis, minor, [t.label1 for t in ticks] + [t.label2 for t in ticks]))
    return out


def _texts(fig: Figure) -> list[Text]:
    """Every text of ``fig`` that is not a tick label, in drawing order."""
    ticks = {id(t) for *_, labels in _tick_labels(fig) for t in labels}
    return [t for t in fig.findobj(Text) if id(t) not in ticks]


def words(fig: Figure) -> list[str]:
    """The texts of ``fig`` that need a translation, each once, in order."""
    fig.canvas.draw()  # ticks get their labels at the draw
    found = [t.get_text() for *_, labels in _tick_labels(fig) for t in labels if t.get_visible()]
    found += [t.get_text() for t in _texts(fig) if t.get_visible()]
    return list(dict.fromkeys(s for s in found if has_words(s)))


def translate(fig: Figure, translations: dict[str, str], family: str) -> list[str]:
    """Put ``fig``'s words into Chinese in place, in the font ``family``, keeping the English
    layout (a figure may place its legend after laying out). Returns the texts that have no
    translation (left in English)."""
    missing = [s for s in words(fig) if s not in translations]

    def chinese(text: str) -> str:
        return translations.get(text, text) if has_words(text) else text

    for axis, minor, labels in _tick_labels(fig):
        first = labels[:len(labels) // 2]  # label1 of each tick; label2 shows the same text
        if any(has_words(t.get_text()) for t in labels):
            limits = axis.get_view_interval()
            locations = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
            axis.set_ticks(locations, [chinese(t.get_text()) for t in first], minor=minor)
            axis.set_view_interval(*limits, ignore=True)
    for text in _texts(fig):
        text.set_text(chinese(text.get_text()))
    for text in fig.findobj(Text):
        text.set_fontfamily([family, "DejaVu Sans"])
    return missing


def load(path: Path = CATALOGUE) -> dict[str, str]:
    """The translated, not fuzzy, messages of the figures' catalogue."""
    if not path.exists():
        return {}
    with path.open("rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def save(fig: Figure, path: Path) -> None:
    """``fig.savefig(path)`` at the book's resolution. A character that no font has
    (matplotlib's "Glyph ... missing" warning: an empty box in the drawing) is a RuntimeError
    naming it."""
    records, mathtext = _Records(), logging.getLogger("matplotlib.mathtext")
    mathtext.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fig.savefig(path, dpi=110)
    finally:
        mathtext.removeHandler(records)
    said = [str(w.message) for w in seen] + records.messages
    boxes = sorted({m for m in said if _GLYPH_MISSING.search(m)})
    for w in seen:
        if not _GLYPH_MISSING.search(str(w.message)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if boxes:
        raise RuntimeError(f"{path.name}: characters no font has, drawn as empty boxes (run "
                           f"`make cjk-font`): {boxes}")


def save_chinese(fig: Figure, path: Path, translations: dict[str, str]) -> list[str]:
    """Save ``fig`` (already saved in English at ``path``) in Chinese beside it, in the book's
    CJK font (:func:`save`); returns the texts left without a translation. ``fig`` is changed
    in place."""
    missing = translate(fig, translations, cjk_family())
    save(fig, localized(path))
    return missing


def update(texts: dict[str, list[str]], path: Path = CATALOGUE) -> tuple[int, int]:
    """Bring the catalogue at ``path`` up to ``texts`` (figure name -> its words): new words
    untranslated, changed ones with the closest old translation marked fuzzy, gone ones
    dropped. Returns (messages, untranslated or fuzzy)."""
    template = Catalog(locale=LANGUAGE, project="gpudl figures")
    for name, found in sorted(texts.items()):
        for text in found:
            template.add(text, locations=[(name, 0)])
    if path.exists():
        with path.open("rb") as f:
            catalog = read_po(f)
    else:
        catalog = Catalog(locale=LANGUAGE, project="gpudl figures")
    template.creation_date = catalog.creation_date  # no date churn: branches merge cleanly
    catalog.update(template, no_fuzzy_matching=False)
    catalog.obsolete.clear()
    for message in catalog:  # babel's format flags: a text is never a Python format (msgfmt -c)
        message.flags.difference_update({"python-format", "python-brace-format"})
    for message in catalog:  # a figure's text is never a Python format (`gpudl_po.py flags`)
        message.flags.difference_update(("python-format", "python-brace-format"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=76, omit_header=False)
    messages = [m for m in catalog if m.id]
    return len(messages), sum(1 for m in messages if not m.string or m.fuzzy)
