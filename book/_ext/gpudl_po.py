"""The Chinese edition's catalogues, from the command line (CONTRIBUTING.md, "Translations").

    python book/_ext/gpudl_po.py check [--pot _build/gettext]   # `make i18n-check`
    python book/_ext/gpudl_po.py memory                         # part of `make po`
    python book/_ext/gpudl_po.py notebooks                      # `make po`, `make notebooks`
    python book/_ext/gpudl_po.py figures                        # part of `make po`
    python book/_ext/gpudl_po.py extensions                     # part of `make po`
    python book/_ext/gpudl_po.py flags                          # part of `make po`

``check`` prints, per catalogue, how many of its messages are translated, and fails on: a
fuzzy entry; an obsolete entry (``#~``) that keeps a translation; a translation that loses
what `gpudl_po_checks` says it must keep; an untranslated message of a page that
``locales/zh_CN/pending.txt`` does not list; a figure's text untranslated, fuzzy or with a
number changed (``locales/zh_CN/figures.po``); a text the extensions write untranslated, fuzzy,
missing, no longer written, or with a placeholder, a number, code or emphasis changed
(``locales/zh_CN/extensions.po``, `gpudl_extension_text`); a glossary term not glossed at its
first use in a page; a term with two renderings across all the catalogues, or an English word
glossed two ways; an entry flagged as a Python format (``flags``); a Chinese lab out of sync
with its English notebook and catalogue; and whatever ``msgfmt -c`` finds in any catalogue (GNU
gettext's msgfmt must be installed). With ``--pot`` it also compares every catalogue with the
templates `make pot` wrote: a message missing from a catalogue is untranslated, a translated
one no template has is obsolete.

``memory`` is the translation memory across catalogues, for paragraphs that move between
pages: after ``sphinx-intl update`` it gives each untranslated message the translation the
same message has anywhere (another catalogue, an obsolete entry, ``locales/zh_CN/memory.po``),
or, failing that, the translation of the most similar message, marked fuzzy for review; then
it moves the obsolete entries into memory.po (kept, never compiled) and out of the pages'
catalogues.

``extensions`` brings ``locales/zh_CN/extensions.po`` up to the texts the extensions write
(`gpudl_extension_text.texts`), as ``figures`` does for the figures' words.

``flags`` removes the ``python-format`` and ``python-brace-format`` flags that babel (under
``sphinx-intl update``) puts on every message holding a ``%`` or a ``{...}``: a message is
markdown ("90%", ``{ref}``), never a Python format, and ``msgfmt -c`` fails on a translation
that such a flag makes it read as one."""

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gpudl_extension_text
import gpudl_labs
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po
from gpudl_glossary import terms as glossary_terms
from gpudl_i18n import CATALOGUES, LANGUAGE, ROOT, is_pending
from gpudl_po_checks import (
    Entry,
    entry_problems,
    exemptions,
    number_problems,
    rendering_problems,
    term_problems,
)

MEMORY = ROOT / "locales" / LANGUAGE / "memory.po"
#: The words inside the figures (`gpudl_figure_text`; not a page's catalogue: never compiled).
FIGURES = ROOT / "locales" / LANGUAGE / "figures.po"
#: Pages not held to the first-use gloss of the glossary's terms: the glossary itself, the
#: bibliography; the bibliography is not held to the glossary's renderings either.
NOT_TERM_CHECKED = ("book/appendix-glossary", "book/appendix-references")
NOT_RENDERING_CHECKED = ("book/appendix-references",)
#: the flags babel puts on a message with a % or a {...}: never right for markdown
FORMAT_FLAGS = ("python-format", "python-brace-format")
#: How close an English message must be to one in the memory to reuse its translation (fuzzy),
#: and how long (characters) both must be: a paragraph, not a heading or a term.
SIMILAR, PARAGRAPH = 0.85, 60


def read(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f)


def write(path: Path, catalog: Catalog) -> None:
    """Write ``catalog``, without the format flags babel gives its messages (``flags``)."""
    for message in list(catalog) + list(catalog.obsolete.values()):
        message.flags.difference_update(FORMAT_FLAGS)
    with path.open("wb") as f:
        write_po(f, catalog, width=76)


def catalogues() -> dict[str, Path]:
    """docname -> its catalogue, for every catalogue in locales/zh_CN/LC_MESSAGES."""
    return {str(p.relative_to(CATALOGUES).with_suffix("")): p
            for p in sorted(CATALOGUES.rglob("*.po"))}


def every_catalogue() -> list[Path]:
    """Every catalogue: the pages', the translation memory, the figures' and the extensions'."""
    return list(catalogues().values()) + [
        p for p in (MEMORY, FIGURES, gpudl_extension_text.CATALOGUE) if p.exists()]


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def messages(catalog: Catalog) -> list:
    return [m for m in catalog if m.id]


def lab_problems(english: Path) -> list[str]:
    """A Chinese lab that is not what its English notebook and catalogue make, or translated
    messages that the generator does not find in the notebook's markdown."""
    path = CATALOGUES / "notebooks" / f"{english.stem}.po"
    zh, found = zh_lab(english)
    translated = [m.id for m in messages(read(path)) if m.string] if path.exists() else []
    problems = [f"{path.relative_to(ROOT)}: {i[:50]!r} is not in the notebook's markdown "
                "(run `make po`)" for i in translated if i not in found]
    install = gpudl_labs.first_cell(gpudl_labs.repository_url(), gpudl_labs.wheel_name())
    if "".join(gpudl_labs.first_code_cell(json.loads(english.read_text()))["source"]) != install:
        problems.append(f"{english.relative_to(ROOT)}: its first code cell is not what "
                        "_config.yml makes: run `python book/_ext/gpudl_po.py notebooks`")
    target = gpudl_labs.ZH_NOTEBOOKS / english.name
    if not target.exists() or target.read_text() != gpudl_labs.dumps(zh):
        problems.append(f"{target.relative_to(ROOT)} is not what {english.name} and its "
                        "catalogue make: run `python book/_ext/gpudl_po.py notebooks` (part "
                        "of `make po` and `make notebooks`)")
    return problems


def check_catalogue(docname: str, catalog: Catalog, template: set[str] | None) -> tuple[
        list[str], int, int]:
    """(problems, untranslated messages, messages) of one page's catalogue."""
    problems, entries = [], []
    ids = {m.id for m in messages(catalog)}
    for m in messages(catalog):
        where = f"line {m.lineno}"
        if m.fuzzy:
            problems.append(f"{where}: fuzzy (review the translation, then drop the flag)")
        elif m.string:
            problems += [f"{where}: {p}" for p in entry_problems(m.id, m.string)]
            entries.append((m.id, m.string, exemptions(m.user_comments), where))
        if template is not None and m.id not in template and m.string:
            problems.append(f"{where}: obsolete (no page has it any more): run `make po`")
    problems += [f"obsolete entry {m.id[:50]!r} keeps a translation: run `make po`"
                 for m in catalog.obsolete.values() if m.string]
    missing = sorted(template - ids) if template is not None else []
    current = [m for m in messages(catalog) if template is None or m.id in template]
    untranslated = sum(not m.string or m.fuzzy for m in current) + len(missing)
    total = len(current) + len(missing)
    if not is_pending(docname):
        if untranslated:
            problems.append(f"{untranslated} untranslated messages (a page that "
                            "locales/zh_CN/pending.txt does not list must be translated)")
        if docname not in NOT_TERM_CHECKED:
            problems += term_problems(entries, glossary_terms())
    return problems, untranslated, total


def figure_problems(path: Path) -> list[str]:
    """What is wrong with the figures' catalogue (`gpudl_figure_text`): a fuzzy or untranslated
    text, or a translation that drops or changes one of its numbers (`number_problems`)."""
    if not path.exists():
        return [f"{shown(path)}: missing: run `make po`"]
    problems = []
    for m in messages(read(path)):
        where = f"{shown(path)}: line {m.lineno}"
        if m.fuzzy or not m.string:
            problems.append(f"{where}: {'fuzzy' if m.fuzzy else 'untranslated'}: {m.id!r}")
        else:
            problems += [f"{where}: {p}: {m.id!r}" for p in number_problems(m.id, m.string)]
    return problems


def term_entries(paths: list[Path]) -> dict[str, list[Entry]]:
    """The translated, not fuzzy, entries of the catalogues at ``paths`` (the bibliography's
    left out), for `rendering_problems`."""
    found = {}
    for path in paths:
        if path.is_relative_to(CATALOGUES) and str(
                path.relative_to(CATALOGUES).with_suffix("")) in NOT_RENDERING_CHECKED:
            continue
        name = str(shown(path))
        found[name] = [Entry(m.id, m.string, exemptions(m.user_comments),
                             f"{name} line {m.lineno}")
                       for m in messages(read(path)) if m.string and not m.fuzzy]
    return found


def flagged(path: Path) -> list[int]:
    """The lines of ``path`` that flag a message as a Python format (``flags`` removes them)."""
    return [n for n, line in enumerate(path.read_text().splitlines(), 1)
            if line.startswith("#,") and any(f in line for f in FORMAT_FLAGS)]


def strip_flags(path: Path) -> int:
    """Remove the format flags from the catalogue at ``path``, as text (nothing else of it
    changes); the number of lines changed."""
    lines, changed = path.read_text().splitlines(keepends=True), 0
    for i, line in enumerate(lines):
        if line.startswith("#,") and any(f in line for f in FORMAT_FLAGS):
            kept = [f.strip() for f in line[2:].split(",") if f.strip() not in FORMAT_FLAGS]
            lines[i] = f"#, {', '.join(kept)}\n" if kept else ""
            changed += 1
    if changed:
        path.write_text("".join(lines))
    return changed


def msgfmt_problems(paths: list[Path]) -> list[str]:
    """What ``msgfmt -c`` (GNU gettext) finds wrong in the catalogues at ``paths``: its errors,
    not its warnings (a header's default fields). Empty where msgfmt is not installed."""
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        return []
    problems = []
    for path in paths:
        done = subprocess.run([msgfmt, "-c", "-o", "/dev/null", str(shown(path))], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        if done.returncode:
            errors = [line for line in done.stderr.splitlines()
                      if "warning:" not in line and not re.search(r"msgfmt: found \d", line)]
            problems += [f"msgfmt -c: {line}" for line in errors] or [
                f"msgfmt -c: {shown(path)}: {done.stderr.strip()[-200:]}"]
    return problems


def templates(pot: Path) -> dict[str, set[str]]:
    return {str(p.relative_to(pot).with_suffix("")): {m.id for m in messages(read(p))}
            for p in sorted(pot.rglob("*.pot"))}


def report(pot: Path | None = None) -> tuple[list[str], list[str]]:
    """(the report's lines, the problems found) for every catalogue and Chinese lab."""
    found = catalogues()
    expected = templates(pot) if pot else {}
    lines, problems, untranslated, total = [], [], 0, 0
    for docname in sorted(set(expected) - set(found)):
        count = len(expected[docname])
        untranslated, total = untranslated + count, total + count
        lines.append(f"{docname:40}     0 of {count:5} translated (no catalogue yet)")
        if not is_pending(docname):
            problems.append(f"{docname}: no catalogue: run `make po`")
    for docname, path in found.items():
        if pot and docname not in expected:
            problems.append(f"{path.relative_to(ROOT)}: no page has this catalogue any more")
            continue
        own, missing, count = check_catalogue(docname, read(path), expected.get(docname))
        problems += [f"{path.relative_to(ROOT)}: {p}" for p in own]
        untranslated, total = untranslated + missing, total + count
        state = "pending" if is_pending(docname) else "translated"
        lines.append(f"{docname:40} {count - missing:5} of {count:5} translated ({state})")
    for english in sorted(gpudl_labs.NOTEBOOKS.glob("*.ipynb")):
        problems += lab_problems(english)
    problems += figure_problems(FIGURES)
    problems += gpudl_extension_text.problems()
    every = every_catalogue()
    problems += [f"terms: {p}" for p in rendering_problems(term_entries(every),
                                                            glossary_terms())]
    for path in every:
        if flag_lines := flagged(path):
            problems.append(f"{shown(path)}: lines {flag_lines} flag a message as a Python format: "
                            "run `python book/_ext/gpudl_po.py flags`")
    problems += msgfmt_problems(every)
    lines.append(f"{total - untranslated} of {total} messages translated, {untranslated} "
                 "untranslated" + ("" if pot else " (the catalogues as they are; "
                                   "`make i18n-check` first compares them with the pages)"))
    return lines, problems


def check(pot: Path | None) -> int:
    """Print the report; the number of problems found (msgfmt missing is one)."""
    lines, problems = report(pot)
    if shutil.which("msgfmt") is None:
        problems.append("msgfmt (GNU gettext) is not installed: `msgfmt -c` checks nothing")
    print("\n".join(lines + [f"PROBLEM {p}" for p in problems]))
    return len(problems)


def flags() -> None:
    """Remove the format flags from every catalogue (after ``sphinx-intl update``)."""
    for path in every_catalogue():
        if changed := strip_flags(path):
            print(f"{shown(path)}: {changed} format flags removed")


def memory() -> None:
    """Reuse translations across catalogues, then move obsolete entries into memory.po."""
    memory = read(MEMORY) if MEMORY.exists() else Catalog(locale=LANGUAGE)
    pages = {docname: read(path) for docname, path in catalogues().items()}
    # a message kept as it is (a term in the glossary's English column) says nothing of how
    # another page should render it
    def translations(entries) -> dict[str, str]:
        return {m.id: m.string for m in entries if m.string and m.string != m.id}

    known = translations(messages(memory))
    for catalog in pages.values():
        known |= translations(catalog.obsolete.values())
    for catalog in pages.values():
        known |= translations(m for m in messages(catalog) if not m.fuzzy)
    paragraphs = [msgid for msgid in known if len(msgid) >= PARAGRAPH]
    for docname, catalog in pages.items():
        changed = bool(catalog.obsolete)
        for m in messages(catalog):
            if m.string:
                continue
            if m.id in known:
                m.string = known[m.id]
            elif len(m.id) >= PARAGRAPH and (
                    similar := difflib.get_close_matches(m.id, paragraphs, 1, SIMILAR)):
                m.string, m.previous_id = known[similar[0]], [similar[0]]
                m.flags.add("fuzzy")
            else:
                continue
            changed = True
            print(f"{docname}: reused the translation of {m.id[:60]!r}")
        for m in catalog.obsolete.values():
            if m.string:
                memory.add(m.id, m.string, auto_comments=[f"was in {docname}"])
        catalog.obsolete.clear()
        if changed:
            write(CATALOGUES / f"{docname}.po", catalog)
    if len(memory):
        write(MEMORY, memory)


def zh_lab(english: Path) -> tuple[dict, list[str]]:
    """The Chinese lab of the notebook ``english`` (its catalogue's translations), and the
    messages the generator found in its markdown."""
    path = CATALOGUES / "notebooks" / f"{english.stem}.po"
    catalog = read(path) if path.exists() else Catalog()
    translated = {m.id: m.string for m in messages(catalog) if m.string and not m.fuzzy}
    return gpudl_labs.zh_notebook(json.loads(english.read_text()), translated)


def notebooks() -> None:
    """Give every English lab the install cell that _config.yml makes (`gpudl_labs`), then
    write every Chinese lab from its English notebook and catalogue."""
    for path in gpudl_labs.write_first_cells():
        print(f"{path.relative_to(ROOT)}: its first code cell rewritten from _config.yml")
    gpudl_labs.ZH_NOTEBOOKS.mkdir(exist_ok=True)
    for english in sorted(gpudl_labs.NOTEBOOKS.glob("*.ipynb")):
        (gpudl_labs.ZH_NOTEBOOKS / english.name).write_text(gpudl_labs.dumps(zh_lab(english)[0]))


def figures() -> None:
    """Draw every model figure and bring locales/zh_CN/figures.po up to their words."""
    import matplotlib

    matplotlib.use("Agg")
    import gpudl_figure_text as figure_text
    import matplotlib.pyplot as plt
    from gpudl_figures import figures as book_figures

    texts = {}
    for name, draw in book_figures().items():
        fig = draw()
        texts[name] = figure_text.words(fig)
        plt.close(fig)
    total, todo = figure_text.update(texts)
    print(f"{figure_text.CATALOGUE.relative_to(ROOT)}: {total} messages, {todo} to translate")


def extensions() -> None:
    """Bring locales/zh_CN/extensions.po up to the texts the extensions write."""
    total, todo = gpudl_extension_text.update(gpudl_extension_text.texts())
    print(f"{gpudl_extension_text.CATALOGUE.relative_to(ROOT)}: {total} messages, {todo} to "
          "translate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="the report; fails on any problem")
    check_parser.add_argument("--pot", type=Path, help="the templates (`make pot`)")
    commands.add_parser("memory", help="reuse translations of moved messages")
    commands.add_parser("notebooks",
                        help="write the labs' install cell and notebooks/zh_CN/*.ipynb")
    commands.add_parser("figures", help="update locales/zh_CN/figures.po from the figures")
    commands.add_parser("extensions", help="update locales/zh_CN/extensions.po from the texts "
                        "the extensions write")
    commands.add_parser("flags", help="remove the python-format flags babel puts on messages")
    args = parser.parse_args(argv)
    if args.command == "check":
        return 1 if check(args.pot) else 0
    {"memory": memory, "notebooks": notebooks, "figures": figures,
     "extensions": extensions, "flags": flags}[args.command]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
