"""Gradient buckets (gpudl.kernels.buckets): every variant packs and unpacks exactly as the
NumPy reference, on tensor sizes that fit no block, with poisoned outputs and NaN passed
through; kernels write into torch tensors in place; bad input is refused."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl import interop  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl.kernels import buckets as bucket_kernels

U32 = 2.0**-24  # float32 unit roundoff


def _grads(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) for n in sizes]


def _poisoned(n):
    return np.full(n, np.nan, dtype=np.float32)


def test_offsets_are_the_running_sum():
    assert bucket_kernels.offsets([3, 0, 5]) == [0, 3, 3, 8]
    assert bucket_kernels.offsets([]) == [0]


@pytest.mark.parametrize("variant", list(bucket_kernels.VARIANTS))
@settings(max_examples=12, deadline=None)
@given(sizes=st.lists(st.integers(0, 90), min_size=1, max_size=7).filter(lambda s: sum(s) > 0),
       scale=st.sampled_from([1.0, 0.5, 0.25, 1 / 3, 1 / 7]))
def test_pack_then_unpack_matches_the_reference(variant, sizes, scale):
    grads = _grads(sizes, seed=sum(sizes))
    bucket = _poisoned(sum(sizes))
    bucket_kernels.pack(grads, bucket, scale, variant)
    exact = bucket_kernels.reference_pack(grads, scale)
    # one rounding of 1/N to float32 and one of the product: (2u + u^2) |exact| at most
    assert not np.isnan(bucket).any()
    assert (np.abs(bucket - exact) <= (2 * U32 + U32 * U32) * np.abs(exact)).all()
    if scale in (1.0, 0.5, 0.25):  # powers of two scale exactly
        np.testing.assert_array_equal(bucket, exact.astype(np.float32))
    back = [_poisoned(n) for n in sizes]
    bucket_kernels.unpack(bucket, back, variant)
    for got, want in zip(back, bucket_kernels.reference_unpack(bucket, sizes), strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float32))  # a copy: exact


@pytest.mark.parametrize("variant", list(bucket_kernels.VARIANTS))
def test_nan_and_inf_pass_through(variant):
    grads = [np.array([1.0, np.nan, np.inf], dtype=np.float32), np.array([-np.inf], np.float32)]
    bucket = np.zeros(4, dtype=np.float32)
    bucket_kernels.pack(grads, bucket, 0.5, variant)
    np.testing.assert_array_equal(bucket, [0.5, np.nan, np.inf, -np.inf])


def test_more_tensors_than_one_launch_holds():
    """v2 splits the tensors into launches of MAX_TENSORS_PER_LAUNCH; the seams must join."""
    sizes = [(i * 7) % 5 for i in range(bucket_kernels.MAX_TENSORS_PER_LAUNCH + 5)]
    grads = _grads(sizes, seed=7)
    bucket = _poisoned(sum(sizes))
    bucket_kernels.pack(grads, bucket, 0.25, "v2_multi_tensor")
    np.testing.assert_array_equal(
        bucket, bucket_kernels.reference_pack(grads, 0.25).astype(np.float32)
    )


def test_device_arrays_in_device_arrays_out():
    grads = _grads([33, 64])
    d_grads = [cuda.to_device(g) for g in grads]
    d_bucket = cuda.to_device(_poisoned(97))
    bucket_kernels.pack(d_grads, d_bucket, 0.5)
    np.testing.assert_array_equal(d_bucket.copy_to_host(),
                                  bucket_kernels.reference_pack(grads, 0.5).astype(np.float32))


def test_kernels_write_into_torch_tensors_in_place():
    device = interop.tensor_device()
    grads = [torch.randn(5, 3, device=device), torch.randn(4, device=device)]
    bucket = torch.full((19,), float("nan"), device=device)
    pointer = bucket.data_ptr()
    bucket_kernels.pack([interop.as_kernel_array(g.view(-1)) for g in grads],
            interop.as_kernel_array(bucket), 0.25)
    assert bucket.data_ptr() == pointer
    torch.testing.assert_close(bucket, torch.cat([g.view(-1) for g in grads]) * 0.25,
                               rtol=0, atol=0)
    out = [torch.full_like(g, float("nan")) for g in grads]
    bucket_kernels.unpack(
        interop.as_kernel_array(bucket), [interop.as_kernel_array(o.view(-1)) for o in out]
    )
    for o, g in zip(out, grads, strict=True):
        torch.testing.assert_close(o, g * 0.25, rtol=0, atol=0)


@pytest.mark.parametrize(
    "grads, bucket, kwargs, error, match",
    [
        ([], np.zeros(0, np.float32), {}, ValueError, "at least one"),
        (np.zeros(3, np.float32), np.zeros(3, np.float32), {}, TypeError, "list of arrays"),
        ([np.zeros(3)], np.zeros(3, np.float32), {}, TypeError, "float32"),
        ([np.zeros((2, 2), np.float32)], np.zeros(4, np.float32), {}, ValueError, "1-D"),
        ([np.zeros(3, np.float32)], np.zeros(4, np.float32), {}, ValueError, "exactly the 3"),
        ([np.zeros(6, np.float32)[::2]], np.zeros(3, np.float32), {}, ValueError, "contiguous"),
        ([np.zeros(3, np.float32)], np.zeros(3, np.float32), {"variant": "v9"}, ValueError,
         "variant"),
        ([np.zeros(3, np.float32)], np.zeros(3, np.float32), {"scale": float("nan")},
         ValueError, "finite"),
        ([np.zeros(3, np.float32)], np.zeros(3, np.float32), {"scale": "1"}, TypeError,
         "real number"),
    ],
)
def test_bad_input_is_refused(grads, bucket, kwargs, error, match):
    with pytest.raises(error, match=match):
        bucket_kernels.pack(grads, bucket, **kwargs)


def test_host_and_device_arrays_cannot_be_mixed():
    with pytest.raises(TypeError, match=r"bucket is a numba device array but grads\[0\] is not"):
        bucket_kernels.unpack(cuda.to_device(np.zeros(3, np.float32)), [np.zeros(3, np.float32)])
