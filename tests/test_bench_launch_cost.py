"""gpudl.bench.launch: the launch-cost rows and their shape, numba-cuda's launch path measured
without a driver where the CUDA compiler pieces are installed, and the optimizer's host time
with its launches counted."""

import pytest

from gpudl import backend
from gpudl.bench import launch as launch_cost

ROW_KEYS = {"name", "median_s", "min_s", "max_s", "runs", "method", "bytes", "gbps", "flops",
            "tflops", "measured"}


def test_a_row_has_the_shared_shape():
    r = launch_cost._row("launch x", [3e-6, 1e-6, 2e-6], "full launch", arguments=2)
    assert ROW_KEYS <= set(r) and r["arguments"] == 2
    assert (r["median_s"], r["min_s"], r["max_s"], r["runs"]) == (2e-6, 1e-6, 3e-6, 3)
    assert r["method"] == "wall-clock" and r["gbps"] is None and r["bytes"] is None
    assert r["meaningful"] and not launch_cost._row("x", [1e-6], "simulated launch")["meaningful"]


def test_run_returns_the_rows_of_each_part(monkeypatch):
    fake = [launch_cost._row("launch empty (device arrays)", [1e-6], "launch without the "
                             "driver call", case="empty", kind="device arrays", arguments=0)]
    monkeypatch.setattr(launch_cost, "_without_driver", lambda calls, repeats: fake)
    monkeypatch.setattr(launch_cost, "measure_optimizer", lambda tensors: [])
    result = launch_cost.run()
    assert set(result) == {"rows", "bars", "note"} and result["bars"] == []
    if backend.is_simulator():
        assert result["rows"][0] is fake[0]
        simulated = result["rows"][1:]
        assert [r["name"] for r in simulated] == ["launch empty (device arrays), simulated"]
        assert simulated[0]["measured"] == "simulated launch"
    for r in result["rows"]:
        assert ROW_KEYS <= set(r) and r["median_s"] > 0


def test_a_missing_compiler_is_a_note_not_a_failure(monkeypatch):
    monkeypatch.setattr(launch_cost, "_without_driver",
                        lambda calls, repeats: "not measured: no NVVM")
    monkeypatch.setattr(launch_cost, "measure_optimizer", lambda tensors: [])
    result = launch_cost.run()
    if backend.is_simulator():
        assert result["note"] == "not measured: no NVVM"


@pytest.mark.simulator_only
def test_the_launch_path_without_the_driver_call():
    rows = launch_cost._without_driver(calls=50, repeats=2)
    if isinstance(rows, str):
        pytest.skip(f"the CUDA compiler pieces are not installed: {rows}")
    assert len(rows) == 1 + 3 * 3  # the empty kernel, then 3 kinds of each array case
    assert {r["measured"] for r in rows} == {"launch without the driver call"}
    assert [r["arguments"] for r in rows] == [0, 2, 2, 2, 4, 4, 4, 13, 13, 13]
    assert all(0 < r["min_s"] < 0.01 for r in rows)  # microseconds, not a simulated launch


def test_the_optimizer_host_time_counts_one_launch_against_one_per_tensor():
    rows = launch_cost.measure_optimizer(tensors=20, size=3, steps=2)
    by = {r["variant"]: r for r in rows}
    assert set(by) == {"v4_multi_tensor", "v2_fused"}
    assert by["v4_multi_tensor"]["launches_per_step"] == 1
    assert by["v2_fused"]["launches_per_step"] == 20
    assert by["v4_multi_tensor"]["conversions_per_step"] == 0
    assert by["v2_fused"]["conversions_per_step"] == 0
    if backend.is_simulator():
        assert by["v2_fused"]["measured"] == "host time, launches not run"
    assert all(r["runs"] == 2 and r["min_s"] > 0 for r in rows)
