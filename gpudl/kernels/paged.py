"""A paged KV cache (vLLM's PagedAttention): fixed-size blocks handed out as sequences grow, a
block table per sequence, and decode attention that reads through the table.

Book section: *Chapter 9, "A paged KV cache"*.

Reserving ``max_len`` positions per sequence wastes what a sequence never fills. vLLM (Kwon
et al. 2023) cuts the cache into blocks of ``block_size`` tokens, like an operating system's
pages: :class:`BlockAllocator` gives a sequence a new block only when its last one is full,
and keeps its **block table**, the physical blocks of its logical blocks 0, 1, ...; a
sequence then wastes at most ``block_size - 1`` positions. :class:`PagedKVCache` holds the
blocks on the device, ``(num_blocks, kv_heads, block_size, head_dim)`` for the keys and the
same for the values (poisoned until written), and writes appended tokens through the table
(``v1_scatter_tokens``, vLLM's ``reshape_and_cache``). :func:`paged_decode_attention` is
:mod:`gpudl.kernels.decode`'s v1 with each key's row found through the table. (vLLM's own
kernel also splits the keys' head dimension for 16-byte loads; this one keeps the rows.)

:func:`measure_waste` replays a request stream (:func:`gpudl.estimate.batching.request_stream`)
through the allocator and counts the positions reserved and filled, against one ``max_len``
reservation per sequence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_callable, check_instance, check_int, check_ints, check_positive
from gpudl.estimate.batching import Request, check_requests
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device, zeros
from gpudl.kernels.decode import MAX_HEAD_DIM, check_decode_inputs, plain_launch
from gpudl.kernels.decode_tile import (
    COLUMNS,
    NEG_INF,
    TILE,
    TILE_PADDED,
    load_query,
    online_softmax_step,
    store_row,
)
from gpudl.kernels.grid import blocks_to_cover

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = ["BlockAllocator", "PagedKVCache", "paged_decode_attention", "measure_waste",
           "v1_scatter_tokens", "v1_paged", "paged_scores", "paged_values"]

_SCATTER_THREADS = 128


class BlockAllocator:
    """Blocks of ``block_size`` tokens out of ``num_blocks``, handed to sequences as they
    grow: ``reserve(seq_id, tokens)`` extends a sequence (a new id starts one) and returns
    the slots (``block * block_size + offset``) of its new tokens; ``free(seq_id)`` returns
    its blocks. Ids are not reused: a freed id stays refused."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self._tables: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._freed: set[int] = set()

    def _known(self, seq_id: object) -> int:
        seq_id = check_int("seq_id", seq_id, 0)
        if seq_id in self._freed:
            raise ValueError(f"sequence {seq_id} was freed: its blocks belong to others now")
        if seq_id not in self._tables:
            raise ValueError(f"sequence {seq_id} is unknown (appended sequences: "
                             f"{sorted(self._tables)})")
        return seq_id

    @property
    def free_blocks(self) -> int:
        """Blocks no sequence holds."""
        return len(self._free)

    @property
    def reserved_tokens(self) -> int:
        """Positions in blocks held by sequences."""
        return (self.num_blocks - len(self._free)) * self.block_size

    @property
    def stored_tokens(self) -> int:
        """Positions holding a token."""
        return sum(self._lengths.values())

    def reserve(self, seq_id: int, tokens: int) -> list[int]:
        """The slots of ``tokens`` more tokens of sequence ``seq_id``, taking new blocks as
        needed. ``ValueError``, and nothing taken, when the free blocks are too few."""
        seq_id = check_int("seq_id", seq_id, 0)
        check_int("tokens", tokens, 1)
        if seq_id in self._freed:
            raise ValueError(f"sequence {seq_id} was freed: its blocks belong to others now")
        table, length = self._tables.get(seq_id, []), self._lengths.get(seq_id, 0)
        needed = -(-(length + tokens) // self.block_size) - len(table)
        if needed > len(self._free):
            raise ValueError(f"the cache is full: sequence {seq_id} needs {needed} more "
                             f"block(s) of {self.block_size} tokens, {len(self._free)} free "
                             f"of {self.num_blocks}; free a sequence first")
        table = table + [self._free.pop() for _ in range(needed)]
        self._tables[seq_id], self._lengths[seq_id] = table, length + tokens
        return [table[p // self.block_size] * self.block_size + p % self.block_size
                for p in range(length, length + tokens)]

    def free(self, seq_id: int) -> None:
        """Give sequence ``seq_id``'s blocks back (the most recently freed is handed out
        next)."""
        seq_id = self._known(seq_id)
        self._free += reversed(self._tables.pop(seq_id))
        del self._lengths[seq_id]
        self._freed.add(seq_id)

    def block_table(self, seq_id: int) -> list[int]:
        """The physical block of each of sequence ``seq_id``'s logical blocks."""
        return list(self._tables[self._known(seq_id)])

    def length(self, seq_id: int) -> int:
        """Tokens sequence ``seq_id`` holds."""
        return self._lengths[self._known(seq_id)]


# v1_scatter_tokens: one thread per value of the appended keys (and values): token i's row
# goes to block slots[i] // block_size, position slots[i] % block_size. Consecutive threads
# take consecutive columns: reads and writes of a row are coalesced.
@registry.kernel("paged_v1_scatter_tokens",
                 "void(float32[:, :, ::1], float32[:, :, ::1], int32[::1], float32[:, :, :, ::1], "
                 "float32[:, :, :, ::1])")
@cuda.jit
def v1_scatter_tokens(k, v, slots, k_blocks, v_blocks):
    e = cuda.grid(1)
    tokens, heads, d = k.shape
    if e < tokens * heads * d:
        i, g, c = e // (heads * d), (e // d) % heads, e % d
        block_size = k_blocks.shape[2]
        block, offset = slots[i] // block_size, slots[i] % block_size
        k_blocks[block, g, offset, c] = k[i, g, c]
        v_blocks[block, g, offset, c] = v[i, g, c]


class PagedKVCache:
    """Keys and values in ``num_blocks`` blocks of ``block_size`` tokens, ``kv_heads``
    heads of ``head_dim`` values, on the device (:class:`BlockAllocator` keeps the tables)."""

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> None:
        self.allocator = BlockAllocator(num_blocks, block_size)
        self.kv_heads = check_int("kv_heads", kv_heads, 1)
        self.head_dim = check_int("head_dim", head_dim, 1)
        if head_dim > MAX_HEAD_DIM:
            raise ValueError(f"head_dim must be from 1 to {MAX_HEAD_DIM}, got {head_dim}")
        shape = (num_blocks, kv_heads, block_size, head_dim)
        self.k_blocks, self.v_blocks = poisoned(shape), poisoned(shape)

    def append(self, seq_id: int, k: Array, v: Array) -> None:
        """Append ``tokens`` keys and values, float32 ``(tokens, kv_heads, head_dim)``, to
        sequence ``seq_id`` (a new id starts a sequence)."""
        check_arrays(same_shape=True, k=(k, 3), v=(v, 3))
        expected = (self.kv_heads, self.head_dim)
        if tuple(k.shape)[1:] != expected or k.shape[0] < 1:
            raise ValueError(f"k and v must have shape (tokens >= 1, kv_heads, head_dim) = "
                             f"(tokens, {expected[0]}, {expected[1]}), got {k.shape}")
        slots = np.array(self.allocator.reserve(seq_id, k.shape[0]), np.int32)
        threads = _SCATTER_THREADS
        v1_scatter_tokens[blocks_to_cover(k.size, threads), threads](
            to_device(k), to_device(v), cuda.to_device(slots), self.k_blocks, self.v_blocks)

    def free(self, seq_id: int) -> None:
        """Give sequence ``seq_id``'s blocks back."""
        self.allocator.free(seq_id)

    def block_table(self, seq_id: int) -> list[int]:
        """Sequence ``seq_id``'s block table."""
        return self.allocator.block_table(seq_id)

    def tables(self, seq_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The int32 block tables of ``seq_ids``, one row each padded with -1, and their
        lengths, as ``v1_paged`` reads them."""
        rows = [self.block_table(s) for s in check_ints("seq_ids", seq_ids, 0, 0)]
        width = max((len(r) for r in rows), default=0) or 1
        table = np.full((len(rows), width), -1, np.int32)
        for i, row in enumerate(rows):
            table[i, :len(row)] = row
        return table, np.array([self.allocator.length(s) for s in seq_ids], np.int32)


@cuda.jit(device=True)
def paged_scores(partial, q_r, k_blocks, table, b, g, j0, keys, d):
    """:func:`gpudl.kernels.decode_tile.contiguous_scores` with key j's row at position
    ``j % block_size`` of block ``table[b, j // block_size]``."""
    t = cuda.threadIdx.x
    block_size = k_blocks.shape[2]
    for jj in range(keys):
        j = j0 + jj
        block = table[b, j // block_size]
        p = float32(0)
        for r in range(COLUMNS):
            c = t + r * TILE
            if c < d:
                p += q_r[r] * k_blocks[block, g, j % block_size, c]
        partial[jj, t] = p
    cuda.syncthreads()


@cuda.jit(device=True)
def paged_values(acc, w_s, v_blocks, table, b, g, j0, keys, d, alpha):
    """:func:`gpudl.kernels.decode_tile.contiguous_values` through the block table."""
    t = cuda.threadIdx.x
    block_size = v_blocks.shape[2]
    for r in range(COLUMNS):
        c = t + r * TILE
        if c < d:
            part = float32(0)
            for jj in range(keys):
                j = j0 + jj
                part += w_s[jj] * v_blocks[table[b, j // block_size], g, j % block_size, c]
            acc[r] = alpha * acc[r] + part
    cuda.syncthreads()


# v1_paged: v1_one_block_per_head reading each key's row through the block table: one
# more load (the table entry) per key and thread, and rows of one tile that may lie in two
# blocks. What it gains is not speed but memory: the cache holds only filled blocks.
@registry.kernel("paged_v1_paged",
                 "void(float32[:, :, ::1], float32[:, :, :, ::1], float32[:, :, :, ::1], int32[:, "
                 "::1], int32[::1], float32[:, :, ::1], float32)")
@cuda.jit
def v1_paged(q, k_blocks, v_blocks, table, lengths, o, scale):
    partial = cuda.shared.array((TILE, TILE_PADDED), float32)
    w_s = cuda.shared.array(TILE, float32)
    q_r = cuda.local.array(COLUMNS, float32)
    acc = cuda.local.array(COLUMNS, float32)
    h, b = cuda.blockIdx.x, cuda.blockIdx.y
    d = q.shape[2]
    g = h // (q.shape[1] // k_blocks.shape[1])
    load_query(q_r, acc, q, b, h)
    m = NEG_INF
    total = float32(0)
    for j0 in range(0, lengths[b], TILE):
        keys = min(TILE, lengths[b] - j0)
        paged_scores(partial, q_r, k_blocks, table, b, g, j0, keys, d)
        m, alpha, total = online_softmax_step(partial, w_s, m, total, keys, scale)
        paged_values(acc, w_s, v_blocks, table, b, g, j0, keys, d, alpha)
    store_row(o[b, h], acc, total)


def paged_decode_attention(q: Array, cache: PagedKVCache, seq_ids: Sequence[int],
                           launch: Any = plain_launch) -> Array:
    """Decode attention of ``q`` ``(len(seq_ids), heads, d)`` against each sequence's
    tokens in ``cache``, through its block table; host or device ``q`` in, the same out."""
    check_instance("cache", cache, PagedKVCache)
    seq_ids = check_ints("seq_ids", seq_ids, 0, 0)
    check_callable("launch", launch)
    on_device = check_arrays(q=(q, 3))
    check_decode_inputs(q, cache.kv_heads, cache.head_dim, len(seq_ids))
    if len(set(seq_ids)) != len(seq_ids):
        raise ValueError(f"seq_ids must not repeat a sequence, got {list(seq_ids)}")
    table, lengths = cache.tables(seq_ids)  # ValueError for an unknown or freed sequence
    if not seq_ids:
        return zeros(q.shape, on_device)
    o = poisoned(q.shape)
    launch(v1_paged, (q.shape[1], len(seq_ids)), TILE, to_device(q), cache.k_blocks,
           cache.v_blocks, cuda.to_device(table), cuda.to_device(lengths), o,
           np.float32(1 / math.sqrt(q.shape[2])))
    return returned(o, on_device)


def measure_waste(requests: Sequence[Request], block_size: int, max_len: int,
                  step_s: float) -> dict:
    """Replay ``requests`` one decode step of ``step_s`` seconds at a time: a request joins
    at the first step after it arrives with its prompt, gains a token per step and leaves
    when its output is done. At every step count the positions that hold a token, those the
    paged cache reserves (its :class:`BlockAllocator`'s blocks) and those one reservation of
    ``max_len`` per running sequence would. Returns the totals over all steps and the
    fractions each wastes."""
    check_requests(requests, ordered=False)
    check_int("block_size", block_size, 1)
    check_int("max_len", max_len, 1)
    check_positive("step_s", step_s)
    longest = max(r.prompt + r.output for r in requests)
    if longest > max_len:
        raise ValueError(f"max_len ({max_len}) must hold the longest request ({longest})")
    allocator = BlockAllocator(len(requests) * -(-max_len // block_size), block_size)
    pending = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    left: dict[int, int] = {}
    used = paged = contiguous = 0
    step = 0
    while pending or left:
        if not left:  # nothing running: skip to the next arrival
            step = max(step, math.ceil(requests[pending[0]].arrival_s / step_s))
        while pending and requests[pending[0]].arrival_s <= step * step_s:
            i = pending.pop(0)
            allocator.reserve(i, requests[i].prompt)
            left[i] = requests[i].output
        for i in list(left):
            allocator.reserve(i, 1)
            left[i] -= 1
        used += allocator.stored_tokens
        paged += allocator.reserved_tokens
        contiguous += len(left) * max_len
        for i in [i for i, n in left.items() if n == 0]:
            allocator.free(i)
            del left[i]
        step += 1
    return {"steps": step, "stored": used, "paged_reserved": paged,
            "contiguous_reserved": contiguous, "paged_waste": 1 - used / paged,
            "contiguous_waste": 1 - used / contiguous}
