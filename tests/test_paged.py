"""gpudl.kernels.paged: the block allocator's tables, a cache whose sequences grow interleaved
(blocks not contiguous, a freed sequence's blocks reused) read back exactly by the paged
kernel, clear errors for an exhausted cache and for a freed or unknown sequence, and the
wasted memory measured on a seeded request stream."""

import numpy as np
import pytest

from gpudl.estimate.batching import Request, request_stream
from gpudl.kernels import decode, decode_error, paged


def test_blocks_are_taken_only_when_the_last_one_is_full():
    allocator = paged.BlockAllocator(num_blocks=4, block_size=4)
    assert allocator.reserve(7, 3) == [0, 1, 2]  # block 0
    assert allocator.reserve(8, 1) == [4]  # block 1
    assert allocator.reserve(7, 2) == [3, 8]  # fills block 0, opens block 2
    assert allocator.block_table(7) == [0, 2] and allocator.length(7) == 5
    assert (allocator.free_blocks, allocator.reserved_tokens, allocator.stored_tokens) == (
        1, 12, 6)
    allocator.free(7)
    assert allocator.free_blocks == 3 and allocator.reserve(9, 5) == [0, 1, 2, 3, 8]


def test_an_exhausted_cache_refuses_and_keeps_its_state():
    allocator = paged.BlockAllocator(num_blocks=2, block_size=3)
    allocator.reserve(1, 4)
    with pytest.raises(ValueError, match=r"the cache is full: sequence 2 needs 1 more block"):
        allocator.reserve(2, 3)
    with pytest.raises(ValueError, match="needs 1 more block"):
        allocator.reserve(1, 3)
    assert allocator.block_table(1) == [0, 1] and allocator.length(1) == 4
    with pytest.raises(ValueError, match="sequence 2 is unknown"):
        allocator.block_table(2)


def test_a_freed_sequence_is_refused_everywhere():
    cache = paged.PagedKVCache(4, 2, kv_heads=1, head_dim=2)
    rows = np.ones((1, 1, 2), np.float32)
    cache.append(5, rows, rows)
    cache.free(5)
    for call in (lambda: cache.free(5), lambda: cache.block_table(5),
                 lambda: cache.append(5, rows, rows),
                 lambda: paged.paged_decode_attention(np.ones((1, 1, 2), np.float32), cache,
                                                      [5])):
        with pytest.raises(ValueError, match="sequence 5 was freed"):
            call()


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda c, r: c.append(-1, r, r), ValueError, "seq_id must be >= 0"),
    (lambda c, r: c.append(1.0, r, r), TypeError, "seq_id must be an int"),
    (lambda c, r: c.append(1, r, r[:, :, :1].copy()), ValueError, "the same shape"),
    (lambda c, r: c.append(1, np.ones((2, 2, 3), np.float32), np.ones((2, 2, 3), np.float32)),
     ValueError, r"\(tokens, 1, 3\), got \(2, 2, 3\)"),
    (lambda c, r: c.append(1, r[:0], r[:0]), ValueError, "tokens >= 1"),
    (lambda c, r: c.append(1, r.astype(np.float64), r), TypeError, "k must have dtype float32"),
    (lambda c, r: paged.paged_decode_attention(np.ones((1, 1, 3), np.float32), c, [3]),
     ValueError, "sequence 3 is unknown"),
    (lambda c, r: paged.paged_decode_attention(np.ones((2, 1, 3), np.float32), c, [0, 0]),
     ValueError, "must not repeat"),
    (lambda c, r: paged.paged_decode_attention(np.ones((1, 1, 3), np.float32), "c", [0]),
     TypeError, "cache must be a PagedKVCache"),
    (lambda c, r: paged.paged_decode_attention(np.ones((2, 1, 3), np.float32), c, [0]),
     ValueError, "2 sequences but the cache 1"),
    (lambda c, r: paged.paged_decode_attention(np.ones((1, 1, 4), np.float32), c, [0]),
     ValueError, "head size 4 differs"),
])
def test_bad_input_gets_a_clear_error(call, error, match):
    cache = paged.PagedKVCache(4, 2, kv_heads=1, head_dim=3)
    rows = np.ones((1, 1, 3), np.float32)
    cache.append(0, rows, rows)
    with pytest.raises(error, match=match):
        call(cache, rows)


def test_a_cache_too_small_for_an_append_is_refused_before_writing():
    cache = paged.PagedKVCache(1, 2, kv_heads=1, head_dim=1)
    with pytest.raises(ValueError, match="the cache is full"):
        cache.append(0, np.ones((3, 1, 1), np.float32), np.ones((3, 1, 1), np.float32))
    assert np.isnan(cache.k_blocks.copy_to_host()).all()  # nothing written: still poisoned


def test_interleaved_sequences_in_scattered_blocks_are_read_back_exactly():
    rng = np.random.default_rng(0)
    heads, kv_heads, d, block = 4, 2, 5, 3
    lengths = [8, 4]
    k, v = (rng.standard_normal((2, kv_heads, 8, d)).astype(np.float32) for _ in range(2))
    cache = paged.PagedKVCache(6, block, kv_heads, d)
    cache.append(99, np.ones((4, kv_heads, d), np.float32), np.ones((4, kv_heads, d),
                                                                  np.float32))
    cache.free(99)  # blocks 1 and 0 come back and go to the next sequences
    rows = lambda x, b, t0, t1: np.ascontiguousarray(x[b, :, t0:t1].transpose(1, 0, 2))
    for t0, t1 in ((0, 2), (2, 3), (3, 6), (6, 8)):  # sequence 0 in four appends
        cache.append(0, rows(k, 0, t0, t1), rows(v, 0, t0, t1))
        if t0 < 4:
            cache.append(1, rows(k, 1, t0, min(t1, 4)), rows(v, 1, t0, min(t1, 4)))
    assert cache.block_table(0) == [0, 2, 4] and cache.block_table(1) == [1, 3]
    q = rng.standard_normal((2, heads, d)).astype(np.float32)
    o = paged.paged_decode_attention(q, cache, [0, 1])
    lengths = np.array(lengths, np.int32)
    bound = decode_error.error_bound(q, k, v, lengths)
    assert (np.abs(o - decode.reference(q, k, v, lengths)) <= bound).all()
    np.testing.assert_array_equal(  # the same kernel code as v1: the same float32 result
        o, decode.decode_attention(q, k, v, lengths, "v1_one_block_per_head"))


def test_wasted_memory_on_a_seeded_stream():
    requests = request_stream(100, rate_per_s=20, seed=0, prompt=(16, 512), output=(16, 512))
    waste = {b: paged.measure_waste(requests, b, max_len=1024, step_s=0.02) for b in (1, 16)}
    # the same stream and steps: the same tokens stored, whatever the block size
    assert waste[1]["stored"] == waste[16]["stored"] and waste[1]["paged_waste"] == 0
    for b in (1, 16):
        assert waste[b]["contiguous_reserved"] == waste[1]["contiguous_reserved"]
    # a paged sequence wastes fewer than block_size positions, a contiguous one most of them
    assert 0 < waste[16]["paged_waste"] < 0.05 < 0.5 < waste[16]["contiguous_waste"]
    sequence_steps = waste[16]["contiguous_reserved"] // 1024
    assert waste[16]["paged_reserved"] - waste[16]["stored"] <= 15 * sequence_steps
    again = paged.measure_waste(requests, 16, max_len=1024, step_s=0.02)
    assert again == waste[16]


def test_wasted_memory_by_hand():
    # one request, prompt 3, output 2: stored 4 then 5 tokens over 2 steps
    waste = paged.measure_waste([Request(0.0, 3, 2)], block_size=4, max_len=8, step_s=1.0)
    assert (waste["stored"], waste["paged_reserved"], waste["contiguous_reserved"]) == (
        9, 12, 16)
    with pytest.raises(ValueError, match=r"max_len \(4\) must hold the longest request"):
        paged.measure_waste([Request(0.0, 3, 2)], block_size=4, max_len=4, step_s=1.0)
