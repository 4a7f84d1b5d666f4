"""gpudl.bench.optim: every optimizer's first step checked against the reference computed with
the hyperparameters it actually uses (torch's fused CUDA Adam rounds them to float32, emulated
here on the CPU), a failing peer recorded rather than stopping the benchmark, the rows and
bars; on a GPU, the stored speed goals."""

import numpy as np
import pytest
import torch

from gpudl import backend
from gpudl.bench import find_bar, load_or_run
from gpudl.bench import optim as bench
from gpudl.interop import tensor_device
from gpudl.kernels.optim import VARIANTS


def rounding_peer(params, **hyper):
    """torch's fused CUDA Adam, emulated on any device: lr, the betas and eps as float32."""
    return torch.optim.Adam(params, **bench.float32_hyper(hyper))


def test_float32_hyperparameters_move_one_minus_beta2_far_past_rounding():
    rounded = bench.float32_hyper(bench.HYPER)
    assert rounded["betas"][1] == float(np.float32(0.999)) != 0.999
    # 0.000999987 instead of 0.001: a relative change of 1.3e-5, about 100 float32 epsilons
    assert abs((1 - rounded["betas"][1]) / 0.001 - 1) > 100 * np.finfo(np.float32).eps


def test_a_peer_on_float32_hyperparameters_is_checked_against_its_own_reference():
    stated = bench.check_step(rounding_peer, [4096])
    assert not stated["ok"] and stated["failed"] == ["v"], stated  # v = (1 - beta2) g^2
    assert stated["worst"]["v"] > 2
    own = bench.check_step(rounding_peer, [4096], used=bench.float32_hyper(bench.HYPER))
    assert own["ok"] and max(own["worst"].values()) <= 1, own


def test_hyper_used_rounds_only_for_torch_fused_on_a_gpu():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert bench.hyper_used("torch fused", cuda) == bench.float32_hyper(bench.HYPER)
    assert bench.hyper_used("torch fused", cpu) == bench.HYPER
    assert bench.hyper_used("torch foreach", cuda) == bench.HYPER
    assert bench.hyper_used("adam_v2_fused", cuda) == bench.HYPER


def test_torch_fused_passes_its_check_here():
    # On the CPU torch's fused Adam computes its scalars in double; on a GPU in float32.
    device = tensor_device()
    check = bench.check_step(bench.METHODS["torch fused"], [4096],
                             used=bench.hyper_used("torch fused", device))
    assert check["ok"], check


def test_bench_checks_and_rates_every_method():
    result = bench.run(sizes=(33,), small=(2, 5), repeats=1)
    methods = ["copy", *(f"adam_{v}" for v in VARIANTS), "torch foreach", "torch fused"]
    assert [r["optimizer"] for r in result["rows"]] == methods * 2
    assert result["rows"][0]["name"] == "copy [1 tensor of 33]"
    assert {r["params"] for r in result["rows"]} == {33, 10}
    assert all(r["check"]["ok"] for r in result["rows"] if r["optimizer"] != "copy")
    assert [b["name"] for b in result["bars"]] == [spec["name"] for spec in bench.BARS]
    assert find_bar(result, "fused_adam_vs_copy")["numerator"] == "adam_v2_fused [1 tensor of 33]"
    assert find_bar(result, "multi_tensor_vs_torch_fused")["denominator"] == (
        "torch fused [2 tensors of 5]")
    if backend.is_simulator():
        assert all(r["gbps"] is None and r["fraction_of_copy"] is None for r in result["rows"])
        assert all(b["ratio"] is None and b["verdict"] is None for b in result["bars"])


def test_a_peer_that_fails_its_check_is_timed_and_recorded(monkeypatch, capsys):
    monkeypatch.setitem(bench.METHODS, "torch fused", rounding_peer)  # checked as stated
    result = bench.run(sizes=(300,), small=(2, 5), repeats=1)
    peer = {r["name"]: r for r in result["rows"]}["torch fused [1 tensor of 300]"]
    assert peer["check"]["ok"] is False and peer["check"]["failed"] == ["v"]
    assert peer["median_s"] > 0  # timed all the same
    assert "torch fused: array(s) v off the float64 reference" in capsys.readouterr().out


def test_a_gpudl_variant_that_fails_its_check_stops_the_benchmark(monkeypatch):
    monkeypatch.setitem(bench.METHODS, "adam_v2_fused", rounding_peer)
    with pytest.raises(RuntimeError, match="adam_v2_fused: array.s. v off"):
        bench.run(sizes=(300,), small=(2, 5), repeats=1)


@pytest.mark.parametrize("kwargs", [dict(sizes=(0,)), dict(small=(2, -1)), dict(repeats=0)])
def test_bad_sizes_are_rejected(kwargs):
    with pytest.raises(ValueError):
        bench.run(**kwargs)


@pytest.mark.gpu
def test_speed_goals_of_the_stored_run():
    stored = load_or_run("optim")  # this commit's stored run, measured now if there is none
    for name in ("fused_adam_vs_copy", "multi_tensor_vs_torch_foreach",
                 "multi_tensor_vs_torch_fused"):
        assert find_bar(stored, name)["verdict"], stored["bars"]
    assert all(r["check"]["ok"] for r in stored["rows"] if r["check"]), [
        (r["name"], r["check"]) for r in stored["rows"] if r["check"] and not r["check"]["ok"]]
