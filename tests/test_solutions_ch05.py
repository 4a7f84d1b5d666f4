"""Chapter 5's exercises: summing against averaging (SGD and Adam), the weighted average for
unequal shares, the ring's bytes per rank against the counts of ring_all_reduce, and the best
number of buckets against a hand derivation."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpudl.parallel.data import ring_all_reduce_check
from gpudl.parallel.one_process import make_mlp
from gpudl.solutions import ch05

EXERCISE_DIMS = (6, 16, 3)


def _batch(n=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, EXERCISE_DIMS[0], generator=generator), torch.randn(n, EXERCISE_DIMS[-1],
                                                                     generator=generator)


def _relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def test_the_mean_of_equal_shares_is_the_global_batch():
    x, y = _batch()
    one = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 1, "mean", "sgd", 0.1, steps=3)
    four = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "mean", "sgd", 0.1, steps=3)
    assert _relative(four, one) < 1e-6


def test_summing_is_averaging_with_the_learning_rate_times_n_for_sgd_only():
    x, y = _batch()
    mean = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "mean", "sgd", 0.1, steps=3)
    summed_scaled = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "sum", "sgd", 0.1 / 4, steps=3)
    summed = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "sum", "sgd", 0.1, steps=3)
    assert _relative(summed_scaled, mean) < 1e-6
    assert _relative(summed, mean) > 1e-2
    # Adam divides by the root of its second moment: a gradient 4 times larger gives (but for
    # epsilon) the same update
    adam_mean = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "mean", "adam", 1e-2, steps=3)
    adam_sum = ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "sum", "adam", 1e-2, steps=3)
    assert _relative(adam_sum, adam_mean) < 1e-5


def test_unequal_shares_need_the_weighted_average():
    x, y = _batch(10)
    plain, weighted = ch05.weighted_average(EXERCISE_DIMS, x, y, [7, 3])
    model = make_mlp(EXERCISE_DIMS)
    torch.nn.functional.mse_loss(model(x), y).backward()
    whole = [p.grad for p in model.parameters()]
    assert max(_relative(w, g) for w, g in zip(weighted, whole, strict=True)) < 1e-6
    assert max(_relative(p, g) for p, g in zip(plain, whole, strict=True)) > 1e-2
    equal_plain, equal_weighted = ch05.weighted_average(EXERCISE_DIMS, x, y, [5, 5])
    assert all(torch.allclose(a, b) for a, b in zip(equal_plain, equal_weighted, strict=True))


def test_bad_shares_are_refused():
    x, y = _batch(10)
    with pytest.raises(ValueError, match="shares"):
        ch05.weighted_average(EXERCISE_DIMS, x, y, [7, 4])
    with pytest.raises(ValueError, match="equal shares"):
        ch05.simulated_replicas(EXERCISE_DIMS, x, y, 4, "mean", "sgd", 0.1, 1)


@given(numel=st.integers(0, 5000), world_size=st.integers(1, 12))
def test_ring_bytes_add_up(numel, world_size):
    sent = ch05.ring_bytes_per_rank(numel, world_size)
    assert sum(sent) == 2 * (world_size - 1) * 4 * numel
    if numel % world_size == 0:
        assert set(sent) <= {2 * (world_size - 1) * 4 * numel // world_size}


@pytest.mark.distributed
@pytest.mark.timeout(200)
def test_ring_bytes_per_rank_are_what_the_ring_counts():
    numels = [1, 2, 1000, 1001]
    per_rank = ring_all_reduce_check(3, numels, timeout=150)
    for i, numel in enumerate(numels):
        assert [rows[i]["bytes_sent"] for rows in per_rank] == ch05.ring_bytes_per_rank(numel, 3)


def test_best_bucket_count_by_hand():
    # backward 1 s; 2 ranks: each bucket's all-reduce takes 0.5 / n + 2 x 0.025 s. Up to
    # n = 10 a bucket's all-reduce ends before the next bucket is ready and only the last
    # one shows: 0.5 / n + 0.05, least at n = 10 (0.1 s). Beyond, they queue up and the
    # exposed time is 1 / n + 0.05 n - 0.5, 0.141 s at n = 11 and growing.
    best, step = ch05.best_bucket_count(1.5, 1e9, 2, 2e9, 0.025, backward_fraction=2 / 3)
    assert best == 10 and step == pytest.approx(1.6)
    # without latency, more buckets are never worse
    assert ch05.best_bucket_count(1.5, 1e9, 2, 2e9, 0.0, max_buckets=16)[0] == 16


def test_exercise5_ring_allreduce_time_and_bytes():
    seconds, sent = ch05.ring_allreduce_time_and_bytes()
    assert sent == pytest.approx(1.75e9)
    assert seconds == pytest.approx(4.375e-3)
