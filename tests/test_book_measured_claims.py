"""Keeping "measured" honest: every claim of a measurement or a timing in the book's prose and in
the labs' text says where it comes from.

A paragraph that claims a measurement or states a time or a rate (the word "measured", "we
timed", "on the GPU ... takes", a number with a unit of time or of rate outside a formula) must,
in the same paragraph, glue its value from a stored run (``{glue:...}``), cite a source
(``{cite}``, or in a lab's text an author and year), stand just before (or inside) a
``{gpudl-measured}`` box, or say plainly that it is derived, assumed, claimed (someone else's
figure, under examination) or not yet measured. A table belongs to the paragraph that introduces
it (the one before, ending with a colon). The paragraphs this rule catches that claim no
measurement are listed below by a phrase they contain, each with the reason; a listed phrase
that is no longer in the book is an error too, so that the list cannot go stale.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
#: The prose the rule covers: the preface, the chapters and the appendices written as prose.
PAGES = sorted([*BOOK.glob("ch[0-9][0-9]-*.md"), BOOK / "preface.md",
                BOOK / "appendix-claims.md", BOOK / "appendix-code.md",
                BOOK / "appendix-glossary.md", BOOK / "appendix-profiles.md"])
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

_TIME_OR_RATE = (r"(?:ns|µs|us|ms|s|seconds?|minutes?|min|h|hours?|days?|"
                 r"[KMGTP]i?B/s|[KMGTP]?FLOP/s|flop/s|TFLOPS|GFLOPS)")
#: What claims a measurement or a timing.
CLAIM = re.compile(
    r"\bmeasured\b|\bwe (?:timed|measured)\b"
    r"|\bon (?:a|the|your) GPUs?\b[^.]*?\btakes?\b"
    r"|(?<![\w.^{])\d[\d,]*(?:\.\d+)?\s*" + _TIME_OR_RATE + r"(?![\w/-])",
    re.IGNORECASE)
#: Inline math (a formula shows its own derivation, and its letters are no units), roles'
#: targets (a label such as ``ch07-measured``) and inline code are no claims.
_NOT_PROSE = re.compile(r"\$[^$]+\$|\{\w+\}`[^`]*`|`[^`]*`")
#: What says where a claimed number comes from.
SOURCED = re.compile(
    r"\{glue(?::\w+)?\}|\{cite(?::\w+)?\}|\bderiv(?:e|ed|es|ation|ations)\b"
    r"|not (?:yet )?measured|\bassum(?:e|ed|es|ption|ptions)\b|\bclaim(?:s|ed)?\b"
    r"|\bet al\.,? \d{4}|\([A-Z][\w-]+(?: and [A-Z][\w-]+)?,? \d{4}\b",
    re.IGNORECASE)

#: Paragraphs the rule catches that claim no measurement, by a phrase each contains.
NOT_CLAIMS = {
    "What this chapter measured or proved":
        "each summary's heading line; its bullets are checked one by one",
    "## The bubble, measured":
        "a lab's heading",
    "## Measured on a GPU":
        "a lab's heading over the cell that times on a GPU",
    "Measured on your machine":
        "a heading and a pointer to the section that measures",
}

_CODE_FENCE = re.compile(r"^\s*(`{3,}|~{3,})(?!\{(?:admonition|note|important|figure|"
                         r"gpudl-measured)\})")
_PROSE_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\{(admonition|note|important|figure|"
                          r"gpudl-measured)\}")


def paragraphs(text: str) -> list[tuple[str, bool]]:
    """``(paragraph, before_or_in_a_box)`` for each paragraph of MyST ``text``: blocks of prose
    between blank lines, a list item or a table counted as one paragraph, outside code and
    math; the text of admonitions, figures' captions and ``{gpudl-measured}`` boxes is prose.
    ``before_or_in_a_box`` is True inside a ``{gpudl-measured}`` box and for the paragraph just
    before one."""
    out: list[list] = []
    block: list[str] = []
    fence: str | None = None  # a code or math fence being skipped
    box_fence: str | None = None  # the fence of the measured box we are in
    math = False

    def flush(in_box: bool = False) -> None:
        if block:
            out.append([" ".join(block), in_box])
            block.clear()

    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if fence is not None:
            if stripped == fence:
                fence = None
            continue
        if math:
            math = not stripped.endswith("$$")
            continue
        prose = _PROSE_FENCE.match(line)
        if prose:
            flush(box_fence is not None)
            if prose.group(2) == "gpudl-measured":
                if out:
                    out[-1][1] = True  # the paragraph that introduces the box
                box_fence = prose.group(1)
            continue
        if box_fence is not None and stripped == box_fence:
            flush(True)
            box_fence = None
            continue
        if re.match(r"^(`{3,}|:{3,})$", stripped):  # the end of an admonition or figure
            flush(box_fence is not None)
            continue
        code = _CODE_FENCE.match(line) or re.match(r"^\s*(:{3,})\{", line)
        if code:
            flush(box_fence is not None)
            fence = code.group(1)
            continue
        if stripped.startswith("$$"):
            flush(box_fence is not None)
            math = not (len(stripped) > 2 and stripped.endswith("$$"))
            continue
        if not stripped or re.match(r"^(\(\S+\)=|:[\w-]+:)", stripped):
            flush(box_fence is not None)
            continue
        if re.match(r"^(- |\* |\d+\. |#)", stripped):
            flush(box_fence is not None)
        if (stripped.startswith("|") and not block and out and not out[-1][0].startswith("|")
                and out[-1][0].endswith(":")):  # a table joins the sentence that introduces it
            block.append(out.pop()[0])
        block.append(stripped)
    return [(p, box) for p, box in out]


def unsourced(text: str) -> list[str]:
    """The paragraphs of ``text`` that claim a measurement or a time and do not say where it
    comes from (nor are listed in :data:`NOT_CLAIMS`)."""
    return [p for p, box in paragraphs(text)
            if CLAIM.search(_NOT_PROSE.sub(" (formula) ", p)) and not box
            and not SOURCED.search(p) and not any(phrase in p for phrase in NOT_CLAIMS)]


def lab_markdown(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_claim_of_a_measurement_in_the_book_says_where_it_comes_from(path):
    bad = unsourced(path.read_text())
    assert not bad, f"{path.name}: unsourced measurements or times: {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_claim_of_a_measurement_in_a_lab_says_where_it_comes_from(path):
    bad = unsourced(lab_markdown(path))
    assert not bad, f"{path.name}: unsourced measurements or times: {bad}"


def test_a_planted_measurement_fails_and_its_sourced_forms_pass():
    planted = "The launch is cheap.\n\nWe measured 3 us per launch on a GPU.\n"
    assert unsourced(planted) == ["We measured 3 us per launch on a GPU."]
    for sourced in ("We measured {glue:text}`nb.ipynb::launch_us:.1f` us per launch.",
                    "A launch takes 3 us {cite}`nvidia2025cudaguide`.",
                    "A launch takes 3 us (derived from the clock).",
                    "A launch takes an assumed 3 us.",
                    "A launch on a GPU takes: not yet measured."):
        assert unsourced(sourced) == [], sourced
    boxed = "On a GPU the lab times both.\n\n```{gpudl-measured} a b\nIt takes 3 us.\n```\n"
    assert unsourced(boxed) == []
    for claim in ("It took 12.5 ms.", "The copy reached 3,350 GB/s.", "on the GPU it takes long",
                  "We timed it.", "the measured rate", "at 19.5 TFLOP/s",
                  "Each row:\n\n| a | b |\n|---|---|\n| x | 4 ms |"):
        assert len(unsourced(claim)) == 1, claim
    for not_a_claim in ("A warp has 32 threads.", "It holds 80 GB.", "the 3 s-shaped curves",
                        "```python\nx = 3  # 3 ms\n```", "$$t = 3\\ \\text{ms}$$",
                        "while $2s \\le 32$", "see {ref}`ch07-measured`", "`measured` column",
                        "Times (assumed):\n\n| a | b |\n|---|---|\n| x | 4 ms |"):
        assert unsourced(not_a_claim) == [], not_a_claim


def test_every_listed_exception_is_still_in_the_book():
    everything = "\n".join(p.read_text() for p in PAGES)
    everything += "\n".join(lab_markdown(p) for p in NOTEBOOKS)
    stale = [phrase for phrase in NOT_CLAIMS if phrase not in everything]
    assert not stale, f"phrases of NOT_CLAIMS no longer in the book: {stale}"
