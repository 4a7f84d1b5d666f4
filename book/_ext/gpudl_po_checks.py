"""What a translation must keep of its message (CONTRIBUTING.md, "Translations").

A catalogue's message is MyST markdown. Its translation is parsed with the same parser (MyST's
markdown-it, with the extensions of _config.yml) and must keep, unchanged:

- every role's name, and its target (``{ref}`第 1 章 <ch01-cores>``` may translate the title
  ``Chapter 1``, not ``ch01-cores``); a role without a title (``{cite}``, ``{glue:text}``,
  ``{eq}``, a bare ``{ref}``) whole;
- every link's target, inline code, inline math, substitution and inline HTML;
- every number of its text (a translation may add numbers, as 8 月 31 日 for 31 August);
- its emphasis: as many strong and emphasised spans, and no ``*`` left over. CommonMark does
  not close ``**读它。**`` when a character follows it: the full stop goes outside,
  ``**读它**。``

`term_problems` holds the translation to the glossary (`gpudl_glossary`): an English term of
a message is rendered by the glossary's Chinese (names and acronyms may stay as they are), and
its first rendering in a page is glossed as 中文（English）. A translator's comment
``# terms: rank, value`` exempts those terms in that message (a meaning the glossary's
term does not have there)."""

import re
from collections import Counter
from functools import cache
from pathlib import Path

from gpudl_glossary import Term

ROOT = Path(__file__).resolve().parents[2]
#: Roles whose content is "title <target>": the title may be translated, the target not.
TITLED_ROLES = {"ref", "numref", "doc", "term", "download", "any", "external"}
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


@cache
def markdown_parser():
    """MyST's markdown-it parser with the book's extensions (`parse` in _config.yml)."""
    import yaml
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    extensions = set(config["parse"]["myst_enable_extensions"])
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def inline_tokens(text: str) -> list:
    """The inline tokens of ``text``, flattened (a message is one paragraph, title or cell)."""
    return [child for block in markdown_parser().parse(text) if block.type == "inline"
            for child in block.children or []]


def _split_title(content: str) -> tuple[str | None, str]:
    match = re.fullmatch(r"(.*?)\s*<([^<>]+)>", content, re.S)
    return (match.group(1), match.group(2)) if match else (None, content)


def invariants(text: str) -> Counter:
    """What a translation of ``text`` must keep, as a multiset of (kind, value)."""
    kept: Counter = Counter()
    for token in inline_tokens(text):
        if token.type == "myst_role":
            name = token.meta["name"]
            title, target = _split_title(token.content)
            kept["role", name, target if name in TITLED_ROLES and title else token.content] += 1
        elif token.type in ("code_inline", "math_inline", "math_inline_double",
                            "substitution_inline", "html_inline"):
            kept[token.type, token.content] += 1
        elif token.type in ("link_open", "image"):
            kept["target", token.attrs.get("href") or token.attrs.get("src")] += 1
        elif token.type == "text":
            kept.update(("number", n) for n in NUMBER.findall(token.content))
    return kept


def words(text: str, titles: bool = True) -> str:
    """The prose of ``text``, where a term of the glossary can occur: its text and (with
    ``titles``) the titles of its references; no code, math, targets or citation keys."""
    parts = []
    for token in inline_tokens(text):
        if token.type == "text":
            parts.append(token.content)
        elif titles and token.type == "myst_role" and token.meta["name"] in TITLED_ROLES:
            parts.append(_split_title(token.content)[0] or "")
    return " ".join(parts)


def emphasis(text: str) -> tuple[int, int, int]:
    """(strong spans, emphasised spans, ``*`` left in the text) of ``text``."""
    tokens = inline_tokens(text)
    return (sum(t.type == "strong_open" for t in tokens), sum(t.type == "em_open" for t in tokens),
            sum(t.content.count("*") for t in tokens if t.type == "text"))


def entry_problems(msgid: str, msgstr: str) -> list[str]:
    """What ``msgstr`` loses or breaks of ``msgid`` (nothing: an empty list)."""
    problems = []
    if "\n" in msgid.strip() or msgid.lstrip().startswith(("$$", "```")):
        return [] if msgid == msgstr else ["a block that is not prose must stay as it is"]
    before, after = invariants(msgid), invariants(msgstr)
    numbers = {k: v for k, v in before.items() if k[0] == "number"}
    others = lambda kept: Counter({k: v for k, v in kept.items() if k[0] != "number"})
    if others(before) != others(after):
        lost, added = others(before) - others(after), others(after) - others(before)
        problems.append(f"changes roles, references, links, code or math: lost "
                        f"{sorted(lost.elements())}, added {sorted(added.elements())}")
    missing = [k[1] for k, v in numbers.items() if after[k] < v]
    if missing:
        problems.append(f"drops or changes the numbers {missing}")
    strong, emph, stars = emphasis(msgid)
    strong_zh, emph_zh, stars_zh = emphasis(msgstr)
    if (strong_zh, emph_zh) != (strong, emph) or stars_zh > stars:
        problems.append(f"emphasis that will not render: {strong_zh} strong and {emph_zh} "
                        f"emphasised spans for {strong} and {emph}, {stars_zh - stars} '*' "
                        "left over (keep a full stop outside: **读它**。)")
    return problems


def _english(term: Term) -> re.Pattern:
    flags = 0 if term.name_like else re.I
    return re.compile(rf"(?<![\w-]){re.escape(term.english)}(?:s|es)?(?![\w-])", flags)


def exempt_terms(comments: list[str]) -> set[str]:
    """The terms a translator's ``# terms: a, b (why)`` comment exempts."""
    return {t.strip().lower() for c in comments if c.startswith("terms:")
            for t in re.sub(r"\(.*?\)", "", c[len("terms:"):]).split(",")}


def _found(terms: list[Term], prose: str) -> list[Term]:
    """The terms in ``prose``, longest first, each occurrence counted for one term only
    (``thread block`` is not also a ``thread``)."""
    found = []
    for term in sorted(terms, key=lambda t: -len(t.english)):
        prose, hits = _english(term).subn("§", prose)
        if hits:
            found.append(term)
    return found


def term_problems(entries: list[tuple[str, str, set[str]]], terms: list[Term]) -> list[str]:
    """The glossary's terms that ``entries`` (msgid, msgstr, exempt terms), one page's
    translated messages in order, render otherwise, or do not gloss at their first use in
    its prose (a reference's title, a section's name, is not glossed)."""
    problems, glossed = [], set()
    for msgid, msgstr, exempt in entries:
        in_text = set(_found(terms, words(msgid, titles=False)))
        for term in _found(terms, words(msgid)):
            if term.english.lower() in exempt or (term.name_like and term.english in msgstr):
                continue
            if term.chinese not in msgstr:
                problems.append(f"{term.english!r} is rendered otherwise than "
                                f"{term.chinese!r} in {msgstr[:50]!r}")
            elif term in in_text and term.english not in glossed and not term.name_like:
                gloss = rf"{re.escape(term.chinese)}\s*[（(]\s*{re.escape(term.english)}"
                if not re.search(gloss, msgstr, re.I):
                    problems.append(f"first use of {term.english!r} is not glossed as "
                                    f"{term.chinese}（{term.english}） in {msgstr[:50]!r}")
            if term in in_text:
                glossed.add(term.english)
    return problems
