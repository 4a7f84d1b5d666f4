"""The kernels of one decode step of a small Transformer decoder, besides attention: the
embedding, a linear layer (with an optional GeLU), a residual addition with a LayerNorm, the
KV cache's append and the greedy choice of the next token.

Book section: *Chapter 9, "A tiny decoder, token for token"* (the model is
:mod:`gpudl.models.decoder`, attention :mod:`gpudl.kernels.decode`).

Every kernel reads what changes from step to step (the token, its position, the lengths)
from device memory, never from a launch argument, so that a CUDA graph captured once
replays every step: ``v1_embed`` writes ``lengths = positions + 1`` and
``v1_argmax_next`` writes the next token and advances the position. Shapes: a batch of
``batch`` sequences, one token each; ``x`` ``(batch, features)``.

The reference is the same model in PyTorch (:class:`gpudl.models.decoder.TinyDecoder`): the
tests compare every step's logits, and the tokens, with it.
"""

from __future__ import annotations

import math

from gpudl import backend, registry

# isort: split
from numba import cuda, float32, int32

__all__ = ["THREADS", "v1_embed", "v1_linear", "v1_add_layernorm", "v1_append_kv",
           "v1_argmax_next", "row_sum"]

THREADS = backend.WARP_SIZE  # threads per block of every kernel here
_INV_SQRT2 = float32(1 / math.sqrt(2))
_NEG_INF = float32(-math.inf)


# v1_embed: block b, thread t: x[b, c] = tok_emb[tokens[b], c] + pos_emb[positions[b], c]
# for c = t, t + 32, ...; thread 0 also writes the length the step attends over.
@registry.kernel("decoder_v1_embed",
                 "void(int32[::1], int32[::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], "
                 "int32[::1])")
@cuda.jit
def v1_embed(tokens, positions, tok_emb, pos_emb, x, lengths):
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    token, position = tokens[b], positions[b]
    for c in range(t, x.shape[1], THREADS):
        x[b, c] = tok_emb[token, c] + pos_emb[position, c]
    if t == 0:
        lengths[b] = position + 1


# v1_linear: y[b, o] = sum_i x[b, i] w_t[i, o] + bias[o], then the exact GeLU if gelu, with
# one thread per output: the weight is stored transposed, (in, out), so the 32 threads of a
# block read 32 consecutive words of a row of w_t (coalesced) and x[b, i] is one word for
# all of them (a broadcast). Every weight is read once per sequence: a decode step's
# product, two flops per four bytes.
@registry.kernel("decoder_v1_linear",
                 "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], boolean)")
@cuda.jit
def v1_linear(x, w_t, bias, y, gelu):
    o = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
    b = cuda.blockIdx.y
    if o < y.shape[1]:
        acc = float32(0)
        for i in range(x.shape[1]):
            acc += x[b, i] * w_t[i, o]
        acc += bias[o]
        if gelu:
            acc = float32(0.5) * acc * (float32(1) + math.erf(acc * _INV_SQRT2))
        y[b, o] = acc


@cuda.jit(device=True)
def row_sum(sums, value):
    """The 32 threads' ``value`` added up through shared memory ``sums``, the total returned
    to every thread (each reads all 32 words: broadcasts)."""
    t = cuda.threadIdx.x
    sums[t] = value
    cuda.syncthreads()
    total = float32(0)
    for other in range(THREADS):
        total += sums[other]
    cuda.syncthreads()
    return total


# v1_add_layernorm: block b normalises row b of z = x + residual: thread t adds its columns
# t, t + 32, ... into out, the block sums them for the mean, then the squares of z - mean for
# the variance (two passes: no cancellation), and each thread writes
# (z - mean) / sqrt(var + eps) * gamma + beta.
@registry.kernel("decoder_v1_add_layernorm",
                 "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], float32[:, "
                 "::1], float32)")
@cuda.jit
def v1_add_layernorm(x, residual, gamma, beta, out, eps):
    sums = cuda.shared.array(THREADS, float32)
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    n = x.shape[1]
    part = float32(0)
    for c in range(t, n, THREADS):
        z = x[b, c] + residual[b, c]
        out[b, c] = z
        part += z
    mean = row_sum(sums, part) / float32(n)
    part = float32(0)
    for c in range(t, n, THREADS):
        part += (out[b, c] - mean) * (out[b, c] - mean)
    inv = float32(1) / math.sqrt(row_sum(sums, part) / float32(n) + eps)
    for c in range(t, n, THREADS):
        out[b, c] = (out[b, c] - mean) * inv * gamma[c] + beta[c]


# v1_append_kv: the step's key and value rows, (batch, kv_heads * d) from the projections,
# into position positions[b] of each cache head: k_cache[b, g, positions[b], c].
@registry.kernel("decoder_v1_append_kv",
                 "void(float32[:, ::1], float32[:, ::1], int32[::1], float32[:, :, :, ::1], "
                 "float32[:, :, :, ::1])")
@cuda.jit
def v1_append_kv(k_new, v_new, positions, k_cache, v_cache):
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    d = k_cache.shape[3]
    position = positions[b]
    for e in range(t, k_new.shape[1], THREADS):
        k_cache[b, e // d, position, e % d] = k_new[b, e]
        v_cache[b, e // d, position, e % d] = v_new[b, e]


# v1_argmax_next: block b finds the largest logit of row b (the lowest index among equals, as
# torch.argmax): each thread its own over columns t, t + 32, ..., thread 0 the best of the
# 32; it writes the token and the next position (the step's length).
@registry.kernel("decoder_v1_argmax_next",
                 "void(float32[:, ::1], int32[::1], int32[::1], int32[::1])")
@cuda.jit
def v1_argmax_next(logits, tokens, positions, lengths):
    best_v = cuda.shared.array(THREADS, float32)
    best_i = cuda.shared.array(THREADS, int32)
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    value, index = _NEG_INF, int32(-1)
    for c in range(t, logits.shape[1], THREADS):
        if index < 0 or logits[b, c] > value:
            value, index = logits[b, c], int32(c)
    best_v[t] = value
    best_i[t] = index
    cuda.syncthreads()
    if t == 0:
        for other in range(1, THREADS):
            i = best_i[other]
            if i >= 0 and (best_v[other] > value or best_v[other] == value and i < index):
                value, index = best_v[other], i
        tokens[b] = index
        positions[b] = lengths[b]
