"""Mixed precision: float16 or bfloat16 parameters and gradients, float32 master weights and
moments.

Book section: *Chapter 4, "Mixed precision"*.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32, int16, uint16, uint32

from gpudl import registry
from gpudl.checks import FLOAT_DTYPES, check_float_array
from gpudl.kernels.arrays import Array, launch_in_place
from gpudl.kernels.grid import grid_stride_blocks
from gpudl.kernels.optim.adam import adam_element
from gpudl.kernels.optim.hyper import AdamScalars, adam_scalars
from gpudl.kernels.optim.traffic import THREADS, launch

__all__ = ["LOW_FORMATS", "adam_mixed", "adam_step_mixed", "bf16_to_f32", "f32_to_bf16",
           "launch_mixed"]

#: The formats of low-precision parameters and gradients, float16 or bfloat16 (held as its
#: int16 bits, since NumPy has no bfloat16, as ``tensor.view(torch.int16)`` gives them), names
#: of :data:`gpudl.checks.FLOAT_DTYPES`.
LOW_FORMATS = ("float16", "bfloat16")


@cuda.jit(device=True, inline=True)
def bf16_to_f32(bits):
    """A bfloat16 (its bit pattern, int16) as float32: the same 16 bits, followed by 16
    zeros. Exact, for every value."""
    return uint32(uint32(bits.view(np.uint16)) << uint32(16)).view(np.float32)


@cuda.jit(device=True, inline=True)
def f32_to_bf16(x):
    """float32 to bfloat16 bits (int16), rounded to nearest, ties to even, as torch rounds:
    add 0x7FFF plus the lowest bit that survives, then drop the low 16 bits. A carry out of
    the mantissa raises the exponent, which is correct rounding; past the largest bfloat16
    it gives infinity. NaN would risk carrying into infinity, so it becomes the quiet NaN
    0x7FC0."""
    if x != x:
        return int16(0x7FC0)
    u = x.view(np.uint32)
    rounded = uint32(u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1))) >> uint32(16)
    return uint16(rounded).view(np.int16)


# adam_mixed: mixed precision. Parameters and gradients are float16 or bfloat16 (as the
# forward and backward passes use them); the optimizer keeps a float32 master copy of each
# parameter and float32 moments, updates those, and writes the new parameter rounded to
# nearest even. Per parameter it reads g (2 bytes), the master, m, v (12) and writes the
# master, m, v (12) and p (2): 28 bytes, as in fp32. The low-precision parameter is only
# written; the small updates accumulate in the master copy, where float16 or bfloat16 would
# round many of them away. bfloat16 arrives as int16 bits (NumPy has no bfloat16), converted
# with bf16_to_f32 and f32_to_bf16; ``bf16`` is the same for every thread.
@registry.kernel("adam_mixed",
                 "void(float16[::1], float16[::1], float32[::1], float32[::1], float32[::1], "
                 "boolean, boolean, float32, float32, float32, float32, float32, float32, float32, "
                 "float32)",
                 "void(int16[::1], int16[::1], float32[::1], float32[::1], float32[::1], boolean, "
                 "boolean, float32, float32, float32, float32, float32, float32, float32, float32)")
@cuda.jit
def adam_mixed(p_low, g_low, master, m, v, bf16, maximize, l2, decay, w1, beta2, w2,
               neg_step_size, bc2_sqrt, eps):
    for i in range(cuda.grid(1), master.size, cuda.gridsize(1)):
        if bf16:
            g = bf16_to_f32(g_low[i])
        else:
            g = float32(g_low[i])
        p, m[i], v[i] = adam_element(master[i], g, m[i], v[i], maximize, l2, decay, w1,
                                      beta2, w2, neg_step_size, bc2_sqrt, eps)
        master[i] = p
        if bf16:
            p_low[i] = f32_to_bf16(p)
        else:
            p_low[i] = p


def launch_mixed(p_low: Array, g_low: Array, master: Array, m: Array, v: Array,
                 k: AdamScalars) -> None:
    """One ``adam_mixed`` launch over one wave of resident blocks."""
    bf16 = np.dtype(p_low.dtype) == FLOAT_DTYPES["bfloat16"]
    launch(adam_mixed, grid_stride_blocks(master.size, THREADS), p_low, g_low, master, m, v,
            bf16, *k)


def adam_step_mixed(p_low: Array, g_low: Array, master: Array, m: Array, v: Array, *,
                    step: int, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                    eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                    maximize: bool = False) -> None:
    """A mixed-precision Adam step in place: ``p_low`` and ``g_low`` are float16, or int16
    arrays holding bfloat16 bits (both the same); ``master``, ``m`` and ``v`` are float32.
    The master weights, ``m`` and ``v`` take the fp32 step; ``p_low`` receives the new master
    weights rounded to nearest, ties to even."""
    k = adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)
    check_float_array("p_low", p_low, 1, LOW_FORMATS)
    check_float_array("g_low", g_low, 1, LOW_FORMATS)
    if p_low.dtype != g_low.dtype:
        raise TypeError(f"p_low and g_low must have the same dtype, got {p_low.dtype} and "
                        f"{g_low.dtype}")
    arrays = {"p_low": p_low, "g_low": g_low, "master": master, "m": m, "v": v}
    for name in ("master", "m", "v"):
        check_float_array(name, arrays[name], 1)
    launch_in_place(launch_mixed, arrays, ("p_low", "master", "m", "v"), k)
