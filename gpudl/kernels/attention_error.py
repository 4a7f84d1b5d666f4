"""How accurate float32 attention is: an elementwise bound on any variant's error.

Book section: *Chapter 8, "How accurate is float32 attention?"*.

The bound (:func:`error_bound`). With ``u = 2**-24``, for one query row with exact scores
``x_j``, ``m = max_j x_j``, weights ``p_j = exp(x_j - m) / sum_k exp(x_k - m)`` and
``o = sum_j p_j v_j``, to first order in ``u``:

1. *Scores.* A float32 dot product of ``d`` terms errs by at most ``gamma_d sum_c |q_c k_jc|``
   (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, section 3.1); the float32
   scale and the product by it add ``2u``: ``|x^_j - x_j| <= (d + 2) u a_j`` with
   ``a_j = sum_c |q_c| |k_jc| / sqrt(d)``.
2. *Weights.* Each variant computes ``exp(x^_j - m')`` for some ``m' >= x^_j``, and v2 may
   later rescale it by ``exp(m' - m'')`` when the running maximum grows. The roundings of
   those subtractions add at most ``u |x - m'| + u |m' - m''| + ... = u (m - x_j) = u D_j``
   to the exponent (the maxima only grow, so the steps telescope). Each ``exp`` errs by at
   most 2 ulp, ``4u`` (CUDA's ``expf``), and at most ``T + 1`` of them touch one weight,
   ``T = ceil(s / 16)``. Relative errors ``r_j`` on the weights move the output by
   ``|sum_j p_j r_j (v_j - o)| / |1 + sum_j p_j r_j|``, to first order at most
   ``sum_j p_j |r_j| (|v_j| + |o|)``, with ``|r_j| <= ((d + 2) a_j + D_j + 4 (T + 1)) u``.
   (``sum_j p_j D_j`` is the entropy of ``p`` less ``log sum_j exp(x_j - m)``: at most
   ``log s``, so the subtractions cost little even when ``D_j`` is large.)
3. *Sums.* Along its way into the numerator ``sum_j w_j v_j`` or the denominator
   ``sum_j w_j``, a term is rounded at most ``n = s + 2 T + 32`` times (v1: ``s`` in ``P v``,
   products included, and ``ceil(s / 32) + 32`` in the softmax's sum; v2: 16 within a tile,
   then 2 per later tile), and the final division once: ``(n + 1) u (sum_j p_j |v_j| + |o|)``.

The bound is the sum of 2 and 3 in units of ``eps32 = 2u``, twice the first-order terms, which
leaves room for the second-order ones while they are small. ``lse = m + log(l)`` errs by at
most the same weight and sum terms without ``|v|``, plus ``2u |log l|`` (``logf``: 1 ulp) and
``u |lse|`` (the addition), also doubled. NaN in ``q`` or ``k`` makes its rows' outputs NaN;
NaN in column ``c`` of ``v`` makes column ``c`` NaN in every row that sees that key.

The Triton variants are held to the same bound. Their tiles of keys are 16 or wider, so they
take at most ``T`` rescalings; a sum over one tile's keys in any order is within the ``s``
roundings counted; their scores are scaled by ``log2(e) / sqrt(d)`` (one rounded constant and
one product, as before), after which an ``exp2`` (``ex2.approx``, 2 ulp) of a difference of
scaled scores is the ``exp`` of the difference, with the same relative errors; ``lse``'s extra
product by ``ln 2`` is one rounding more, ``u |lse|``, within the doubling. In float16
(``precision="float16"``: the inputs' float16 values are exact, their products in float32
too) the bound is twice the float32 one, since tensor cores may truncate their float32
additions (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021), plus, for ``o``,
``2 u16 (sum_j p_j |v_j| + |o|)`` for the weights rounded to float16 before the second
product and ``2 u16 |o|`` for the output's rounding (``u16 = 2**-11``).
"""

from __future__ import annotations

import math

import numpy as np

from gpudl.checks import check_choice
from gpudl.kernels.arrays import EPS32, UNIT_ROUNDOFF
from gpudl.kernels.attention import TILE, check_host_heads, weighted

__all__ = ["error_bound"]


def error_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                precision: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """Elementwise bounds on ``|o - o_ref|`` and ``|lse - lse_ref|`` for any variant's result
    in ``precision`` (``"float32"``, or ``"float16"`` for float16 inputs and output with
    float32 accumulation; derivation in the module docstring); NaN where the reference is
    NaN."""
    check_host_heads(q, k, v, causal)
    check_choice("precision", precision, ("float32", "float16"))
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s, d = q.shape[1], q.shape[2]
    tiles = -(-s // TILE)
    n_round = s + 2 * tiles + 32
    x = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    a = np.abs(q) @ np.abs(k).transpose(0, 2, 1) / math.sqrt(d)
    seen = np.tril(np.ones((s, s), bool)) if causal else np.ones((s, s), bool)
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(seen, x, -np.inf)
        m = x.max(axis=-1, keepdims=True)
        e = np.exp(x - m)
        total = e.sum(axis=-1, keepdims=True)
        p = e / total
        o = weighted(p, v, causal)
        gap = np.where(seen, m - x, 0.0)  # D_j; 0 where p_j is 0 anyway
        r = np.where(seen, (d + 2) * a + gap + 4 * (tiles + 1), 0.0)  # |r_j| / u
        weights = (weighted(p * r, np.abs(v), causal)
                   + (p * r).sum(-1, keepdims=True) * np.abs(o))
        sums = (n_round + 1) * (weighted(p, np.abs(v), causal) + np.abs(o))
        log_total = np.log(total)[..., 0]
        lse_bound = ((p * r).sum(-1) + n_round + 1 + 2 * np.abs(log_total)
                     + np.abs(m[..., 0] + log_total))
        if precision == "float32":
            return EPS32 * (weights + sums), EPS32 * lse_bound
        rounded = 2 * UNIT_ROUNDOFF["float16"] * (weighted(p, np.abs(v), causal) + 2 * np.abs(o))
    return 2 * EPS32 * (weights + sums) + rounded, 2 * EPS32 * lse_bound
