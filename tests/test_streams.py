"""gpudl.kernels.streams: SAXPY in chunks on several streams equals the one-launch SAXPY bit
for bit (on the simulator every stream runs synchronously; the overlap is a GPU's)."""

import numpy as np
import pytest
from conftest import random_float32
from numba import cuda

from gpudl.kernels import elementwise, streams


@pytest.mark.parametrize(("n", "chunks", "queues"), [
    (1, 1, 1), (255, 3, 2), (1001, 8, 2), (1001, 7, 3), (5, 8, 2), (300, 1, 4)])
def test_streamed_saxpy_equals_the_one_launch_saxpy(n, chunks, queues):
    x, y = random_float32(n, seed=n), random_float32(n, seed=n + 1)
    got = streams.saxpy_streamed(-1.5, x, y, chunks=chunks, streams=queues,
                                 threads_per_block=64)
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_array_equal(got, elementwise.saxpy(-1.5, x, y))


def test_an_empty_input_gives_an_empty_output():
    empty = np.empty(0, dtype=np.float32)
    assert streams.saxpy_streamed(2.0, empty, empty).shape == (0,)


def test_nan_stays_where_it_was():
    x = np.arange(40, dtype=np.float32)
    x[17] = np.nan
    got = streams.saxpy_streamed(2.0, x, np.ones(40, dtype=np.float32), chunks=4)
    assert np.isnan(got).tolist() == [i == 17 for i in range(40)]


def test_an_element_the_kernel_forgets_stays_poisoned(monkeypatch):
    @cuda.jit
    def writes_nothing(alpha, x, y, out):
        pass

    monkeypatch.setattr(streams, "saxpy_v1_naive", writes_nothing)
    x = np.ones(50, dtype=np.float32)
    assert np.isnan(streams.saxpy_streamed(2.0, x, x, chunks=3)).all()


def test_chunk_bounds_cover_the_range_evenly():
    assert streams.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert streams.chunk_bounds(2, 5) == [(0, 1), (1, 2)]
    assert streams.chunk_bounds(0, 3) == []
    for n, k in ((1000, 7), (7, 7), (13, 2)):
        bounds = streams.chunk_bounds(n, k)
        sizes = [stop - start for start, stop in bounds]
        assert bounds[0][0] == 0 and bounds[-1][1] == n and max(sizes) - min(sizes) <= 1
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))


def test_the_pinned_copy_is_an_equal_host_array():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    copy = streams.pinned_copy(a)
    assert isinstance(copy, np.ndarray) and copy.dtype == a.dtype
    np.testing.assert_array_equal(copy, a)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(x=np.ones(3)), TypeError, "x must have dtype float32"),
    (dict(y=[1.0, 2.0, 3.0]), TypeError, "y must be a NumPy array"),
    (dict(y=np.ones(4, dtype=np.float32)), ValueError, "x.size must equal y.size"),
    (dict(x=np.ones((3, 1), dtype=np.float32)), ValueError, "x must be 1-D"),
    (dict(chunks=0), ValueError, "chunks"),
    (dict(streams=0), ValueError, "streams"),
    (dict(alpha="2"), TypeError, "alpha must be a real number"),
    (dict(x=cuda.to_device(np.ones(3, dtype=np.float32))), TypeError, "host NumPy array"),
])
def test_bad_input_is_refused(kwargs, error, match):
    args = dict(alpha=2.0, x=np.ones(3, dtype=np.float32), y=np.ones(3, dtype=np.float32))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        streams.saxpy_streamed(**args)
