"""Solutions to the exercises of Chapter 3, matrix multiply and backpropagation.

Book section: Chapter 3, "Exercises": the gradient of a linear layer written out as sums, the
flops of one training step of an MLP, the arithmetic intensity of a matmul tile, and the
sectors the naive and the coalesced matmul ask for, counted by the tracer.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np

from gpudl.kernels import matmul as matmul_kernels
from gpudl.trace import trace


def linear_grads_by_loops(x: np.ndarray, w: np.ndarray,
                          dy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dw, db)`` of ``y = x @ w + b`` (Chapter 3, exercise 1), in float64, each entry
    written as the sum it is:

    - ``dx[n, i] = sum_j dy[n, j] * w[i, j]``, that is ``dy @ w.T``;
    - ``dw[i, j] = sum_n x[n, i] * dy[n, j]``, that is ``x.T @ dy``: a sum over the batch;
    - ``db[j] = sum_n dy[n, j]``.
    """
    x, w, dy = (np.asarray(v, dtype=np.float64) for v in (x, w, dy))
    batch, n_in = x.shape
    n_out = w.shape[1]
    dx, dw, db = np.zeros((batch, n_in)), np.zeros((n_in, n_out)), np.zeros(n_out)
    for n in range(batch):
        for i in range(n_in):
            for j in range(n_out):
                dx[n, i] += dy[n, j] * w[i, j]
                dw[i, j] += x[n, i] * dy[n, j]
        db += dy[n]
    return dx, dw, db


def training_step_flops(sizes: tuple[int, ...], batch: int) -> dict[str, dict[str, int]]:
    """Flops of one SGD step of ``KernelMLP(sizes)`` on ``batch`` samples (Chapter 3,
    exercise 2), laid out as ``KernelMLP.count_flops()`` reports them.

    Per linear layer with ``k`` inputs and ``n`` outputs: forward ``2 batch k n`` (the
    product) and ``batch n`` (the bias); backward ``4 batch k n`` (``dx`` and ``dw``) and
    ``batch n`` (``db``). One comparison per element for each ReLU, forward and backward;
    ``6 C + 5`` per sample for softmax cross-entropy over ``C`` classes; 2 per parameter
    for the SGD update."""
    layers = list(zip(sizes[:-1], sizes[1:], strict=True))
    hidden = sum(sizes[1:-1])
    forward = {"matmul": sum(2 * batch * k * n for k, n in layers),
               "bias": sum(batch * n for _, n in layers)}
    backward = {"matmul": sum(4 * batch * k * n for k, n in layers),
                "bias": sum(batch * n for _, n in layers)}
    if hidden:
        forward["relu"] = backward["relu"] = batch * hidden
    params = sum(k * n + n for k, n in layers)
    return {"forward": forward, "loss": {"softmax_xent": batch * (6 * sizes[-1] + 5)},
            "backward": backward, "update": {"sgd": 2 * params}}


def tile_intensity(bm: int, bn: int) -> float:
    """Flops per byte loaded from global memory by a block that computes a ``bm x bn`` tile
    of C in float32 (Chapter 3, exercise 3).

    For each step of k the block loads ``bm`` values of A and ``bn`` of B (4 bytes each) and
    does ``bm * bn`` multiply-adds (2 flops each). The slab depth BK multiplies both and
    cancels. A tile of 1 x 1 is the naive kernel: 2 loads per multiply-add."""
    return 2 * bm * bn / (4 * (bm + bn))


def shared_loads_per_fma(tm: int, tn: int) -> float:
    """Shared-memory loads per multiply-add of a thread that computes ``tm x tn`` outputs
    from registers: per step of k it loads ``tm`` values of A and ``tn`` of B and does
    ``tm * tn`` multiply-adds (the same count as :func:`tile_intensity`, one level down)."""
    return (tm + tn) / (tm * tn)


def naive_and_coalesced_sectors(m: int = 32, k: int = 16,
                                n: int = 32) -> dict[str, dict[str, float]]:
    """Mean 32-byte sectors per warp request of ``v1_naive`` and ``v2_coalesced`` for an
    (m, k) @ (k, n) product (Chapter 3, exercise 4): ``{variant: {"load a", "load b",
    "store c"}}``, counted by the tracer, so on the simulator only.

    Each product is also checked against the float64 reference within its error bound."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out = {}
    for variant in ("v1_naive", "v2_coalesced"):
        c = np.full((m, n), np.nan, dtype=np.float32)
        grid, block = matmul_kernels.launch_config(variant, m, n)
        t = trace(getattr(matmul_kernels, variant), grid, block, a, b, c)
        if not (
            np.abs(c - matmul_kernels.reference(a, b)) <= matmul_kernels.error_bound(a, b)
        ).all():
            raise RuntimeError(f"{variant} returned a wrong product")
        out[variant] = {"load a": t.sectors_per_request("a").mean,
                        "load b": t.sectors_per_request("b").mean,
                        "store c": t.sectors_per_request("c", op="store").mean}
    return out
