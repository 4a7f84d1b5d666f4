"""gpudl.kernels.wide: 16-byte loads and stores, with the same meaning on the simulator (its
shim) as on a GPU (the intrinsics, whose PTX tests/test_ptx.py reads)."""

import numpy as np
import pytest

# isort: split
from numba import cuda

from gpudl.kernels import wide


@cuda.jit
def _copy_vectors(x, out, first):
    i = cuda.grid(1)
    j = first + 4 * i
    if j + 4 <= out.size:
        wide.store4(out, j, wide.load4(x, j))


@cuda.jit
def _reverse_lanes(x, out):
    i = 4 * cuda.grid(1)
    if i + 4 <= out.size:
        v = wide.load4(x, i)
        wide.store4(out, i, (v[3], v[2], v[1], v[0]))


def test_a_vector_is_four_consecutive_elements_in_order():
    x = np.arange(32, dtype=np.float32)
    out = cuda.to_device(np.full(32, np.nan, dtype=np.float32))
    _reverse_lanes[1, 8](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x.reshape(8, 4)[:, ::-1].ravel())


def test_vectors_copy_whole_16_byte_groups():
    x = np.random.default_rng(0).standard_normal(20).astype(np.float32)
    out = cuda.to_device(np.full(20, np.nan, dtype=np.float32))
    _copy_vectors[1, 5](cuda.to_device(x), out, 0)
    np.testing.assert_array_equal(out.copy_to_host(), x)


@pytest.mark.simulator_only
@pytest.mark.parametrize("first", [1, 2, 3])
def test_a_vector_access_off_a_16_byte_boundary_is_an_error(first):
    x = cuda.to_device(np.zeros(16, dtype=np.float32))
    out = cuda.to_device(np.zeros(16, dtype=np.float32))
    with pytest.raises(ValueError, match="misaligned.*CUDA_ERROR_MISALIGNED_ADDRESS"):
        _copy_vectors[1, 1](x, out, first)


@pytest.mark.simulator_only
def test_a_view_that_starts_off_a_boundary_is_an_error_inside_the_kernel():
    x = cuda.to_device(np.zeros(17, dtype=np.float32))[1:]  # starts 4 bytes in
    out = cuda.to_device(np.zeros(16, dtype=np.float32))
    with pytest.raises(ValueError, match="misaligned"):
        _copy_vectors[1, 1](x, out, 0)


def test_addresses_and_the_alignment_check():
    host = np.zeros(9, dtype=np.float32)
    device = cuda.to_device(host)
    assert wide.address(host) == host.ctypes.data
    assert wide.address(device) % 16 == 0 and wide.address(device[1:]) % 16 == 4
    assert wide.address([1.0, 2.0]) is None
    wide.check_aligned("x", device)
    with pytest.raises(ValueError, match="y must start on a 16-byte boundary.*starts 8 bytes"):
        wide.check_aligned("y", device[2:])
