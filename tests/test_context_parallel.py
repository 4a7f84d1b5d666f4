"""Context parallelism (gpudl.parallel.context): ring attention and head-parallel (Ulysses)
attention equal one process (torch's scaled_dot_product_attention and its autograd), output,
log-sum-exp and the gradients of q, k and v, at world sizes 2, 3 and 4 with sequence lengths
the world size does not divide; the balanced layout gives every rank the same work; the ring
posts each transfer before the computation it overlaps; the bytes sent are the cost model's;
bad input is refused before any process starts."""

from dataclasses import replace

import pytest
import torch

from gpudl import estimate
from gpudl.checks import largest_difference
from gpudl.parallel import context
from gpudl.parallel.context import ContextJob, run_context_jobs
from gpudl.parallel.context import run as context_run
from gpudl.parallel.one_process import attention_gradients

#: float64 throughout: every result is within this of one process, relative to the largest
#: magnitude of the reference tensor (at most seq + d + 2 W roundings of 2**-53 touch an
#: element here, about 1e-14; a dropped chunk or a wrong mask misses by more than 1e-2).
TOLERANCE = 1e-12
#: float32: (seq + d) roundings of 2**-24, doubled, at the sizes below.
TOLERANCE_FLOAT32 = 64 * 2**-23
HEAD_DIM = 5
FIELDS = ("out", "lse", "grad_q", "grad_k", "grad_v")


def _tensors(heads, seq, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(heads, seq, HEAD_DIM, generator=generator, dtype=dtype)
            for _ in range(4)]


def _jobs(world_size):
    """Every job of one world size, named: each strategy, causal or not, at the shortest
    sequence its layout can use plus one and at a longer one, neither divisible by the world
    size; the naive layout and ring; a forward pass alone; float32; and lengths 2 W divides,
    for the work and the bytes."""
    jobs = {}
    for strategy in context.STRATEGIES:
        heads = 2 * world_size if strategy == "ulysses" else 3
        for causal in (False, True):
            for seq in (2 * world_size + 1, 4 * world_size + 3):
                q, k, v, do = _tensors(heads, seq, len(jobs))
                jobs[strategy, causal, seq] = ContextJob(q, k, v, causal, do, strategy)
    q, k, v, do = _tensors(3, 4 * world_size, 99)
    even = ContextJob(q, k, v, True, do)
    jobs["even balanced"] = even
    jobs["even contiguous"] = replace(even, layout="contiguous")
    jobs["even ulysses"] = ContextJob(*_tensors(2 * world_size, 4 * world_size, 98)[:3], True,
                                      strategy="ulysses")  # forward only
    jobs["naive ring"] = replace(jobs["ring", True, 4 * world_size + 3], overlap=False)
    jobs["ulysses balanced"] = replace(jobs["ulysses", True, 4 * world_size + 3],
                                       layout="balanced")
    q, k, v, do = _tensors(3, 4 * world_size + 3, 97, torch.float32)
    jobs["float32"] = ContextJob(q, k, v, True, do)
    return jobs


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda n: f"world{n}")
def runs(request):
    world_size = request.param
    jobs = _jobs(world_size)
    results = run_context_jobs(list(jobs.values()), world_size, timeout=200)
    return world_size, jobs, dict(zip(jobs, results, strict=True))


def _differences(job, result):
    reference = attention_gradients(job.q, job.k, job.v, job.causal, job.grad_out)
    names = FIELDS if job.grad_out is not None else FIELDS[:2]
    return {name: largest_difference(getattr(result, name), reference[name])
            / max(1.0, reference[name].abs().max().item()) for name in names}


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_every_job_equals_one_process(runs):
    world_size, jobs, results = runs
    worst = {torch.float32: 0.0, torch.float64: 0.0}
    for name, job in jobs.items():
        tolerance = TOLERANCE_FLOAT32 if job.q.dtype == torch.float32 else TOLERANCE
        differences = _differences(job, results[name])
        assert all(d <= tolerance for d in differences.values()), (name, differences)
        worst[job.q.dtype] = max(worst[job.q.dtype], *differences.values())
    print(f"world size {world_size}: largest relative difference {worst[torch.float64]:.1e} "
          f"in float64, {worst[torch.float32]:.1e} in float32")
    assert results["even ulysses"].grad_q is None  # no grad_out, no backward pass


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_tolerance_tells_a_missing_chunk(runs):
    """Attention that misses one rank's keys (the ring stopped a step early) is far outside
    the tolerance."""
    world_size, jobs, _ = runs
    job = jobs["ring", False, 4 * world_size + 3]
    keep = job.q.shape[1] - job.q.shape[1] // world_size
    short = torch.nn.functional.scaled_dot_product_attention(job.q, job.k[:, :keep],
                                                             job.v[:, :keep])
    assert largest_difference(short, attention_gradients(job.q, job.k, job.v)["out"]) > (
        1e6 * TOLERANCE)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_balanced_layout_gives_every_rank_the_same_work(runs):
    world_size, _, results = runs
    balanced = [r["work"] for r in results["even balanced"].ranks]
    contiguous = [r["work"] for r in results["even contiguous"].ranks]
    assert len(set(balanced)) == 1, balanced
    # a diagonal block of c x c tokens computes c (c - 1) / 2 masked scores: the contiguous
    # layout has W blocks of 4 (6 W masked scores per head), the balanced one 2 W of 2 (2 W)
    assert sum(contiguous) == sum(balanced) + world_size * 3 * 4
    # the contiguous layout's last rank computes W chunks' scores, its first one
    assert contiguous == [(r + 1) * contiguous[0] for r in range(world_size)]
    assert len({r["work_backward"] for r in results["even balanced"].ranks}) == 1


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_each_rank_sends_what_the_cost_model_says(runs):
    world_size, _, results = runs
    seq, heads, element = 4 * world_size, 3, 8
    ring = estimate.context_bytes_per_gpu(seq, heads, HEAD_DIM, world_size, "ring", element)
    assert ring == (world_size - 1) * estimate.ring_step_bytes(seq // world_size, heads,
                                                               HEAD_DIM, element)
    for r in results["even balanced"].ranks:
        assert r["bytes_sent"] == ring
        # the chunks again, then each chunk's gradients at every one of the W steps
        assert r["bytes_sent_backward"] == ring + world_size * ring / (world_size - 1)
    ulysses = estimate.context_bytes_per_gpu(seq, 2 * world_size, HEAD_DIM, world_size,
                                             "ulysses", element)
    log_sum_exp = ulysses / (4 * HEAD_DIM)  # sent back beside the output
    assert [r["bytes_sent"] for r in results["even ulysses"].ranks] == [
        ulysses + log_sum_exp] * world_size


def _position(events, *event):
    return events.index(event)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_ring_posts_each_transfer_before_the_computation_it_overlaps(runs):
    world_size, jobs, results = runs
    job = jobs["ring", True, 4 * world_size + 3]
    for r in results["ring", True, 4 * world_size + 3].ranks:
        # the forward pass ends with its last computation
        forward_end = r["events"].index(("computed", world_size - 1)) + 1
        forward, backward = r["events"][:forward_end], r["events"][forward_end:]
        for events in (forward, backward):
            for step in range(world_size - 1):
                # the next chunk is in flight while this one is computed
                assert (_position(events, "post kv", step + 1) < _position(events, "compute", step)
                        < _position(events, "computed", step)
                        < _position(events, "arrive kv", step + 1)), events
        for step in range(world_size - 1):  # the gradients travel during the next step
            assert (_position(backward, "post grads", step) < _position(backward, "compute",
                                                                        step + 1)
                    < _position(backward, "computed", step + 1)
                    < _position(backward, "arrive grads", step)), backward
    assert job.overlap
    for r in results["naive ring"].ranks:  # the naive ring posts only after computing
        for step in range(world_size - 1):
            assert (_position(r["events"], "computed", step)
                    < _position(r["events"], "post kv", step + 1))


def test_the_layouts_cover_the_sequence_once():
    for seq, world_size in ((7, 3), (9, 4), (64, 4), (5, 2)):
        for layout in context.LAYOUTS:
            segments = context.rank_segments(seq, world_size, layout)
            every = torch.cat([context.positions(s) for s in segments])
            assert sorted(every.tolist()) == list(range(seq))
            counts = [context.token_count(s) for s in segments]
            assert max(counts) - min(counts) <= (1 if layout == "contiguous" else 2)
    assert context.rank_segments(8, 2, "balanced") == [[(0, 2), (6, 8)], [(2, 4), (4, 6)]]


def test_world_size_one_runs_in_this_process():
    q, k, v, do = _tensors(2, 5, 0)
    job = ContextJob(q, k, v, True, do, "ring")
    from gpudl.parallel.spawn import run_under_torchrun

    record = run_under_torchrun(context.context_worker, [job])[0]
    reference = attention_gradients(q, k, v, True, do)
    assert largest_difference(record["out"], reference["out"]) < TOLERANCE
    assert largest_difference(record["grads"][1], reference["grad_k"]) < TOLERANCE
    assert record["bytes_sent"] == 0


# --- bad input, refused before any process starts ---------------------------------------------


@pytest.fixture
def no_spawn(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(context_run, "spawn", refuse)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [(dict(strategy="ulysses", heads=3), ValueError, r"heads \(3\) must be divisible by the "
                                                     r"context-parallel degree \(2\)"),
     (dict(seq=1), ValueError, "cannot be split over world size 2 in the contiguous layout"),
     (dict(seq=3, causal=True), ValueError, "4 pieces of at least one token each"),
     (dict(world_size=0), ValueError, "world_size"),
     (dict(dtype=torch.float16), TypeError, "dtype"),
     (dict(v_seq=4), ValueError, "one shape"),
     (dict(strategy="allgather"), ValueError, "strategy"),
     (dict(layout="zigzag"), ValueError, "layout"),
     (dict(causal=1), TypeError, "causal"),
     (dict(timeout=0), ValueError, "timeout")],
)
def test_bad_input_is_refused_before_any_process_starts(no_spawn, kwargs, error, match):
    heads, seq = kwargs.pop("heads", 2), kwargs.pop("seq", 5)
    q, k, _, do = _tensors(heads, seq, 0, kwargs.pop("dtype", torch.float64))
    v = _tensors(heads, kwargs.pop("v_seq", seq), 1)[0]
    with pytest.raises(error, match=match):
        context.context_attention(q, k, v, grad_out=do, **kwargs)


def test_a_job_list_is_checked_whole(no_spawn):
    good = ContextJob(*_tensors(2, 9, 0)[:3])
    with pytest.raises(ValueError, match=r"the heads \(2\) must be divisible by the "
                                         r"context-parallel degree \(5\)"):
        run_context_jobs([good, replace(good, strategy="ulysses")], 5)
    with pytest.raises(TypeError, match="jobs"):
        run_context_jobs(good, 2)


# --- on GPUs ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ring_and_ulysses_equal_one_process_on_gpus():
    from gpudl.bench.environment import gpus_missing

    missing = gpus_missing(2)
    if missing:
        pytest.skip(f"ring attention between GPUs: {missing}")
    jobs = _jobs(2)
    for (name, job), result in zip(jobs.items(), run_context_jobs(list(jobs.values()), 2),
                                   strict=True):
        tolerance = TOLERANCE_FLOAT32 if job.q.dtype == torch.float32 else TOLERANCE
        assert all(d <= tolerance for d in _differences(job, result).values()), name
