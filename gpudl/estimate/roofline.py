"""The roofline: the flop/s a kernel can reach at its arithmetic intensity.

Book section: *Chapter 2, "The roofline"*. Units: bytes, seconds, and bytes per second (not
bits, not GB/s).
"""

from __future__ import annotations

import numpy as np

from gpudl.checks import check_positive, check_real

__all__ = ["KERNEL_INTENSITY", "ridge_point", "roofline"]


def roofline(
    intensity: float | np.ndarray, peak_flops: float, peak_bandwidth: float
) -> float | np.ndarray:
    """Attainable flop/s for an arithmetic intensity, by the roofline model.

    Book section: *Chapter 2, "The roofline"*. ``intensity`` is flops per byte moved to or
    from memory (a number, or a NumPy array of them), ``peak_flops`` in flop/s and
    ``peak_bandwidth`` in bytes/s::

        attainable = min(peak_flops, intensity * peak_bandwidth)

    Below the ridge point (:func:`ridge_point`) a kernel cannot be fed fast enough and is
    memory-bound; above it, compute-bound. A float for a number, an array for an array.
    """
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    if isinstance(intensity, np.ndarray):
        if intensity.dtype.kind not in "iuf":
            raise TypeError(f"intensity must have a real dtype, got {intensity.dtype}")
        if np.isnan(intensity).any() or (intensity < 0).any():
            raise ValueError("intensity must be >= 0 everywhere, got a negative or NaN value")
        return np.minimum(float(peak_flops), intensity * float(peak_bandwidth))
    check_real("intensity", intensity, 0, finite=False)  # infinite: the compute roof
    return float(min(peak_flops, intensity * peak_bandwidth))


def ridge_point(peak_flops: float, peak_bandwidth: float) -> float:
    """The intensity (flop/byte) where the roofline bends: ``peak_flops / peak_bandwidth``.

    Book section: *Chapter 2, "The roofline"*. H100 SXM: 67e12 flop/s FP32 over 3.35e12
    bytes/s is 20 flop/byte; a kernel doing fewer flops per byte is memory-bound.
    """
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    return float(peak_flops / peak_bandwidth)


#: Arithmetic intensity (flop per byte moved, float32) of kernels this book writes, derived
#: from what each reads, writes and computes (Chapter 2, "The roofline"). Adam: 28 bytes
#: (read p, g, m, v; write p, m, v) for about 12 operations. Matmul: at most, since 12 n**2
#: bytes is the least traffic an n x n product can have.
KERNEL_INTENSITY: dict[str, float] = {
    "vector add (1 flop, 12 B)": 1 / 12,
    "SAXPY (2 flops, 12 B)": 2 / 12,
    "sum (1 flop, 4 B)": 1 / 4,
    "fp32 Adam (about 12 flops, 28 B)": 12 / 28,
    "matmul n=4096 (at most: 2n^3 flops, 12n^2 B)": 2 * 4096**3 / (12 * 4096**2),
}
