"""The book's "Measured on a GPU" boxes (book/_ext): drawn from a stored GPU result with the GPU,
its software, the date and the commit, or saying "not yet measured" where none is stored; and a
small Sphinx project using the directive builds without warnings either way. In the Chinese
edition their words come from locales/zh_CN/extensions.po, and a text it lacks is a warning of
the build."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import gpudl_extension_text  # noqa: E402
import gpudl_measured  # noqa: E402
import gpudl_reading  # noqa: E402
import gpudl_views  # noqa: E402
from zh_text import english_sentences, page_sentences  # noqa: E402


def chinese_prose(lines: list[str]) -> str:
    """The text of a box's markdown ``lines`` that a reader sees as prose: no inline code,
    no image directive."""
    text = "\n".join(line for line in lines if not line.startswith(("```", ":alt:")))
    return re.sub(r"`[^`]*`", " ", text)


def test_a_box_from_a_stored_run_shows_the_gpu_the_commit_and_the_goals(tmp_path,
                                                                        fake_cuda_record):
    lines = gpudl_measured.box_markdown("elementwise", "bandwidth", fake_cuda_record(), tmp_path)
    text = "\n".join(lines)
    assert "**Fake GPU 9000** (driver 999.1.2, CUDA 13.0, torch 2.11.0, numba 0.68.1" in text
    assert "on 2026-12-01, code at commit `0123abcd0123`" in text
    assert "`results/elementwise-cuda.json`" in text
    assert ("vector_add v2's bandwidth over a torch device-to-device copy's, same run: **1.20** "
            "(goal >= 0.9), met.") in text
    assert "```{image} _generated/measured-elementwise-bandwidth.png" in text
    assert (tmp_path / "measured-elementwise-bandwidth.png").stat().st_size > 1000
    assert "| vector_add_v2_grid_stride | 0.010 | 1,258 | 120% |" in text
    assert gpudl_measured.NOT_MEASURED not in text


def test_the_chinese_edition_draws_its_own_file_with_the_catalogues_words(tmp_path,
                                                                          fake_cuda_record):
    """The two editions build at once: the Chinese one writes only ``<name>.zh_CN.png`` (which
    Sphinx shows there), with the axis words of locales/zh_CN/figures.po where it has them."""
    from PIL import Image

    lines = gpudl_measured.box_markdown("elementwise", "bandwidth", fake_cuda_record(),
                                        tmp_path, language="zh_CN")
    assert "```{image} _generated/measured-elementwise-bandwidth.png" in "\n".join(lines)
    assert [p.name for p in tmp_path.iterdir()] == ["measured-elementwise-bandwidth.zh_CN.png"]
    gpudl_measured.box_markdown("elementwise", "bandwidth", fake_cuda_record(), tmp_path)
    english, chinese = (Image.open(tmp_path / f"measured-elementwise-bandwidth{s}.png")
                        for s in ("", ".zh_CN"))
    assert english.size == chinese.size
    assert english.tobytes() != chinese.tobytes()  # drawn in another font


def test_a_box_without_a_stored_run_predicts_and_says_not_yet_measured(tmp_path):
    lines = gpudl_measured.box_markdown("memory", "copies", None, tmp_path)
    text = "\n".join(lines)
    assert text.startswith("**Predicted** by the book's own models")  # tests/test_predictions.py
    assert lines[-1].startswith("**Not yet measured** on a GPU by this book: `python -m gpudl "
                                "bench memory` writes `results/memory-cuda.json`")
    assert not list(tmp_path.iterdir())
    assert "Not yet measured" in gpudl_measured.box_markdown(None, None, None, tmp_path)[0]
    with pytest.raises(ValueError, match="no view 'bars' of topic 'memory'"):
        gpudl_measured.box_markdown("memory", "bars", None, tmp_path)


def test_a_chinese_box_without_a_stored_run_says_so_in_the_catalogue_s_words(tmp_path):
    zh = gpudl_extension_text.load()
    for topic, view, measured_by in [("memory", "copies", None), (None, None, None),
                                     (None, None, "no benchmark of the book times it yet")]:
        lines = gpudl_measured.box_markdown(topic, view, None, tmp_path, measured_by,
                                            language="zh_CN")
        assert lines[-1].startswith(zh["**Not yet measured**"]), lines
        assert english_sentences(chinese_prose(lines)) == [], lines
    assert zh["no benchmark of the book times it yet"] in lines[0]


def test_a_text_without_a_chinese_translation_is_named(tmp_path):
    """Written in the Chinese edition, a text the catalogue lacks raises (or, in Sphinx, is a
    warning naming it) and stays English; the English edition needs no catalogue."""
    with pytest.raises(gpudl_extension_text.Untranslated, match="'nothing translates this'"):
        gpudl_measured.box_markdown(None, None, None, tmp_path, "nothing translates this",
                                    language="zh_CN")
    missing = []
    lines = gpudl_measured.box_markdown(None, None, None, tmp_path, "nothing translates this",
                                        language="zh_CN", on_missing=missing.append)
    assert missing == ["nothing translates this"] and "nothing translates this" in lines[0]
    words = gpudl_extension_text.Words("zh_CN", translations={"{minutes} min": "{minutes} 分钟"})
    assert words("{minutes} min", minutes=3) == "3 分钟"
    assert gpudl_extension_text.Words("en", translations={})("{minutes} min", minutes=3) == (
        "3 min")


def test_a_chinese_box_from_a_stored_run_keeps_its_numbers_and_names(tmp_path,
                                                                     fake_cuda_record):
    record = fake_cuda_record()
    english = gpudl_measured.box_markdown("elementwise", "bandwidth", record, tmp_path)
    chinese = gpudl_measured.box_markdown("elementwise", "bandwidth", record, tmp_path,
                                          language="zh_CN")
    numbers = re.compile(r"\d+(?:[.,]\d+)*")
    assert sorted(numbers.findall("\n".join(english))) == sorted(
        numbers.findall("\n".join(chinese)))  # the same numbers, maybe in another order
    stored = gpudl_measured.record_texts(record)
    assert "vector_add_v2_grid_stride" in stored
    assert not stored & {bar["what"] for bar in record["bars"]}  # translated instead
    prose = chinese_prose(chinese)
    for name in stored:
        prose = prose.replace(f"| {name} |", "| |")
    assert english_sentences(prose) == [], chinese


def test_every_topic_s_views_and_bars_come_from_its_bench_module():
    from gpudl.bench import TOPICS

    assert set(gpudl_measured.TOPICS) == set(TOPICS) == set(gpudl_views.DRAW)
    for topic, module in gpudl_measured.TOPICS.items():
        assert module.__name__ == f"gpudl.bench.{topic}"
        assert list(module.VIEWS) == list(gpudl_views.DRAW[topic]), topic
        declared = {spec["name"] for spec in module.BARS}
        for view, bars in module.VIEWS.items():
            assert set(bars) <= declared, (topic, view)
        # every bar is shown in some box
        assert declared == {b for bars in module.VIEWS.values() for b in bars}, topic


def test_a_bar_name_with_a_placeholder_matches_each_bar_made_from_it():
    assert gpudl_measured._held_to(("bucketed_vs_ddp_x{ws}",), "bucketed_vs_ddp_x2")
    assert not gpudl_measured._held_to(("bucketed_vs_ddp_x{ws}",), "bucketed_vs_ddp")
    assert not gpudl_measured._held_to(("fused_faster_than_v1",), "fused_faster_than_v10")


def _conf(src, results) -> None:
    """A small Sphinx project that has the boxes, the book's bibliography (the boxes cite the
    published measurements) and the sections a box of elementwise or memory links to."""
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_parser', 'sphinxcontrib.bibtex', 'gpudl_sphinx']\n"
        "bibtex_bibfiles = ['references.bib']\n"
        f"gpudl_results = {str(results)!r}\n"
        "gpudl_model_figures = False\n")
    (src / "references.bib").write_text((ROOT / "book" / "references.bib").read_text())
    (src / "sections.md").write_text(
        "# Sections\n\n(ch01-simt)=\n## Threads\n\n(ch01-divergence)=\n## Divergence\n\n"
        "(ch02-coalescing)=\n## Coalescing\n\n```{bibliography}\n```\n")


def _sphinx(src, out, *options: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "sphinx", *(options or ("-W",)), "-n", "-q",
                           "-b", "html", str(src), str(out)], capture_output=True, text=True,
                          env=env, timeout=280)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stored", [True, False], ids=["with-result", "without"])
def test_a_page_with_boxes_builds_without_warnings(tmp_path, fake_cuda_record, stored):
    src, results = tmp_path / "src", tmp_path / "results"
    src.mkdir()
    results.mkdir()
    if stored:
        (results / "elementwise-cuda.json").write_text(json.dumps(fake_cuda_record()))
    _conf(src, results)
    (src / "index.md").write_text(
        "# Boxes\n\n"
        "```{gpudl-measured} elementwise bandwidth\nVector add against a copy.\n```\n\n"
        "```{gpudl-measured} elementwise divergence\n:title: Measured on GPUs\nParity.\n```\n\n"
        "```{gpudl-measured}\nNothing measures this yet.\n```\n\n"
        "```{toctree}\nsections\n```\n")
    done = _sphinx(src, tmp_path / "html")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "html" / "index.html").read_text()
    assert html.count("Measured on a GPU") == 2 and "Measured on GPUs" in html
    assert ("Fake GPU 9000" in html) == stored and ("0123abcd0123" in html) == stored
    assert html.count("Not yet measured") == (1 if stored else 3)
    assert html.count("Predicted</strong> by the book") == 2  # the measured one's GPU: none
    assert ((tmp_path / "html" / "_images" / "measured-elementwise-bandwidth.png").exists()
            == stored)


@pytest.mark.timeout(300)
def test_a_chinese_page_with_boxes_is_in_chinese_and_warns_of_a_missing_text(
        tmp_path, fake_cuda_record):
    src, results = tmp_path / "src", tmp_path / "results"
    src.mkdir()
    results.mkdir()
    record = fake_cuda_record()
    (results / "elementwise-cuda.json").write_text(json.dumps(record))
    _conf(src, results)
    with (src / "conf.py").open("a") as conf:
        conf.write("language = 'zh_CN'\n")
    (src / "index.md").write_text(
        "# 测量\n\n"
        "```{gpudl-measured} elementwise bandwidth\n:title: 在 GPU 上测量\n向量加法。\n```\n\n"
        "```{gpudl-measured} memory copies\n:title: 在 GPU 上测量\n拷贝。\n```\n\n"
        "```{gpudl-measured}\n:title: 在 GPU 上测量\n:measured-by: nothing translates this\n"
        "无。\n```\n\n```{toctree}\nsections\n```\n")
    done = _sphinx(src, tmp_path / "html", "--keep-going")
    assert "'nothing translates this' has no Chinese translation" in done.stderr, done.stderr
    assert done.stderr.count("has no Chinese translation") == 1, done.stderr
    html = (tmp_path / "html" / "index.html").read_text()
    boxes = html[html.index('admonition">'):html.index("nothing translates this")]
    assert "Fake GPU 9000" in boxes and "尚未测量" in boxes and "gpudl-record" in boxes
    assert page_sentences(boxes) == [], page_sentences(boxes)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("damage", ["no reference row", "simulator record", "null commit"])
def test_a_malformed_record_is_a_sphinx_error_naming_the_file_and_field(tmp_path,
                                                                        fake_cuda_record,
                                                                        damage):
    src, results = tmp_path / "src", tmp_path / "results"
    src.mkdir()
    results.mkdir()
    record = fake_cuda_record()
    if damage == "no reference row":
        record["rows"] = [r for r in record["rows"] if r["name"] != "torch copy"]
        record["bars"] = record["bars"][1:]
        expected = "results/elementwise-cuda.json: field "
    elif damage == "simulator record":
        record |= {"backend": "simulator", "timings_meaningful": False}
        record["machine"] = dict(record["machine"], backend="simulator", gpu=None)
        record["bars"] = [dict(b, ratio=None, verdict=None) for b in record["bars"]]
        for row in record["rows"]:
            row.update(meaningful=False, gbps=None)
        expected = "elementwise-cuda.json: backend must be 'cuda' here"
    else:
        record["commit"] = None
        expected = "elementwise-cuda.json: commit: a cuda result must record the commit"
    (results / "elementwise-cuda.json").write_text(json.dumps(record))
    _conf(src, results)
    (src / "index.md").write_text(
        "# Boxes\n\n```{gpudl-measured} elementwise bandwidth\nVector add.\n```\n")
    done = _sphinx(src, tmp_path / "html")
    assert done.returncode != 0
    assert "Exception occurred" not in done.stderr, done.stderr[-3000:]
    assert expected in done.stderr and "gpudl-measured elementwise bandwidth" in done.stderr, (
        done.stderr[-3000:])


def test_the_preface_table_counts_prose_words_and_reads_each_labs_recorded_run(tmp_path):
    book, labs = tmp_path / "book", tmp_path / "notebooks"
    book.mkdir()
    labs.mkdir()
    (book / "ch01-a.md").write_text(
        "# One two\n\nthree four five\n\n```python\nnot counted at all\n```\n\n"
        "```{admonition} Six\nseven eight\n```\n\n```{literalinclude} x.py\n:pyobject: f\n```\n")
    (book / "ch02-b.md").write_text(" ".join(["word"] * 300) + "\n")
    assert gpudl_reading.prose_words((book / "ch01-a.md").read_text()) == 8
    run = {"seconds": 12.9, "backend": "simulator", "cpu_threads": 2, "date": "2026-12-01"}
    (labs / "01-a.ipynb").write_text(json.dumps({"metadata": {"gpudl": run}, "cells": []}))
    (labs / "02-b.ipynb").write_text(json.dumps({"metadata": {}, "cells": []}))
    rows = gpudl_reading.reading_and_lab_times(book, labs)
    assert rows[0].startswith("| chapter | words of prose | reading |")
    # a lab of 12.9 s reads as 13 s, not as "0 min"
    assert rows[2] == "| 1 | 8 | 0 min | 13 s on the simulator, 2 CPU threads, 2026-12-01 |"
    minutes = 300 / gpudl_reading.WORDS_PER_MINUTE
    assert rows[3] == f"| 2 | 300 | {minutes:.0f} min | not recorded |"
    # the Chinese edition's table: the same numbers, its words from the catalogue
    zh = gpudl_reading.reading_and_lab_times(book, labs, "zh_CN")
    words = gpudl_extension_text.load()
    header = [words[h] for h in ("chapter", "words of prose", "reading",
                                 "its lab, last executed")]
    assert zh[0] == "| " + " | ".join(header) + " |"
    took = words["{seconds} s on the {backend}, {threads} CPU threads, {date}"].format(
        seconds=13, backend=words["simulator"], threads=2, date="2026-12-01")
    assert zh[2] == f"| 1 | 8 | {words['{minutes} min'].format(minutes=0)} | {took} |"
    assert zh[3] == (f"| 2 | 300 | {words['{minutes} min'].format(minutes=f'{minutes:.0f}')} "
                     f"| {words['not recorded']} |")
    assert english_sentences("\n".join(zh)) == []
    with pytest.raises(ValueError, match="language"):
        gpudl_reading.reading_and_lab_times(book, labs, "fr")


def test_the_prose_after_an_admonition_or_a_figure_is_counted():
    # the counter once took the closing fence of an admonition or a figure for the opening of
    # a code block, and skipped the prose after it
    text = ("```{admonition} Title here\n:class: tip\n- one two\n```\n\nthree four\n\n"
            "```{figure} _generated/x.png\n:name: fig-x\n:alt: not read\n\nfive six\n```\n\n"
            "seven eight nine\n\n:::{admonition} Solution\n:class: dropdown\nten\n"
            "```{literalinclude} ../x.py\n:pyobject: f\n```\neleven\n:::\n\ntwelve\n")
    # "Title here" 2, "one two" 2, "three four" 2, the caption 2, then 3, "Solution", "ten",
    # "eleven", "twelve"
    assert gpudl_reading.prose_words(text) == 15


def test_the_prose_count_leaves_out_code_maths_and_citations_and_reads_references():
    text = ("(sec-a)=\n## Warps and lanes\n\nA `kernel(x)` adds $a + b$ {cite}`key2020`, as "
            "{ref}`sec-a`, {ref}`the first chapter <ch01>` and {numref}`fig-x` show.\n\n"
            "$$\nx = y + z\n$$\n\n| claim | verdict |\n|---|---|\n| one - two | three |\n\n"
            "```{gpudl-measured} memory copies\nWritten from a stored run.\n```\n")
    # the heading 3; "A adds , as" 3 words; the bare ref the section's 3 words; "the first
    # chapter" 3; "and" 1; "Fig. 1" 2; "show." 1; the table 5 (a dash alone is not a word)
    assert gpudl_reading.prose_words(text) == 3 + 3 + 3 + 3 + 1 + 2 + 1 + 5


WORD = re.compile(r"\S*\w\S*")
#: What a built chapter shows that is not prose: code and maths, the numbers of sections,
#: figures and equations, citation labels, header links, and the measured boxes.
NOT_PROSE = ("div.highlight", "pre", "code", "span.math", "div.math", "span.eqno",
             "a.headerlink", "span.section-number", "span.caption-number",
             "span.bibtex-citation", "div.important", "img", "script", "style")


def html_prose_words(page: Path, source: str) -> int:
    """The words of prose in a built chapter, counted from its HTML, independently of
    ``gpudl_reading``: the article's visible text without :data:`NOT_PROSE` and without the
    tables that the book's directives write from data (a table whose first header word heads
    no table of the page's source)."""
    from bs4 import BeautifulSoup

    article = BeautifulSoup(page.read_text(), "html.parser").find("article",
                                                                  class_="bd-article")
    for selector in NOT_PROSE:
        for element in article.select(selector):
            element.decompose()
    lines = source.splitlines()
    heads = {(re.findall(r"\w+", line.split("|")[1]) or [""])[0]
             for line, rule in zip(lines, lines[1:], strict=False)
             if line.startswith("|") and rule.startswith("|---")}
    for table in article.select("table"):
        first = table.select_one("thead th")
        if first is not None and (re.findall(r"\w+", first.get_text(" ")) or [""])[0] not in heads:
            table.decompose()
    return len(WORD.findall(article.get_text(" ")))


CHAPTERS = sorted((ROOT / "book").glob("ch[0-9][0-9]-*.md"))


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_the_preface_counts_every_word_of_each_chapter_s_built_prose(built, md):
    titles = gpudl_reading.section_titles([p.read_text() for p in (ROOT / "book").glob("*.md")])
    counted = gpudl_reading.prose_words(md.read_text(), titles)
    shown = html_prose_words(built / "book" / f"{md.stem}.html", md.read_text())
    assert abs(counted - shown) <= 0.02 * shown, (md.name, counted, shown)
    # and the preface's table, in both editions, shows that count
    for preface in (built / "book" / "preface.html", built / "zh_CN" / "book" / "preface.html"):
        assert f"<td><p>{int(md.name[2:4])}</p></td>\n<td><p>{counted:,}</p></td>" in (
            preface.read_text()), preface
