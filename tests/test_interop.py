"""gpudl.interop: kernels write into a tensor's own memory; what cannot be shared is refused."""

import pytest
import torch

from gpudl import interop  # first: chooses GPU or simulator before numba

# isort: split
from numba import cuda


@cuda.jit
def _add_index(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += i


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_a_kernel_updates_the_tensor_in_place(dtype):
    t = torch.ones(37, dtype=dtype, device=interop.tensor_device())
    before = t.data_ptr()
    _add_index[2, 32](interop.as_kernel_array(t))
    assert t.data_ptr() == before
    torch.testing.assert_close(t.cpu(), (1 + torch.arange(37)).to(dtype))


def test_bfloat16_is_reached_through_its_bit_pattern():
    t = torch.tensor([1.0, -2.0], dtype=torch.bfloat16, device=interop.tensor_device())
    bits = interop.as_kernel_array(t.view(torch.int16))
    assert bits.shape == (2,) and str(bits.dtype) == "int16"


def test_bad_tensors_raise_clear_errors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        interop.as_kernel_array([1.0, 2.0])
    with pytest.raises(TypeError, match="bfloat16"):
        interop.as_kernel_array(torch.zeros(3, dtype=torch.bfloat16,
                                            device=interop.tensor_device()))
    with pytest.raises(ValueError, match="contiguous"):
        interop.as_kernel_array(torch.zeros(4, 3, device=interop.tensor_device()).T, "grad")
    if interop.tensor_device().type == "cpu":
        return
    with pytest.raises(ValueError, match="must be on cuda"):
        interop.as_kernel_array(torch.zeros(3))
