"""ZeRO stage 1 (gpudl.parallel.zero): the padded flat layout, ZeroAdam against one process's
Adam (bit for bit when the gradients are exact, to float32 rounding in training), optimizer
state per rank 1/N of the whole, PyTorch's ZeroRedundancyOptimizer beside it, bad input, and
the torchrun entry point."""

import functools
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl import optim
from gpudl.estimate import model_state_memory
from gpudl.kernels import optim as optim_kernels
from gpudl.parallel.one_process import ZERO_DIMS, adam_run, make_mlp, optimizer_state_bytes
from gpudl.parallel.spawn import default_backend, spawn
from gpudl.parallel.zero import (
    ATOL,
    LR,
    OPTIMIZERS,
    RTOL,
    STEPS,
    NaiveZeroAdam,
    ZeroAdam,
    format_table,
    main,
    matches_reference,
    max_difference,
    padded_numel,
    shard_range,
    train_worker,
    zero_training,
)

ROOT = Path(__file__).resolve().parent.parent
N_PARAMS = sum(p.numel() for p in make_mlp(ZERO_DIMS).parameters())

# --- the padded flat layout ------------------------------------------------------------------


def test_layout_by_hand():
    assert N_PARAMS == 6_859
    assert [padded_numel(N_PARAMS, n) for n in (1, 2, 3, 4)] == [6_859, 6_860, 6_861, 6_860]
    assert [shard_range(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 12)]
    assert shard_range(5, 1, 0) == (0, 5)


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(1, 10_000), world_size=st.integers(1, 64))
def test_shards_tile_the_padded_buffer(numel, world_size):
    size = -(-numel // world_size)
    if (world_size - 1) * size >= numel:  # the last rank would hold padding only
        with pytest.raises(ValueError, match="only padding"):
            shard_range(numel, world_size, 0)
        return
    padded = padded_numel(numel, world_size)
    assert padded % world_size == 0 and 0 <= padded - numel < world_size
    ranges = [shard_range(numel, world_size, r) for r in range(world_size)]
    assert ranges[0][0] == 0 and ranges[-1][1] == padded
    # contiguous, in rank order
    assert all(a[1] == b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=True))
    assert {stop - start for start, stop in ranges} == {padded // world_size}
    assert ranges[-1][0] < numel  # every rank owns at least one real element


@pytest.mark.parametrize(
    "args, error, match",
    [((0, 2, 0), ValueError, "numel"), ((10, 0, 0), ValueError, "world_size"),
     ((10, 2.0, 0), TypeError, "world_size"), ((10, 2, 2), ValueError, "rank"),
     ((10, 2, -1), ValueError, "rank"), ((3, 4, 0), ValueError, "cannot shard 3 elements"),
     ((True, 2, 0), TypeError, "numel")],
)
def test_shard_range_rejects_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        shard_range(*args)


# --- one process: a group of one, in this process ---------------------------------------------


def _in_group_of_one(fn):
    """Run ``fn()`` inside a gloo process group of one, in this process (CPU tensors on any
    machine), and tear the group down whatever happens."""
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        return fn()
    finally:
        dist.destroy_process_group()


def test_zero_adam_needs_a_process_group():
    with pytest.raises(ValueError, match="process group"):
        ZeroAdam(make_mlp((3, 2)).parameters())


@pytest.mark.parametrize(
    "make_params, error, match",
    [
        (lambda: [], ValueError, "empty"),
        (lambda: torch.zeros(3, requires_grad=True), TypeError, "iterable of tensors"),
        (lambda: [torch.arange(3)], TypeError, "floating-point.*torch.int64"),
        (lambda: [{"params": [torch.zeros(3, requires_grad=True)]}], TypeError, "dict"),
        (lambda: [torch.zeros(3)], ValueError, "requires grad"),
        (lambda: [torch.zeros(3, requires_grad=True) * 2], ValueError, "leaf"),
        (lambda: [torch.zeros(3, requires_grad=True),
                  torch.zeros(3, dtype=torch.float64, requires_grad=True)], TypeError, "one dtype"),
        (lambda: [torch.zeros(3, requires_grad=True).to_sparse()], TypeError, "dense"),
    ],
)
def test_zero_adam_rejects_bad_parameters(make_params, error, match):
    with pytest.raises(error, match=match):
        _in_group_of_one(lambda: ZeroAdam(make_params()))


def test_zero_adam_rejects_a_repeated_parameter():
    p = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="more than once"):
        _in_group_of_one(lambda: ZeroAdam([p, p]))


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(lr=-1e-3), "learning rate"), (dict(eps=-1.0), "epsilon"),
     (dict(betas=(1.0, 0.999)), "beta"), (dict(betas=(0.9, -0.1)), "beta"),
     (dict(weight_decay=-0.1), "weight_decay")],
)
def test_hyperparameters_are_checked_by_torch_and_leave_the_model_alone(kwargs, match):
    model = make_mlp((3, 4, 2))
    before = [(p.data_ptr(), p.detach().clone()) for p in model.parameters()]
    with pytest.raises(ValueError, match=match):
        _in_group_of_one(lambda: ZeroAdam(model.parameters(), **kwargs))
    for p, (ptr, value) in zip(model.parameters(), before, strict=True):
        assert p.data_ptr() == ptr and torch.equal(p, value) and p.grad is None


def test_one_rank_is_torch_adam_bit_for_bit_whoever_owns_the_gradients():
    """World size 1: nothing sharded, the same gradients, so every bit equal. Gradients reach
    the flat buffer either by accumulating into it (the views) or, after ``model.zero_grad()``
    replaced them, by being copied in."""
    hyper = dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)

    def run():
        ours, theirs = make_mlp(ZERO_DIMS), make_mlp(ZERO_DIMS)
        zero, adam = ZeroAdam(ours.parameters(), **hyper), torch.optim.Adam(
            theirs.parameters(), **hyper)
        grad_ptrs = [p.grad.data_ptr() for p in ours.parameters()]
        for step in range(4):
            x, y = torch.randn(5, ZERO_DIMS[0]), torch.randn(5, ZERO_DIMS[-1])
            if step % 2:
                ours.zero_grad()  # set_to_none: backward allocates new gradients
            else:
                zero.zero_grad()  # the views stay
            adam.zero_grad()
            for model in (ours, theirs):
                torch.nn.functional.mse_loss(model(x), y).backward()
            zero.step()
            adam.step()
            assert all(map(torch.equal, ours.parameters(), theirs.parameters()))
            assert [p.grad.data_ptr() for p in ours.parameters()] == grad_ptrs
        ours.zero_grad()
        with pytest.raises(ValueError, match="no gradient"):
            zero.step()
        return zero.state_bytes(), optimizer_state_bytes(adam)

    (ours, our_steps), (theirs, their_steps) = _in_group_of_one(run)
    assert ours == theirs == 8 * N_PARAMS
    assert our_steps == 4 and their_steps == 4 * 6  # one step counter, against one per tensor


def test_main_runs_as_a_single_process(capsys):
    os.environ.pop("RANK", None)
    main(["--steps", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{N_PARAMS:,} parameters, 1 rank(s)")
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == list(OPTIMIZERS)
    assert all(row[-1] == "True" for row in rows)


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(steps=0), ValueError), (dict(steps=2.0), TypeError), (dict(lr=0.0), ValueError),
     (dict(lr=float("inf")), ValueError), (dict(lr="1e-2"), TypeError),
     (dict(dims=(8,)), ValueError), (dict(world_size=0), ValueError),
     (dict(world_size="2"), TypeError)],
)
def test_zero_training_rejects_bad_input_before_spawning(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        zero_training(**kwargs)


def test_the_reference_moves_far_more_than_the_tolerance():
    """Equality to the reference at ``RTOL``/``ATOL`` is not vacuous: every step moves the
    parameters by far more, so a run that skipped or botched a step would not match."""
    reference = adam_run(2, STEPS, LR)
    before = torch.cat([p.detach().flatten() for p in make_mlp(ZERO_DIMS).parameters()])
    steps = [before, *reference["params"]]
    for a, b in zip(steps[:-1], steps[1:], strict=True):
        assert (a - b).abs().max().item() > 100 * (ATOL + RTOL)
    assert matches_reference(reference, reference) and max_difference(reference, reference) == 0
    shifted = {"params": reference["params"][1:] + reference["params"][:1]}
    assert not matches_reference(shifted, reference)
    with pytest.raises(ValueError, match="steps"):
        max_difference({"params": reference["params"][:2]}, reference)


# --- sharded training, spawned ---------------------------------------------------------------
# Starting the processes costs far more than the work, so each world size is spawned once, for
# both the training run (train_worker) and the exact-gradient run (exact_worker, below), on
# gloo (CPU tensors) on every machine; test_nccl_training checks NCCL where there are GPUs.
WORLD_SIZES = [2, 3, 4]
EXACT_STEPS = 4


def both_worker(rank, world_size):
    return train_worker(rank, world_size), exact_worker(rank, world_size, EXACT_STEPS)


@functools.cache
def spawned(world_size):
    return tuple(spawn(both_worker, world_size, timeout=180, backend="gloo"))


def trained(world_size):
    return [train for train, _ in spawned(world_size)]


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_optimizer_gives_one_process_adam_after_every_step(world_size):
    reference = adam_run(world_size, STEPS, LR)
    results = trained(world_size)
    for name in OPTIMIZERS:
        first = results[0]["runs"][name]
        assert len(first["params"]) == STEPS
        assert matches_reference(first, reference), (name, max_difference(first, reference))
        assert first["losses"] == pytest.approx(reference["losses"], rel=1e-6)
        for result in results[1:]:  # every replica holds the same parameters, bit for bit
            assert all(map(torch.equal, result["runs"][name]["params"], first["params"]))
    if world_size == 2:  # a + b = b + a and /2 is exact: both roads give the same bits
        runs = results[0]["runs"]
        assert all(map(torch.equal, runs["ZeroAdam"]["params"], runs["NaiveZeroAdam"]["params"]))


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_state_per_rank_is_one_nth_up_to_padding(world_size):
    total = adam_run(world_size, 1, LR)["state_bytes"]
    assert total == 8 * N_PARAMS  # m and v in float32
    results = trained(world_size)
    assert [r["rank"] for r in results] == list(range(world_size))
    assert {(r["world_size"], r["backend"]) for r in results} == {(world_size, "gloo")}
    padded = results[0]["padded_numel"]
    assert 0 < padded - N_PARAMS < world_size  # the odd parameter count needs padding
    # ZeRO's formula for stage 1 (fp32 Adam): 4 + 4 + 8 / N bytes per parameter on each rank
    share = model_state_memory(N_PARAMS, n_gpus=world_size, zero_stage=1,
                               precision="fp32") - 8 * N_PARAMS
    assert share == pytest.approx(total / world_size)
    for result in results:
        for name in ("ZeroAdam", "NaiveZeroAdam"):
            run = result["runs"][name]
            assert run["state_bytes"] == [8 * padded // world_size] * world_size
            for counted in run["state_bytes"]:  # total / N, up to less than one element
                assert share <= counted < share + 8
            assert run["step_bytes"] == 4
        # PyTorch's: whole tensors to ranks, no padding, so uneven: the largest weight alone
        # outweighs an even share
        torch_zero = result["runs"]["ZeroRedundancyOptimizer"]["state_bytes"]
        assert sum(torch_zero) == total
        assert max(torch_zero) == 8 * 64 * 64 > total / world_size
    table = format_table(results[0], adam_run(world_size, STEPS, LR))
    assert len(table.splitlines()) == 2 + len(OPTIMIZERS)


# Exact gradients: dyadic numbers whose sum over the ranks is exact in float32, so sharding
# can change nothing, not even a rounding.
EXACT_DIMS = (5, 7, 2)  # 58 parameters: no padding over 2 ranks, 2 elements over 3 and 4
HYPER = dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
# torch's Adam and AdamW, and gpudl.optim's Adam in each variant: the book's kernels in place on
# the shard (compared with one process running the same class)
CLASSES = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW} | {
    f"gpudl Adam {v}": functools.partial(optim.Adam, variant=v) for v in optim_kernels.VARIANTS}


def dyadic_grads(step, rank):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    return [torch.randint(-1024, 1025, p.shape, generator=generator) / 4096
            for p in make_mlp(EXACT_DIMS).parameters()]


def exact_worker(rank, world_size, steps):
    """ZeroAdam (and NaiveZeroAdam) with Adam and AdamW inside on the same gradients each step,
    written into the flat buffer (even steps) or as new tensors (odd steps); and the error a
    world size that cannot shard gives."""
    out = {}
    for zero_class in (ZeroAdam, NaiveZeroAdam):
        for name, cls in CLASSES.items():
            model = make_mlp(EXACT_DIMS)
            optimizer = zero_class(model.parameters(), optimizer_class=cls, **HYPER)
            params = []
            for step in range(steps):
                optimizer.zero_grad()
                for p, g in zip(model.parameters(), dyadic_grads(step, rank), strict=True):
                    if step % 2:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
                optimizer.step()
                params.append([p.detach().clone() for p in model.parameters()])
            out[zero_class.__name__, name] = params
            # the shard the optimizer updates is still the slice of the flat parameters that
            # the all-gather fills in place
            start, _ = shard_range(optimizer.numel, world_size, rank)
            shard, flat = optimizer.param_shard, optimizer.flat_param
            out["in place", zero_class.__name__, name] = (
                shard.data_ptr() == flat.data_ptr() + start * flat.element_size())
    try:
        ZeroAdam([torch.zeros(world_size - 1, requires_grad=True)])
    except ValueError as exc:
        out["error"] = str(exc)
    return out


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_exact_gradients_give_torchs_parameters_bit_for_bit(world_size):
    results = [exact for _, exact in spawned(world_size)]
    for name, cls in CLASSES.items():
        model = make_mlp(EXACT_DIMS)
        optimizer = cls(model.parameters(), **HYPER)
        for step in range(EXACT_STEPS):
            per_rank = [dyadic_grads(step, r) for r in range(world_size)]
            for i, p in enumerate(model.parameters()):
                p.grad = torch.stack([g[i] for g in per_rank]).sum(0) / world_size
            optimizer.step()
            for result in results:
                for zero_class in ("ZeroAdam", "NaiveZeroAdam"):
                    got = result[zero_class, name][step]
                    assert all(map(torch.equal, got, model.parameters())), (zero_class, name, step)
                    assert result["in place", zero_class, name], (zero_class, name)
    for result in results:
        assert f"cannot shard {world_size - 1} elements over {world_size} ranks" in result["error"]


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_torchrun_trains_and_only_rank_0_prints(torchrun):
    done = torchrun("gpudl.parallel.zero", "--steps", "2", timeout=150)
    lines = done.stdout.splitlines()
    header = f"2 rank(s) ({default_backend(2)})"
    assert sum(header in line for line in lines) == 1  # one table: rank 0's
    rows = [line.split() for line in lines if line.split() and line.split()[0] in OPTIMIZERS]
    assert [row[0] for row in rows] == list(OPTIMIZERS)
    assert all(row[-1] == "True" for row in rows)
    for row in rows[:2]:  # ZeroAdam, NaiveZeroAdam: half the state each
        assert row[1:3] == [f"{8 * padded_numel(N_PARAMS, 2) // 2:,}"] * 2


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for NCCL")
def test_nccl_training_matches_one_process_adam():
    results = zero_training(2)
    reference = adam_run(2, STEPS, LR)
    padded = padded_numel(N_PARAMS, 2)
    for result in results:
        assert result["backend"] == "nccl"
        for name in OPTIMIZERS:
            run = result["runs"][name]
            assert matches_reference(run, reference), (name, max_difference(run, reference))
        for name in ("ZeroAdam", "NaiveZeroAdam"):
            assert result["runs"][name]["state_bytes"] == [8 * padded // 2] * 2
