"""Row softmax: three passes over a row in Numba, one pass with an online maximum in Triton.

Book section: Chapter 10, "Reductions inside a block" (a reduction per row: its maximum and its sum
of exponentials).

Every variant computes, for each row of a float32 ``(rows, cols)`` array, ``exp(x - max) /
sum(exp(x - max))`` as ``torch.softmax(x, dim=-1)`` does, in float32:

* ``v1_three_passes``: one warp per row reads the row three times, for its maximum (warp
  shuffles combine the lanes'), for its sum of ``exp(x - max)`` and to write the
  probabilities: 16 bytes per element;
* ``v2_triton_online`` (:mod:`gpudl.kernels.tiles.reduction`): one program per row finds the
  maximum and the sum in one read (online softmax, Milakov and Gimelshein 2018), then writes:
  12 bytes per element.

Accuracy (:func:`error_bound`), to first order in ``u = 2**-24``, for element ``j`` of a row
with maximum ``m`` and probabilities ``p``: its weight ``exp(x_j - m)`` is off by a relative
``r_j <= (4 (T + 2) + 2 D_j) u``, ``D_j = m - x_j``: each ``exp`` (``expf``, or Triton's
``ex2.approx`` of ``x log2 e``) errs by 2 ulp, ``4 u``, and at most ``T + 1`` of them touch a
weight (one per rescaling of an online sum, ``T = ceil(cols / 32)``: no position's chain is
longer); the subtraction ``x - m`` and the product by ``log2 e`` each add ``u D_j`` to the
exponent (the rescalings' subtractions telescope). The sum meets at most ``n = cols + 2 T +
32`` roundings and the division one, so ``|p^_j - p_j| <= p_j (r_j + sum_k p_k r_k + (n + 1)
u)``. The bound is twice that, in units of ``eps32 = 2u``, as Chapter 8's, plus ``2**-126``
for the weights that fall below float32's normal range (subnormal, or flushed to zero; the
sum is at least 1, so a probability is off by no more than its weight). A NaN makes its row
NaN, as in torch; a row of ``-inf`` gives NaN (0 / 0), as in torch.

Host functions take a host NumPy array (returning one) or a numba device array (returning
one), float32, C-contiguous, 2-D; the output is poisoned (NaN) before the launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_array
from gpudl.kernels.arrays import EPS32, check_arrays, launch_into_poisoned
from gpudl.kernels.tiles import reduction as tiled

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = ["WARP", "VARIANTS", "reference", "error_bound", "v1_three_passes",
           "launch_v1_three_passes", "launch_v2_triton_online", "softmax"]

WARP = 32  # threads per block of v1: one warp per row
FULL_MASK = 0xFFFFFFFF
NEG_INF = float32(-np.inf)
_SMALLEST_NORMAL = 2.0**-126  # a weight below it may be subnormal, or flushed to 0


def reference(x: np.ndarray) -> np.ndarray:
    """The row softmax of ``x`` in float64 NumPy (NaN rows where a row holds NaN)."""
    x = np.asarray(check_array("x", x, 2), np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def error_bound(x: np.ndarray) -> np.ndarray:
    """Elementwise bound on ``|p - p_ref|`` for any variant's float32 row softmax of ``x``
    (derivation in the module docstring); NaN where the reference is NaN."""
    x = np.asarray(check_array("x", x, 2), np.float64)
    cols = x.shape[1]
    tiles = math.ceil(cols / WARP)
    with np.errstate(invalid="ignore", over="ignore"):
        p = reference(x)
        gap = np.where(x == -np.inf, 0.0, x.max(axis=-1, keepdims=True) - x)  # p_j = 0 there
        r = 4 * (tiles + 2) + 2 * gap  # |r_j| / u
        spread = (p * r).sum(axis=-1, keepdims=True)
        return EPS32 * p * (r + spread + cols + 2 * tiles + 33) + _SMALLEST_NORMAL


# v1_three_passes: one warp per row. Lane t reads elements t, t + 32, ... three times: for
# their maximum (the lanes' maxima meet through five xor shuffles, so every lane holds the
# row's), for their sum of exp(x - max) (five shuffles again), and to write exp(x - max) /
# sum. Each pass is coalesced. A NaN is never the maximum but makes the sum NaN; a row of
# -inf shifts by 0 instead of -inf, so that exp gives 0 and the row 0 / 0.
@registry.kernel("softmax_v1_three_passes", "void(float32[:, ::1], float32[:, ::1])",
                 threads_per_block=WARP, reference="gpudl.kernels.softmax.reference")
@cuda.jit
def v1_three_passes(x, out):
    row, lane = cuda.blockIdx.x, cuda.threadIdx.x
    cols = x.shape[1]
    m = NEG_INF
    for j in range(lane, cols, WARP):
        if x[row, j] > m:
            m = x[row, j]
    offset = WARP // 2
    while offset > 0:
        other = cuda.shfl_xor_sync(FULL_MASK, m, offset)
        if other > m:
            m = other
        offset //= 2
    shift = m if m != NEG_INF else float32(0)
    total = float32(0)
    for j in range(lane, cols, WARP):
        total += math.exp(x[row, j] - shift)
    offset = WARP // 2
    while offset > 0:
        total += cuda.shfl_xor_sync(FULL_MASK, total, offset)
        offset //= 2
    for j in range(lane, cols, WARP):
        out[row, j] = math.exp(x[row, j] - shift) / total


# flops per element: v1 a comparison, then a subtraction, an exp and an addition, then a
# subtraction, an exp and a division (7); v2 a comparison, two subtractions, two exps, a
# multiply and an addition, then three (10).
@registry.variant("softmax", "v1_three_passes", bytes_per_element=16, flops_per_element=7)
def launch_v1_three_passes(x: Array, out: Array) -> None:
    """One block of one warp per row (device arrays of one shape, both sizes ``>= 1``)."""
    v1_three_passes[x.shape[0], WARP](x, out)


# v2_triton_online: one read for the maximum and the sum (gpudl.kernels.tiles.reduction),
# one to write: 12 bytes per element instead of 16, for a second exp per element.
@registry.variant("softmax", "v2_triton_online", bytes_per_element=12, flops_per_element=10,
                  requires="triton")
def launch_v2_triton_online(x: Array, out: Array) -> None:
    """One Triton program per row (device arrays of one shape, both sizes ``>= 1``)."""
    tiled.launch_softmax(x, out)


#: Variant name -> launcher(x, out) on device arrays.
VARIANTS: dict[str, Callable[[Array, Array], None]] = registry.variants("softmax")


def softmax(x: Array, variant: str = "v1_three_passes") -> Array:
    """The softmax of each row of the float32 2-D array ``x``, computed by
    ``VARIANTS[variant]`` into a poisoned output."""
    registry.check_variant("softmax", variant, VARIANTS)
    on_device = check_arrays(x=(x, 2))
    launch = VARIANTS[variant]
    return launch_into_poisoned(launch, (x,), [x.shape], on_device)[0]
