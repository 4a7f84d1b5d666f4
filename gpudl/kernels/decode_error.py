"""How accurate float32 decode attention is: an elementwise bound on any decode variant's error,
contiguous or paged.

Book section: *Chapter 9, "How accurate is a decode step?"*.

Chapter 8's bound (:mod:`gpudl.kernels.attention_error`) for one query row, with the
rounding counts of the decode kernels. With ``u = 2**-24``, ``L`` keys, tiles of ``TILE = 32``
and chunks of ``C`` keys (``C = L`` for the variants that do not split), ``T = ceil(min(L, C)
/ 32)`` tiles per chunk and ``S = ceil(L / C)`` chunks, to first order in ``u``:

1. *Scores.* Each lane adds its columns' products, then one thread adds the 32 lanes' sums:
   a term meets at most ``d`` roundings (its product and the additions of later nonzero
   terms; adding a lane's zero is exact), and the scale two more:
   ``|x^_j - x_j| <= (d + 2) u a_j``, ``a_j = sum_c |q_c| |k_jc| / sqrt(d)``.
2. *Weights.* The subtractions from the running maxima add ``u D_j`` to the exponent,
   ``D_j = m - x_j`` (the maxima, and the combine kernel's maximum of the chunks', only grow:
   the steps telescope). One ``exp`` makes the weight, one per later tile of its chunk
   rescales it (at most ``T - 1``) and one more the combine kernel: at most ``T + 1``
   exponentials of 4 u each. The relative error of weight j is ``|r_j| <= ((d + 2) a_j + D_j
   + 4 (T + 1)) u``.
3. *Sums.* A term of the numerator ``sum_j w_j v_j`` is rounded by its product (1), the
   tile's sum (at most ``TILE - 1``: the first addition is to zero), its addition to the
   output columns (1), the rescaling and addition at each later tile of its chunk
   (``2 (T - 1)``), the combine's product (1) and sum over chunks (``S - 1``), and the final
   division (1): at most ``n = 2 T + S + 32`` (``2 T + 32`` without the combine); a term of
   the denominator meets fewer. The sums give ``(n + 1) u (sum_j p_j |v_j| + |o|)``.

:func:`error_bound` counts ``T + 2`` exponentials and ``n = TILE + 2 T + S + 3`` (``2 T + S +
35``), one exponential and three roundings more than the kernels make: a looser bound, still
a bound. As in Chapter 8 the bound is twice these first-order terms, in units of ``eps32 =
2u``. NaN
in a query makes its head's output NaN; NaN in column ``c`` of a value the sequence holds
makes column ``c`` NaN for the heads that read it; nothing past a sequence's length counts.
"""

from __future__ import annotations

import math

import numpy as np

from gpudl.checks import check_int
from gpudl.kernels.arrays import EPS32
from gpudl.kernels.decode import check_decode_arrays
from gpudl.kernels.decode_tile import TILE

__all__ = ["error_bound"]


def error_bound(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, lengths: np.ndarray,
                split_size: int | None = None) -> np.ndarray:
    """Elementwise bound on ``|o - o_ref|`` for a decode variant's float32 result, ``q``
    ``(batch, heads, d)`` against caches ``(batch, kv_heads, max_len, d)`` (derivation in
    the module docstring); ``split_size`` is ``v2_split_kv``'s chunk, None for the variants
    that walk a sequence in one block. NaN where the reference is NaN."""
    check_decode_arrays(q, k_cache, v_cache, lengths, reference=True)
    if split_size is not None:
        check_int("split_size", split_size, 1)
    q, k_cache, v_cache = (np.asarray(x, np.float64) for x in (q, k_cache, v_cache))
    batch, heads, d = q.shape
    group = heads // k_cache.shape[1]
    bound = np.empty((batch, heads, d))
    for b, length in enumerate(np.asarray(lengths).tolist()):
        chunk = length if split_size is None else min(split_size, length)
        tiles, chunks = -(-chunk // TILE), -(-length // chunk)
        n_round = TILE + 2 * tiles + chunks + 3
        for h in range(heads):
            keys = k_cache[b, h // group, :length]
            values = np.abs(v_cache[b, h // group, :length])
            x = keys @ q[b, h] / math.sqrt(d)
            a = np.abs(keys) @ np.abs(q[b, h]) / math.sqrt(d)
            with np.errstate(invalid="ignore", over="ignore"):
                e = np.exp(x - x.max())
                p = e / e.sum()
                o = np.abs(p @ v_cache[b, h // group, :length])
                r = (d + 2) * a + (x.max() - x) + 4 * (tiles + 2)  # |r_j| / u
                weights = (p * r) @ values + (p * r).sum() * o
                bound[b, h] = EPS32 * (weights + (n_round + 1) * (p @ values + o))
    return bound
