"""Solutions to the exercises of Chapter 10, tiles instead of threads: Chapter 6's fused bias
and GeLU written in Triton (exercise 1), and a LayerNorm forward in Triton, one program per
row (exercise 2).

Book section: Chapter 10, "Exercises".

Exercise 1: program ``pid`` owns ``BLOCK`` consecutive elements of ``x`` (row-major), finds
each one's column as ``offset % cols`` and loads the bias there (a gather that the cache
serves, as in the Numba twin), then writes ``gelu(x + b)`` with the exact ``erf``. Exercise 2:
program ``row`` loads its whole row as one block of ``BLOCK`` values (the row's width rounded
up to a power of two, masked past it), takes the mean and the variance with ``tl.sum`` and
writes ``(x - mean) / sqrt(var + eps) * w + b``: one read and one write of the row, the
reductions inside the program. Exercise 3: the GPU time an autotuner spends timing its
configurations, ``triton.testing.do_bench``'s default 25 ms of warm-up and 100 ms of
repetitions per configuration and key.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np

from gpudl import registry
from gpudl.checks import check_equal, check_int, check_real
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["GELU_BLOCK", "MAX_LAYER_NORM_WIDTH", "autotuning_seconds", "bias_gelu_kernel",
           "bias_gelu_triton", "layer_norm_kernel", "layer_norm_triton"]

#: Elements per program of the bias + GeLU kernel (8 per thread with 4 warps).
GELU_BLOCK = 1024
#: The widest row the LayerNorm kernel takes in one block of values.
MAX_LAYER_NORM_WIDTH = 8192

# ------------------------------------------------------------------------------------------
# Exercise 1: the fused bias + GeLU, one program per block of elements
# ------------------------------------------------------------------------------------------


@registry.triton_kernel("ch10_bias_gelu", "(*fp32:16, *fp32:16, *fp32:16, i32:16, i32)",
                        configs=[{"BLOCK": GELU_BLOCK, "num_warps": 4}],
                        reference="gpudl.kernels.bias_gelu.reference")
@triton.jit
def bias_gelu_kernel(x, b, y, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    z = tl.load(x + offsets, mask=inside) + tl.load(b + offsets % cols, mask=inside)
    tl.store(y + offsets, 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476)), mask=inside)


def bias_gelu_triton(x: Any, b: Any) -> Any:
    """``gelu(x + b)`` for float32 ``x`` (rows, features) and ``b`` (features,), one Triton
    kernel; host arrays in, host arrays out (device arrays: device arrays)."""
    on_device = check_arrays(x=(x, 2), b=(b, 1))
    check_equal("b.shape[0]", b.shape[0], "x.shape[1]", x.shape[1])
    y = poisoned(x.shape)
    if y.size:
        launch(bias_gelu_kernel, (triton.cdiv(y.size, GELU_BLOCK),), to_device(x),
               to_device(b), y, y.size, x.shape[1], BLOCK=GELU_BLOCK, num_warps=4)
    return returned(y, on_device)


# ------------------------------------------------------------------------------------------
# Exercise 2: LayerNorm forward, one program per row
# ------------------------------------------------------------------------------------------


def reference_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray,
                         eps: float = 1e-5) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * w + b`` per row, in float64 (the biased variance, as
    ``torch.nn.functional.layer_norm``)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(w, np.float64) + np.asarray(b, np.float64)


@registry.triton_kernel("ch10_layer_norm", "(*fp32:16, *fp32:16, *fp32:16, *fp32:16, i32:16, "
                        "fp32)", configs=[{"BLOCK": 1024, "num_warps": 4}],
                        reference="gpudl.solutions.ch10.reference_layer_norm")
@triton.jit
def layer_norm_kernel(x, w, b, y, cols, eps, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * cols
    offsets = tl.arange(0, BLOCK)
    inside = offsets < cols
    v = tl.load(x + start + offsets, mask=inside, other=0.0)
    mean = tl.sum(v, axis=0) / cols
    centred = tl.where(inside, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(centred * centred, axis=0) / cols + eps)
    scale = tl.load(w + offsets, mask=inside)
    shift = tl.load(b + offsets, mask=inside)
    tl.store(y + start + offsets, centred * rstd * scale + shift, mask=inside)


def layer_norm_triton(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    """LayerNorm forward of float32 ``x`` (rows, features) with weight ``w`` and bias ``b``
    (features,), at most :data:`MAX_LAYER_NORM_WIDTH` features, one Triton program per row."""
    on_device = check_arrays(x=(x, 2), w=(w, 1), b=(b, 1))
    cols = x.shape[1]
    check_int("x.shape[1]", cols, 1, MAX_LAYER_NORM_WIDTH)
    check_equal("w.shape[0]", w.shape[0], "x.shape[1]", cols)
    check_equal("b.shape[0]", b.shape[0], "x.shape[1]", cols)
    eps = check_real("eps", eps, 0.0, strict=True)
    y = poisoned(x.shape)
    if y.size:
        launch(layer_norm_kernel, (x.shape[0],), to_device(x), to_device(w), to_device(b), y,
               cols, float(eps), BLOCK=1 << (cols - 1).bit_length(), num_warps=4)
    return returned(y, on_device)


# ------------------------------------------------------------------------------------------
# Exercise 3: the price of autotuning
# ------------------------------------------------------------------------------------------


def autotuning_seconds(configs: int, keys: int, warmup_ms: float = 25.0,
                       rep_ms: float = 100.0) -> float:
    """GPU seconds an autotuner spends timing ``configs`` configurations for each of ``keys``
    new keys (shapes), each timed by a warm-up of ``warmup_ms`` and repetitions for
    ``rep_ms`` (``triton.testing.do_bench``'s defaults); the compilations come on top."""
    configs, keys = check_int("configs", configs, 1), check_int("keys", keys, 1)
    warmup_ms = check_real("warmup_ms", warmup_ms, 0.0)
    rep_ms = check_real("rep_ms", rep_ms, 0.0, strict=True)
    return configs * keys * (warmup_ms + rep_ms) / 1000.0
