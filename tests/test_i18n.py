"""The Chinese edition (CONTRIBUTING.md, "Translations"): the catalogues pass every check, the
checks catch what they are for, the Chinese labs are the English ones translated, and the two
built editions link page to page, keep the same anchors and can be searched in Chinese."""

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
# the book's tools need Sphinx, which a lent GPU machine's image lacks (its gpu-marked run)
pytest.importorskip("sphinx")

import gpudl_editions  # noqa: E402
import gpudl_extension_text  # noqa: E402
import gpudl_glossary  # noqa: E402
import gpudl_i18n  # noqa: E402
import gpudl_labs  # noqa: E402
import gpudl_po  # noqa: E402
from conftest import ZH, pages  # noqa: E402  (conftest's fixture `built`: both editions)
from gpudl_po_checks import Entry, entry_problems, rendering_problems, term_problems  # noqa: E402

assert ZH == gpudl_i18n.LANGUAGE  # the Chinese edition is built into _build/html/zh_CN
NOTEBOOKS = sorted(gpudl_labs.NOTEBOOKS.glob("*.ipynb"))

# --- the catalogues ---------------------------------------------------------------------------


def test_every_catalogue_and_chinese_lab_passes_the_check():
    lines, problems = gpudl_po.report()
    assert not problems, "\n".join(problems)
    assert any("(translated)" in line for line in lines)


def test_every_page_is_translated_and_nothing_is_pending():
    docnames = set(gpudl_po.catalogues())
    assert {"book/preface", "book/ch01-hardware", "book/ch09-inference", "book/appendix-api",
            "notebooks/01-hardware", "notebooks/09-inference"} <= docnames
    assert [d for d in sorted(docnames) if gpudl_i18n.is_pending(d)] == []
    assert gpudl_i18n.pending() == []


REF = "{ref}`Chapter 2, \"The roofline\" <ch02-roofline>`"


@pytest.mark.parametrize(("msgid", "msgstr", "problem"), [
    # the title of a reference may be translated, its target not, nor the role
    (f"See {REF}.", "见{ref}`第 2 章“屋顶线模型” <ch02-roofline>`。", None),
    (f"See {REF}.", "见{ref}`第 2 章 <ch02-memory>`。", "roles"),
    (f"See {REF}.", "见{numref}`第 2 章 <ch02-roofline>`。", "roles"),
    (f"See {REF}.", "见第 2 章“屋顶线模型”。", "roles"),
    ("Numba {cite}`lam2015numba` runs it.", "Numba {cite}`lam2016numba` 运行它。", "roles"),
    ("It took {glue:text}`ch01-time` s.", "耗时 {glue:text}`ch01_time` 秒。", "roles"),
    ("Call `gpudl.pick(gpu=...)` once.", "调用一次 `gpudl.pick(gpu=…)`。", "code"),
    ("Hence $C \\approx 6ND$.", "因此 $C \\approx 6NT$。", "math"),
    ("See [the lab](../notebooks/01-hardware.md).", "见[实验](../notebooks/02-memory.md)。",
     "links"),
    ("An A100 has 108 SMs.", "A100 有 180 个 SM。", "numbers"),
    ("31 August", "8 月 31 日", None),  # numbers may be added, none lost
    # millions and billions in the Chinese manner; never abbreviated, nor in Chinese numerals
    ("A dataset of 10 million samples.", "一个有 1000 万个样本的数据集。", None),
    ("It has 16.8 million parameters.", "它有 1680 万个参数。", None),
    ("About 1.5 billion tokens.", "大约 15 亿个 token。", None),
    ("100 million parameters.", "1 亿个参数。", None),
    ("A dataset of 10 million samples.", "一个有 10M 个样本的数据集。", "10 million otherwise"),
    ("A dataset of 10 million samples.", "一个有 1000 万（10M）个样本的数据集。", "abbreviates"),
    ("A dataset of 10 million samples.", "一个有一千万个样本的数据集。", "Chinese numerals"),
    ("A model of one billion parameters on 8 GPUs.", "8 块 GPU 上的十亿参数模型。", "numerals"),
    ("A model of one billion parameters on 8 GPUs.", "8 块 GPU 上的 10 亿参数模型。", None),
    ("Millions of threads on 8 GPUs.", "8 块 GPU 上的数百万个线程。", None),
    # an English abbreviation may stay, or take the Chinese manner
    ("At 1M, 10M and 100M parameters.", "规模为 1M、10M 和 100M 个参数。", None),
    ("At 1M, 10M and 100M parameters.", "规模为 100 万、1000 万和 1 亿个参数。", None),
    # thousands, millions and billions converted exactly (20k: 2 万), never otherwise
    ("About 20k CNY a year, 50k CNY.", "每年约 2 万元，5 万元。", None),
    ("About 20k CNY a year.", "每年约 20 万元。", "converts 20k wrongly: it is 2 万"),
    ("About 20k CNY a year.", "每年约 2 千元。", "numbers ['20']"),
    ("About 5k CNY a year.", "每年约 5,000 元。", None),
    ("About 5k CNY a year.", "每年约 5 万元。", "converts 5k wrongly: it is 5000"),
    ("About 20 thousand CNY.", "约 2 万元。", None),
    ("1.61 million tokens.", "161 万个 token。", None),
    ("1.61 million tokens.", "16.1 万个 token。", "writes 1.61 million otherwise than 161 万"),
    ("About 1.5B tokens.", "大约 15 亿个 token。", None),
    ("About 1.5B tokens.", "大约 1.5 亿个 token。", "converts 1.5B wrongly: it is 15 亿"),
    ("A 10-million-sample data set.", "一个 1000 万样本的数据集。", None),
    ("A 10-million-sample data set.", "一个 10 万样本的数据集。", "converts 10 million wrongly"),
    # a list that shares its last number's scale: "3.67 and 63.8 million" is 367 万 and 6380 万
    ("At a price p, 3.67 and 63.8 million over p.", "价格为 p 时，367 万和 6380 万除以 p。", None),
    ("At a price p, 3.67 and 63.8 million over p.", "价格为 p 时，36.7 万和 6380 万除以 p。",
     "numbers ['3.67']"),
    ("At a price p, 3.67 and 63.8 million over p.", "价格为 p 时，3.67 万和 6380 万除以 p。",
     "converts 3.67 million wrongly: it is 367 万"),
    ("At batch 1 and 28.0 million at batch 64.", "批次为 1 时，批次为 64 时 2800 万。", None),
    # CommonMark does not close **...。** before a character: the full stop goes outside
    ("**Read it.** The book.", "**阅读。**本书。", "emphasis"),
    ("**Read it.** The book.", "**阅读**。本书。", None),
    ("It is *not yet measured*.", "它*尚未测量。", "emphasis"),
    ("$$\nx = 1\n$$", "$$\nx = 2\n$$", "not prose"),
])
def test_a_translation_keeps_roles_targets_code_math_numbers_and_emphasis(msgid, msgstr,
                                                                         problem):
    found = entry_problems(msgid, msgstr)
    if problem is None:
        assert not found
    else:
        assert found and any(problem in f for f in found), found


TERMS = gpudl_glossary.terms()


def test_a_term_not_glossed_at_its_first_use_in_a_page_is_reported():
    entries = [("The warps of a kernel.", "核函数（kernel）的线程束（warp）。", set()),
               ("Each warp runs a kernel.", "每个线程束运行一个核函数。", set())]
    assert term_problems(entries, TERMS) == []
    not_glossed = [("Shared memory is fast.", "共享内存很快。", set(), "line 7")]
    assert term_problems(not_glossed, TERMS) == [
        "line 7: first use of 'shared memory' is not glossed as 共享内存（shared memory） in "
        "'共享内存很快。'"]
    # the gloss may follow the emphasis
    assert not term_problems([("**Shared memory** is fast.", "**共享内存**（shared memory）很快。",
                               set())], TERMS)
    # a longer term is not also its shorter part; a bare name may stay unglossed; a comment
    # exempts a term from the gloss
    assert not term_problems([("A thread block of a GPU.", "GPU 的线程块（thread block）。",
                               set())], TERMS)
    assert not term_problems([("Half of each layer's kernels.", "每层一半的卷积核。",
                               {"kernel"})], TERMS)
    assert not term_problems([("A token per step on an SM, with Adam.",
                               "在 SM 上用 Adam 每步一个 token。", set())], TERMS)


@pytest.mark.parametrize(("msgid", "msgstr", "glossed"), [
    ("The KV cache grows.", "KV 缓存会增长。", "KV 缓存（KV cache）会增长。"),
    ("The KV cache grows.", "KV cache 会增长。", "KV 缓存（KV cache）会增长。"),
    ("A paged KV cache grows.", "分页 KV 缓存会增长。", "分页 KV 缓存（paged KV cache）会增长。"),
    ("Split-KV decoding merges chunks.", "分段 KV 解码合并各段。",
     "分段 KV 解码（split-KV decoding）合并各段。"),
    ("Each CUDA core adds.", "每个 CUDA 核心做加法。", "每个 CUDA 核心（CUDA core）做加法。"),
    ("A CUDA stream is a queue.", "CUDA 流是一个队列。", "CUDA 流（CUDA stream）是一个队列。"),
    ("The L1 cache is small.", "一级缓存很小。", "一级缓存（L1 cache）很小。"),
])
def test_a_term_that_holds_a_name_is_glossed_at_its_first_use(msgid, msgstr, glossed):
    """Only a bare acronym or name (GPU, SM, NVLink, Adam) may go unglossed: a longer term
    that holds one (KV cache, CUDA core, L1 cache) reads 中文（English） at its first use."""
    found = term_problems([(msgid, msgstr, set())], TERMS)
    assert len(found) == 1 and "not glossed" in found[0], found
    assert not term_problems([(msgid, glossed, set())], TERMS)


def test_a_stale_exemption_is_reported():
    """A comment that says a term means something else, on a translation that renders it as
    the glossary does, no longer exempts anything: the new glossary made it unnecessary."""
    stale = [("Each rank adds.", "每个进程做加法。", {"rank": "a process, not its index"})]
    assert "drop the comment" in term_problems(stale, TERMS)[0]
    kept = [("A rank-2 tensor and the world size.", "二阶张量与进程总数（world size）。",
             {"rank": "a tensor's number of dimensions, not a process"})]
    assert term_problems(kept, TERMS) == []


def _entries(*rows, name="book/x.po"):
    return [Entry(msgid, msgstr, exempt, f"{name} line {10 * i}")
            for i, (msgid, msgstr, exempt) in enumerate(rows, 1)]


def test_a_term_rendered_two_ways_across_catalogues_is_reported():
    """变体（variant） in one catalogue, 版本（variant） or a translation without 变体 in
    another: one term, two renderings, each named with its catalogue and line."""
    ch01 = _entries(("Each variant is timed.", "每个变体（variant）都要计时。", {}),
                    name="book/ch01.po")
    ch03 = _entries(("The tiled variant.", "分块版本（variant）。", {}),
                    ("Every variant is faster.", "每个版本都更快。", {}), name="book/ch03.po")
    problems = rendering_problems({"book/ch01.po": ch01, "book/ch03.po": ch03}, TERMS)
    assert problems == ["'variant' has 2 renderings: 变体 (the glossary, 1 glosses); "
                        "版本 (book/ch03.po lines 10, 20)"]
    assert "'variant' has 2" in rendering_problems({"book/ch03.po": ch03}, TERMS)[0]
    # without any gloss of it, a translation that lacks the glossary's Chinese is named so
    ch04 = _entries(("Every variant is faster.", "每个版本都更快。", {}), name="book/ch04.po")
    assert rendering_problems({"book/ch01.po": ch01, "book/ch04.po": ch04}, TERMS) == [
        "'variant' has 2 renderings: 变体 (the glossary, 1 glosses); "
        "not 变体 (book/ch04.po line 10)"]
    assert rendering_problems({"book/ch01.po": ch01}, TERMS) == []


def test_a_glossary_term_glossed_otherwise_and_a_note_name_are_renderings():
    found = rendering_problems({"a.po": _entries(
        ("The running maximum.", "滑动最大值（running maximum）。", {}),
        ("Each token.", "每个词元（token）。", {}),
        ("The memory hierarchy.", "GPU 的内存层次结构（memory hierarchy）。", {}),
        ("Adam adds an L2 term (Adam).", "作为 L2 项加到梯度上（Adam）。", {}), name="a.po")},
        TERMS)
    assert [p.split(" has ")[0] for p in found] == ["'memory hierarchy'", "'token'",
                                                    "'running maximum'"]
    assert "词元 (a.po line 20)" in found[1]


def test_an_exemption_for_another_meaning_is_honoured_and_one_for_a_title_is_not():
    under_load = ("A clock the GPU holds under load.", "GPU 在负载下维持的频率。")
    meaning = {"load": "under load: a busy GPU, not a memory load"}
    assert not rendering_problems({"a.po": _entries((*under_load, meaning))}, TERMS)
    title = {"load": "a title: glossed in the paragraph below"}
    assert "'load' has 2 renderings" in rendering_problems(
        {"a.po": _entries((*under_load, title))}, TERMS)[0]
    assert "'load' has 2 renderings" in rendering_problems(
        {"a.po": _entries((*under_load, {}))}, TERMS)[0]


def test_an_english_word_glossed_two_ways_is_reported():
    """Glossary term or not: spill (not in the glossary) is 溢出（spill） in one page and
    溢写（spill） in another (each named by its last words, as many as the English has: 溢出,
    not 寄存器溢出); eager, in the glossary since its two glosses 即时执行（eager） and
    逐个启动（eager） were found, is a term with two renderings. A longer rendering that ends
    in the same one is the same (多个流, 流)."""
    a = _entries(("Registers spill to local memory.", "寄存器溢出（spill）到本地内存。", {}),
                 ("Several streams.", "核函数排入多个流（stream）。", {}),
                 ("An eager framework.", "以即时执行（eager）方式运行的框架。", {}), name="a.po")
    b = _entries(("A spill costs a load.", "一次溢写（spill）要多一次加载。", {}),
                 ("A stream.", "一种叫作**流**（stream）的队列。", {}),
                 ("The eager run.", "与逐个启动（eager）的运行相等。", {}), name="b.po")
    assert rendering_problems({"a.po": a, "b.po": b}, TERMS) == [
        "'eager' has 2 renderings: 即时执行 (the glossary, 1 glosses); 启动 (b.po line 30)",
        "'spill' is glossed 2 ways: 溢出（spill） (a.po line 10); 溢写（spill） (b.po line 10)"]
    # a parenthesis the English has itself is a remark, not a gloss (FSDP, ZeRO stage 3)
    c = _entries(("Sharded data parallelism (FSDP, ZeRO stage 3).",
                  "**分片数据并行**（FSDP、ZeRO 第 3 阶段）。", {}), name="c.po")
    assert rendering_problems({"c.po": c}, TERMS) == []


def test_the_glossary_is_consistent_with_itself():
    """A term inside a longer term keeps its Chinese there (kernel 核函数, fused kernel
    融合核函数; all-reduce 全归约, ring all-reduce 环形全归约), and one name has one
    Chinese."""
    for long in TERMS:
        for short in TERMS:
            if short is not long and re.search(
                    rf"(?<![\w-]){re.escape(short.english)}(?![\w-])", long.english, re.I):
                assert short.chinese in long.chinese, (short, long)
    names = [t.english for t in TERMS]
    assert len(names) == len(set(names))
    chinese = {t.english: t.chinese for t in TERMS}
    assert chinese["backward pass"] == chinese["backpropagation"] == "反向传播"
    assert chinese["reduction"] in chinese["all-reduce"]


def test_the_format_flags_babel_adds_are_removed_and_not_written(tmp_path):
    """babel flags a message holding "90%" as python-format, which `msgfmt -c` then rejects:
    `gpudl_po.py flags` (the last step of `make po`) removes the flags from a catalogue's
    text, and the catalogue tools never write them."""
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="zh_CN")
    catalog.add("Reach 90% of the copy.", "达到拷贝的 90%。")
    catalog.add("See {ref}`ch01`.", "见{ref}`ch01`。", flags=["fuzzy"])
    path = tmp_path / "a.po"
    gpudl_po.write(path, catalog)
    assert "python-format" not in path.read_text() and "python-brace-format" not in (
        path.read_text())
    assert "#, fuzzy\n" in path.read_text()
    path.write_text(path.read_text()
                    .replace('#, fuzzy\nmsgid "See', '#, fuzzy, python-brace-format\nmsgid "See')
                    .replace('msgid "Reach', '#, python-format\nmsgid "Reach'))
    assert len(gpudl_po.flagged(path)) == 2
    assert gpudl_po.strip_flags(path) == 2 and not gpudl_po.flagged(path)
    assert "#, fuzzy\n" in path.read_text() and gpudl_po.strip_flags(path) == 0
    recipe = (ROOT / "Makefile").read_text().split("\npo: ")[1].split("\n\n")[0]
    assert recipe.rstrip().endswith("$(PO_TOOL) flags"), recipe


MSGFMT = shutil.which("msgfmt")


@pytest.mark.skipif(MSGFMT is None, reason="msgfmt (GNU gettext) is not installed")
def test_msgfmt_check_passes_on_every_catalogue():
    """`msgfmt -c` on every catalogue (the pages', memory.po, figures.po), as `make
    i18n-check` runs it: no fatal error."""
    paths = gpudl_po.every_catalogue()
    assert gpudl_po.MEMORY in paths and gpudl_po.FIGURES in paths
    assert gpudl_po.msgfmt_problems(paths) == []


@pytest.mark.skipif(MSGFMT is None, reason="msgfmt (GNU gettext) is not installed")
def test_msgfmt_problems_catch_a_wrong_python_format_flag(tmp_path):
    path = tmp_path / "a.po"
    path.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                    '#, python-format\nmsgid "90% of the peak"\nmsgstr "峰值的 90%"\n')
    assert "not a valid Python format string" in gpudl_po.msgfmt_problems([path])[0]
    gpudl_po.strip_flags(path)
    assert gpudl_po.msgfmt_problems([path]) == []


def test_moved_paragraphs_keep_their_translation(tmp_path, monkeypatch):
    from babel.messages.catalog import Catalog, Message

    catalogues, memory = tmp_path / "LC_MESSAGES", tmp_path / "memory.po"
    (catalogues / "book").mkdir(parents=True)
    monkeypatch.setattr(gpudl_po, "CATALOGUES", catalogues)
    monkeypatch.setattr(gpudl_po, "MEMORY", memory)
    moved = "A paragraph that another developer moved from one chapter to another."
    old = Catalog(locale="zh_CN")
    old.add("Stays.", "留下。")
    old.add("kernel", "kernel")  # a term kept in English says nothing of another page
    old.obsolete[moved] = Message(moved, "一段挪了位置的文字。")  # its page lost it
    gpudl_po.write(catalogues / "book" / "ch02.po", old)
    new = Catalog(locale="zh_CN")
    new.add(moved, "")
    new.add(moved.replace("another", "the next"), "")  # near: reused, marked fuzzy
    new.add("Something new.", "")
    new.add("kernel", "")
    new.add("Stays!", "")  # too short to be close to anything: a heading, a term
    gpudl_po.write(catalogues / "book" / "ch03.po", new)

    gpudl_po.memory()

    ch03 = {m.id: m for m in gpudl_po.read(catalogues / "book" / "ch03.po") if m.id}
    assert ch03[moved].string == "一段挪了位置的文字。" and not ch03[moved].fuzzy
    near = ch03[moved.replace("another", "the next")]
    assert near.string == "一段挪了位置的文字。" and near.fuzzy
    assert ch03["Something new."].string == ch03["kernel"].string == ch03["Stays!"].string == ""
    ch02 = gpudl_po.read(catalogues / "book" / "ch02.po")
    assert not ch02.obsolete and [m.id for m in ch02 if m.id] == ["Stays.", "kernel"]
    assert [m.id for m in gpudl_po.read(memory) if m.id] == [moved]


# --- the words inside the figures ------------------------------------------------------------


def test_a_figure_is_translated_word_by_word_and_its_numbers_stay():
    """Titles, axis labels, legends, annotations and the names on a categorical axis go into
    Chinese; numeric ticks stay; the inverted axis stays inverted; a text with no translation
    is named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gpudl_figure_text import cjk_family, translate, words

    fig, (left, right) = plt.subplots(1, 2)
    left.barh(["stride 1", "stride 32"], [4, 32], label="sectors")
    left.invert_yaxis()
    left.set(xlabel="sectors per request", title="One warp")
    left.legend()
    right.plot([1, 10], [1, 100])
    right.set(xscale="log", ylabel="$10^{6}$ flops")
    right.text(2, 50, "not in the catalogue")
    assert sorted(words(fig)) == sorted(["stride 1", "stride 32", "One warp", "sectors",
                                         "sectors per request", "$10^{6}$ flops",
                                         "not in the catalogue"])
    zh = {"stride 1": "步长 1", "stride 32": "步长 32", "sectors": "扇区",
          "sectors per request": "每个请求的扇区数", "One warp": "一个线程束",
          "$10^{6}$ flops": "$10^{6}$ 次浮点运算"}
    assert translate(fig, zh, cjk_family()) == ["not in the catalogue"]
    fig.canvas.draw()
    assert [t.get_text() for t in left.get_yticklabels()] == ["步长 1", "步长 32"]
    assert left.yaxis_inverted() and left.get_title() == "一个线程束"
    assert left.get_legend().get_texts()[0].get_text() == "扇区"
    assert right.get_ylabel() == "$10^{6}$ 次浮点运算"
    assert all(not any(c.isalpha() for c in t.get_text().replace("$", "").replace("^", ""))
               or "10" in t.get_text() for t in right.get_xticklabels())
    assert words(fig) == ["not in the catalogue"]
    plt.close(fig)


def test_the_figures_catalogue_check_finds_fuzzy_untranslated_and_changed_numbers(tmp_path):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="zh_CN")
    catalog.add("4 sectors", "4 个扇区")
    catalog.add("stride 2", "步长 3")
    catalog.add("rank", "")
    catalog.add("time (ms)", "时间（ms）", flags=["fuzzy"])
    gpudl_po.write(tmp_path / "figures.po", catalog)
    problems = gpudl_po.figure_problems(tmp_path / "figures.po")
    assert len(problems) == 3
    assert "numbers ['2']" in problems[0] and "'stride 2'" in problems[0]
    assert "untranslated: 'rank'" in problems[1] and "fuzzy: 'time (ms)'" in problems[2]
    assert "run `make po`" in gpudl_po.figure_problems(tmp_path / "none.po")[0]


# --- the words the extensions write ------------------------------------------------------------


def test_the_extensions_catalogue_holds_every_text_they_write():
    """The boxes' reasons (a page's `:measured-by:`), the bars' descriptions, the literal
    messages of book/_ext and the book's title are found, and all are translated."""
    found = gpudl_extension_text.texts()
    assert "no benchmark of the book times it yet" in found  # ch01's and ch06's boxes
    reason = "the lab's timeline cell measures it with NCCL where two or more GPUs are present"
    chapter = (ROOT / "book" / "ch05-data-parallel.md").read_text().splitlines()
    line = next(i for i, text in enumerate(chapter, 1) if reason in text)
    assert ("book/ch05-data-parallel.md", line) in found[reason]
    from gpudl.bench import decode

    assert all(spec["what"] in found for spec in decode.BARS)
    assert {"**Not yet measured**", "{minutes} min", "How deep learning runs on GPUs",
            "Show code cell output", "time (ms)"} <= set(found)
    assert set(found) <= set(gpudl_extension_text.load())
    assert not gpudl_extension_text.problems()


def test_the_extensions_catalogue_check_finds_what_a_translation_loses(tmp_path):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="zh_CN")
    catalog.add("{minutes} min", "{minute} 分钟")
    catalog.add("within 10%", "相差不超过 1%")
    catalog.add("see `results/`", "见 results/")
    catalog.add("not recorded", "")
    catalog.add("reading", "阅读时间", flags=["fuzzy"])
    catalog.add("gone", "不再使用")
    path = tmp_path / "extensions.po"
    gpudl_po.write(path, catalog)
    wanted = {"{minutes} min", "within 10%", "see `results/`", "not recorded", "reading",
              "new text"}
    problems = gpudl_extension_text.problems(path, wanted)
    assert len(problems) == 7, problems
    expected = ["'new text' is not in the catalogue", "placeholders of '{minutes} min'",
                "numbers ['10']", "changes roles, references, links, code or math",
                "untranslated: 'not recorded'", "fuzzy: 'reading'",
                "no extension writes 'gone' any more"]
    for text in expected:
        assert any(text in p for p in problems), (text, problems)


def test_an_extension_s_message_is_a_literal(tmp_path):
    source = tmp_path / "gpudl_x.py"
    source.write_text("tr('{n} rows', n=2)\nmessage('kernel')\nother('not a message')\n")
    assert gpudl_extension_text.literal_messages(source) == [("{n} rows", 1), ("kernel", 2)]
    source.write_text("name = 'kernel'\ntr(name)\n")
    with pytest.raises(ValueError, match="gpudl_x.py:2: tr\\(\\) takes a literal string"):
        gpudl_extension_text.literal_messages(source)


def test_update_adds_new_texts_marks_changed_ones_fuzzy_and_drops_gone_ones(tmp_path):
    from babel.messages.catalog import Catalog

    path = tmp_path / "extensions.po"
    catalog = Catalog(locale="zh_CN")
    catalog.add("the stored run has no MLP timing.", "存储的这次运行没有 MLP 的计时。")
    catalog.add("gone", "不再使用")
    gpudl_po.write(path, catalog)
    total, todo = gpudl_extension_text.update(
        {"the stored run has no MLP timings.": [("gpudl_views.py", 3)], "new": [("x.py", 1)]},
        path)
    assert (total, todo) == (2, 2)
    messages = {m.id: m for m in gpudl_po.read(path) if m.id}
    assert messages["the stored run has no MLP timings."].fuzzy
    assert messages["new"].string == "" and "gone" not in messages


# --- the Chinese labs -------------------------------------------------------------------------


def test_the_lab_generator_translates_headings_paragraphs_lists_and_tables():
    source = ("## Occupancy\n\nThe limit\nthat binds:\n\n- one item\n  two lines\n\n"
              "| Name | Value |\n|---|---|\n| warp | `32` |\n\nSee [Chapter 1](../book/ch01.md).")
    translated = {"Occupancy": "占用率", "The limit that binds:": "起约束作用的限制：",
                  "one item two lines": "一项两行", "Name": "名称", "warp": "线程束",
                  "See [Chapter 1](../book/ch01.md).": "见[第 1 章](../book/ch01.md)。"}
    text, found = gpudl_labs.translate_markdown(source, translated)
    assert text == ("## 占用率\n\n起约束作用的限制：\n\n- 一项两行\n\n| 名称 | Value |\n|---|---|\n"
                    "| 线程束 | `32` |\n\n见[第 1 章](../book/ch01.md)。")
    assert set(translated) <= set(found) and "`32`" in found
    notebook = {"cells": [{"cell_type": "markdown", "source": [source]}], "metadata": {}}
    zh, _ = gpudl_labs.zh_notebook(notebook, translated)
    assert "](../../book/ch01.md)" in "".join(zh["cells"][0]["source"])  # one folder deeper


def test_the_chinese_edition_launches_the_chinese_lab():
    """With `repository.url` set, a lab's Colab and Binder buttons open notebooks/zh_CN."""
    buttons = [{"url": "https://colab.research.google.com/github/o/r/blob/main/"
                       "notebooks/01-hardware.ipynb"},
               {"url": "https://mybinder.org/v2/gh/o/r/main?urlpath=tree/"
                       "notebooks/01-hardware.ipynb"}]
    gpudl_editions.zh_launch_urls(buttons, "notebooks/01-hardware")
    assert all(b["url"].endswith("/notebooks/zh_CN/01-hardware.ipynb") for b in buttons)
    chapter = [{"url": "https://example.org/book/ch01-hardware.md"}]
    gpudl_editions.zh_launch_urls(chapter, "book/ch01-hardware")
    assert chapter[0]["url"].endswith("/book/ch01-hardware.md")


@pytest.mark.parametrize("english", NOTEBOOKS, ids=lambda p: p.name)
def test_a_chinese_lab_has_the_english_code_and_outputs(english):
    """nbval runs the English labs only (notebooks/zh_CN is kept out of its collection): the
    Chinese ones compute and print the same, cell for cell."""
    en = json.loads(english.read_text())
    zh = json.loads((gpudl_labs.ZH_NOTEBOOKS / english.name).read_text())
    assert en["metadata"] == zh["metadata"] and len(en["cells"]) == len(zh["cells"])
    for a, b in zip(en["cells"], zh["cells"], strict=True):
        assert a["cell_type"] == b["cell_type"]
        if a["cell_type"] == "code":
            assert a == b


def test_nbval_does_not_collect_the_chinese_labs():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval",
                           "--nbval-current-env", "notebooks"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "01-hardware.ipynb" in done.stdout, done.stdout[-500:]
    assert "zh_CN" not in done.stdout


# --- the Chinese build's freshness check ------------------------------------------------------


def test_the_chinese_build_fails_on_an_untranslated_message_and_an_obsolete_one(tmp_path):
    """A page of the book that is held to its translation, with one paragraph changed: the
    build warns (and `make book` runs it with -W) on the new paragraph and on the
    translations its catalogue keeps for paragraphs the page no longer has."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "preface.md").write_text(
        "# How deep learning runs on GPUs\n\nA paragraph nobody has translated yet.\n")
    (tmp_path / "conf.py").write_text(
        f"extensions = ['myst_parser', 'gpudl_i18n']\nlanguage = 'zh_CN'\n"
        f"locale_dirs = [{str(ROOT / 'locales')!r}]\ngettext_compact = False\n"
        "root_doc = 'book/preface'\n")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(tmp_path),
         str(tmp_path / "_build")], capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT / "book" / "_ext"), "PATH": ""})
    warnings = done.stderr
    assert "untranslated message 'A paragraph nobody has translated yet.'" in warnings
    assert "untranslated message 'How deep" not in warnings  # the title has its translation
    assert "obsolete translation of 'Three ways to use this book'" in warnings
    html = (tmp_path / "_build" / "book" / "preface.html").read_text()
    assert "深度学习如何在 GPU 上运行" in html


# --- the built editions -----------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.switch, self.alternate, self.ids, self.links = None, None, set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "btn-language-switch" in (attrs.get("class") or ""):
            self.switch = re.search(r"href='([^']+)'", attrs["onclick"]).group(1)
        if tag == "link" and attrs.get("rel") == "alternate":
            self.alternate = attrs["href"]
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def parse(page: Path) -> _Page:
    parser = _Page()
    parser.feed(page.read_text())
    return parser


def test_every_page_links_to_the_same_page_of_the_other_edition_with_the_same_anchors(built):
    english = pages(built)
    assert len(english) >= 20 and len(pages(built / ZH)) == len(english)
    for page in english:
        zh_page = built / ZH / page.relative_to(built)
        en, zh = parse(page), parse(zh_page)
        assert en.switch and (page.parent / en.switch).resolve() == zh_page.resolve(), page
        assert zh.switch and (zh_page.parent / zh.switch).resolve() == page.resolve(), page
        assert en.alternate == en.switch and zh.alternate == zh.switch
        # the switch keeps the anchor (location.hash): every anchor exists on both sides
        assert en.ids == zh.ids, (page, en.ids ^ zh.ids)


def test_every_link_of_the_chinese_edition_leads_to_a_page(built):
    for page in pages(built / ZH):
        for link in parse(page).links:
            target = link.split("#")[0]
            if target and not re.match(r"^(https?:|mailto:|javascript:)", target):
                assert (page.parent / target).exists(), (page, link)


def test_the_landing_page_offers_both_editions(built):
    links = parse(built / "index.html").links
    assert links == ["book/preface.html", "zh_CN/book/preface.html"]
    assert all((built / link).exists() for link in links)
    assert "深度学习如何在 GPU 上运行" in (built / ZH / "book" / "preface.html").read_text()


def _images(page: Path) -> list[str]:
    return re.findall(r'<img[^>]* src="([^"]+)"', page.read_text())


def test_the_chinese_edition_shows_every_model_figure_in_chinese(built):
    """Each figure of book/_generated is drawn in both languages; a page of the Chinese edition
    shows the Chinese drawing (Sphinx's figure_language_filename), the English page the
    English one, on every machine (the font is the repository's, `gpudl_fonts`)."""
    generated = sorted(p.name for p in (ROOT / "book" / "_generated").glob("*.png")
                       if ".zh_CN." not in p.name and not p.name.startswith("measured-"))
    assert len(generated) >= 20
    english = [Path(src).name for page in pages(built) for src in _images(page)]
    chinese = [Path(src).name for page in pages(built / ZH) for src in _images(page)]
    for name in generated:
        stem = name.removesuffix(".png")
        assert name in english, name
        assert f"{stem}.zh_CN.png" in chinese and name not in chinese, name
    assert not [n for n in english if ".zh_CN." in n]


def test_a_chinese_lab_downloads_as_the_chinese_notebook(built):
    for english in NOTEBOOKS:
        served = built / ZH / "_sources" / "notebooks" / english.name
        assert served.read_bytes() == (gpudl_labs.ZH_NOTEBOOKS / english.name).read_bytes()


SEARCHED = ["线程束分化", "共享内存", "流式多处理器", "全归约", "算术强度", "核函数",
            "屋顶线模型", "反向传播", "张量核心", "访存受限"]


def test_a_chinese_search_for_ten_glossary_terms_finds_pages(built):
    text = (built / ZH / "searchindex.js").read_text()
    index = json.loads(text[text.index("(") + 1: text.rindex(")")])
    glossary = index["docnames"].index("book/appendix-glossary")
    for term in SEARCHED:  # the search box looks a query word up as it is (no stemming)
        found = index["terms"].get(term, [])
        found = [found] if isinstance(found, int) else found
        assert glossary in found, term
        assert term in gpudl_glossary.search_dictionary()
    # without the glossary's dictionary jieba cuts the first term into words no query finds
    import jieba

    assert "线程束分化" not in jieba.Tokenizer().lcut_for_search("线程束分化")


def _readme_commands(text: str) -> tuple[list[str], list[str], int]:
    """A README's shell lines (comments dropped), its inline code and its sections."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    lines = [re.sub(r"\s*#.*$", "", line).rstrip() for b in blocks for line in b.splitlines()]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [x for x in lines if x], sorted(set(re.findall(r"`([^`\n]+)`", prose))), \
        len(re.findall(r"^## ", text, re.M))


def test_the_chinese_readme_is_the_english_ones_twin():
    """README.zh.md has README.md's commands, inline code and sections: a command changed in
    one and not in the other fails."""
    english, chinese = ((ROOT / name).read_text() for name in ("README.md", "README.zh.md"))
    assert _readme_commands(chinese) == _readme_commands(english)
    assert "README.zh.md" in english and "](README.md)" in chinese
