"""`python -m gpudl` entry points."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudl import backend
from gpudl.__main__ import BENCHMARKS, main

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


def test_bench_elementwise_writes_json_with_the_machine(tmp_path):
    out = run_cli("bench", "elementwise", "--results", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "[elementwise]" in out.stdout  # progress is shown as it goes
    record = json.loads((tmp_path / f"elementwise-{backend.name()}.json").read_text())
    assert record["machine"]["backend"] == backend.name()
    assert record["timings_meaningful"] == (backend.name() == "cuda")
    assert {"vector_add_v1", "vector_add_v2", "torch_copy"} <= set(record["payload"]["bandwidth"])


def test_every_benchmark_topic_is_a_cli_choice():
    assert set(BENCHMARKS) == {"elementwise", "memory", "matmul", "allreduce", "optim",
                               "dataparallel", "pipeline", "precision"}


def test_unknown_topic_or_notebook_is_an_error():
    with pytest.raises(SystemExit):
        main(["bench", "nonsense"])
    with pytest.raises(SystemExit, match="no notebook"):
        main(["notebooks", "99-nothing"])


def test_bench_memory_checks_and_records_every_kernel(tmp_path):
    from gpudl.bench import bench_memory, write_results
    from gpudl.parallel.comms import default_sizes

    payload = bench_memory(time_kernels=True, n=300)
    record = json.loads(write_results("memory", payload, directory=tmp_path).read_text())["payload"]
    assert set(record["copies"]) == {"torch_copy", "coalesced", "stride_2", "stride_4",
                                     "stride_8", "stride_32", "offset_1"}
    assert set(record["transposes"]) == {"naive", "shared", "padded", "padded_loads_first"}
    assert len(record["reductions"]) == 8  # seven variants and torch.sum
    assert record["copies"]["stride_32"]["bytes"] == 8 * 10  # ceil(300 / 32) elements
    assert [r["size_bytes"] for r in record["p2p"]] == default_sizes()
    if backend.is_simulator():
        assert record["timings_meaningful"] is False
        assert set(record["fractions_of_copy"].values()) == {None}
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
