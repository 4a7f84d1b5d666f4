"""What a translation must keep of its message (CONTRIBUTING.md, "Translations").

A catalogue's message is MyST markdown. Its translation is parsed with the same parser (MyST's
markdown-it, with the extensions of _config.yml) and must keep, unchanged:

- every role's name, and its target (``{ref}`第 1 章 <ch01-cores>``` may translate the title
  ``Chapter 1``, not ``ch01-cores``); a role without a title (``{cite}``, ``{glue:text}``,
  ``{eq}``, a bare ``{ref}``) whole;
- every link's target, inline code, inline math, substitution and inline HTML;
- every number of its text (a translation may add numbers, as 8 月 31 日 for 31 August), in
  the Chinese manner for thousands, millions and billions (20k is 2 万, 10 million 1000 万,
  1.5 billion 15 亿: exact conversions only), never abbreviated (10M) nor in Chinese numerals
  (一千万) where the English has digits (`number_problems`);
- its emphasis: as many strong and emphasised spans, and no ``*`` left over. CommonMark does
  not close ``**读它。**`` when a character follows it: the full stop goes outside,
  ``**读它**。``

The glossary (`gpudl_glossary`) holds the translation to one Chinese rendering per term.
`term_problems` checks one page: the first use of each term in its prose reads 中文（English）
(a bare acronym or name, ``GPU``, ``Adam``, need not be glossed; a longer term that holds one,
``KV cache``, must). `rendering_problems` checks every catalogue together: for each term, the
renderings found for its English (the glossary's, each 中文（English） gloss, and each
translation of a message holding the term without the glossary's Chinese) must be one; and an
English word glossed anywhere is glossed the same way everywhere. A translator's comment
``# terms: rank, kernel (why)`` exempts those terms in that message: from the first-use gloss
whatever the reason (a title), from the rendering only where the reason is another meaning
(``kernel (a layer's convolution kernels, not a GPU kernel)``)."""

import re
from collections import Counter, defaultdict
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import NamedTuple

from gpudl_glossary import Term, search_dictionary

ROOT = Path(__file__).resolve().parents[2]
#: Roles whose content is "title <target>": the title may be translated, the target not.
TITLED_ROLES = {"ref", "numref", "doc", "term", "download", "any", "external"}
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
#: "N thousand", "N million", "N billion" in English, also hyphenated ("a 10-million-sample
#: set"), or abbreviated, "20k", "10M", "1.5B" (which a translation may also keep as they are)
SCALED = re.compile(r"(?<![\w.,])(\d+(?:\.\d+)?)"
                    r"(?:(?:\s*|-)((?i:thousand|million|billion|trillion))\b"
                    r"|([kKMB])(?![A-Za-z]))")
#: the numbers of a list that shares the scale of its last one: the 3.67 of "3.67 and 63.8
#: million", the 20 of "20 to 50 thousand" (a translation may write them in the Chinese manner
#: too, 367 万 and 6380 万, or keep them as they are: "at batch 1 and 28.0 million" means 1)
_JOIN = r"(?:,\s+|\s+(?:and|or|to)\s+|\s*[-–]\s*)"
SHARED = re.compile(rf"(?<![\w.,])(\d+(?:\.\d+)?)(?={_JOIN}(?:\d+(?:\.\d+)?{_JOIN})*"
                    r"\d+(?:\.\d+)?(?:\s*|-)((?i:thousand|million|billion|trillion))\b)")
SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12, "k": 3, "m": 6, "b": 9}
#: Chinese units of a large number, largest first: 1.5 billion is 15 亿
CHINESE_UNITS = (("万亿", 12), ("亿", 8), ("万", 4))
#: a number abbreviated, 10M, 1.5B, 20k (where the English does not write it so itself)
ABBREVIATED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[kKMBT](?![A-Za-z])")
#: a number in Chinese numerals, 一千万, 十五亿 (数百万, 几十亿 "millions" is not a number)
CHINESE_NUMERAL = re.compile(r"(?<![数几])[一二两三四五六七八九十百千]+[万亿]")
#: a number with a Chinese unit of a large number (2 万, 15 亿; 5 千 is not the manner)
WITH_UNIT = r"\s*(?:万亿|[千万亿])"


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


def chinese_number(number: str, scale: str) -> tuple[str, str]:
    """``number`` ``scale`` (16.8 million) in the Chinese manner: (1680, 万); a number below
    10,000 (5 thousand) has no unit: (5000, "")."""
    value = Decimal(number).scaleb(SCALES[scale.lower()])
    if value < 10 ** CHINESE_UNITS[-1][1]:
        return f"{value.normalize():f}", ""
    unit, power = next((u, p) for u, p in CHINESE_UNITS if value >= Decimal(10) ** p)
    amount = value.scaleb(-power).normalize()
    return f"{amount:f}", unit


def _written(amount: str, unit: str, chinese: str) -> bool:
    """Whether ``chinese`` writes ``amount`` ``unit`` (1680 万; 5000 or 5,000 with no unit)."""
    if not unit:
        plain = {amount, f"{Decimal(amount):,f}"}
        return any(re.search(rf"(?<![\d.,]){re.escape(p)}(?![\d.,]|{WITH_UNIT})", chinese)
                   for p in plain)
    after = "(?!亿)" if unit == "万" else ""
    return bool(re.search(rf"(?<![\d.,]){re.escape(amount)}\s*{unit}{after}", chinese))


def number_problems(english: str, chinese: str) -> list[str]:
    """What the prose ``chinese`` drops or changes of the numbers of the prose ``english``:
    every number stays (more may come), "N thousand", "N million" and "N billion" are written
    in the Chinese manner (20 thousand: 2 万; 10 million: 1000 万; 16.8 million: 1680 万;
    1.5 billion: 15 亿), and a number is neither abbreviated (10M) nor written in Chinese
    numerals (一千万). An abbreviation of the English (20k, 10M, 1.5B) and a number of a list
    sharing a scale ("3.67 and 63.8 million") may stay as they are or take the Chinese manner
    (2 万, 1000 万, 15 亿, 367 万); a conversion that is not exact (20k as 20 万 or 2 千,
    1.5B as 1.5 亿, 3.67 million as 36.7 万) is reported."""
    problems = []
    needed = Counter(NUMBER.findall(english))
    scaled = [(number, scale, bool(word)) for number, word, abbreviation in
              SCALED.findall(english) for scale in [word or abbreviation]]
    scaled += [(number, scale, False) for number, scale in SHARED.findall(english)]
    converted = [chinese_number(number, scale) for number, scale, _ in scaled]
    exact = {amount + unit for amount, unit in converted}
    for (number, scale, word), (amount, unit) in zip(scaled, converted, strict=True):
        written = f"{number}{scale}" if len(scale) == 1 else f"{number} {scale}"
        if _written(amount, unit, chinese):
            needed[number] -= 1
            continue
        # the English digits with a Chinese unit, not another number's exact conversion
        if any(re.sub(r"\s", "", m.group(0)) not in exact
               for m in re.finditer(rf"(?<![\d.,]){re.escape(number)}{WITH_UNIT}", chinese)):
            problems.append(f"converts {written} wrongly: it is {amount} {unit}".strip())
        elif word:  # "10 million" must be 1000 万; "10M", the 3.67 of a list may stay
            needed[number] -= 1
            problems.append(f"writes {written} otherwise than {amount} {unit}".strip())
    missing = needed - Counter(NUMBER.findall(chinese))
    if missing:
        problems.append(f"drops or changes the numbers {sorted(missing)}")
    abbreviated = set(ABBREVIATED.findall(chinese)) - set(ABBREVIATED.findall(english))
    if abbreviated:
        problems.append(f"abbreviates the numbers {sorted(abbreviated)} (write 1000 万, 15 亿)")
    if NUMBER.search(english) and (numerals := CHINESE_NUMERAL.findall(chinese)):
        problems.append(f"writes {numerals} in Chinese numerals where the English has digits "
                        "(write 1000 万, 15 亿)")
    return problems


def entry_problems(msgid: str, msgstr: str) -> list[str]:
    """What ``msgstr`` loses or breaks of ``msgid`` (nothing: an empty list)."""
    problems = []
    if "\n" in msgid.strip() or msgid.lstrip().startswith(("$$", "```")):
        return [] if msgid == msgstr else ["a block that is not prose must stay as it is"]
    before, after = invariants(msgid), invariants(msgstr)
    others = lambda kept: Counter({k: v for k, v in kept.items() if k[0] != "number"})
    if others(before) != others(after):
        lost, added = others(before) - others(after), others(after) - others(before)
        problems.append(f"changes roles, references, links, code or math: lost "
                        f"{sorted(lost.elements())}, added {sorted(added.elements())}")
    problems += number_problems(words(msgid, titles=False), words(msgstr, titles=False))
    strong, emph, stars = emphasis(msgid)
    strong_zh, emph_zh, stars_zh = emphasis(msgstr)
    if (strong_zh, emph_zh) != (strong, emph) or stars_zh > stars:
        problems.append(f"emphasis that will not render: {strong_zh} strong and {emph_zh} "
                        f"emphasised spans for {strong} and {emph}, {stars_zh - stars} '*' "
                        "left over (keep a full stop outside: **读它**。)")
    return problems


def _english(term: Term) -> re.Pattern:
    """``term`` in English prose, plural included, not in a unit (flop/s): with its case
    where it has capitals."""
    flags = 0 if term.english != term.english.lower() else re.I
    first = term.english[0]
    name = (f"[{first}{first.upper()}]" if first.islower() else re.escape(first)) + re.escape(
        term.english[1:])  # split-KV decoding, Split-KV decoding
    return re.compile(rf"(?<![\w-])(?<!\w/){name}(?:s|es)?(?![\w-]|/\w)", flags)


#: the reason of a ``# terms:`` comment that says only where the term is glossed instead (a
#: title, a heading), not that it means something else there
GLOSSED_ELSEWHERE = re.compile(r"\b(?:titles?|headings?|glossed)\b", re.I)


def exemptions(comments: list[str]) -> dict[str, str]:
    """The terms a translator's ``# terms: a, b (why)`` comments exempt, each with its reason
    ("" where none is given)."""
    found, lines = {}, iter(comments)
    for comment in lines:
        if not comment.startswith("terms:"):
            continue
        while comment.count("(") > comment.count(")"):  # a long comment, wrapped by babel
            comment += " " + next(lines, ")")
        for name, reason in re.findall(r"\s*([^,()]+?)\s*(?:\(([^)]*)\))?\s*(?:,|$)",
                                       comment[len("terms:"):]):
            found[name.lower()] = reason
    return found


def other_meaning(reason: str) -> bool:
    """Whether an exemption's reason says what else the term means there (``a verb``, ``cells
    of a figure``: honoured by the rendering check), rather than where it is glossed (``a
    title: glossed below``: the first-use gloss only) or nothing at all."""
    return bool(reason.strip()) and not GLOSSED_ELSEWHERE.search(reason)


def _as_reasons(exempt) -> dict[str, str]:
    return exempt if isinstance(exempt, dict) else dict.fromkeys(exempt, "")


def _found(terms: list[Term], prose: str) -> list[Term]:
    """The terms in ``prose``, longest first, each occurrence counted for one term only
    (``thread block`` is not also a ``thread``)."""
    found = []
    for term in sorted(terms, key=lambda t: -len(t.english)):
        prose, hits = _english(term).subn("§", prose)
        if hits:
            found.append(term)
    return found


def _kept(term: Term, msgstr: str) -> bool:
    """A bare acronym or name kept as it is (``GPU``, ``token``, ``Token``)."""
    if term.english != term.english.lower():
        return term.bare and term.english in msgstr
    return term.bare and term.english in msgstr.lower()


def _renders(term: Term, msgstr: str, terms: list[Term]) -> bool:
    """Whether ``msgstr`` holds the glossary's Chinese of ``term`` as a word of its own, not
    inside another term's (进程 inside 进程总数), nor kept as English."""
    for other in terms:
        if term.chinese in other.chinese and other.chinese != term.chinese:
            msgstr = msgstr.replace(other.chinese, "")
    return term.chinese in msgstr


def term_problems(entries: list[tuple], terms: list[Term]) -> list[str]:
    """What ``entries`` (msgid, msgstr, exempt terms with their reasons, and optionally where
    the entry is, "line 12"), one page's translated messages in order, miss of the glossary:
    a term's first use in the page's prose not glossed as 中文（English） (a reference's title,
    a section's name, is not its first use; a bare acronym or name need not be glossed), and
    an exemption for another meaning where the translation renders the term as the glossary
    does (a stale comment). How each term is rendered is `rendering_problems`'s, across all
    the catalogues."""
    problems, glossed = [], set()
    for msgid, msgstr, exempt, *where in entries:
        exempt, at = _as_reasons(exempt), "".join(f"{w}: " for w in where)
        in_text = set(_found(terms, words(msgid, titles=False)))
        for term in _found(terms, words(msgid)):
            reason = exempt.get(term.english.lower())
            if reason is not None:
                if other_meaning(reason) and _renders(term, msgstr, terms):
                    problems.append(f"{at}the comment exempts {term.english!r} ({reason}), but "
                                    f"the translation renders it {term.chinese} as the "
                                    f"glossary does: drop the comment in {msgstr[:40]!r}")
                continue
            if _kept(term, msgstr) or term not in in_text or term.english in glossed:
                continue
            glossed.add(term.english)
            if term.bare:
                continue
            gloss = rf"{re.escape(term.chinese)}[\s*_]*[（(]\s*{re.escape(term.english)}"
            if not re.search(gloss, msgstr, re.I):
                problems.append(f"{at}first use of {term.english!r} is not glossed as "
                                f"{term.chinese}（{term.english}） in {msgstr[:50]!r}")
    return problems


# --- one rendering per term, across the catalogues -------------------------------------------


class Entry(NamedTuple):
    """A translated message of a catalogue, for `rendering_problems`."""

    msgid: str
    msgstr: str
    exempt: dict[str, str]
    where: str  # "book/ch01-hardware.po line 120"


#: a gloss: a parenthesis after Chinese, holding English first (a note may follow it after a
#: Chinese comma: 数据并行（data parallelism，见第 5 章）)
_GLOSS = re.compile(r"[（(]([A-Za-z][^（）()，、；：。]*)")
_GLOSS_ENGLISH = re.compile(r"[A-Za-z][A-Za-z0-9 '’.\-/,≈:]*[A-Za-z0-9]|[A-Za-z]")
_CJK = re.compile(r"[\u3400-\u9fff]")
#: words that end a rendering on their left (a gloss glosses the word before it, not 的)
_STOP = frozenset(
    "的 是 在 和 与 或 及 即 把 将 对 从 到 为 了 个 这 那 其 该 每 各 用 以 由 并 而 "
    "也 都 就 所 之 上 中 下 里 后 前 时 它 叫作 称为 所谓 就是 一个 这个 那个 每个 "
    "各个 两个 它们 一种 这种 一次 一条 一块".split())
#: the prose before a gloss, as far back as a rendering may reach
_LEFT = re.compile(r"[^，。；：、“”‘’《》！？（）()\[\]{}`$]{1,24}$")


@cache
def _tokenizer():
    """jieba, with the glossary's Chinese as whole words (the search index's dictionary)."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    for word in search_dictionary():
        tokenizer.add_word(word)
    return tokenizer


def _compact(text: str) -> str:
    return re.sub(r"[\s*_]", "", text)


def _rendering(left: str, english: str) -> str:
    """The Chinese that a gloss of ``english`` glosses: the words of ``left`` (the prose
    before the parenthesis) after the last function word (的, 即, 一个), at most as many as
    the English has (jieba's words, the glossary's Chinese among them)."""
    left = left.strip(" *_")
    tokens = [t for t in _tokenizer().tokenize(left) if t[0].strip(" *_")]
    start, taken = len(left), 0
    for word, begin, _ in reversed(tokens):
        if word in _STOP or not (_CJK.search(word) or word.lower() in english.lower()):
            break
        start, taken = begin, taken + 1
        if taken >= len(re.split(r"[\s-]+", english)):
            break
    return left[start:].strip(" *_")


def glosses(msgstr: str) -> list[tuple[str, str]]:
    """The glosses 中文（English） of ``msgstr``: (English, the prose before the parenthesis,
    as far back as a rendering may reach)."""
    found = []
    for match in _GLOSS.finditer(msgstr):
        english = match.group(1).strip()
        left = msgstr[:match.start()].rstrip(" *_")
        if not (_GLOSS_ENGLISH.fullmatch(english) and left and _CJK.match(left[-1])):
            continue
        found.append((english, _LEFT.search(left).group(0) if _LEFT.search(left) else ""))
    return found


def _plain_english(english: str) -> bool:
    """A gloss whose English is words (``eager``, ``warp shuffle``), for the check of glosses
    that no term of the glossary has: not an acronym (GB, C1), a unit (TFLOP/s) or a name
    with digits."""
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z '’-]*[A-Za-z]", english)) and (
        english.upper() != english)


def _in_parentheses(english: str, msgid: str) -> bool:
    """Whether ``msgid`` writes ``english`` in a parenthesis itself (``sharded data
    parallelism (FSDP, ZeRO stage 3)``): the translation's parenthesis is its own, a remark
    rather than a gloss."""
    return bool(re.search(rf"\(\s*{re.escape(english)}(?![\w-])", msgid, re.I))


def _where(places: list[str]) -> str:
    """"a.po lines 3, 5; b.po line 2" for places "a.po line 3", "a.po line 5", "b.po line 2"."""
    lines: dict[str, list[str]] = defaultdict(list)
    for place in places:
        catalogue, _, line = place.rpartition(" line ")
        lines[catalogue].append(line)
    return "; ".join(f"{c} line{'s' if len(n) > 1 else ''} {', '.join(n)}"
                     for c, n in lines.items())


def renderings(catalogues: dict[str, list[Entry]], terms: list[Term]) -> tuple[
        dict[str, dict[str, list[str]]], dict[str, dict[str, list[str]]]]:
    """The Chinese renderings found for each term's English across ``catalogues`` (name ->
    translated entries), and for each other English word that some catalogue glosses:
    ({term: {rendering: places}}, {english: {rendering: places}}). A term's renderings are the
    glossary's (place "the glossary"), each gloss 中文（English） of it, and each translation
    of a message holding it without the glossary's Chinese (the rendering: another of the
    term's renderings that the translation holds, a note of the glossary's cell, or "not
    <the glossary's Chinese>"); an exemption for another meaning is honoured."""
    names = {t.english.lower(): t for t in terms}
    found: dict[str, dict[str, list[str]]] = {t.english: {t.chinese: ["the glossary"]}
                                              for t in terms}
    notes = _notes(terms)
    other: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    unrendered: list[tuple[Term, Entry]] = []

    def term_of(english: str) -> Term | None:
        key = english.lower()
        for stem in (key, key[:-1] if key.endswith("s") else "",
                     key[:-2] if key.endswith("es") else ""):
            if stem in names:
                return names[stem]
        return None

    for entries in catalogues.values():
        for entry in entries:
            exempt = {n for n, r in entry.exempt.items() if other_meaning(r)}
            glossed = set()  # the terms this entry glosses: its rendering of them is known
            for english, left in glosses(entry.msgstr):
                term = term_of(english)
                if _in_parentheses(english, entry.msgid):
                    continue
                if term is None:
                    if _plain_english(english) and (rendering := _rendering(left, english)):
                        other[english.lower()][rendering].append(entry.where)
                    continue
                if term.english.lower() in exempt:
                    continue
                rendering = (term.chinese if _compact(left).endswith(_compact(term.chinese))
                             else _rendering(left, english) or _compact(left)[-6:])
                # a name its Chinese keeps (Adam, SASS, token): the parenthesis of a remark,
                # unless what it follows is a name the glossary's notes give up (词元)
                if term.bare and term.english in term.chinese and rendering != term.chinese \
                        and _compact(rendering) not in map(_compact, notes[term]):
                    continue
                found[term.english].setdefault(rendering, []).append(entry.where)
                glossed.add(term.english)
            if entry.msgstr == entry.msgid:
                continue
            for term in _found(terms, words(entry.msgid)):
                if (term.english.lower() not in exempt and term.english not in glossed
                        and _compact(term.chinese) not in _compact(entry.msgstr)
                        and not _kept(term, entry.msgstr)):
                    unrendered.append((term, entry))
    for term, entry in unrendered:
        known = [r for r in found[term.english] if r != term.chinese] + notes.get(term, [])
        rendering = next((r for r in known if _compact(r) in _compact(entry.msgstr)),
                         f"not {term.chinese}")
        found[term.english].setdefault(rendering, []).append(entry.where)
    # a plural is its singular's English; a longer rendering ending in another is that one
    # (多个流 and 流 for "stream")
    for english in sorted(other, key=len, reverse=True):
        for stem in (english[:-1], english[:-2]):
            if english.endswith("s") and stem in other and stem != english:
                for rendering, places in other.pop(english).items():
                    other[stem][rendering] += places
                break
    merged = {}
    for english, found_renderings in other.items():
        kept: dict[str, list[str]] = {}
        for rendering in sorted(found_renderings, key=lambda r: len(_compact(r))):
            same = next((k for k in kept if _compact(rendering).endswith(_compact(k))), None)
            kept.setdefault(same or rendering, []).extend(found_renderings[rendering])
        merged[english] = kept
    return found, merged


def _notes(terms: list[Term]) -> dict[Term, list[str]]:
    """Each term's other names in the notes of its glossary cell (token（词元）: 词元)."""
    notes = {}
    for term in terms:
        names = [n for n in re.findall(r"（([^）]*)）", term.cell) if _CJK.search(n)]
        notes[term] = [n for n in names if n != term.chinese and "的" not in n]
    return notes


def rendering_problems(catalogues: dict[str, list[Entry]], terms: list[Term]) -> list[str]:
    """Every term of the glossary with more than one rendering across ``catalogues``, and
    every English word glossed two ways, with the catalogues and lines of each rendering."""
    by_term, by_gloss = renderings(catalogues, terms)
    problems = []
    chinese = {t.english: t.chinese for t in terms}
    for english, found in by_term.items():
        if len(found) < 2:
            continue
        glossed = len(found[chinese[english]]) - 1
        parts = [f"{chinese[english]} (the glossary"
                 + (f", {glossed} glosses" if glossed else "") + ")"]
        parts += [f"{r} ({_where(p)})" for r, p in found.items() if r != chinese[english]]
        problems.append(f"{english!r} has {len(found)} renderings: {'; '.join(parts)}")
    for english, found in sorted(by_gloss.items()):
        if len(found) > 1:
            parts = [f"{r}（{english}） ({_where(p)})" for r, p in found.items()]
            problems.append(f"{english!r} is glossed {len(found)} ways: {'; '.join(parts)}")
    return problems
