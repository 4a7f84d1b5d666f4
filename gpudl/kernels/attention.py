"""Attention, from three kernels that store the scores to one fused kernel with online softmax.

Book section: *Chapter 8*, "Attention in one formula" (the reference), "v2: one fused kernel
with online softmax" and "The bytes each variant moves"; the first variant's three kernels are
:mod:`gpudl.kernels.attention_v1`'s ("v1: three kernels and the scores in memory"), and the
backward pass is Chapter 8's exercise (``gpudl.solutions.ch08``).

Every variant computes, for each head ``z`` of float32 ``q``, ``k``, ``v`` of shape
``(heads, s, d)``, ``o = softmax(q k^T / sqrt(d)) v``, optionally causal (query ``i`` sees
keys ``j <= i``), as ``torch.nn.functional.scaled_dot_product_attention`` does, and the
log-sum-exp of each row of scores, ``lse_i = log sum_j exp(x_ij)``, which the backward pass
needs. They differ in what crosses the memory bus:

* ``v1_three_kernels``: ``S = q k^T / sqrt(d)`` into device memory, a row softmax from ``S``
  into ``P``, then ``o = P v``: two ``s x s`` matrices per head written and read back;
* ``v2_fused``: one kernel. A block owns 16 query rows and walks over the keys 16 at a time,
  with the key and value tiles in shared memory, keeping each row's running maximum and sum
  (online softmax, Milakov and Gimelshein 2018; FlashAttention, Dao et al. 2022): no ``s x s``
  matrix is ever written. Causal blocks skip the tiles above the diagonal;
* ``v3_triton_flash`` and ``v4_triton_flash_float16``: FlashAttention-2 in Triton
  (:mod:`gpudl.kernels.tiles.attention`; Chapter 10, "What it leaves to the author"), in float32
  with IEEE products, and in float16 (``o`` float16, ``lse`` float32) for the tensor cores;
  their backward pass is :mod:`gpudl.kernels.tiles.attention_backward`'s.

:func:`traffic` gives the bytes each variant reads and writes in device memory, per array,
by formula; :func:`traced_traffic` counts them on the simulator with :mod:`gpudl.trace`, and
the tests require the two to be equal.

:func:`reference_online` computes the reference in v2's order, a tile of keys at a time, each
merged into the running result by :func:`gpudl.kernels.online_softmax.merge`, the rule that
Chapter 9's split-KV combine and Chapter 11's ring attention share. How accurate each variant
is: :mod:`gpudl.kernels.attention_error`.

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return device arrays), float32 (float16 for ``v4_triton_flash_float16``), C-contiguous, all
three of one shape ``(heads, s, d)`` with ``1 <= d <= MAX_HEAD_DIM`` (128). Outputs are
poisoned (NaN) before each launch; ``lse`` is float32 for every variant.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_bool,
    check_choice,
    check_equal,
    check_int,
)
from gpudl.kernels import attention_v1, online_softmax
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device, zeros
from gpudl.kernels.attention_v1 import NEG_INF, Launch, plain_launch
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.tiles import attention as tiled

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "TILE", "MAX_HEAD_DIM", "VARIANTS", "TRACEABLE",
    "reference", "reference_online", "check_host_heads", "weighted", "traffic",
    "traced_traffic",
    "fused_kernel", "v2_fused", "v3_triton_flash", "v4_triton_flash_float16", "precision",
    "forward", "attention",
]

TILE = 16  # query rows per block and keys per tile of v2 (v1's tiles: attention_v1.TILE)
MAX_HEAD_DIM = 128  # v2 keeps three (16, d) tiles in shared memory: 25 KiB at d = 128


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray,
              causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` in float64 NumPy: ``softmax(q k^T / sqrt(d)) v`` over the last two axes,
    keys after the query masked out if ``causal``, and each row's log-sum-exp of scores.
    ``q`` may hold another number of queries than ``k`` and ``v`` hold keys."""
    check_host_heads(q, k, v, causal, same_length=False)
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    x = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        x = np.where(np.tril(np.ones(x.shape[1:], bool)), x, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.max(axis=-1, keepdims=True)
        e = np.exp(x - m)
        total = e.sum(axis=-1, keepdims=True)
        return weighted(e / total, v, causal), (m + np.log(total))[..., 0]


def weighted(p: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """``p @ v`` over the keys each query sees (float64 NumPy): a NaN in a value a query does
    not see (a later key, when causal) does not reach it, as in the kernels."""
    check_bool("causal", causal)
    check_array("p", p, 3)
    check_array("v", v, 3)
    check_equal("(p.shape[0], p.shape[2])", (p.shape[0], p.shape[2]), "v.shape[:2]",
                v.shape[:2])
    if not causal:
        return p @ v
    s = p.shape[-1]
    seen = np.tril(np.ones((s, s), bool))
    return np.stack([np.where(seen[i][:, None], p[:, i, :, None] * v, 0.0).sum(1)
                     for i in range(s)], axis=1)


def reference_online(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                     tile: int = TILE) -> tuple[np.ndarray, np.ndarray]:
    """``(o, lse)`` as :func:`reference` gives them, computed in float64 NumPy the way
    ``v2_fused`` walks the keys: ``tile`` keys at a time, each tile's partial merged into the
    running one by :func:`gpudl.kernels.online_softmax.merge`. (A NaN in a value a query does
    not see reaches it here, as ``0 x NaN``; the kernels skip it.)"""
    check_host_heads(q, k, v, causal)
    check_int("tile", tile, 1)
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    x = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        x = np.where(np.tril(np.ones(x.shape[1:], bool)), x, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        tiles = [online_softmax.partial(x[..., j0:j0 + tile], v[:, j0:j0 + tile])
                 for j0 in range(0, x.shape[-1], tile)]
        return online_softmax.finish(functools.reduce(online_softmax.merge, tiles))


# ------------------------------------------------------------------------------------------
# v2: one fused kernel, online softmax
# ------------------------------------------------------------------------------------------


_FUSED_SIGNATURE = ("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], "
                    "float32[:, :, ::1], float32[:, ::1], float32)")


@registry.factory("attention_v2_fused",
                  [((d, causal), _FUSED_SIGNATURE) for d, causal in ((16, False), (64, True),
                                                                      (128, True))],
                  threads_per_block=TILE * TILE, reference="gpudl.kernels.attention.reference")
@functools.cache
def fused_kernel(d: int, causal: bool) -> Any:
    """The fused kernel for head size ``d``, causal or not, compiled once per pair: shared
    arrays need shapes that are constants when the kernel is compiled."""
    check_int("d", d, 1, MAX_HEAD_DIM)
    check_bool("causal", causal)
    n_out = -(-d // TILE)  # output columns per thread: tx, tx + 16, ...
    threads = TILE * TILE
    d_padded = d + 1  # computed here: a shape must be a constant, not d + 1 in the kernel

    # v2_fused: a block of 16 x 16 threads owns 16 query rows of one head; thread (ty, tx)
    # works on query row ty. For each tile of 16 keys: the block copies the tile's keys and
    # values into shared memory; thread (ty, tx) computes the score of key tx; the row's
    # new maximum m_new = max(m, max of the tile) rescales what the row has so far by
    # alpha = exp(m - m_new); the weights exp(x - m_new) are added to the running sum l and,
    # times the values, to the thread's output columns. The scores live in a 16 x 16 shared
    # tile and die with it. At the end o = acc / l and lse = m + log(l).
    @cuda.jit
    def v2_fused(q, k, v, o, lse, scale):
        q_s = cuda.shared.array((TILE, d), float32)
        k_s = cuda.shared.array((TILE, d_padded), float32)  # lanes read k_s[tx, c]
        v_s = cuda.shared.array((TILE, d), float32)
        x_s = cuda.shared.array((TILE, TILE), float32)
        acc = cuda.local.array(n_out, float32)
        tx, ty, z = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.y
        t = ty * TILE + tx
        i0 = cuda.blockIdx.x * TILE
        s = q.shape[1]
        i = i0 + ty
        for e in range(t, TILE * d, threads):
            r, c = e // d, e % d
            q_s[r, c] = q[z, i0 + r, c] if i0 + r < s else float32(0)
        for r in range(n_out):
            acc[r] = float32(0)
        m = NEG_INF
        total = float32(0)
        end = min(s, i0 + TILE) if causal else s
        for j0 in range(0, end, TILE):
            for e in range(t, TILE * d, threads):
                r, c = e // d, e % d
                inside = j0 + r < s
                k_s[r, c] = k[z, j0 + r, c] if inside else float32(0)
                v_s[r, c] = v[z, j0 + r, c] if inside else float32(0)
            cuda.syncthreads()
            j = j0 + tx
            x = float32(0)
            for c in range(d):
                x += q_s[ty, c] * k_s[tx, c]
            x *= scale
            if j >= s or (causal and j > i):
                x = NEG_INF
            x_s[ty, tx] = x
            cuda.syncthreads()
            m_new = m
            for jj in range(TILE):
                if x_s[ty, jj] > m_new:
                    m_new = x_s[ty, jj]
            cuda.syncthreads()  # every lane of the row has read the scores
            x_s[ty, tx] = math.exp(x - m_new)
            alpha = math.exp(m - m_new)
            cuda.syncthreads()
            tile_sum = float32(0)
            for jj in range(TILE):
                tile_sum += x_s[ty, jj]
            total = alpha * total + tile_sum
            keys = min(TILE, i - j0 + 1) if causal else TILE  # the keys row i sees
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    part = float32(0)
                    for jj in range(keys):
                        part += x_s[ty, jj] * v_s[jj, c]
                    acc[r] = alpha * acc[r] + part
            m = m_new
            cuda.syncthreads()  # the tiles are read before the next ones overwrite them
        if i < s:
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    o[z, i, c] = acc[r] / total
            if tx == 0:
                lse[z, i] = m + math.log(total)

    return v2_fused


# ------------------------------------------------------------------------------------------
# Launchers (device arrays of shape (heads, s, d); o poisoned, lse (heads, s))
# ------------------------------------------------------------------------------------------


@registry.variant("attention", "v2_fused")
def v2_fused(q: Array, k: Array, v: Array, o: Array, lse: Array, causal: bool,
             launch: Launch = plain_launch) -> None:
    """The fused kernel for this head size: one launch, one block per 16 query rows."""
    heads, s, d = q.shape
    scale = np.float32(1 / math.sqrt(d))
    launch(fused_kernel(d, bool(causal)), (blocks_to_cover(s, TILE), heads), (TILE, TILE),
           q, k, v, o, lse, scale)


# v3_triton_flash: FlashAttention-2 in Triton (gpudl.kernels.tiles.attention): tl.dot on
# tiles of 64 queries and 32 keys, exp2, IEEE float32 products.
@registry.variant("attention", "v3_triton_flash", requires="triton")
def v3_triton_flash(q: Array, k: Array, v: Array, o: Array, lse: Array, causal: bool) -> None:
    """The Triton kernel in float32: one program per block of queries of each head."""
    tiled.launch_forward(q, k, v, o, lse, causal, "float32")


# v4_triton_flash_float16: the same kernel on float16 q, k, v and o: both products on the
# tensor cores, the probabilities rounded to float16 before the second.
@registry.variant("attention", "v4_triton_flash_float16", requires="triton")
def v4_triton_flash_float16(q: Array, k: Array, v: Array, o: Array, lse: Array,
                            causal: bool) -> None:
    """The Triton kernel in float16 (``lse`` float32)."""
    tiled.launch_forward(q, k, v, o, lse, causal, "float16")


#: Variant name -> launcher(q, k, v, o, lse, causal) on device arrays.
VARIANTS: dict[str, Callable[..., None]] = registry.variants("attention")
#: The variants whose bytes the simulator's tracer counts (:func:`traced_traffic`): the Numba
#: ones.
TRACEABLE = tuple(key for key, v in registry.variant_records("attention").items()
                  if v.kind == "numba")


def precision(variant: str) -> str:
    """The format of ``variant``'s ``q``, ``k``, ``v`` and ``o`` (float32 for a variant a test
    adds to :data:`VARIANTS`)."""
    registry.check_variant("attention", variant, VARIANTS)
    records = registry.VARIANTS["attention"]
    return records[variant].precision if variant in records else "float32"


def check_host_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: object,
                     same_length: bool = True) -> None:
    """The checks of a reference's inputs: three real NumPy arrays ``(heads, s, d)``, ``k``
    and ``v`` of one shape, ``q`` of the same heads and ``d`` (and, with ``same_length``, of
    the same ``s``), and a bool ``causal``."""
    check_bool("causal", causal)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(name, x, 3)
    if k.shape != v.shape or (q.shape[0], q.shape[2]) != (k.shape[0], k.shape[2]) or (
            same_length and q.shape != k.shape):
        raise ValueError(f"q, k and v must have one shape (heads, s, d)"
                         f"{'' if same_length else ' but for the length of q'}, got "
                         f"{q.shape}, {k.shape} and {v.shape}")


def _check(q: Array, k: Array, v: Array, causal: object, variant: str) -> bool:
    registry.check_variant("attention", variant, VARIANTS)
    check_bool("causal", causal)
    on_device = check_arrays(dtype=precision(variant), q=(q, 3), k=(k, 3), v=(v, 3))
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v must have one shape (heads, s, d), got {q.shape}, "
                         f"{k.shape} and {v.shape}")
    if not 1 <= q.shape[2] <= MAX_HEAD_DIM:
        raise ValueError(f"the head size d = q.shape[2] must be from 1 to {MAX_HEAD_DIM}, "
                         f"got {q.shape[2]}")
    return on_device


def forward(q: Array, k: Array, v: Array, causal: bool = False,
            variant: str = "v2_fused") -> tuple[Array, Array]:
    """``(o, lse)``: attention of ``(heads, s, d)`` arrays (float32, or the format the
    variant declares) and each row's log-sum-exp of scores (float32), computed by
    ``VARIANTS[variant]``."""
    on_device = _check(q, k, v, causal, variant)
    heads, s, d = q.shape
    if heads * s == 0:  # nothing to launch
        return zeros(q.shape, on_device, precision(variant)), zeros((heads, s), on_device)
    o, lse = poisoned(q.shape, precision(variant)), poisoned((heads, s))
    VARIANTS[variant](*(to_device(x) for x in (q, k, v)), o, lse, bool(causal))
    return returned(o, on_device), returned(lse, on_device)


def attention(q: Array, k: Array, v: Array, causal: bool = False,
              variant: str = "v2_fused") -> Array:
    """``softmax(q k^T / sqrt(d)) v`` for ``(heads, s, d)`` arrays (see :func:`forward`)."""
    return forward(q, k, v, causal, variant)[0]


# ------------------------------------------------------------------------------------------
# Bytes moved: the formula, and the count on the simulator
# ------------------------------------------------------------------------------------------


def traffic(variant: str, heads: int, s: int, d: int, causal: bool = False) -> dict:
    """Bytes each kernel parameter of ``variant`` loads and stores in device memory, as
    ``{(array, op): bytes}``, for ``heads`` heads of ``s`` tokens and head size ``d``.

    Per head, in float32 values, with ``T = ceil(s / 16)``: v1 reads q and k once per tile
    of S in their row of tiles (``T s d`` each), writes S (``s^2``) and reads it three times
    (``3 s^2``), writes P (``s^2``) and reads it once per 16 columns of o
    (``ceil(d / 16) s^2``), reads v once per row of tiles of o (``T s d``) and writes o and
    lse. v2 reads q once, k and v once per block of queries (``T s d`` each; causal: only
    the ``min(s, 16 (b + 1))`` keys up to block b's diagonal), and writes o and lse. The
    Triton variants move what v2 moves with their own block of queries (``BLOCK_M`` of
    ``gpudl.kernels.tiles.attention.CONFIGS`` on this backend) in place of 16, and 2 bytes
    per value of q, k, v and o in float16.
    """
    registry.check_variant("attention", variant, VARIANTS)
    check_int("heads", heads, 1)
    check_int("s", s, 1)
    check_int("d", d, 1, MAX_HEAD_DIM)
    check_bool("causal", causal)
    values = {("o", "store"): s * d, ("lse", "store"): s}
    if variant == "v1_three_kernels":
        tiles, v1_tile = -(-s // attention_v1.TILE), attention_v1.TILE
        values |= {("q", "load"): tiles * s * d, ("k", "load"): tiles * s * d,
                   ("scores", "store"): s * s, ("scores", "load"): 3 * s * s,
                   ("probs", "store"): s * s, ("probs", "load"): -(-d // v1_tile) * s * s,
                   ("v", "load"): tiles * s * d}
    else:
        block = (TILE if variant == "v2_fused"
                 else tiled.CONFIGS[(precision(variant), causal)]["BLOCK_M"])
        tiles = -(-s // block)
        keys = sum(min(s, block * (b + 1)) for b in range(tiles)) if causal else tiles * s
        values |= {("q", "load"): s * d, ("k", "load"): keys * d, ("v", "load"): keys * d}
    size = 2 if precision(variant) == "float16" else 4
    return {key: (4 if key[0] == "lse" else size) * heads * n for key, n in values.items()}


def traced_traffic(variant: str, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   causal: bool = False) -> dict:
    """Run ``variant`` under :func:`gpudl.trace.trace` (simulator only: wrap the call in
    :func:`gpudl.trace.on_simulator` on a GPU) and count the bytes of device memory each
    kernel parameter loads and stores, as :func:`traffic` gives them."""
    from gpudl.trace import trace

    check_choice("variant", variant, TRACEABLE)
    _check(q, k, v, causal, variant)
    counts: dict[tuple[str, str], int] = {}

    def traced(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        for a in trace(kernel, griddim, blockdim, *args).accesses:
            if a.kind == "global":
                counts[(a.array, a.op)] = counts.get((a.array, a.op), 0) + a.size

    o, lse = poisoned(q.shape), poisoned(q.shape[:2])
    VARIANTS[variant](*(cuda.to_device(x) for x in (q, k, v)), o, lse, bool(causal),
                      launch=traced)
    return counts
