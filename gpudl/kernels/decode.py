"""Decode attention: one new query per sequence against its KV cache, sequences of different
lengths in one batch, grouped-query heads.

Book section: Chapter 9, "Decode attention, one block per head" (v1) and "Split-KV decoding"
(v2 and its combine kernel); what both do with one tile of keys is
:mod:`gpudl.kernels.decode_tile`, the bound :mod:`gpudl.kernels.decode_error`, the positions
read :mod:`gpudl.kernels.decode_reads`, the paged cache :mod:`gpudl.kernels.paged`.

A decoding step gives each sequence ``b`` of a batch one query per head, ``q[b, h]`` (``d``
values), and attends it to the ``lengths[b]`` keys and values its cache holds:
``o[b, h] = softmax(q k^T / sqrt(d)) v`` over positions ``0 .. lengths[b] - 1`` of
``k_cache[b, g]`` and ``v_cache[b, g]``, where query head ``h`` reads cache head
``g = h // (heads // kv_heads)`` (grouped-query attention: ``kv_heads`` may divide ``heads``;
multi-query attention is ``kv_heads = 1``). Positions at or past a sequence's length hold
anything (another request's data, NaN): no variant reads them.

Both variants walk over the keys a tile of ``TILE`` (32) at a time with Chapter 8's online
softmax, in blocks of one warp:

* ``v1_one_block_per_head``: one block per (sequence, head) walks over the whole sequence. At
  batch 1 a model's few dozen heads are a few dozen blocks: most of a GPU's SMs wait;
* ``v2_split_kv`` (Flash-Decoding, Dao et al. 2023): the sequence is split into chunks of
  ``split_size`` keys, one block per (chunk, sequence, head), each writing its running
  maximum, sum and unnormalised output; ``v2_combine_splits`` then merges the chunks of
  each head with the online-softmax rule (:func:`reference_split_kv` does the same in NumPy,
  with :func:`gpudl.kernels.online_softmax.merge`);
* ``v3_triton_split_kv``: v2 in Triton (:mod:`gpudl.kernels.tiles.decode`; Chapter 10,
  "What it leaves to the author"), its kernels launched by Triton (not through ``launch=``:
  the tracer and CUDA graphs see the Numba variants, :data:`TRACEABLE`).

Host functions take host NumPy arrays (returning host arrays) or numba device arrays
(returning device arrays): ``q`` float32 ``(batch, heads, d)``, the caches float32
``(batch, kv_heads, max_len, d)``, ``lengths`` int32 ``(batch,)`` from 1 to ``max_len``,
``1 <= d <= MAX_HEAD_DIM``. Outputs and partial results are poisoned (NaN) before each launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_callable,
    check_host_or_device,
    check_int,
    check_kernel_array,
)
from gpudl.kernels import online_softmax
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device, zeros
from gpudl.kernels.decode_tile import (
    COLUMNS,
    NEG_INF,
    TILE,
    TILE_PADDED,
    attend_keys,
    load_query,
    store_row,
)
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.tiles import decode as tiled

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any
# launch(kernel, griddim, blockdim, *args): how a host function starts a kernel (plainly,
# counted, on a stream or under the tracer).
Launch = Callable[..., None]

__all__ = [
    "MAX_HEAD_DIM", "VARIANTS", "TRACEABLE", "SPLIT_VARIANTS", "SPLIT_SIZE", "GPU_SPLIT_SIZE",
    "reference", "reference_split_kv", "check_lengths", "check_decode_inputs",
    "check_decode_arrays", "plain_launch",
    "v1_one_block_per_head", "v2_split_kv", "v2_combine_splits",
    "launch_v1_one_block_per_head", "launch_v2_split_kv", "launch_v3_triton_split_kv",
    "decode_attention",
]

MAX_HEAD_DIM = COLUMNS * TILE  # 128: a lane holds four head dimensions of the query
#: Keys per block of ``v2_split_kv`` on a GPU: 8 tiles (at batch 1, s = 8,192 and 32 heads:
#: 1,024 blocks).
GPU_SPLIT_SIZE = 8 * TILE
#: Keys per block of ``v2_split_kv`` unless the caller picks another: the GPU's, and one tile
#: on the simulator.
SPLIT_SIZE = backend.pick(gpu=GPU_SPLIT_SIZE, sim=TILE)


def reference(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
              lengths: np.ndarray) -> np.ndarray:
    """``o[b, h]`` in float64 NumPy: softmax of ``q[b, h] . k / sqrt(d)`` over the first
    ``lengths[b]`` keys of cache head ``h // (heads // kv_heads)``, times the values."""
    check_decode_arrays(q, k_cache, v_cache, lengths, reference=True)
    q, k_cache, v_cache = (np.asarray(x, np.float64) for x in (q, k_cache, v_cache))
    batch, heads, d = q.shape
    group = heads // k_cache.shape[1]
    out = np.empty((batch, heads, d))
    for b, length in enumerate(np.asarray(lengths)):
        for h in range(heads):
            keys, values = k_cache[b, h // group, :length], v_cache[b, h // group, :length]
            x = keys @ q[b, h] / math.sqrt(d)
            with np.errstate(invalid="ignore", over="ignore"):
                e = np.exp(x - x.max())
                out[b, h] = e @ values / e.sum()
    return out


def reference_split_kv(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
                       lengths: np.ndarray, split_size: int = SPLIT_SIZE) -> np.ndarray:
    """:func:`reference`'s ``o`` computed as ``v2_split_kv`` and ``v2_combine_splits`` do, in
    float64 NumPy: each chunk of ``split_size`` keys gives every head its partial (running
    maximum, sum and unnormalised output, :func:`gpudl.kernels.online_softmax.partial`), and
    the chunks are combined by :func:`gpudl.kernels.online_softmax.merge`."""
    check_decode_arrays(q, k_cache, v_cache, lengths, reference=True)
    check_int("split_size", split_size, 1)
    group = q.shape[1] // k_cache.shape[1]  # query heads per cache head
    keys, values = (np.repeat(np.asarray(c, np.float64), group, axis=1)
                    for c in (k_cache, v_cache))
    out = np.empty(q.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        # (batch, heads, 1, max_len): one query row per head
        scores = np.asarray(q, np.float64)[:, :, None] @ keys.transpose(0, 1, 3, 2) / math.sqrt(
            q.shape[2])
        for b, length in enumerate(np.asarray(lengths)):
            chunks = []
            for start in range(0, length, split_size):
                stop = min(length, start + split_size)  # positions past the length never read
                chunks.append(online_softmax.partial(scores[b, ..., start:stop],
                                                     values[b, :, start:stop]))
            merged = functools.reduce(online_softmax.merge, chunks)
            out[b] = online_softmax.finish(merged)[0][:, 0]
    return out


# ------------------------------------------------------------------------------------------
# v1: one block per (sequence, head)
# ------------------------------------------------------------------------------------------


# v1_one_block_per_head: block (h, b) of 32 threads owns query head h of sequence b. Thread
# t keeps q's columns t, t + 32, ... in registers and, for each tile of 32 keys, adds its
# columns' share of every key's score into a 32 x 33 shared tile; thread t then sums row t
# (key t's score) and the block updates the running maximum and sum (online softmax, as
# Chapter 8's v2_fused) and thread t its output columns. The loop stops at the sequence's
# length: no position past it is read. One pass over the keys per head, but only
# batch x heads blocks: at batch 1 too few to keep a large GPU's SMs busy.
@registry.kernel("decode_v1_one_block_per_head",
                 "void(float32[:, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
                 "int32[::1], float32[:, :, ::1], float32)", threads_per_block=TILE,
                 reference="gpudl.kernels.decode.reference")
@cuda.jit
def v1_one_block_per_head(q, k_cache, v_cache, lengths, o, scale):
    partial = cuda.shared.array((TILE, TILE_PADDED), float32)
    w_s = cuda.shared.array(TILE, float32)
    q_r = cuda.local.array(COLUMNS, float32)
    acc = cuda.local.array(COLUMNS, float32)
    h, b = cuda.blockIdx.x, cuda.blockIdx.y
    g = h // (q.shape[1] // k_cache.shape[1])
    load_query(q_r, acc, q, b, h)
    m, total = attend_keys(partial, w_s, q_r, acc, k_cache, v_cache, b, g, 0, lengths[b],
                           scale)
    store_row(o[b, h], acc, total)


# ------------------------------------------------------------------------------------------
# v2: split-KV (Flash-Decoding), then a combine kernel
# ------------------------------------------------------------------------------------------


# v2_split_kv: what v1 does for one head, on one chunk of split_size keys: block (s, h, b)
# walks keys s * split_size up to the chunk's end or the sequence's, and writes its running
# maximum m, sum l and unnormalised output acc (partials). A chunk that starts at or past
# the length returns at once and writes nothing. At batch 1 and s = 8,192 a model's heads
# become 32 times more blocks (split_size 256), enough to fill every SM; the price is the
# partials' bytes and a second launch.
@registry.kernel("decode_v2_split_kv",
                 "void(float32[:, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], "
                 "int32[::1], float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], "
                 "int32, float32)", threads_per_block=TILE,
                 reference="gpudl.kernels.decode.reference")
@cuda.jit
def v2_split_kv(q, k_cache, v_cache, lengths, part_m, part_l, part_acc, split_size, scale):
    partial = cuda.shared.array((TILE, TILE_PADDED), float32)
    w_s = cuda.shared.array(TILE, float32)
    q_r = cuda.local.array(COLUMNS, float32)
    acc = cuda.local.array(COLUMNS, float32)
    s, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
    start, length = s * split_size, lengths[b]
    if start >= length:
        return
    g = h // (q.shape[1] // k_cache.shape[1])
    load_query(q_r, acc, q, b, h)
    end = min(length, start + split_size)
    m, total = attend_keys(partial, w_s, q_r, acc, k_cache, v_cache, b, g, start, end, scale)
    store_row(part_acc[b, h, s], acc, float32(1))
    if cuda.threadIdx.x == 0:
        part_m[b, h, s] = m
        part_l[b, h, s] = total


# v2_combine_splits: block (h, b) merges the chunks that hold keys of sequence b (the first
# ceil(length / split_size); the others' partials are never read) with the online-softmax
# rule: M = max_s m_s, o = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s. Thread t
# writes output columns t, t + 32, ...
@registry.kernel("decode_v2_combine_splits",
                 "void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], int32[::1], "
                 "float32[:, :, ::1], int32)")
@cuda.jit
def v2_combine_splits(part_m, part_l, part_acc, lengths, o, split_size):
    h, b, t = cuda.blockIdx.x, cuda.blockIdx.y, cuda.threadIdx.x
    d = o.shape[2]
    used = (lengths[b] + split_size - 1) // split_size
    m = NEG_INF
    for s in range(used):
        if part_m[b, h, s] > m:
            m = part_m[b, h, s]
    total = float32(0)
    for s in range(used):
        total += math.exp(part_m[b, h, s] - m) * part_l[b, h, s]
    for r in range(COLUMNS):
        c = t + r * TILE
        if c < d:
            acc = float32(0)
            for s in range(used):
                acc += math.exp(part_m[b, h, s] - m) * part_acc[b, h, s, c]
            o[b, h, c] = acc / total


# ------------------------------------------------------------------------------------------
# Launchers (device arrays in; o allocated by the caller)
# ------------------------------------------------------------------------------------------


def plain_launch(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
    """Launch ``kernel[griddim, blockdim](*args)`` on the default stream."""
    kernel[griddim, blockdim](*args)


def _scale(d: int) -> np.float32:
    return np.float32(1 / math.sqrt(d))


@registry.variant("decode", "v1_one_block_per_head")
def launch_v1_one_block_per_head(q: Array, k_cache: Array, v_cache: Array, lengths: Array,
                                  o: Array, launch: Launch = plain_launch) -> None:
    """One launch of ``v1_one_block_per_head``: a block per (head, sequence)."""
    batch, heads, d = q.shape
    launch(v1_one_block_per_head, (heads, batch), TILE, q, k_cache, v_cache, lengths, o,
           _scale(d))


@registry.variant("decode", "v2_split_kv", kernels=("decode_v2_split_kv",
                                                    "decode_v2_combine_splits"))
def launch_v2_split_kv(q: Array, k_cache: Array, v_cache: Array, lengths: Array, o: Array,
                       launch: Launch = plain_launch, split_size: int = SPLIT_SIZE,
                       workspace: tuple[Array, Array, Array] | None = None) -> None:
    """``v2_split_kv`` over ``ceil(max_len / split_size)`` chunks per head, then
    ``v2_combine_splits``: two launches. The partials go into ``workspace``
    ``(part_m, part_l, part_acc)`` if given (a benchmark or a CUDA graph allocates them
    once), else into new poisoned arrays."""
    batch, heads, d = q.shape
    splits = blocks_to_cover(k_cache.shape[2], check_int("split_size", split_size, 1))
    shapes = ((batch, heads, splits),) * 2 + ((batch, heads, splits, d),)
    part_m, part_l, part_acc = _workspace(workspace, shapes)
    launch(v2_split_kv, (splits, heads, batch), TILE, q, k_cache, v_cache, lengths, part_m,
           part_l, part_acc, np.int32(split_size), _scale(d))
    launch(v2_combine_splits, (heads, batch), TILE, part_m, part_l, part_acc, lengths, o,
           np.int32(split_size))


# v3_triton_split_kv: v2 in Triton (gpudl.kernels.tiles.decode): the same chunks and combine
# rule, each tile of keys a block of values; two Triton launches.
@registry.variant("decode", "v3_triton_split_kv", kernels=("decode_v3_triton_split_kv",
                                                           "decode_v3_triton_combine_splits"),
                  requires="triton")
def launch_v3_triton_split_kv(q: Array, k_cache: Array, v_cache: Array, lengths: Array,
                              o: Array, launch: Launch = plain_launch,
                              split_size: int = SPLIT_SIZE,
                              workspace: tuple[Array, Array, Array] | None = None) -> None:
    """The Triton split-KV kernel over ``ceil(max_len / split_size)`` chunks per head, then
    its combine kernel, with ``workspace`` as ``launch_v2_split_kv``'s. Triton launches them:
    ``launch`` must be :func:`plain_launch` (``ValueError`` for a tracer or a graph's)."""
    if launch is not plain_launch:
        raise ValueError("launch must be plain_launch for decode_v3_triton_split_kv: Triton "
                         f"starts its kernels (the tracer and graphs take {list(TRACEABLE)})")
    batch, heads, d = q.shape
    splits = blocks_to_cover(k_cache.shape[2], check_int("split_size", split_size, 1))
    shapes = ((batch, heads, splits),) * 2 + ((batch, heads, splits, d),)
    tiled.launch_split_kv(q, k_cache, v_cache, lengths, o, split_size,
                          _workspace(workspace, shapes))


def _workspace(workspace: object, shapes: tuple[tuple[int, ...], ...]) -> tuple:
    """``workspace`` checked against ``shapes``, or new poisoned arrays of them."""
    if workspace is None:
        return tuple(poisoned(shape) for shape in shapes)
    _check_workspace(workspace, shapes)
    return tuple(workspace)


def _check_workspace(workspace: object, shapes: tuple[tuple[int, ...], ...]) -> None:
    """``workspace`` three float32 device arrays of ``shapes`` (the kernels write into them
    without a bound of their own)."""
    if not isinstance(workspace, tuple | list) or len(workspace) != 3:
        raise TypeError("workspace must be three device arrays (part_m, part_l, part_acc), "
                        f"got {type(workspace).__name__}")
    for name, x, shape in zip(("part_m", "part_l", "part_acc"), workspace, shapes, strict=True):
        if not check_kernel_array(f"workspace {name}", x, len(shape), np.float32):
            raise TypeError(f"workspace {name} must be a device array, got a NumPy array")
        if tuple(x.shape) != shape:
            raise ValueError(f"workspace {name} must have shape {shape}, got {x.shape}")


#: Variant name -> launcher(q, k_cache, v_cache, lengths, o, launch) on device arrays.
VARIANTS: dict[str, Callable[..., None]] = registry.variants("decode")
#: The variants whose kernels start through ``launch=`` (the tracer's, a CUDA graph's): the
#: Numba ones.
TRACEABLE = ("v1_one_block_per_head", "v2_split_kv")
#: The variants that split a sequence into chunks of ``split_size`` keys.
SPLIT_VARIANTS = ("v2_split_kv", "v3_triton_split_kv")


# ------------------------------------------------------------------------------------------
# Checks and the public entry point
# ------------------------------------------------------------------------------------------


def check_lengths(lengths: object, batch: int | None = None,
                  max_len: int | None = None) -> np.ndarray:
    """``lengths`` as a host int32 array after checking it: an int32 array (on the host or
    the device) of shape ``(batch,)`` (any batch if None), each from 1 to ``max_len`` (no
    upper bound if None)."""
    on_device = check_kernel_array("lengths", lengths, 1, np.int32)
    if batch is not None and lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape (batch,) = ({batch},), got {lengths.shape}")
    host = lengths.copy_to_host() if on_device else lengths
    bad = host[(host < 1) | (host > (max_len or np.iinfo(np.int32).max))]
    if bad.size:
        most = "" if max_len is None else f" to max_len = {max_len} (the cache holds no more)"
        raise ValueError(f"each of lengths must be from 1{most}, got {bad.tolist()}")
    return host


def check_decode_inputs(q: Array, heads_of_cache: int, d_of_cache: int, batch_of_cache: int
                        ) -> None:
    """The shape rules shared by the contiguous and the paged cache: ``q`` of shape
    ``(batch, heads, d)`` with the cache's batch and head size, ``1 <= d <= MAX_HEAD_DIM``,
    and ``heads`` a multiple of the cache's ``kv_heads``."""
    batch, heads, d = q.shape
    if batch != batch_of_cache:
        raise ValueError(f"q has {batch} sequences but the cache {batch_of_cache}")
    if d != d_of_cache:
        raise ValueError(f"q's head size {d} differs from the cache's {d_of_cache}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"the head size d must be from 1 to {MAX_HEAD_DIM}, got {d}")
    if heads < 1 or heads % heads_of_cache:
        raise ValueError(f"the query heads ({heads}) must be a multiple of the cache's "
                         f"kv_heads ({heads_of_cache}): each cache head serves a group")


def check_decode_arrays(q: object, k_cache: object, v_cache: object, lengths: object,
                        reference: bool = False) -> tuple[bool, np.ndarray]:
    """The checks of decode attention's inputs: float32 C-contiguous arrays (with
    ``reference``: real NumPy arrays of any precision), ``q`` ``(batch, heads, d)`` and
    caches ``(batch, kv_heads, max_len, d)`` of one shape (:func:`check_decode_inputs`),
    int32 ``lengths`` from 1 to ``max_len`` (:func:`check_lengths`), all on the host or all
    on the device (:func:`gpudl.checks.check_host_or_device`). Returns whether they are on
    the device, and the host lengths."""
    if reference:
        for name, x, ndim in (("q", q, 3), ("k_cache", k_cache, 4), ("v_cache", v_cache, 4)):
            check_array(name, x, ndim)
        on_device = False
    else:
        on_device = check_arrays(q=(q, 3), k_cache=(k_cache, 4), v_cache=(v_cache, 4))
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape (batch, kv_heads, max_len,"
                         f" d), got {k_cache.shape} and {v_cache.shape}")
    batch, kv_heads, max_len, d = k_cache.shape
    check_decode_inputs(q, kv_heads, d, batch)
    lengths_host = check_lengths(lengths, batch, max_len)
    check_host_or_device({"q": q, "lengths": lengths})
    return on_device, lengths_host


def decode_attention(q: Array, k_cache: Array, v_cache: Array, lengths: Array,
                     variant: str = "v2_split_kv", split_size: int = SPLIT_SIZE,
                     launch: Launch = plain_launch) -> Array:
    """Decode attention of ``q`` ``(batch, heads, d)`` against the first ``lengths[b]``
    positions of float32 caches ``(batch, kv_heads, max_len, d)``, by ``VARIANTS[variant]``
    (``split_size``: keys per block of ``v2_split_kv``), each kernel started by ``launch``
    (:func:`plain_launch`, or the tracer's). Returns ``(batch, heads, d)``."""
    registry.check_variant("decode", variant, tuple(VARIANTS))
    check_int("split_size", split_size, 1)
    check_callable("launch", launch)
    on_device, lengths_host = check_decode_arrays(q, k_cache, v_cache, lengths)
    if q.shape[0] == 0:
        return zeros(q.shape, on_device)
    o = poisoned(q.shape)
    extra = {"split_size": split_size} if variant in SPLIT_VARIANTS else {}
    VARIANTS[variant](to_device(q), to_device(k_cache), to_device(v_cache),
                      lengths if on_device else cuda.to_device(lengths_host), o,
                      launch=launch, **extra)
    return returned(o, on_device)
