"""Solutions to the exercises of Chapter 9, inference on a GPU.

Book section: Chapter 9, "Exercises": weight-only int4, two weights to a byte, and its GEMV
(exercise 1); what grouped-query attention saves in Llama 2 70B's cache (exercise 2); the
context beyond which no batch makes decoding compute-bound (exercise 3); and what batching
does to the price of a token (exercise 4).

int4 (exercise 1): each row's scale is ``max |w| / 7`` and its integers ``-7 .. 7``; two of
them share a byte, the even column in the low four bits, the odd one in the high four, each
as a two's-complement nibble; a row of odd length is padded with a zero nibble. The GEMV
unpacks each byte in registers: a nibble ``n`` (0 to 15) is the value ``n - 16 (n >> 3)``,
whatever the width of the integers the compiler picks. Its bound is
:mod:`gpudl.kernels.quant`'s, with the rows' int4 values in place of the int8 ones.
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32, int32

from gpudl import registry
from gpudl.checks import check_float32_array, check_int, check_kernel_array, check_positive
from gpudl.estimate import MODELS, decode_tokens_per_second, tokens_per_price
from gpudl.hardware import SPECS
from gpudl.kernels.arrays import poisoned, returned, to_device
from gpudl.kernels.quant import warp_sum

WARP = backend.WARP_SIZE

# ------------------------------------------------------------------------------------------
# Exercise 1: int4, two weights to a byte
# ------------------------------------------------------------------------------------------


def quantize_int4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: int8 values from -7 to 7 (not yet packed) and float32 per-row scales
    ``max |w| / 7``, for a finite float32 host array ``w`` ``(out, in)``."""
    check_float32_array("w", w, 2)
    if not isinstance(w, np.ndarray) or not np.isfinite(w).all():
        raise ValueError("w must be a finite NumPy array")
    top = np.abs(w).max(axis=1) if w.shape[1] else np.zeros(w.shape[0], np.float32)
    scale = (top / np.float32(7)).astype(np.float32)
    divisor = np.where(scale > 0, scale, 1).astype(np.float64)[:, None]
    return np.clip(np.rint(w / divisor), -7, 7).astype(np.int8), scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack int8 values from -8 to 7, ``(out, in)``, two to a uint8, ``(out, ceil(in / 2))``:
    column ``2j`` in the low nibble of byte ``j``, column ``2j + 1`` in the high one."""
    check_kernel_array("q", q, 2, np.int8)
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError(f"q must hold int4 values from -8 to 7, got {q.min()} to {q.max()}")
    padded = np.zeros((q.shape[0], q.shape[1] + q.shape[1] % 2), np.uint8)
    padded[:, :q.shape[1]] = q.astype(np.uint8) & 0x0F  # two's-complement nibbles
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed: np.ndarray, in_features: int) -> np.ndarray:
    """The int8 values :func:`pack_int4` packed, the first ``in_features`` of each row."""
    check_kernel_array("packed", packed, 2, np.uint8)
    check_int("in_features", in_features, 0)
    if -(-in_features // 2) != packed.shape[1]:
        raise ValueError(f"{in_features} values take {-(-in_features // 2)} bytes a row, "
                         f"packed has {packed.shape[1]}")
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    signed = nibbles.astype(np.int16) - 16 * (nibbles >= 8)
    return signed[:, :in_features].astype(np.int8)


# gemv_int4_kernel: quant.v2_dequantize_in_registers with two weights per byte: lane l takes
# bytes l, l + 32, ... of row o (32 consecutive bytes per warp request, 64 weights), splits
# each into its two signed nibbles and multiplies them by x[2j] and x[2j + 1].
@registry.kernel("ch09_gemv_int4",
                 "void(float32[:, ::1], uint8[:, ::1], float32[::1], float32[:, ::1])")
@cuda.jit
def gemv_int4_kernel(x, packed, scale, y):
    sums = cuda.shared.array(WARP, float32)
    o, lane = cuda.blockIdx.x, cuda.threadIdx.x
    n = x.shape[1]
    for b in range(x.shape[0]):
        acc = float32(0)
        for j in range(lane, packed.shape[1], WARP):
            byte = int32(packed[o, j])
            low, high = byte & 15, (byte >> 4) & 15
            acc += x[b, 2 * j] * float32(low - 16 * (low >> 3))
            if 2 * j + 1 < n:
                acc += x[b, 2 * j + 1] * float32(high - 16 * (high >> 3))
        total = warp_sum(sums, acc)
        if lane == 0:
            y[b, o] = total * scale[o]


def gemv_int4(x: np.ndarray, packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``x @ (unpack_int4(packed) * scale[:, None]).T`` for float32 ``x`` ``(batch, in)``
    on the host, by ``gemv_int4_kernel``."""
    check_float32_array("x", x, 2)
    check_kernel_array("packed", packed, 2, np.uint8)
    check_float32_array("scale", scale, 1)
    if packed.shape != (scale.shape[0], -(-x.shape[1] // 2)) or 0 in packed.shape:
        raise ValueError(f"packed must be (out, ceil(in / 2)) = ({scale.shape[0]}, "
                         f"{-(-x.shape[1] // 2)}) for in = {x.shape[1]} >= 1, got "
                         f"{packed.shape}")
    y = poisoned((x.shape[0], packed.shape[0]))
    gemv_int4_kernel[packed.shape[0], WARP](to_device(x), to_device(packed), to_device(scale),
                                            y)
    return returned(y, False)


# ------------------------------------------------------------------------------------------
# Exercises 2 to 4
# ------------------------------------------------------------------------------------------


def gqa_saving(tokens: int = 4096) -> dict[str, float]:
    """Llama 2 70B's cache per token and for ``tokens`` tokens, fp16, with its 8 key and
    value heads and as it would be with one per query head (64): 320 KiB against 2.5 MiB
    per token, 8 times less."""
    model = MODELS["Llama 2 70B"]
    gqa = model.kv_bytes_per_token()
    mha = gqa * model.heads / model.kv_heads
    return {"gqa_per_token": gqa, "mha_per_token": mha, "gqa_total": gqa * tokens,
            "mha_total": mha * tokens, "saving": mha / gqa}


def longest_compute_bound_context(n_params: float, kv_bytes_per_token: float,
                                  peak_flops: float, peak_bandwidth: float) -> float:
    """The context per sequence beyond which no batch makes a decode step compute-bound:
    ``2 N / (R K)`` tokens, with ``R`` the ridge point and ``K`` the cache's bytes per
    token (a sequence then brings more bytes than its ``2 N`` flops can pay for; the
    weights' bytes do not enter, since a large enough batch shares them)."""
    check_positive("n_params", n_params)
    check_positive("kv_bytes_per_token", kv_bytes_per_token)
    ridge = check_positive("peak_flops", peak_flops) / check_positive(
        "peak_bandwidth", peak_bandwidth)
    return 2 * n_params / (ridge * kv_bytes_per_token)


def tokens_per_price_by_batch(batches: tuple[int, ...] = (1, 64), context: int = 512,
                              price: float = 2.0) -> dict[int, float]:
    """Tokens per unit of price of Llama 2 7B in bf16 on one H100 SXM at the roofline, at
    each batch of ``batches`` with ``context`` cached tokens per sequence, for a price of
    ``price`` per GPU-hour (any currency: the ratio between batches does not depend on
    it)."""
    model, gpu = MODELS["Llama 2 7B"], SPECS["H100 SXM"]
    out = {}
    for batch in batches:
        rate = decode_tokens_per_second(model.params, batch, gpu.bf16_tflops * 1e12,
                                        gpu.memory_bandwidth_gbs * 1e9, batch * context,
                                        model.kv_bytes_per_token())
        out[batch] = tokens_per_price(rate, price)
    return out
