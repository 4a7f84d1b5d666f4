"""gpudl.bench: rows, bars as data, the machine and commit, stored results (their schema on the
simulator for every topic, their reuse on a GPU), and the import of GPU runs made elsewhere."""

import importlib
import importlib.util
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

import gpudl.bench
import gpudl.hardware
from gpudl import backend
from gpudl.bench import (
    TOPICS,
    bar,
    evaluate_bars,
    find_bar,
    load_or_run,
    row,
    run_topic,
    write_results,
)
from gpudl.bench.environment import commit, machine
from gpudl.bench.results import check_record, import_results, load_record
from gpudl.bench.timing import Timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
import gpudl_measured  # noqa: E402  (the book's boxes, book/_ext)
from zh_text import english_sentences  # noqa: E402

FAST = Timing((1e-3, 2e-3, 3e-3), "cuda-events", True)
SLOW = Timing((4e-3,), "cuda-events", True)


def test_row_rates_and_keys(capsys):
    r = row("copy", FAST, n_bytes=8_000_000, n_flops=2e9, group="copies")
    assert (r["median_s"], r["min_s"], r["max_s"], r["runs"]) == (2e-3, 1e-3, 3e-3, 3)
    assert r["gbps"] == pytest.approx(4.0) and r["tflops"] == pytest.approx(1.0)
    assert r["group"] == "copies" and r["method"] == "cuda-events"
    assert "copy: median 2.000 ms" in capsys.readouterr().out
    meaningless = row("sim", Timing((1.0,), "wall-clock", False), n_bytes=8)
    assert meaningless["gbps"] is None and meaningless["tflops"] is None
    assert meaningless["median_s"] == 1.0  # kept in the row, but not printed
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("args", "kwargs", "error"), [
    (("", FAST), {}, ValueError), (("x", 0.1), {}, TypeError),
    (("x", FAST), {"median_s": 1.0}, ValueError),
])
def test_row_rejects_bad_input(args, kwargs, error):
    with pytest.raises(error):
        row(*args, **kwargs)


@pytest.fixture
def on_a_gpu(monkeypatch):
    """Pretend to run on a GPU: only what bars and the reuse of stored results ask."""
    monkeypatch.setattr(gpudl.bench.backend, "is_simulator", lambda: False)
    monkeypatch.setattr(gpudl.bench.backend, "name", lambda: "cuda")


def test_bar_ratio_and_verdict(on_a_gpu):
    rows = [row("kernel", FAST, n_bytes=8), row("torch copy", SLOW, n_bytes=8)]
    faster = bar("kernel_vs_copy", "kernel over copy", rows, "kernel", "torch copy", 1.5)
    assert faster["ratio"] == pytest.approx(2.0) and faster["verdict"] is True
    by_time = bar("time_ratio", "time of kernel over copy", rows, "kernel", "torch copy", 0.4,
                  compare="<=", rate="median_s")
    assert by_time["ratio"] == pytest.approx(0.5) and by_time["verdict"] is False


def test_bars_are_null_on_the_simulator_and_bad_specs_are_errors(monkeypatch):
    monkeypatch.setattr(gpudl.bench.backend, "is_simulator", lambda: True)
    rows = [row("a", FAST, n_bytes=8), row("b", SLOW, n_bytes=8)]
    assert bar("a_vs_b", "a over b", rows, "a", "b", 1.0)["verdict"] is None
    with pytest.raises(ValueError,
                       match=r"denominator \(a row's name\) must be one of \['a', 'b'\], got 'c'"):
        bar("a_vs_c", "a over c", rows, "a", "c", 1.0)
    with pytest.raises(ValueError, match=r"numerator \(a row's name\) must be one of \[\]"):
        bar("a_vs_b", "a over b", [], "a", "b", 1.0)
    with pytest.raises(ValueError, match="compare"):
        bar("a_vs_b", "a over b", rows, "a", "b", 1.0, compare=">")
    with pytest.raises(ValueError, match="rate"):
        bar("a_vs_b", "a over b", rows, "a", "b", 1.0, rate="ms")
    with pytest.raises(ValueError, match="short id"):
        bar("A vs B", "a over b", rows, "a", "b", 1.0)


def test_evaluate_bars_picks_the_fastest_and_fills_placeholders(on_a_gpu):
    rows = [row("v1 n=8", SLOW, n_bytes=8), row("v2 n=8", FAST, n_bytes=8),
            row("torch n=8", FAST, n_bytes=8)]
    specs = ({"name": "best_x{n}", "what": "best over torch", "numerator": ["v1 n={n}",
              "v2 n={n}", "v9 n={n}"], "denominator": "torch n={n}", "threshold": 0.9},
             {"name": "gone", "what": "a row not measured", "numerator": "v3 n={n}",
              "denominator": "torch n={n}", "threshold": 1.0})
    best, gone = evaluate_bars(specs, rows, n=8)
    assert (best["name"], best["numerator"], best["verdict"]) == ("best_x8", "v2 n=8", True)
    assert gone["ratio"] is None and gone["verdict"] is None
    assert find_bar({"bars": [best, gone]}, "gone") is gone
    with pytest.raises(KeyError, match="no bar 'other'"):
        find_bar({"topic": "t", "bars": [best]}, "other")


def test_machine_names_what_ran():
    m = machine()
    assert m["backend"] == backend.name()
    assert set(m["versions"]) == {"numpy", "numba", "numba-cuda", "torch"}
    assert (m["gpu"] is None) == backend.is_simulator()


def test_commit_from_git_or_the_environment(monkeypatch):
    monkeypatch.delenv("GPUDL_COMMIT", raising=False)
    sha = commit()
    assert sha is not None and len(sha.removesuffix("-dirty")) == 40
    monkeypatch.setenv("GPUDL_COMMIT", "0123abc")
    assert commit() == "0123abc"
    monkeypatch.setenv("GPUDL_COMMIT", "not a sha")
    with pytest.raises(ValueError, match="GPUDL_COMMIT"):
        commit()


@pytest.mark.parametrize(("topic", "body", "error"), [
    ("", {"rows": [], "bars": []}, ValueError), ("a/b", {"rows": [], "bars": []}, ValueError),
    ("ok", [], TypeError), ("ok", {"rows": []}, ValueError),
    ("ok", {"rows": [], "bars": [], "commit": "x"}, ValueError),
])
def test_write_results_rejects_bad_arguments(tmp_path, topic, body, error):
    with pytest.raises(error):
        write_results(topic, body, directory=tmp_path)


# --- every topic's stored result on this backend ---------------------------------------------

SMALL = {  # each topic at a size the simulator runs in seconds
    "elementwise": dict(n=100, repeats=1),
    "memory": dict(n=64, hierarchy=False),
    "matmul": dict(sizes=(8,), mlp=False),
    "optim": dict(sizes=(17,), small=(2, 3), repeats=1),
    "allreduce": dict(world_sizes=(2,), sizes_bytes=[4096], repeats=1),
    "dataparallel": dict(world_sizes=[1]),
    "pipeline": dict(world_size=2, microbatches=(2,)),
    "precision": dict(n=32),
    "launch": dict(calls=20, repeats=2, tensors=20),
    "attention": dict(s_values=(17,), heads=1, d=8),
    "tensorcores": dict(sizes=(16,), kernel_sizes=(16,)),
    "decode": dict(s=20, heads=1, d=4, n=8),
    "context": dict(world_size=2, repeats=1),
    "profiles": dict(n=64, sizes=(4, 3, 2), batch=2),
}


#: The views whose part of the record the small runs above skip (the memory hierarchy, the
#: larger MLP): they say so.
SKIPPED_BY_THE_SMALL_RUN = {("memory", "hierarchy"), ("matmul", "mlp")}


def test_every_topic_has_a_small_run():
    assert set(SMALL) == set(TOPICS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("topic", list(TOPICS))
def test_every_topic_stores_its_rows_and_bars_in_the_schema(tmp_path, topic):
    path = write_results(topic, run_topic(topic, **SMALL[topic]), directory=tmp_path)
    record = load_record(path)
    assert record["topic"] == topic and record["backend"] == backend.name()
    assert record["rows"] and record["commit"] == commit()
    for spec in importlib.import_module(f"gpudl.bench.{topic}").BARS:  # declared as data
        prefix = spec["name"].split("{")[0]
        assert any(b["name"] == spec["name"] or "{" in spec["name"]
                   and b["name"].startswith(prefix) for b in record["bars"]), spec["name"]
    if backend.is_simulator():
        assert record["timings_meaningful"] is False
        assert all(b["ratio"] is None and b["verdict"] is None for b in record["bars"])
    # every view of the topic's boxes draws this run, with rates made up as a GPU's would be
    fake = _as_if_measured(record)
    for view in gpudl_measured.TOPICS[topic].VIEWS:
        lines = gpudl_measured.box_markdown(topic, view, fake, tmp_path / "generated")
        text = "\n".join(lines)
        assert "Measured on **Synthetic GPU**" in text, (view, text)
        if (topic, view) in SKIPPED_BY_THE_SMALL_RUN:  # it says what the run left out
            assert "Not yet measured" in text, (view, text)
        else:
            assert "Not yet measured" not in text and ("| " in text or "{image}" in text), (
                view, text)
    if importlib.util.find_spec("babel") is not None:  # the Chinese catalogue's reader (the
        # lent GPU machine's image has none, and builds no book)
        for view in gpudl_measured.TOPICS[topic].VIEWS:
            _check_the_chinese_view(topic, view, fake, tmp_path / "generated")


def _check_the_chinese_view(topic: str, view: str, record: dict, generated: Path) -> None:
    """The Chinese edition's box draws the view with every word translated (a text the
    catalogue lacks raises): no English sentence is left but the names the run stores."""
    lines = gpudl_measured.box_markdown(topic, view, record, generated, language="zh_CN")
    stored = gpudl_measured.record_texts(record)
    prose = []
    for line in lines:
        if line.startswith("```"):
            continue
        if line.startswith("|"):
            line = "|".join(c for c in line.split("|") if c.strip() not in stored)
        prose.append(re.sub(r"`[^`]*`", " ", line))
    assert english_sentences("\n".join(prose)) == [], (topic, view, lines)


def _as_if_measured(record: dict) -> dict:
    """A synthetic GPU record made from a simulator run: every timing meaningful, every rate
    and ratio a number (never a measurement: only for drawing the book's views)."""
    fake = json.loads(json.dumps(record))
    fake |= {"backend": "cuda", "timings_meaningful": True, "commit": "0123abcd" * 5,
             "machine": fake["machine"] | {"backend": "cuda", "gpu": "Synthetic GPU",
                                           "driver": "1.0", "cuda_driver": "13.0"}}

    def fill(value: object) -> None:
        if isinstance(value, dict):
            if "median_s" in value:
                value["meaningful"] = True
                if value.get("bytes"):
                    value["gbps"] = value["bytes"] / value["median_s"] / 1e9
                if value.get("flops"):
                    value["tflops"] = value["flops"] / value["median_s"] / 1e12
            for item in value.values():
                fill(item)
        elif isinstance(value, list):
            for item in value:
                fill(item)

    fill(fake["rows"])
    for b in fake["bars"]:
        b |= {"ratio": 1.0, "verdict": True}
    return fake


# --- reuse of a stored run -------------------------------------------------------------------


@pytest.fixture
def fake_gpu(on_a_gpu, monkeypatch):
    monkeypatch.setattr(gpudl.bench, "commit", lambda: "0123abc")
    monkeypatch.setattr(gpudl.bench, "machine", lambda: {
        "backend": "cuda", "gpu": "Fake GPU", "driver": "999.1", "cuda_driver": "13.0",
        "torch_cuda": "13.0", "python": "3.12", "versions": {}})
    monkeypatch.setattr(gpudl.hardware, "describe",
                        lambda: gpudl.hardware.DeviceInfo("cuda", "Fake GPU"))
    runs = []

    def fake_run(topic, **kwargs):
        runs.append(topic)
        return {"rows": [], "bars": []}

    monkeypatch.setattr(gpudl.bench, "run_topic", fake_run)
    return runs


def test_a_stored_run_of_this_commit_on_this_gpu_is_reused(tmp_path, fake_gpu, monkeypatch):
    first = load_or_run("elementwise", tmp_path)
    assert fake_gpu == ["elementwise"] and first["commit"] == "0123abc"
    assert load_or_run("elementwise", tmp_path) == first and fake_gpu == ["elementwise"]
    load_or_run("elementwise", tmp_path, fresh=True)
    assert len(fake_gpu) == 2
    monkeypatch.setattr(gpudl.bench, "commit", lambda: "4567def")  # other code: measure again
    load_or_run("elementwise", tmp_path)
    assert len(fake_gpu) == 3
    monkeypatch.setattr(gpudl.bench, "commit", lambda: "4567def-dirty")  # edited code: again
    load_or_run("elementwise", tmp_path)
    load_or_run("elementwise", tmp_path)
    assert len(fake_gpu) == 5


def test_a_skipped_topic_stores_nothing(tmp_path, fake_gpu, monkeypatch, capsys):
    monkeypatch.setattr(gpudl.bench, "run_topic", lambda topic: {
        "rows": [], "bars": [], "skipped": "needs 2 GPUs, this machine has 1"})
    record = load_or_run("allreduce", tmp_path)
    assert record["skipped"] == "needs 2 GPUs, this machine has 1"
    assert not list(tmp_path.iterdir())
    assert "[allreduce] skipped: needs 2 GPUs" in capsys.readouterr().out


# --- the schema, and importing GPU runs -------------------------------------------------------


def test_check_record_accepts_a_gpu_run_and_names_what_is_wrong(fake_cuda_record):
    good = fake_cuda_record()
    assert check_record(good) is good
    cases = [
        ({"topic": "nonsense"}, "unknown topic"),
        ({"backend": "rocm"}, "backend"),
        ({"commit": "xyz"}, "commit"),
        ({"date": "yesterday"}, "date"),
        ({"timings_meaningful": False}, "timings_meaningful"),
        ({"rows": [{"name": "x"}]}, "lacks"),
        ({"bars": [dict(good["bars"][0], verdict=False)]}, "does not follow"),
        ({"bars": [dict(good["bars"][0], ratio=None)]}, "null exactly when"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            check_record(fake_cuda_record() | change)
    machine = dict(good["machine"], gpu=None)
    with pytest.raises(ValueError, match="name its GPU"):
        check_record(fake_cuda_record() | {"machine": machine})


def _notebook(path, stored_output: str) -> None:
    nbformat = pytest.importorskip("nbformat")  # not on the GPU machine's image
    cell = nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1, outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=stored_output)])
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.timeout(300)
def test_import_takes_only_what_passes(tmp_path, fake_cuda_record):
    nbformat = pytest.importorskip("nbformat")
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "notebooks").mkdir()
    (run / "results" / "elementwise-cuda.json").write_text(json.dumps(fake_cuda_record()))
    (run / "results" / "memory-cuda.json").write_text(json.dumps(
        fake_cuda_record("memory") | {"commit": None}))
    (run / "results" / "matmul-cuda.json").write_text("{not json")
    (run / "results" / "optim-cuda.json").write_text(json.dumps(fake_cuda_record()))
    _notebook(run / "notebooks" / "01-good.ipynb", "42\n")
    _notebook(run / "notebooks" / "02-bad.ipynb", "41\n")  # fails nbval here
    _notebook(run / "notebooks" / "99-unknown.ipynb", "42\n")
    with tarfile.open(tmp_path / "gpu.tar", "w") as tar:
        tar.add(run, arcname=".")
    results, notebooks = tmp_path / "results", tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("01-good", "02-bad"):
        _notebook(notebooks / f"{name}.ipynb", "0\n")
    with pytest.raises(ValueError, match="5 file.s. rejected"):
        import_results(tmp_path / "gpu.tar", results, notebooks)
    assert [p.name for p in results.iterdir()] == ["elementwise-cuda.json"]
    assert load_record(results / "elementwise-cuda.json")["commit"] == "0123abcd" * 5
    good = nbformat.read(notebooks / "01-good.ipynb", as_version=4)
    assert good.cells[0].outputs[0]["text"] == "42\n"  # taken
    bad = nbformat.read(notebooks / "02-bad.ipynb", as_version=4)
    assert bad.cells[0].outputs[0]["text"] == "0\n"  # left as it was
    assert not (notebooks / "99-unknown.ipynb").exists()


def test_import_rejects_a_simulator_run_and_bad_paths(tmp_path, fake_cuda_record):
    sim = fake_cuda_record() | {"backend": "simulator", "timings_meaningful": False}
    sim["machine"] = dict(sim["machine"], backend="simulator")
    sim["bars"] = [dict(b, ratio=None, verdict=None) for b in sim["bars"]]
    (tmp_path / "elementwise-cuda.json").write_text(json.dumps(sim))
    with pytest.raises(ValueError, match="rejected"):
        import_results(tmp_path, tmp_path / "results", tmp_path)
    assert not (tmp_path / "results").exists()
    with pytest.raises(FileNotFoundError):
        import_results(tmp_path / "missing.tar", tmp_path / "results", tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no .*-cuda.json"):
        import_results(empty, tmp_path / "results", tmp_path)
