"""`python -m gpudl` entry points."""

import functools
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpudl.bench
from gpudl import backend
from gpudl.__main__ import bench, main
from gpudl.bench import TOPICS

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpudl", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=300, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )


def test_info_names_the_backend():
    out = run_cli("info")
    assert out.returncode == 0, out.stderr
    assert f"backend: {backend.name()}" in out.stdout


def test_bench_elementwise_writes_json_with_the_machine(tmp_path, monkeypatch, capsys):
    # The command in this process (test_info_names_the_backend runs `python -m gpudl` as a
    # program), with the topic at a size the simulator runs in seconds.
    from gpudl.bench import elementwise

    monkeypatch.setattr(elementwise, "run", functools.partial(elementwise.run, n=100, repeats=1))
    assert main(["bench", "elementwise", "--results", str(tmp_path)]) is None  # exit status 0
    out = capsys.readouterr().out
    assert "[elementwise]" in out  # progress is shown as it goes
    assert "bar vector_add_v2_vs_torch_copy: " in out
    record = json.loads((tmp_path / f"elementwise-{backend.name()}.json").read_text())
    assert record["machine"]["backend"] == record["backend"] == backend.name()
    assert record["timings_meaningful"] == (backend.name() == "cuda")
    assert {"vector_add_v1_naive", "vector_add_v2_grid_stride", "torch copy"} <= {
        r["name"] for r in record["rows"]}


def test_every_benchmark_topic_is_a_cli_choice_and_a_module():
    assert set(TOPICS) == {"elementwise", "memory", "matmul", "allreduce", "optim",
                           "dataparallel", "pipeline", "precision", "attention", "launch",
                           "tensorcores", "decode", "context", "profiles"}
    for topic in TOPICS:
        module = importlib.import_module(f"gpudl.bench.{topic}")
        assert callable(module.run) and isinstance(module.BARS, tuple)


def test_unknown_topic_or_notebook_is_an_error(capsys):
    with pytest.raises(SystemExit) as err:
        main(["bench", "nonsense"])
    assert err.value.code == 2
    assert main(["notebooks", "99-nothing"]) == 2
    assert "no notebook" in capsys.readouterr().err


def test_a_topic_that_raises_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    def fake_run(topic, **kwargs):
        if topic == "elementwise":
            raise RuntimeError("boom in elementwise")
        return {"rows": [], "bars": []}

    monkeypatch.setattr(gpudl.bench, "TOPICS", {"elementwise": "", "memory": ""})
    monkeypatch.setattr(gpudl.bench, "run_topic", fake_run)
    with pytest.raises(SystemExit, match="benchmarks that raised: elementwise$"):
        bench("all", tmp_path)
    printed = capsys.readouterr()
    assert "boom in elementwise" in printed.err  # the traceback is shown
    assert "== benchmark memory" in printed.out  # the next topic ran
    assert (tmp_path / f"memory-{backend.name()}.json").exists()
    assert not (tmp_path / f"elementwise-{backend.name()}.json").exists()


def test_bench_memory_checks_and_records_every_kernel(tmp_path):
    from gpudl import registry
    from gpudl.bench import memory, write_results

    path = write_results("memory", memory.run(n=300), directory=tmp_path)
    record = json.loads(path.read_text())
    groups = {}
    for r in record["rows"]:
        groups.setdefault(r["group"], []).append(r["name"])
    names = {family: [v.name for v in registry.variant_records(family).values()]
             for family in ("copy", "transpose", "reduce", "softmax")}
    assert names["copy"][:3] == ["copy_v1_naive", "copy_v2_k_loads", "copy_v3_vector4"]
    assert groups["copies"] == ["torch copy", *names["copy"], "copy stride 2", "copy stride 4",
                                "copy stride 8", "copy stride 32", "copy offset 1"]
    assert groups["transposes"] == names["transpose"]
    assert groups["reductions"] == [*names["reduce"], "torch.sum", *names["softmax"],
                                    "torch.softmax"]
    stride_32 = next(r for r in record["rows"] if r["name"] == "copy stride 32")
    assert stride_32["bytes"] == 8 * 10  # ceil(300 / 32) elements
    assert "p2p" not in record  # the bandwidth between GPUs is the allreduce topic's
    assert [b["name"] for b in record["bars"]] == [spec["name"] for spec in memory.BARS]
    if backend.is_simulator():
        assert record["timings_meaningful"] is False
        assert all(b["ratio"] is None and b["verdict"] is None for b in record["bars"])
        assert "not measured (simulator)" in record["hierarchy_table"]


def test_a_notebook_that_raises_is_left_unchanged_and_the_others_still_run(tmp_path,
                                                                            monkeypatch):
    import nbformat

    import gpudl.__main__ as cli

    for name, source in (("01-bad", "raise ValueError('boom')"), ("02-good", "print(6 * 7)")):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    before = (tmp_path / "01-bad.ipynb").read_text()
    monkeypatch.setattr(cli, "NOTEBOOKS", tmp_path)
    with pytest.raises(SystemExit, match="01-bad.ipynb"):
        cli.execute_notebooks([], timeout=60)
    assert (tmp_path / "01-bad.ipynb").read_text() == before
    good = nbformat.read(tmp_path / "02-good.ipynb", as_version=4)
    assert good.cells[0].outputs[0]["text"] == "42\n"
    recorded = good.metadata["gpudl"]  # how long it took, and where: the preface's lab times
    assert recorded["backend"] == backend.name() and 0 < recorded["seconds"] < 60
    assert recorded["cpu_threads"] >= 1 and len(recorded["date"]) == 10
