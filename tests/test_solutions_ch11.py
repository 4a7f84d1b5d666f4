"""Chapter 11's exercises: the choices a capacity drops with top-1 and top-2 routing (against
the capacity rule by hand), the causal ring's work per rank and per step in both layouts
(against closed forms), and the chunk that hides a ring whose keys and values have fewer heads
(against the cost model's step times)."""

import math

import pytest
import torch

from gpudl import estimate
from gpudl.parallel.context import attend_block, empty_partial, rank_segments
from gpudl.solutions import ch11

# --- exercise 1 -------------------------------------------------------------------------------

#: (top_k, capacity factor, capacity, dropped): the numbers the exercise's solution gives.
DROPS = [(1, 1.0, 8, 20), (1, 1.25, 10, 12), (1, 2.0, 16, 1),
         (2, 1.0, 16, 26), (2, 1.25, 20, 14), (2, 2.0, 32, 0)]


@pytest.mark.parametrize("top_k, factor, capacity, dropped", DROPS)
def test_the_dropped_choices_are_the_counts_over_the_capacity(top_k, factor, capacity, dropped):
    got = ch11.routed(top_k, factor)
    assert got["capacity"] == capacity == math.ceil(factor * top_k * 64 / 8)
    assert got["choices"] == sum(got["counts"]) == top_k * 64
    # an expert keeps the first `capacity` choices sent to it and drops the rest
    assert got["dropped"] == sum(max(n - capacity, 0) for n in got["counts"]) == dropped


@pytest.mark.parametrize("top_k, factor", [(1, 2.125), (2, 1.6875)])
def test_no_choice_is_dropped_from_the_no_drop_factor_on(top_k, factor):
    counts = ch11.routed(top_k, 1.0)["counts"]
    assert ch11.no_drop_factor(counts, top_k) == factor
    assert ch11.routed(top_k, factor)["dropped"] == 0
    assert ch11.routed(top_k, factor - 0.2)["dropped"] > 0


def test_no_drop_factor_refuses_counts_that_are_not_choices():
    with pytest.raises(ValueError, match="multiple of top_k"):
        ch11.no_drop_factor([3, 2], 2)


# --- exercise 2 -------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_causal_ring_work_by_closed_forms(world_size):
    c = 8  # tokens per rank; pieces of c / 2 in the balanced layout
    contiguous = ch11.causal_ring_work(world_size * c, world_size, "contiguous")
    balanced = ch11.causal_ring_work(world_size * c, world_size, "balanced")
    assert contiguous["per_rank"] == [r * c * c + c * (c + 1) // 2 for r in range(world_size)]
    p = c // 2  # every rank: (2W - 1) full pieces' pairs and two diagonals
    assert balanced["per_rank"] == [(2 * world_size - 1) * p * p + p * (p + 1)] * world_size
    assert sum(contiguous["per_rank"]) == sum(balanced["per_rank"])  # the same scores in all
    # the slowest rank sets each step: (W - 1) full chunks and a diagonal, against W steps of
    # two full pieces (and the first step's diagonals)
    assert contiguous["critical_path"] == (world_size - 1) * c * c + c * (c + 1) // 2
    assert balanced["critical_path"] == world_size * 2 * p * p + p


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_the_contiguous_ring_tends_to_2_minus_1_over_w_times_the_balanced(world_size):
    c = 2048
    ratio = (ch11.causal_ring_work(world_size * c, world_size, "contiguous")["critical_path"]
             / ch11.causal_ring_work(world_size * c, world_size, "balanced")["critical_path"])
    assert ratio == pytest.approx(ch11.contiguous_over_balanced(world_size), rel=1e-3)


def test_the_packages_ring_visits_what_the_solution_counts():
    """The blocks the ring's maths computes (diagonal pairs whole, masked pairs skipped) hold
    every score the solution counts, and no pair it leaves out."""
    seq, w = 24, 4
    for layout in ("contiguous", "balanced"):
        segments = rank_segments(seq, w, layout)
        q = torch.zeros(1, seq // w, 1)
        for rank in range(w):
            work = sum(attend_block(q, torch.zeros(1, seq // w, 1), torch.zeros(1, seq // w, 1),
                                    segments[rank], segments[owner], True, empty_partial(q))
                       for owner in range(w))
            counted = ch11.causal_ring_work(seq, w, layout)["per_rank"][rank]
            assert counted <= work <= counted + (seq // w) ** 2


# --- exercise 3 -------------------------------------------------------------------------------


def test_with_every_head_it_is_the_cost_models_chunk():
    for causal in (False, True):
        assert ch11.hiding_chunk_gqa(450e9, 989e12, 32, 32, causal=causal) == (
            estimate.hiding_chunk(450e9, 989e12, causal=causal))


@pytest.mark.parametrize("causal", [False, True])
def test_the_gqa_chunk_is_where_the_computation_overtakes_the_transfer(causal):
    bandwidth, peak, heads, kv_heads, d = 50e9, 989e12, 128, 8, 128
    chunk = ch11.hiding_chunk_gqa(bandwidth, peak, heads, kv_heads, causal=causal)

    def hides(c):
        compute = 4 * c * c * heads * d / (2 if causal else 1) / peak
        return compute >= 2 * c * kv_heads * d * 2 / bandwidth

    assert hides(chunk) and not hides(chunk - 1)


def test_the_exercise_s_numbers():
    h100 = 989e12  # dense BF16, the H100 SXM's datasheet
    assert ch11.hiding_chunk_gqa(50e9, h100, 128, 128, causal=True) == 39_560
    assert ch11.hiding_chunk_gqa(50e9, h100, 128, 8, causal=True) == 2_473
    assert 131_072 // 16 == 8_192 > 2_473


def test_kv_heads_must_divide_the_heads():
    with pytest.raises(ValueError, match="must divide heads"):
        ch11.hiding_chunk_gqa(50e9, 989e12, 12, 8)
