"""The data-parallel step-time model (gpudl.estimate.data_parallel_step_time): hand cases,
its limits (no overlap with one bucket, only the last bucket exposed with many), and bad
input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudl.estimate import allreduce_time, data_parallel_step_time


def test_hand_case_two_buckets():
    # 1 s of compute, 0.6 s of it backward; 2 buckets of 1e9 B on 2 ranks at 1e9 B/s:
    # each all-reduce takes 2 (2 - 1) / 2 * 1e9 / 1e9 = 1 s. Bucket 0 is ready at 0.3 s and
    # ends at 1.3 s; bucket 1, ready at 0.6 s, starts at 1.3 s and ends at 2.3 s, 1.7 s after
    # the backward pass: step = 1 + 1.7 s.
    assert data_parallel_step_time(1.0, 2e9, 2, 1e9, backward_fraction=0.6,
                                   n_buckets=2) == pytest.approx(2.7)


def test_one_bucket_hides_nothing():
    comm = allreduce_time(4e8, 4, 1e10, 1e-5)
    assert data_parallel_step_time(0.5, 4e8, 4, 1e10, 1e-5) == pytest.approx(0.5 + comm)


def test_many_small_buckets_expose_only_the_last():
    # communication (0.15 ms in all) far shorter than the backward pass (2/3 s)
    n = 10
    step = data_parallel_step_time(1.0, 1e6, 4, 1e10, n_buckets=n)
    assert step == pytest.approx(1.0 + allreduce_time(1e6 / n, 4, 1e10))


def test_one_rank_costs_only_the_compute():
    assert data_parallel_step_time(0.25, 1e9, 1, 1e9, latency=1e-3, n_buckets=5) == 0.25


@given(compute=st.floats(1e-4, 10), grad_bytes=st.floats(0, 1e10),
       world_size=st.integers(2, 64), bandwidth=st.floats(1e8, 1e12),
       latency=st.floats(0, 1e-3), fraction=st.floats(0, 1), n=st.integers(1, 40))
def test_step_lies_between_full_overlap_and_none(compute, grad_bytes, world_size, bandwidth,
                                                 latency, fraction, n):
    step = data_parallel_step_time(compute, grad_bytes, world_size, bandwidth, latency,
                                   fraction, n)
    per_bucket = allreduce_time(grad_bytes / n, world_size, bandwidth, latency)
    # the last bucket is never hidden (to the rounding of sums of the size of the step)
    assert step >= (compute + per_bucket) * (1 - 1e-12)
    assert step <= (compute + n * per_bucket) * (1 + 1e-12)  # nothing hidden at worst
    # communication cannot hide more than the backward pass
    assert step >= (compute + n * per_bucket - fraction * compute) * (1 - 1e-12)


@pytest.mark.parametrize(
    "args, kwargs, error",
    [((-1.0, 1e6, 2, 1e9), {}, ValueError), ((1.0, 1e6, 2, 0.0), {}, ValueError),
     ((1.0, 1e6, 0, 1e9), {}, ValueError), ((1.0, 1e6, 2.0, 1e9), {}, TypeError),
     ((1.0, 1e6, 2, 1e9), {"backward_fraction": 1.5}, ValueError),
     ((1.0, 1e6, 2, 1e9), {"n_buckets": 0}, ValueError),
     ((1.0, 1e6, 2, 1e9), {"n_buckets": 2.5}, TypeError),
     (("1", 1e6, 2, 1e9), {}, TypeError)],
)
def test_bad_input_is_refused(args, kwargs, error):
    with pytest.raises(error):
        data_parallel_step_time(*args, **kwargs)
