"""The ring all-reduce built from sends and receives (gpudl.parallel.data.comms.ring_all_reduce):
equal to dist.all_reduce on tensor lengths the world size does not divide, and sending
2(N-1)/N of the tensor per rank."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpudl import estimate
from gpudl.parallel.data import ring_all_reduce, ring_all_reduce_check, ring_chunks
from gpudl.parallel.spawn import run_under_torchrun

NUMELS = [1, 3, 1000, 1001, 4099]  # below, multiple of and not a multiple of 2 and 4


@given(numel=st.integers(0, 10_000), world_size=st.integers(1, 16))
def test_chunks_cover_the_tensor_in_near_equal_pieces(numel, world_size):
    chunks = ring_chunks(numel, world_size)
    assert len(chunks) == world_size
    assert chunks[0][0] == 0 and chunks[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(chunks[:-1], chunks[1:], strict=True))
    sizes = [end - start for start, end in chunks]
    assert max(sizes) - min(sizes) <= 1


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"world{n}")
def ring(request):
    return request.param, ring_all_reduce_check(request.param, NUMELS, timeout=180)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ring_equals_all_reduce_exactly(ring):
    world_size, per_rank = ring
    for rows in per_rank:  # the worker also checked each result against the exact sum
        assert [r["numel"] for r in rows] == NUMELS
        assert all(r["equal"] for r in rows)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_each_rank_sends_2_n_minus_1_over_n_of_the_tensor(ring):
    world_size, per_rank = ring
    for i, numel in enumerate(NUMELS):
        sent = [rows[i]["bytes_sent"] for rows in per_rank]
        n_bytes = 4 * numel
        # every chunk travels N - 1 times in each of the two phases
        assert sum(sent) == 2 * (world_size - 1) * n_bytes
        # 2 (N - 1) chunks per rank, each of floor or ceil(numel / N) elements
        assert all(2 * (world_size - 1) * 4 * (numel // world_size) <= s
                   <= 2 * (world_size - 1) * 4 * math.ceil(numel / world_size) for s in sent)
        if numel % world_size == 0:
            expected = estimate.allreduce_bytes_per_rank(n_bytes, world_size)
            assert sent == [expected] * world_size


def _one_rank(rank, world_size):
    tensor = torch.arange(5.0)
    return ring_all_reduce(tensor), tensor


def test_a_group_of_one_sends_nothing():
    sent, tensor = run_under_torchrun(_one_rank)
    assert sent == 0 and torch.equal(tensor, torch.arange(5.0))


@pytest.mark.parametrize(
    "tensor, error, match",
    [([1.0, 2.0], TypeError, "torch.Tensor"),
     (torch.ones(3, dtype=torch.bool), TypeError, "numeric"),
     (torch.ones(4, 3).T, ValueError, "contiguous"),
     (torch.ones(3), RuntimeError, "process group")],
)
def test_bad_input_is_refused(tensor, error, match):
    with pytest.raises(error, match=match):
        ring_all_reduce(tensor)


@pytest.mark.parametrize(("numels", "error"), [([], ValueError), ([0], ValueError),
                                               ([2.0], TypeError), ([True], TypeError)])
def test_bad_lengths_are_refused_before_spawning(numels, error):
    with pytest.raises(error, match="numels"):
        ring_all_reduce_check(2, numels)
