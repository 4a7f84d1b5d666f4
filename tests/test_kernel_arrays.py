"""The shared kernel-array plumbing: checks and poisoned outputs of each floating-point format
(float32, float16, bfloat16 as int16 bits), and the refusal of host and device arrays mixed."""

import numpy as np
import pytest
from numba import cuda

from gpudl import checks, registry
from gpudl.kernels import arrays
from gpudl.kernels import matmul as matmul_kernels
from gpudl.kernels.elementwise import vector_add


@pytest.mark.parametrize(("dtype", "numpy_dtype"), [
    ("float32", np.float32), ("float16", np.float16), ("bfloat16", np.int16)])
def test_poisoned_outputs_are_nan_in_each_format(dtype, numpy_dtype):
    out = arrays.poisoned((3, 5), dtype)
    assert out.dtype == np.dtype(numpy_dtype)
    host = out.copy_to_host()
    if dtype == "bfloat16":  # a bfloat16 is the high half of a float32
        host = (host.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(host).all()
    zeros = arrays.zeros(4, True, dtype).copy_to_host()
    assert zeros.dtype == np.dtype(numpy_dtype) and not zeros.any()
    assert arrays.zeros(4, False, dtype).dtype == np.dtype(numpy_dtype)


def test_a_format_that_is_not_declared_is_refused():
    with pytest.raises(ValueError, match="dtype must be one of"):
        arrays.poisoned(3, "float8")
    with pytest.raises(TypeError, match="dtype must be a str"):
        arrays.poisoned(3, np.float16)


def test_float16_arrays_pass_the_checks_a_float16_launch_declares():
    a, b = np.ones(7, np.float16), cuda.to_device(np.ones(7, np.float16))
    assert arrays.check_arrays(same_shape=True, dtype="float16", a=(a, 1), c=(a.copy(), 1)) \
        is False
    assert arrays.check_arrays(dtype="float16", b=(b, 1)) is True
    with pytest.raises(TypeError, match="a must have dtype float32, got float16"):
        arrays.check_arrays(a=(a, 1))
    with pytest.raises(TypeError, match="a must have dtype float16, got float32"):
        arrays.check_arrays(dtype="float16", a=(a.astype(np.float32), 1))
    with pytest.raises(TypeError, match=r"float16 or bfloat16 \(int16 bits\), got float32"):
        checks.check_float_array("p", np.ones(3, np.float32), 1, ("float16", "bfloat16"))
    assert checks.check_float_array("p", np.ones(3, np.int16), 1, ("float16", "bfloat16")) \
        is False


def test_a_float16_launch_writes_a_poisoned_float16_output():
    a = np.arange(5, dtype=np.float16)

    def launch(x, out):  # stands in for a float16 kernel: writes all but the last element
        out[:4] = x.copy_to_host()[:4]

    (out,) = arrays.launch_into_poisoned(launch, [a], [a.shape], False, "float16")
    assert out.dtype == np.float16 and isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out[:4], a[:4])
    assert np.isnan(out[4])


def test_a_kernel_may_declare_float16_or_bfloat16_precision():
    assert {"float16", "bfloat16"} <= set(registry.PRECISIONS) & set(registry.NO_FLOAT64)
    assert set(registry.NO_FLOAT64) <= set(checks.FLOAT_DTYPES)


@pytest.mark.parametrize("call", [
    lambda h, d: vector_add(h, d),
    lambda h, d: vector_add(d, h),
    lambda h, d: matmul_kernels.matmul(h.reshape(2, 2), d.reshape(2, 2)),
    lambda h, d: matmul_kernels.matmul(d.reshape(2, 2), h.reshape(2, 2)),
])
def test_host_and_device_arrays_mixed_are_refused_naming_both(call):
    host = np.ones(4, np.float32)
    device = cuda.to_device(host)
    with pytest.raises(TypeError, match=r"(a|b) is a numba device array but (a|b) is not"):
        call(host, device)


def test_check_host_or_device():
    host, device = np.ones(2, np.float32), cuda.to_device(np.ones(2, np.float32))
    assert checks.check_host_or_device({"x": host, "y": host}) is False
    assert checks.check_host_or_device({"x": device, "y": device}) is True
    with pytest.raises(TypeError, match="y is a numba device array but x is not"):
        checks.check_host_or_device({"x": host, "y": device})


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rounding_to_a_format_is_one_rounding_and_reads_back_exactly(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1000) * 10.0 ** rng.integers(-3, 4, 1000)).astype(np.float32)
    x[:4] = (np.nan, 1.0, -0.0, 1e-7)  # 1e-7: a float16 subnormal
    low = arrays.from_float32(x, dtype)
    assert low.dtype == checks.float_dtype(dtype)
    back = arrays.to_float64(low, dtype)
    assert np.isnan(back[0]) and back[1] == 1.0 and np.signbit(back[2])
    exact = x[1:].astype(np.float64)
    assert np.all(np.abs(back[1:] - exact) <= arrays.rounding_bound(exact, dtype))
    normal = np.abs(exact) >= 2.0**-14  # float16's smallest normal: the relative bound holds
    np.testing.assert_allclose(back[1:][normal], exact[normal],
                               rtol=arrays.UNIT_ROUNDOFF[dtype], atol=0)
    if dtype == "float16":
        np.testing.assert_array_equal(low[1:], x[1:].astype(np.float16))


def test_bfloat16_rounds_ties_to_even():
    # 1 + 2**-8 lies halfway between bfloat16's 1 and 1 + 2**-7: ties go to the even one, 1
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20], np.float32)
    np.testing.assert_array_equal(arrays.to_float64(arrays.from_float32(x, "bfloat16"),
                                                    "bfloat16"), [1.0, 1 + 2.0**-6, 1 + 2.0**-7])


def test_conversions_refuse_device_arrays_and_other_formats():
    with pytest.raises(TypeError, match="NumPy array"):
        arrays.from_float32(cuda.to_device(np.ones(3, np.float32)), "float16")
    with pytest.raises(TypeError, match="must have dtype float32"):
        arrays.from_float32(np.ones(3, np.float64), "float16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        arrays.to_float64(np.ones(3, np.float32), "float8")


def test_a_variant_s_precision_is_its_kernels_and_sets_the_format_vector_add_checks():
    records = registry.variant_records("vector_add")
    assert records["v1_naive"].precision == "float32"
    assert {v.precision for v in records.values()} <= set(registry.PRECISIONS)
    with pytest.raises(TypeError, match="a must have dtype float32, got float16"):
        vector_add(np.ones(3, np.float16), np.ones(3, np.float16), variant="v1_naive")
    broken = registry.Variant("vector_add", "v9_made_up", vector_add, ("no_such_kernel",),
                              None, None)
    with pytest.raises(ValueError, match="must be registered with one precision"):
        _ = broken.precision


def test_the_rounding_bound_is_tight_and_nan_never_passes():
    exact = np.array([1 + 2.0**-11, 3.0, np.nan])
    bound = arrays.rounding_bound(exact, "float16")
    assert bound[0] == pytest.approx(2.0**-11 * (1 + 2.0**-11) + 2.0**-25)
    got = arrays.to_float64(arrays.from_float32(exact.astype(np.float32), "float16"), "float16")
    assert abs(got[0] - exact[0]) <= bound[0] < 2.0**-10  # a tie: off by exactly half an ulp
    assert not np.abs(got[2] - exact[2]) <= bound[2]
