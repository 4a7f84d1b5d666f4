"""gpudl.parallel.spawn: spawn returns per-rank results, surfaces errors, times out, cleans up.

The workers below are module-level functions of this test module: spawned children import it by
name (pytest puts tests/ on sys.path, and children inherit sys.path).
"""

import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.distributed as dist
from workers import hello

from gpudl.parallel.spawn import (
    WorkerError,
    default_backend,
    rank0_print,
    run_under_torchrun,
    spawn,
)


def hello_and_sum(rank, world_size):
    """hello, plus a tensor that went through an all-reduce (tensors travel back too)."""
    total = torch.tensor([float(rank + 1)])
    if dist.get_backend() == "nccl":
        total = total.cuda()
    dist.all_reduce(total)
    return hello(rank, world_size), total.cpu()


def fail_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 cannot go on")
    dist.barrier()  # the other ranks wait here for rank 1, which never comes


def die_on_rank_1(rank, world_size):
    if rank == 1:
        os._exit(3)
    dist.barrier()


def environment_and_modules(rank, world_size, name):
    import sys

    return os.environ.get(name), "gpudl.parallel.zero" in sys.modules, os.getpid()


def sleep_long(rank, world_size):
    time.sleep(300)


def no_children_left():
    return multiprocessing.active_children() == []


@pytest.mark.distributed
@pytest.mark.timeout(120)
def assert_in_rank_order(results, world_size):
    expected_sum = world_size * (world_size + 1) / 2
    backend = default_backend(world_size)
    assert [r[0] for r in results] == [(rank, world_size, backend) for rank in range(world_size)]
    for _, total in results:
        assert torch.equal(total, torch.tensor([expected_sum]))


# World size 2: test_concurrent_spawns_do_not_collide (two spawns of 2 at once).
@pytest.mark.parametrize("world_size", [1, 4])
def test_spawn_returns_results_in_rank_order(world_size):
    assert_in_rank_order(spawn(hello_and_sum, world_size), world_size)
    assert no_children_left()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_worker_exception_names_rank_type_message_and_traceback():
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        spawn(fail_on_rank_1, 2)
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert info.value.rank == 1
    assert "rank 1" in message
    assert "ValueError: rank 1 cannot go on" in message
    assert "Traceback" in message and "fail_on_rank_1" in message
    # rank 0 was stuck in a barrier: it was stopped, not waited for
    assert time.monotonic() - start < 60
    assert no_children_left()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_worker_that_dies_is_reported():
    with pytest.raises(WorkerError, match="rank 1 of 2 died"):
        spawn(die_on_rank_1, 2)
    assert no_children_left()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_timeout_names_unfinished_ranks_and_kills_children():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[0, 1\] of world size 2"):
        spawn(sleep_long, 2, timeout=3.0)
    assert time.monotonic() - start < 20
    assert no_children_left()


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_concurrent_spawns_do_not_collide():
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda _: spawn(hello_and_sum, 2), range(2)))
    for results in runs:  # each in rank order, its all-reduce within its own group
        assert_in_rank_order(results, 2)
    assert no_children_left()


@pytest.mark.parametrize("world_size", [0, -1])
def test_world_size_below_one_is_rejected(world_size):
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        spawn(hello, world_size)


@pytest.mark.parametrize("world_size", [2.0, "2", True])
def test_world_size_must_be_an_int(world_size):
    with pytest.raises(TypeError, match="world_size must be an int"):
        spawn(hello, world_size)


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout"):
        spawn(hello, 1, timeout=0)


def notebook_style(rank, world_size):
    return rank


notebook_style.__module__ = "__main__"  # as if typed into a notebook


def test_workers_that_children_cannot_import_are_rejected():
    def nested(rank, world_size):
        return rank

    for worker in (lambda rank, world_size: rank, nested, notebook_style):
        with pytest.raises(ValueError, match="importable module"):
            spawn(worker, 2)
    with pytest.raises(TypeError, match="worker must be a function"):
        spawn(42, 2)
    assert no_children_left()


def test_run_under_torchrun_without_torchrun_is_a_group_of_one(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert run_under_torchrun(hello) == (0, 1, default_backend(1))
    assert not dist.is_initialized()


def test_run_under_torchrun_destroys_the_group_when_the_worker_fails(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="rank 1 cannot go on"):
        run_under_torchrun(fail_on_rank_1_as_rank_0)
    assert not dist.is_initialized()


def fail_on_rank_1_as_rank_0(rank, world_size):
    return fail_on_rank_1(rank + 1, world_size)


def test_rank0_print_prints_on_rank_0_only(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    rank0_print("from rank 0")
    monkeypatch.setenv("RANK", "1")
    rank0_print("from rank 1")
    assert capsys.readouterr().out == "from rank 0\n"


def test_ranks_see_the_environment_of_the_spawn_and_are_new_processes(monkeypatch):
    # the ranks are forked from a server started at the first spawn: what the parent sets
    # later must still reach them, and nothing the parent imported since (a strategy's
    # module) is in them before their worker imports it
    first = spawn(environment_and_modules, 2, "GPUDL_TEST_MARK")
    assert [value for value, _, _ in first] == [None, None]
    import gpudl.parallel.zero  # noqa: F401  (imported here, not preloaded there)

    monkeypatch.setenv("GPUDL_TEST_MARK", "set after the first spawn")
    second = spawn(environment_and_modules, 2, "GPUDL_TEST_MARK")
    assert [value for value, _, _ in second] == ["set after the first spawn"] * 2
    assert not any(loaded for _, loaded, _ in second)
    pids = {pid for _, _, pid in first + second}
    assert len(pids) == 4 and os.getpid() not in pids
