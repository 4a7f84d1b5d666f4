"""ZeRO's memory formula (gpudl.estimate.model_state_memory) and the bytes FSDP2 leaves on each
rank (gpudl.parallel.zero.fsdp)."""

import functools

import pytest
import torch

from gpudl.estimate import model_state_memory
from gpudl.parallel.one_process import SHARDING_DIMS, adam_step_loss, make_batch, make_mlp
from gpudl.parallel.spawn import spawn
from gpudl.parallel.zero.fsdp import format_table, shard_numel, state_bytes, state_bytes_worker

# --- the formula -----------------------------------------------------------------------------


def test_zero_paper_figure_1():
    """7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12): the GB printed in Figure 1."""
    printed = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, gb in printed.items():
        got = model_state_memory(7.5e9, n_gpus=64, zero_stage=stage)
        assert round(got / 1e9, 1) == gb
    assert model_state_memory(7.5e9, n_gpus=64, zero_stage=3) == 7.5e9 * 16 / 64


@pytest.mark.parametrize(
    "optimizer, precision, per_param",
    [("adam", "mixed", (2, 2, 12)), ("adam", "fp32", (4, 4, 8)), ("sgd", "mixed", (2, 2, 8)),
     ("sgd", "fp32", (4, 4, 4))],
)
def test_each_stage_divides_one_more_part(optimizer, precision, per_param):
    params, grads, state = per_param
    memory = functools.partial(model_state_memory, 1000, n_gpus=8, optimizer=optimizer,
                               precision=precision)
    assert memory(zero_stage=0) == 1000 * (params + grads + state)
    assert memory(zero_stage=1) == 1000 * (params + grads + state / 8)
    assert memory(zero_stage=2) == 1000 * (params + (grads + state) / 8)
    assert memory(zero_stage=3) == 1000 * (params + grads + state) / 8
    for stage in range(4):  # one GPU has nothing to share with
        assert model_state_memory(1000, zero_stage=stage, optimizer=optimizer,
                                  precision=precision) == memory(zero_stage=0)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(n_params=-1), ValueError),
        (dict(n_params="1e9"), TypeError),
        (dict(n_gpus=0), ValueError),
        (dict(n_gpus=2.0), TypeError),
        (dict(n_gpus=True), TypeError),
        (dict(zero_stage=4), ValueError),
        (dict(zero_stage=-1), ValueError),
        (dict(zero_stage="3"), TypeError),
        (dict(optimizer="adamw"), ValueError),
        (dict(optimizer=None), TypeError),
        (dict(precision="bf16"), ValueError),
    ],
)
def test_model_state_memory_rejects_bad_input(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        model_state_memory(**{"n_params": 1000, **kwargs})


# --- FSDP2's shards --------------------------------------------------------------------------


def test_shard_numel_by_hand():
    assert [shard_numel((10, 12), 4, r) for r in range(4)] == [36, 36, 36, 12]  # 3, 3, 3, 1 rows
    assert [shard_numel((6,), 4, r) for r in range(4)] == [2, 2, 2, 0]
    assert [shard_numel((256, 64), 4, r) for r in range(4)] == [4096] * 4
    with pytest.raises(ValueError, match="rank"):
        shard_numel((8,), 4, 4)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7, 8])
def test_shard_numel_matches_torch_chunk(world_size):
    for shape in [(1,), (5, 3), (6,), (10, 12), (17, 2, 3), (64,)]:
        chunks = torch.ones(shape).chunk(world_size)  # FSDP2 splits dim 0 like torch.chunk
        expected = [c.numel() for c in chunks] + [0] * (world_size - len(chunks))
        assert [shard_numel(shape, world_size, r) for r in range(world_size)] == expected


# --- bytes counted on each rank --------------------------------------------------------------

N_PARAMS = sum(p.numel() for p in make_mlp(SHARDING_DIMS).parameters())
UNEVEN = (12, 10, 6)  # over 4 ranks: rows 3, 3, 3, 1 and 2, 2, 2, 0
# Starting the processes costs far more than a step: each world size is spawned once, and its
# ranks measure every configuration of that size one after another.
CONFIGS = {2: (("replicated", SHARDING_DIMS), ("fsdp2", SHARDING_DIMS)),
           4: (("replicated", SHARDING_DIMS), ("fsdp2", SHARDING_DIMS), ("fsdp2", UNEVEN))}


def every_config_worker(rank, world_size):
    return [state_bytes_worker(rank, world_size, strategy, dims)
            for strategy, dims in CONFIGS[world_size]]


@functools.cache
def spawned(world_size):
    per_rank = spawn(every_config_worker, world_size, timeout=240)
    return {config: tuple(rows[i] for rows in per_rank)
            for i, config in enumerate(CONFIGS[world_size])}


def measured(world_size, strategy, dims):
    """What :func:`state_bytes` returns for the configuration, one row per rank."""
    return spawned(world_size)[strategy, dims]


def test_the_model_is_as_described():
    assert N_PARAMS == 98_880
    assert all(p.shape[0] % 4 == 0 for p in make_mlp(SHARDING_DIMS).parameters())


@pytest.mark.parametrize(("kwargs", "error"), [
    (dict(strategy="zero3"), ValueError), (dict(dims=(64,)), ValueError),
    (dict(dims=(64, 0)), ValueError), (dict(dims=(8.0, 4)), TypeError),
])
def test_state_bytes_rejects_bad_input_before_spawning(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        state_bytes(**{"world_size": 2, "strategy": "fsdp2", **kwargs})


def test_make_mlp_is_reproducible_and_leaves_the_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    first, second = make_mlp(SHARDING_DIMS), make_mlp(SHARDING_DIMS)
    assert torch.equal(torch.rand(3), expected)
    assert all(map(torch.equal, first.parameters(), second.parameters()))


@pytest.mark.parametrize("dims", [SHARDING_DIMS, UNEVEN])
def test_the_reference_step_lowers_the_loss(dims):
    """So a strategy that skipped or botched the step would not match it."""
    x, y = make_batch(4, dims)
    before = torch.nn.functional.mse_loss(make_mlp(dims)(x), y).item()
    assert adam_step_loss(4, dims) < before - 1e-3


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [2, 4])
def test_replicated_ranks_hold_everything(world_size):
    for row in measured(world_size, "replicated", SHARDING_DIMS):
        assert row["n_params"] == N_PARAMS
        assert (row["param_bytes"], row["grad_bytes"], row["adam_bytes"]) == (
            4 * N_PARAMS, 4 * N_PARAMS, 8 * N_PARAMS)
        assert row["total_bytes"] == model_state_memory(
            N_PARAMS, n_gpus=world_size, zero_stage=0, precision="fp32")
        assert row["step_bytes"] == 4 * 6  # one fp32 scalar per parameter tensor


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [2, 4])
def test_fsdp2_is_zero_3(world_size):
    replicated = measured(world_size, "replicated", SHARDING_DIMS)[0]
    sharded = measured(world_size, "fsdp2", SHARDING_DIMS)
    for row in sharded:
        for key in ("param_bytes", "grad_bytes", "adam_bytes", "total_bytes"):
            assert row[key] * world_size == replicated[key]
        assert row["total_bytes"] == model_state_memory(
            N_PARAMS, n_gpus=world_size, zero_stage=3, precision="fp32")
        assert row["step_bytes"] == replicated["step_bytes"]  # not sharded
    for key in ("param_bytes", "grad_bytes", "adam_bytes"):
        assert sum(row[key] for row in sharded) == replicated[key]
    assert len(format_table(sharded).splitlines()) == world_size + 1


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "world_size, strategy, dims",
    [(2, "replicated", SHARDING_DIMS), (2, "fsdp2", SHARDING_DIMS),
     (4, "replicated", SHARDING_DIMS), (4, "fsdp2", SHARDING_DIMS),
     (4, "fsdp2", UNEVEN)],
)
def test_sharding_does_not_change_the_maths(world_size, strategy, dims):
    """Every rank ends with the loss one process gets from one step on the whole batch."""
    expected = adam_step_loss(world_size, dims)
    for row in measured(world_size, strategy, dims):
        assert row["loss"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_uneven_shards_are_rows_of_ceil_d0_over_n():
    shapes = [p.shape for p in make_mlp(UNEVEN).parameters()]
    sharded = measured(4, "fsdp2", UNEVEN)
    for rank, row in enumerate(sharded):
        local = 4 * sum(shard_numel(shape, 4, rank) for shape in shapes)
        assert (row["param_bytes"], row["grad_bytes"], row["adam_bytes"]) == (
            local, local, 2 * local)
    assert sharded[3]["param_bytes"] < sharded[0]["param_bytes"]
    n_params = sum(p.numel() for p in make_mlp(UNEVEN).parameters())
    assert sum(row["total_bytes"] for row in sharded) == model_state_memory(
        n_params, precision="fp32")  # one replica's worth, in all
