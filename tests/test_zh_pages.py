"""Every page of the Chinese edition is in Chinese (CONTRIBUTING.md, "What stays English"): no
English sentence in what a reader sees, outside code, cell outputs, maths, the bibliography,
the API appendix's signatures and docstrings, and what a stored GPU run names. What an English
sentence is, and what a page's visible text leaves out: tests/zh_text.py."""

from collections import defaultdict

import pytest

pytest.importorskip("sphinx")  # the book's tests (a lent GPU machine's image has no Sphinx)

from conftest import ZH, pages  # noqa: E402  (conftest's fixture `built`: both editions)
from zh_text import KEPT_CLASSES, english_sentences, page_sentences  # noqa: E402

#: English that a Chinese page keeps on purpose, and why.
EXCEPTIONS = {
    "How to Scale Your Model":
        "the title of a cited book (Austin et al.), quoted as it is published",
    "Optimizing Parallel Reduction in CUDA":
        "the title of Mark Harris's cited talk, in italics as it is published",
}


def test_no_page_of_the_chinese_edition_has_an_english_sentence(built):
    found: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    chinese = pages(built / ZH)
    assert len(chinese) >= 20
    for page in chinese:
        for sentence in page_sentences(page.read_text()):
            seen.add(sentence)
            if sentence not in EXCEPTIONS:
                found[str(page.relative_to(built / ZH))].append(sentence)
    count = sum(map(len, found.values()))
    assert not found, f"{count} English sentences in the Chinese edition: " + "; ".join(
        f"{page}: {sentences}" for page, sentences in sorted(found.items()))
    assert set(EXCEPTIONS) <= seen, f"exceptions no page has: {set(EXCEPTIONS) - seen}"


def test_the_english_edition_reads_as_english_to_the_same_test(built):
    """The test finds sentences where there are some: every English page has them."""
    for page in pages(built)[:5]:
        assert len(page_sentences(page.read_text())) > 5, page


@pytest.mark.parametrize(("text", "sentences"), [
    ("在 GPU 上测量：Not yet measured: no GPU run of it is stored.",
     ["Not yet measured: no GPU run of it is stored."]),
    ("the stored run.", ["the stored run."]),  # three words and a full stop
    ("中文 vector_add v2 over torch copy 中文", ["vector_add v2 over torch copy"]),
    ("单指令多线程（single instruction, multiple threads）", []),  # a gloss in parentheses
    ("用 NVIDIA H100 SXM 测量", []),  # a product's name: three words
    ("按 Korthikanti et al. (2022) 的方法", []),  # authors, and a year in parentheses
    ("GB/s、TFLOP/s、µs（最快的一次采样）", []),  # units
    ("核函数 launch empty (device arrays) 中文", []),  # two words out of parentheses
])
def test_an_english_sentence_is_four_words_or_three_with_a_full_stop(text, sentences):
    assert english_sentences(text) == sentences


def test_the_visible_text_leaves_out_code_outputs_maths_citations_and_the_api():
    kept = "".join(f'<div class="{c}"><p>This English text stays as it is.</p></div>'
                   for c in KEPT_CLASSES)
    page = (f"<html><head><title>Not seen by a reader at all</title></head><body>{kept}"
            "<pre>for every thread in the block</pre><p>调用 <code>one two three four</code>"
            "。</p><img src='a.png' alt='an alt text is read aloud' /><table><tr><td>kernel"
            "</td><td>time (ms)</td><td>GB/s</td><td>of torch copy</td></tr></table></body>"
            "</html>")
    assert page_sentences(page) == ["an alt text is read aloud"]  # table cells do not run on
