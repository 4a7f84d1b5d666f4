"""Measurements that others published of what the book's "Measured on a GPU" boxes measure.

Book section: every chapter's "Measured on a GPU" boxes, which show these beside the book's
own predictions (:mod:`gpudl.estimate.predictions`), as their authors' numbers, not the book's.

Each entry was read in its source: a paper, a benchmark's data file, or a thread of the
benchmark's own repository, and ``source`` is its key in ``book/references.bib``. Only numbers a
source states for named hardware are here; none is derived from another.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PUBLISHED", "Published"]


@dataclass(frozen=True)
class Published:
    """One published number: ``quantity`` (English, as the box writes it before the number),
    ``value`` in ``unit``, the ``hardware`` it was measured on (as the source names it),
    ``source`` (a key of ``book/references.bib``) and ``where`` in it (a file of a repository,
    or ``""``). ``box`` is the box it belongs to: ``(topic, view)``, or ``(name, None)`` for a
    box with no benchmark."""

    box: tuple[str, str | None]
    quantity: str
    value: float
    unit: str
    hardware: str
    source: str
    where: str = ""


_STREAM = "gpu-stream/h200.txt"
_LATENCY = "gpu-latency/h100_pcie.txt"
_L2 = "gpu-l2-cache/h200.txt"
_H100_PCIE = "H100 PCIe, 1,755 MHz"

#: Every published measurement the boxes show, in the order each box lists them.
PUBLISHED: tuple[Published, ...] = (
    # gpu-benches' STREAM kernels on an H200, one block per SM, its last line (full occupancy)
    Published(("elementwise", "bandwidth"),
              "STREAM triad, two loads and a store per element as in `vector_add`, at full "
              "occupancy", 3534, "GB/s", "H200", "ernst2023gpubenches", _STREAM),
    Published(("memory", "copies"),
              "STREAM scale, a load and a store per element as in a copy, at full occupancy",
              3165, "GB/s", "H200", "ernst2023gpubenches", _STREAM),
    # the pointer chase of gpu-benches (cycles at 1,755 MHz), and its cache-bandwidth sweep
    Published(("memory", "hierarchy"), "L1 hit latency (pointer chase)", 34.2, "clock cycles",
              _H100_PCIE, "ernst2023gpubenches", _LATENCY),
    Published(("memory", "hierarchy"), "L2 hit latency, near partition (pointer chase)",
              265.5, "clock cycles", _H100_PCIE, "ernst2023gpubenches", _LATENCY),
    Published(("memory", "hierarchy"), "device-memory latency (pointer chase)", 650,
              "clock cycles", _H100_PCIE, "ernst2023gpubenches", _LATENCY),
    Published(("memory", "hierarchy"), "L2 read bandwidth, a data set of 12 MiB", 9716,
              "GB/s", "H200", "ernst2023gpubenches", _L2),
    Published(("memory", "hierarchy"), "device-memory read bandwidth, a data set of about 1 GB",
              3889, "GB/s", "H200", "ernst2023gpubenches", _L2),
    # Boehm's SGEMM worklog, n = 4092 (the README's table)
    Published(("matmul", "gflops"), "cuBLAS SGEMM at n = 4092", 23249.6, "GFLOP/s",
              "RTX A6000", "boehm2022sgemm"),
    Published(("matmul", "gflops"), "his 2-D block tiling (`v5_register_2d` here), share of "
              "cuBLAS", 68.7, "%", "RTX A6000", "boehm2022sgemm"),
    Published(("matmul", "gflops"), "his warp tiling (not in this book), share of cuBLAS",
              93.7, "%", "RTX A6000", "boehm2022sgemm"),
    # nccl-tests' own issue tracker: NCCL's maintainer on the ring; a user's 8-GPU run
    Published(("allreduce", "busbw"), "bus bandwidth of NCCL's ring all-reduce over NVLink "
              "(its protocol takes about 20% of the 450 GB/s line rate)", 370, "GB/s",
              "H100 SXM", "jeaugey2024nccl"),
    Published(("allreduce", "busbw"), "peak all-reduce bus bandwidth on 8 GPUs, NCCL 2.20.3 "
              "with NVLink SHARP", 475, "GB/s", "8 x H200", "vitduck2024ncclh200"),
    # FlashAttention-2's paper, section 4.1: forward and backward, FP16/BF16, at best
    Published(("attention", "times"), "FlashAttention-2 (FP16 or BF16), the best of its "
              "benchmark", 335, "TFLOP/s", "H100 SXM5", "dao2023flashattention2"),
    Published(("attention", "times"), "FlashAttention-2 (FP16 or BF16), the best of its "
              "benchmark, 73% of the peak", 230, "TFLOP/s", "A100 80GB SXM4",
              "dao2023flashattention2"),
)
