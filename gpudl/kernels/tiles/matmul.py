"""Matrix multiply in Triton: a tile of C per program, ``tl.dot`` on tiles of A and B, programs in
groups of rows that share B's tiles in L2.

Book section: Chapter 10, "A matmul of tiles".

What changes against the Numba twin, ``matmul_v5_register_2d`` (:mod:`gpudl.kernels.matmul`):
the kernel names tiles and leaves the rest to the compiler. Each program computes a
``BLOCK_M x BLOCK_N`` tile of C from ``BLOCK_K``-wide tiles of A and B with ``tl.dot``; how
they are staged through shared memory (asynchronous copies, ``cp.async``, in ``num_stages``
buffers, so that the loads of the next tiles overlap the products of this one), how each
warp's share is loaded into registers (``ldmatrix``) and which instruction multiplies
(``mma.sync`` on an A100, ``wgmma`` on an H100, FMAs for float32 with IEEE products) is
Triton's choice. The one thing the kernel orders is the programs: consecutive programs run
down a group of ``GROUP_M`` rows of tiles before moving to the next column, so that the tiles
of B a column needs are read from DRAM once per group and then found in L2 (Triton's matmul
tutorial).

One kernel serves two variants: ``matmul_v6_triton_tiles`` (float32, ``tl.dot`` with
``input_precision="ieee"``: no TF32, the same float32 products as every Numba variant) and
``matmul_v7_triton_float16`` (float16 A, B and C, float32 accumulation: tensor cores on a
GPU).
"""

from __future__ import annotations

from typing import Any

from gpudl import backend, registry
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["CONFIGS", "grouped_matmul", "launch_matmul"]

# float16: 128 x 256 tiles of C, 64 deep, 3 stages (Triton's matmul tutorial for an H100);
# float32 with IEEE products: 128 x 128, 32 deep. On the simulator small tiles, so that the
# tests cross tiles and groups.
_GPU32 = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
          "num_stages": 3}
_GPU16 = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
          "num_stages": 3}
_SIM = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4}
#: The configuration launched for each precision (tile sizes, group, warps and pipeline
#: stages).
CONFIGS = {"float32": backend.pick(gpu=_GPU32, sim=_SIM),
           "float16": backend.pick(gpu=_GPU16, sim=_SIM)}


# grouped_matmul: program pid finds its tile of C in grouped order (GROUP_M rows of tiles,
# then the next column), walks along K a BLOCK_K slab at a time (masked loads give 0 past the
# edges) and accumulates tl.dot of the two tiles in float32, then stores the tile in C's
# format, masked at the edges.
@registry.triton_kernel("matmul_v7_triton_float16", "(*fp16:16, *fp16:16, *fp16:16, i32:16, "
                        "i32:16, i32:16)", configs=[_GPU16], precision="float16",
                        reference="gpudl.kernels.matmul.reference")
@registry.triton_kernel("matmul_v6_triton_tiles", "(*fp32:16, *fp32:16, *fp32:16, i32:16, "
                        "i32:16, i32:16)", configs=[_GPU32],
                        reference="gpudl.kernels.matmul.reference")
@triton.jit
def grouped_matmul(a, b, c, m, n, k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(m, BLOCK_M)
    per_group = GROUP_M * tl.cdiv(n, BLOCK_N)
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % group_rows
    tile_n = (pid % per_group) // group_rows
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        ks = k0 + depth
        a_tile = tl.load(a + rows[:, None] * k + ks[None, :],
                         mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
        b_tile = tl.load(b + ks[:, None] * n + cols[None, :],
                         mask=(ks[:, None] < k) & (cols[None, :] < n), other=0.0)
        acc = tl.dot(a_tile, b_tile, acc, input_precision="ieee")
    tl.store(c + rows[:, None] * n + cols[None, :], acc.to(c.dtype.element_ty),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def launch_matmul(a: Any, b: Any, c: Any, precision: str) -> None:
    """``grouped_matmul`` on C-contiguous device arrays ``a`` (M, K), ``b`` (K, N) and ``c``
    (M, N) of ``precision`` (``"float32"`` or ``"float16"``), M, N, K >= 1: one program per
    tile of C, with ``CONFIGS[precision]``."""
    (m, k), n = a.shape, b.shape[1]
    config = CONFIGS[precision]
    programs = triton.cdiv(m, config["BLOCK_M"]) * triton.cdiv(n, config["BLOCK_N"])
    launch(grouped_matmul, (programs,), a, b, c, m, n, k, **config)
