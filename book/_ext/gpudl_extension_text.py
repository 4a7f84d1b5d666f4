"""The words the book's extensions write into its pages, in each edition (CONTRIBUTING.md,
"Translations").

An extension writes its words in English, in its code: a sentence as the argument of
:func:`tr`, with ``{placeholders}`` for what changes (``tr("{minutes} min", minutes=3)``), a
word it uses later (a table's header, a backend's name) as the argument of :func:`message`.
Both take a literal string, which is the message's id. In the English build :func:`tr` gives
the English; in the Chinese one, the translation from ``locales/zh_CN/extensions.po`` (not a
page's catalogue: Sphinx never compiles it), read with babel. Texts that come from elsewhere
(a bar's description in a bench module, a box's ``:measured-by:``, the book's title) are put
into Chinese by :func:`translated`.

The edition is the one a directive sets (:func:`edition`) around what it draws (:func:`current`).
A text with no translation, or only a fuzzy one, calls the edition's ``on_missing``: in Sphinx
a warning naming it (the build runs with ``-W``), elsewhere an :class:`Untranslated` error.

``python book/_ext/gpudl_po.py extensions`` (part of `make po`) finds every such text
(:func:`texts`) and brings the catalogue up to them; ``gpudl_po.py check`` holds the catalogue
to them (:func:`problems`)."""

from __future__ import annotations

import ast
import contextvars
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = Path(__file__).resolve().parent
LANGUAGE = "zh_CN"
CATALOGUE = ROOT / "locales" / LANGUAGE / "extensions.po"
#: The functions whose literal first argument is a message (:func:`literal_messages`).
MARKERS = ("tr", "message")
PLACEHOLDER = re.compile(r"\{(\w*)\}")


class Untranslated(KeyError):
    """A text the Chinese edition writes that the catalogue does not translate."""


@cache
def _read(path: Path, mtime: float) -> dict[str, str]:
    from babel.messages.pofile import read_po  # only where Chinese is written: a lent GPU
    # machine's image has no babel, and draws the English boxes
    with path.open("rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def load(path: Path = CATALOGUE) -> dict[str, str]:
    """The catalogue's translated messages (fuzzy ones are not translations), id -> text."""
    return _read(path, path.stat().st_mtime) if path.exists() else {}


def _raise(text: str) -> None:
    raise Untranslated(f"{text!r} has no translation in {CATALOGUE.relative_to(ROOT)}: run "
                       "`make po`, then translate it")


@dataclass(frozen=True)
class Words:
    """An edition's words: ``language`` ``"zh_CN"`` translates, any other gives the English.
    ``translations`` replaces the catalogue (for tests); ``on_missing`` is called with each
    text that has no translation (which is then written in English)."""

    language: str = "en"
    on_missing: Callable[[str], None] = _raise
    translations: dict[str, str] | None = None

    def __call__(self, text: str, /, **fields: object) -> str:
        """``text`` in this edition, its ``{placeholders}`` filled from ``fields``."""
        if self.language == LANGUAGE:
            found = (load() if self.translations is None else self.translations).get(text)
            if found is None:
                self.on_missing(text)
            text = found or text
        return text.format(**fields) if fields else text


ENGLISH = Words()
#: The edition the extensions are writing for (None: English), set by :func:`edition`.
EDITION: contextvars.ContextVar[Words | None] = contextvars.ContextVar("edition", default=None)


def current() -> Words:
    """The words of the edition being written."""
    return EDITION.get() or ENGLISH


@contextmanager
def edition(words: Words) -> Iterator[Words]:
    """Write for ``words``'s edition inside the ``with`` block."""
    token = EDITION.set(words)
    try:
        yield words
    finally:
        EDITION.reset(token)


def tr(msgid: str, /, **fields: object) -> str:
    """The literal ``msgid`` in the current edition, ``{placeholders}`` filled from
    ``fields``."""
    return current()(msgid, **fields)


def message(msgid: str, /) -> str:
    """The literal ``msgid``, unchanged: marks a word for the catalogue that the code puts
    into the current edition later (with :func:`translated`)."""
    return msgid


def translated(text: str, /, **fields: object) -> str:
    """``text`` (not a literal: a marked word, a bench module's or a page's text) in the
    current edition."""
    return current()(text, **fields)


# --- the catalogue -----------------------------------------------------------------------------


def literal_messages(path: Path) -> list[tuple[str, int]]:
    """The messages of the Python file ``path``: the literal first argument of each call of
    :data:`MARKERS`, with its line (``ValueError`` for a call whose argument is not one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in MARKERS:
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                raise ValueError(f"{path.name}:{node.lineno}: {node.func.id}() takes a literal "
                                 "string (use translated() for other texts)")
            found.append((first.value, node.lineno))
    return found


def _measured_by(book: Path) -> Iterator[tuple[str, str, int]]:
    for page in sorted(book.rglob("*.md")):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith(":measured-by:"):
                yield line.split(":", 2)[2].strip(), str(page.relative_to(ROOT)), number


def _bars(results: Path) -> Iterator[tuple[str, str, int]]:
    import json

    from gpudl_measured import TOPICS

    for module in TOPICS.values():
        for spec in module.BARS:
            yield spec["what"], f"{module.__name__}.BARS", 0
    for stored in sorted(results.glob("*-cuda.json")):
        for bar in json.loads(stored.read_text()).get("bars", []):
            yield bar["what"], str(stored.relative_to(ROOT)), 0


def _predicted() -> Iterator[tuple[str, str, int]]:
    """The phrases of the boxes' predictions and published measurements
    (``gpudl.estimate.predictions``): each quantity that is not a row's name, each model and
    unit, each published quantity and unit."""
    from gpudl.estimate import predictions

    where = "gpudl/estimate/predictions"
    for box in predictions.BOXES:
        for p in predictions.predict(*box):
            if p.quantity not in p.rows:
                yield p.quantity, where, 0
            yield from ((text, where, 0) for text in (p.model, p.unit) if text)
        for found in predictions.published(*box):
            yield from ((text, "gpudl/estimate/published.py", 0)
                        for text in (found.quantity, found.unit))


def texts(root: Path = ROOT) -> dict[str, list[tuple[str, int]]]:
    """Every text the extensions write into a page, with where it comes from: the messages of
    book/_ext/*.py, the boxes' ``:measured-by:``, the bars' descriptions (their bench modules'
    ``BARS`` and the stored runs), the phrases of the boxes' predictions (:func:`_predicted`),
    the book's title and author (_config.yml)."""
    import yaml

    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(EXTENSIONS.glob("*.py")):
        for text, line in literal_messages(path):
            found.setdefault(text, []).append((str(path.relative_to(ROOT)), line))
    config = yaml.safe_load((root / "_config.yml").read_text())
    others = [(config["title"], "_config.yml", 0), (config["author"], "_config.yml", 0),
              *_measured_by(root / "book"), *_bars(root / "results"), *_predicted()]
    for text, where, line in others:
        found.setdefault(text, []).append((where, line))
    return found


def update(found: dict[str, list[tuple[str, int]]], path: Path = CATALOGUE) -> tuple[int, int]:
    """Bring the catalogue at ``path`` up to ``found`` (:func:`texts`): new texts
    untranslated, changed ones with the closest old translation marked fuzzy, gone ones
    dropped; each with the files that write it. Returns (messages, untranslated or fuzzy)."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    template = Catalog(locale=LANGUAGE, project="gpudl extensions")
    for text, where in found.items():  # each file that writes it (no lines: they move)
        template.add(text, locations=sorted({(path, 0) for path, _ in where}))
    catalog = Catalog(locale=LANGUAGE, project="gpudl extensions")
    if path.exists():
        with path.open("rb") as f:
            catalog = read_po(f)
    template.creation_date = catalog.creation_date  # no date churn: branches merge cleanly
    catalog.update(template, no_fuzzy_matching=False)
    catalog.obsolete.clear()
    for message in catalog:  # babel's format flags: a text is never a Python format (msgfmt -c)
        message.flags.difference_update({"python-format", "python-brace-format"})
    with path.open("wb") as f:
        write_po(f, catalog, width=76, omit_header=False)
    messages = [m for m in catalog if m.id]
    return len(messages), sum(1 for m in messages if not m.string or m.fuzzy)


def problems(path: Path = CATALOGUE, found: set[str] | None = None) -> list[str]:
    """What is wrong with the catalogue at ``path``: a message untranslated or fuzzy, one
    that :func:`texts` (or ``found``) no longer has or does not have yet, a translation that
    changes its placeholders, numbers, inline code or emphasis."""
    from babel.messages.pofile import read_po
    from gpudl_po_checks import entry_problems

    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        return [f"{shown}: missing: run `make po`"]
    with path.open("rb") as f:
        catalog = read_po(f)
    wanted = set(texts()) if found is None else found
    out = [f"{shown}: {text[:60]!r} is not in the catalogue: run `make po`"
           for text in sorted(wanted - {m.id for m in catalog if m.id})]
    for m in (m for m in catalog if m.id):
        where = f"{shown}: line {m.lineno}"
        if m.id not in wanted:
            out.append(f"{where}: no extension writes {m.id[:60]!r} any more: run `make po`")
        elif m.fuzzy or not m.string:
            out.append(f"{where}: {'fuzzy' if m.fuzzy else 'untranslated'}: {m.id[:60]!r}")
        elif sorted(PLACEHOLDER.findall(m.id)) != sorted(PLACEHOLDER.findall(m.string)):
            out.append(f"{where}: the placeholders of {m.id[:60]!r} are "
                       f"{sorted(set(PLACEHOLDER.findall(m.id)))}")
        else:
            out += [f"{where}: {p}: {m.id[:60]!r}" for p in entry_problems(m.id, m.string)]
    return out
