"""Data parallelism (gpudl.parallel.data): every strategy equals one process on the
global batch at every step, at world sizes 1, 2 and 4, with gradient accumulation, uneven
data and replicas that start apart; the sampler's padding and dropping; clear errors."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.bench import dataparallel as bench
from gpudl.bench import find_bar, load_or_run
from gpudl.estimate import allreduce_time, data_parallel_step_time
from gpudl.kernels import buckets as bucket_kernels
from gpudl.parallel import data as data_parallel
from gpudl.parallel.one_process import make_mlp
from gpudl.parallel.spawn import WorkerError, default_backend, run_under_torchrun, spawn

ROOT = Path(__file__).resolve().parent.parent
BASE = data_parallel.Setup(epochs=2)  # 12 steps
JOBS = {  # name: (strategy, setup); all run in one group of processes per world size
    "manual": ("manual", BASE),
    "bucketed": ("bucketed", BASE),  # gradients as views of the buckets
    # the naive version: packed into the buckets by a kernel, and unpacked; one epoch (6
    # steps), as the kernels pack the same buckets in every epoch and their simulated launches
    # cost more than all the other jobs together
    "bucketed_pack": ("bucketed", replace(BASE, variant="v2_multi_tensor", epochs=1)),
    "bucketed_pack_accumulate": ("bucketed", replace(BASE, variant="v1_per_tensor",
                                                     accumulation=2, epochs=1)),
    "ddp": ("ddp", BASE),
    "ddp_accumulate_verified": ("ddp", replace(BASE, accumulation=2, start="verify")),
    "bucketed_accumulate": ("bucketed", replace(BASE, accumulation=2)),
    "ddp_padded": ("ddp", replace(BASE, n_samples=45)),
    "bucketed_dropped": ("bucketed", replace(BASE, n_samples=45, drop_last=True)),
    # rank r seeds its model with seed + r: the broadcast (DDP's own for DDP) must make the
    # replicas train as one process from rank 0's weights
    "bucketed_apart": ("bucketed", replace(BASE, rank_seed_step=1)),
    "ddp_apart": ("ddp", replace(BASE, rank_seed_step=1)),
}


# --- the data: what DistributedSampler gives each rank ---------------------------------------


def test_sampler_pads_by_repeating_the_start():
    plan = data_parallel.sampler_plan(10, 4)
    assert plan["samples_per_rank"] == 3
    assert plan["per_rank"] == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    assert plan["padding"] == [0, 1] and plan["dropped"] == []


def test_sampler_with_drop_last_cuts_the_tail():
    plan = data_parallel.sampler_plan(10, 4, drop_last=True)
    assert plan["samples_per_rank"] == 2
    assert plan["per_rank"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert plan["padding"] == [] and plan["dropped"] == [8, 9]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), world_size=st.integers(1, 8), drop_last=st.booleans(),
       epoch=st.integers(0, 3))
def test_sampler_plan_accounts_for_every_sample(n, world_size, drop_last, epoch):
    if world_size > n:
        with pytest.raises(ValueError, match="above the number of samples"):
            data_parallel.sampler_plan(n, world_size, drop_last)
        return
    plan = data_parallel.sampler_plan(n, world_size, drop_last, shuffle=True, epoch=epoch)
    rows = plan["per_rank"]
    assert all(len(row) == plan["samples_per_rank"] for row in rows)
    seen = [i for row in rows for i in row]
    if drop_last:
        assert plan["samples_per_rank"] == n // world_size and plan["padding"] == []
        assert len(set(seen)) == len(seen)  # nothing twice
        assert sorted(seen + plan["dropped"]) == list(range(n))
    else:
        assert plan["samples_per_rank"] == -(-n // world_size) and plan["dropped"] == []
        assert sorted(set(seen)) == list(range(n))
        assert len(plan["padding"]) == len(seen) - n < world_size


def test_the_global_batches_are_the_union_of_the_ranks_batches():
    setup = replace(BASE, n_samples=45)
    for world_size in (2, 4):
        order = data_parallel.global_order(setup, world_size, epoch=1)
        share = setup.global_batch // world_size
        ranks = [data_parallel.rank_indices(setup, world_size, r, 1) for r in range(world_size)]
        for step, start in enumerate(range(0, len(order), setup.global_batch)):
            union = sorted(i for row in ranks for i in row[step * share:(step + 1) * share])
            assert union == sorted(order[start:start + setup.global_batch])


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setup, world_size, match",
    [(replace(BASE, global_batch=18), 4, r"global batch \(18\) must be divisible by the "
                                         r"data-parallel degree \(4\)"),
     (replace(BASE, accumulation=3), 2, r"share of the global batch \(8 samples\) must split "
                                        "into accumulation = 3"),
     (replace(BASE, n_samples=3), 4, "world size 4 is above the number of samples 3")],
)
def test_plans_the_ranks_cannot_share_evenly_are_refused(setup, world_size, match):
    with pytest.raises(ValueError, match=match):
        data_parallel.check_plan(setup, world_size)
    with pytest.raises(ValueError, match=match):  # before any process starts
        data_parallel.run("ddp", world_size, setup)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [(dict(dims=(8,)), ValueError, "dims"), (dict(global_batch=0), ValueError, "global_batch"),
     (dict(epochs=1.5), TypeError, "epochs"),
     (dict(variant="v7"), ValueError, r"variant must be one of \['views', 'v1_per_tensor'"),
     (dict(start="hope"), ValueError, "start"), (dict(bucket_cap_mb=0), ValueError,
                                                 "bucket_cap_mb"),
     (dict(lr=float("nan")), ValueError, "lr"), (dict(shuffle=1), TypeError, "shuffle")],
)
def test_bad_setups_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        data_parallel.Setup(**kwargs)


def test_bad_strategies_are_refused():
    with pytest.raises(ValueError, match="strategy must be one of"):
        data_parallel.run("allgather", 2)
    with pytest.raises(ValueError, match="runs in this process"):
        data_parallel.run_many([("single", BASE)], 2)
    with pytest.raises(ValueError, match="runs in one process"):
        data_parallel.train_worker(0, 2, "single", BASE)
    with pytest.raises(TypeError, match="Setup"):
        data_parallel.check_plan({"n_samples": 4}, 2)


def test_gradient_buckets_refuse_what_they_cannot_pack():
    with pytest.raises(TypeError, match="float32"):
        data_parallel.GradientBuckets(make_mlp((3, 2)).double().parameters(), 1.0, 2)
    with pytest.raises(ValueError, match="at least one"):
        data_parallel.GradientBuckets([], 1.0, 2)
    buckets = data_parallel.GradientBuckets(make_mlp((3, 4, 2)).parameters(), 1.0, 2)
    buckets.arm()
    with pytest.raises(RuntimeError, match=r"buckets \[0\] never received"):
        buckets.wait()  # no backward pass ran


# --- the reference and the tolerance --------------------------------------------------------


@pytest.fixture(scope="module")
def singles():
    """The one-process reference of every job, for the data plans of 1, 2 and 4 ranks."""
    return {(name, n): data_parallel.run("single", n, setup)[0]
            for name, (_, setup) in JOBS.items() for n in (1, 2, 4)}


def test_the_tolerance_tells_a_sum_from_a_mean(singles):
    """Summing the gradients of 2 ranks instead of averaging them is SGD with twice the
    learning rate: far outside the tolerance, as is training on one rank's share alone."""
    reference = singles["manual", 2]
    summed = data_parallel.run("single", 2, replace(BASE, lr=2 * BASE.lr))[0]
    assert data_parallel.compare([summed], reference)["params"] > 100 * data_parallel.TOLERANCE
    # a rank that trains on its half of the first batch alone takes another first step
    alone = data_parallel.run("single", 2, replace(BASE, global_batch=8))[0]
    scale = np.abs(reference["params"][0]).max()
    worst = np.abs(alone["params"][0] - reference["params"][0]).max()
    assert worst > 100 * data_parallel.TOLERANCE * scale


def test_single_learns():
    losses = data_parallel.run("single", 2)[0]["losses"]  # the default setup
    assert len(losses) == 18  # 3 epochs of 96 samples in batches of 16
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3])


# --- every strategy equals one process ------------------------------------------------------


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"world{n}")
def runs(request):
    world_size = request.param
    records = data_parallel.run_many(list(JOBS.values()), world_size, timeout=300)
    return world_size, dict(zip(JOBS, records, strict=True))


@pytest.mark.distributed
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(JOBS))
def test_every_strategy_equals_one_process_at_every_step(runs, singles, name):
    world_size, records = runs
    diff = data_parallel.compare(records[name], singles[name, world_size])
    assert diff["equal"], diff
    assert diff["steps"] == len(singles[name, world_size]["losses"])
    for record in records[name]:
        assert (record["world_size"], record["backend"]) == (world_size,
                                                             default_backend(world_size))


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_each_rank_trains_on_its_own_share_of_each_global_batch(runs, singles):
    world_size, records = runs
    for name in ("ddp", "ddp_padded", "bucketed_dropped"):
        reference = singles[name, world_size]["batches"]
        for step, batch in enumerate(reference):
            shares = [r["batches"][step] for r in records[name]]
            assert len({len(s) for s in shares}) == 1  # equal shares
            assert sorted(i for s in shares for i in s) == sorted(batch)
        if name == "ddp":  # no padding: no sample twice in a step
            assert all(len(set(b)) == len(b) for b in reference)


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_one_allreduce_per_parameter_or_per_bucket(runs):
    _, records = runs
    n_params = len(list(make_mlp(BASE.dims).parameters()))
    sizes = [p.numel() * 4 for p in make_mlp(BASE.dims).parameters()][::-1]
    n_buckets = len(data_parallel.expected_buckets(sizes, BASE.bucket_cap_mb))
    assert n_buckets == 2  # so the tests exercise more than one bucket
    assert set(records["manual"][0]["allreduces"]) == {n_params}
    assert set(records["bucketed"][0]["allreduces"]) == {n_buckets}
    assert set(records["bucketed_accumulate"][0]["allreduces"]) == {n_buckets}
    assert set(records["bucketed_pack"][0]["allreduces"]) == {n_buckets}


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_gradient_views_copy_nothing_where_packing_copies_every_bucket_twice(runs):
    _, records = runs
    sizes = [p.numel() * 4 for p in make_mlp(BASE.dims).parameters()][::-1]
    n_buckets = len(data_parallel.expected_buckets(sizes, BASE.bucket_cap_mb))
    for name in ("bucketed", "bucketed_accumulate", "bucketed_dropped", "bucketed_apart"):
        for record in records[name]:
            assert set(record["grad_copies"]) == {0}, name
    for name in ("bucketed_pack", "bucketed_pack_accumulate"):
        for record in records[name]:
            assert set(record["grad_copies"]) == {2 * n_buckets}, name  # a pack, an unpack
    assert set(records["manual"][0]["grad_copies"]) == {None}


@pytest.mark.distributed
@pytest.mark.timeout(200)
def test_replicas_that_start_apart_are_caught_when_verified():
    setup = replace(BASE, rank_seed_step=1, start="verify")
    with pytest.raises(WorkerError, match="replicas start from different weights"):
        spawn(data_parallel.train_worker, 2, "bucketed", setup, timeout=150)


def test_world_size_one_equals_one_process(monkeypatch, singles):
    """A group of one (how run_under_torchrun runs without torchrun): the all-reduces are
    trivial, the packing and the hooks are not."""
    monkeypatch.delenv("RANK", raising=False)
    names = ["manual", "bucketed", "ddp", "bucketed_accumulate", "bucketed_pack"]
    records = run_under_torchrun(data_parallel.run_worker, [JOBS[n] for n in names])
    for name, record in zip(names, records, strict=True):
        assert data_parallel.compare([record], singles[name, 1])["equal"], name


def test_gradient_views_never_call_the_pack_kernels(monkeypatch, singles):
    monkeypatch.delenv("RANK", raising=False)

    def forbidden(*args, **kwargs):
        raise AssertionError("the views version packed or unpacked a bucket")

    monkeypatch.setattr(bucket_kernels, "pack", forbidden)
    monkeypatch.setattr(bucket_kernels, "unpack", forbidden)
    [record] = run_under_torchrun(data_parallel.run_worker, [JOBS["bucketed_accumulate"]])
    assert data_parallel.compare([record], singles["bucketed_accumulate", 1])["equal"]
    assert set(record["grad_copies"]) == {0}


def _replaced_gradient_worker(rank: int, world_size: int) -> dict:
    """One step of the views version after a gradient was replaced by a new tensor."""
    device, _ = data_parallel.rank_device()
    model = make_mlp(BASE.dims).to(device)
    buckets = data_parallel.GradientBuckets(model.parameters(), BASE.bucket_cap_mb, world_size)
    params = list(model.parameters())
    params[0].grad = torch.zeros_like(params[0])  # not its view: backward accumulates there
    x, y = (t.to(device) for t in data_parallel.make_dataset(BASE))
    buckets.arm()
    torch.nn.functional.mse_loss(model(x), y).backward()
    buckets.wait()
    expected = make_mlp(BASE.dims).to(device)
    torch.nn.functional.mse_loss(expected(x), y).backward()
    return {"copies": buckets.copies,
            "views": [p.grad is buckets.slot_of[id(p)] for p in params],
            "equal": all(torch.allclose(p.grad, q.grad, rtol=1e-6, atol=0)
                         for p, q in zip(params, expected.parameters(), strict=True))}


def test_a_replaced_gradient_is_copied_into_its_bucket_once(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    out = run_under_torchrun(_replaced_gradient_worker)
    assert out == {"copies": 1, "views": [True] * 6, "equal": True}


def test_main_prints_the_comparison(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    data_parallel.main(["--strategy", "bucketed", "--accumulation", "2", "--epochs", "1"])
    out = capsys.readouterr().out
    assert "bucketed on 1 rank(s)" in out and f"within {data_parallel.TOLERANCE:g}: True" in out


@pytest.mark.distributed
@pytest.mark.timeout(200)
def test_torchrun_runs_a_strategy_and_rank_0_compares(torchrun):
    done = torchrun("gpudl.parallel.data", "--strategy", "bucketed", "--accumulation",
                    "2", "--drop-last", "--epochs", "1", timeout=180)
    assert done.stdout.count("bucketed on 2 rank(s) (gloo)") == 1  # rank 0 only
    assert f"within {data_parallel.TOLERANCE:g}: True" in done.stdout


# --- step times -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def benchmark():
    """The benchmark at world sizes 1 and 2, and each step_times result it used, whole (run
    keeps their timings only in its rows): one spawn per world size for the tests of both."""
    measured = []
    step_times = bench.step_times

    def recording(*args, **kwargs):
        out = step_times(*args, **kwargs)
        measured.append(dict(out))
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench, "step_times", recording)
        body = bench.run(world_sizes=[1, 2], setup=BASE)
    return body, measured


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_step_times_report_what_the_cost_model_needs(benchmark):
    body, measured = benchmark
    out = measured[1]
    assert out["world_size"] == 2
    assert set(out["step_s"]) == set(out["timings"]) == {"manual", "bucketed", "ddp"}
    assert all(len(t.samples) == body["steps"] for t in out["timings"].values())
    assert all(t > 0 for t in out["step_s"].values()) and out["compute_s"] > 0
    assert 0 < out["backward_fraction"] <= 1
    n_params = sum(p.numel() for p in make_mlp(BASE.dims).parameters())
    assert out["grad_bytes"] == 4 * n_params and out["n_buckets"] == 2
    assert [r["size_bytes"] for r in out["allreduce"]] == [out["grad_bytes"] // 2 // 4 * 4,
                                                           out["grad_bytes"],
                                                           4 << 20]
    assert bench.predicted_step_time(out) >= out["compute_s"]


def test_predicted_step_time_fits_the_ring_model_to_the_timings():
    latency, bandwidth = 2e-5, 3e9
    sizes = [4_000, 400_000]
    times = {"world_size": 4, "compute_s": 0.01, "backward_fraction": 0.6,
             "grad_bytes": 400_000, "n_buckets": 3,
             "allreduce": [{"size_bytes": s, "time_s": allreduce_time(s, 4, bandwidth, latency)}
                           for s in sizes]}
    expected = data_parallel_step_time(0.01, 400_000, 4, bandwidth, latency, 0.6, 3)
    assert bench.predicted_step_time(times) == pytest.approx(expected, rel=1e-9)
    assert bench.predicted_step_time(times | {"world_size": 1}) == 0.01


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_benchmark_rows_and_bars_per_world_size(benchmark):
    body, _ = benchmark
    names = [r["name"] for r in body["rows"]]
    assert names == [f"{s} step x{n}" for n in (1, 2) for s in ("manual", "bucketed", "ddp")]
    assert [b["name"] for b in body["bars"]] == ["bucketed_vs_ddp_x1", "bucketed_vs_ddp_x2"]
    assert [r["world_size"] for r in body["runs"]] == [1, 2]
    assert body["runs"][0]["predicted_step_s"] == body["runs"][0]["compute_s"]


@pytest.mark.gpu
@pytest.mark.timeout(1200)
def test_bucketed_steps_within_10_percent_of_ddp_on_gpus():
    stored = load_or_run("dataparallel")  # this commit's stored run, measured if there is none
    bars = [b for b in stored["bars"] if b["name"].startswith("bucketed_vs_ddp_x")]
    assert bars and all(b["verdict"] for b in bars), bars
    assert find_bar(stored, "bucketed_vs_ddp_x1")["compare"] == "<="


def test_rank_device_on_a_gpu_is_the_current_cuda_device(monkeypatch):
    # On the simulator rank_device is the CPU; on a GPU it names torch's current device (a
    # misspelt torch function there would only fail on a GPU).
    from gpudl.parallel.data import buckets

    monkeypatch.setattr(buckets.backend, "is_simulator", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    device, sync = data_parallel.rank_device()
    assert device == torch.device("cuda", 3) and sync is torch.cuda.synchronize
