"""Latency and bandwidth per level of the GPU memory hierarchy, timed, and the articles' ratios
beside this GPU's.

Book section: Chapter 2, "Latency and bandwidth per level".

The kernels are :mod:`gpudl.kernels.hierarchy`'s: a one-thread pointer chase for latency, many
threads reading independent values for bandwidth. :func:`measure` times them all (part of the
``memory`` topic) and :func:`table` sets the ratios next to the claim of the articles the book
corrects (their Table 1: shared memory "2-10x", registers "20-30x" faster than global memory).
On Numba's CUDA simulator every result is checked, but its time says nothing about a GPU, and
every result says so (``meaningful=False``).
"""

from __future__ import annotations

from typing import Any

from gpudl import backend, hardware

# isort: split
import numpy as np
from numba import cuda

from gpudl.bench.timing import gbps, time_cuda
from gpudl.checks import check_bool, check_choice, check_instance, check_int
from gpudl.estimate.register_file import register_file_bandwidth_gbs
from gpudl.kernels import hierarchy as hierarchy_kernels
from gpudl.kernels.grid import resident_blocks

__all__ = ["WORKING_SETS", "DEFAULT_STEPS", "BANDWIDTH_LEVELS", "ARTICLE_CLAIMS", "latency",
           "bandwidth", "measure", "table"]


def _l2_working_set() -> int:
    """A quarter of the GPU's L2 (at most 16 MiB), or 4 MiB when its size is unknown."""
    l2 = hardware.describe().l2_cache_bytes
    return 4 * hierarchy_kernels.MiB if l2 is None else min(l2 // 4, 16 * hierarchy_kernels.MiB)


#: Working set of the pointer chase for each level, in bytes. For L1 16 KiB, well inside the
#: L1 of any GPU since Volta (128-256 KiB, shared with shared memory); for L2 far above any
#: L1, a quarter of the L2 so that it stays resident (H100's 50 MB L2 is two partitions of
#: 25 MB); for HBM (or GDDR, device memory) 1 GiB, far beyond any L2. Random hops over it miss
#: the TLBs at times, which is part of what a load from device memory costs. On the simulator
#: the sizes are tiny and the three levels are one (the CPU's memory).
WORKING_SETS: dict[str, int] = {
    "L1": backend.pick(gpu=16 * hierarchy_kernels.KiB, sim=512),
    "L2": backend.pick(gpu=_l2_working_set(), sim=2 * hierarchy_kernels.KiB),
    "HBM": backend.pick(gpu=hierarchy_kernels.GiB, sim=8 * hierarchy_kernels.KiB),
}

#: Hops per launch of the chase (and twice as many for the second launch of the slope). At
#: least as many as the L2 working set has slots (16 MiB / 128 bytes), so the timed hops of
#: the cache-resident levels all hit lines an earlier hop brought in.
DEFAULT_STEPS = backend.pick(gpu=1 << 17, sim=32)

#: Levels :func:`bandwidth` measures.
BANDWIDTH_LEVELS = ("shared", "L2", "HBM")

#: The articles' Table 1, how much faster than global memory each level is said to be.
ARTICLE_CLAIMS = {"shared": "2-10x", "registers": "20-30x"}

_WARMUP = backend.pick(gpu=2, sim=0)
_REPEATS = backend.pick(gpu=7, sim=1)
# Problem sizes. HBM: 1 GiB read once. L2: the L2 working set read 512 times in one launch.
# Shared: each block reads its 4 KiB 8192 times.
_HBM_SIZE = backend.pick(gpu=hierarchy_kernels.GiB // 4, sim=2048)
_L2_REPS = backend.pick(gpu=512, sim=4)
_SHARED_ITERS = backend.pick(gpu=8192, sim=2)


def latency(
    working_set_bytes: int,
    steps: int = DEFAULT_STEPS,
    *,
    shared: bool = False,
    stride_bytes: int = hierarchy_kernels.LINE_BYTES,
    seed: int = 0,
) -> dict[str, Any]:
    """Time one load of a level: a one-thread pointer chase over ``working_set_bytes``.

    A launch costs a few microseconds before its first hop, the time of hundreds of L1
    hits. So the chase is timed twice, for ``k = steps`` and ``2k`` hops, and the launch cost,
    common to both, cancels in the slope::

        ns per hop = (t(2k) - t(k)) / k

    which is also the time of the hops ``k+1 .. 2k`` alone: with ``steps`` at least the
    number of slots, those hops find a cache-resident chain already warm. ``shared=True``
    chases the chain in shared memory instead. Returns a dict: ``ns_per_hop``,
    ``cycles_per_hop`` (ns times the SM clock from :func:`gpudl.hardware.describe`, which is
    the boost clock the driver reports; ``None`` when unknown, as on the simulator),
    ``working_set_bytes``, ``stride_bytes``, ``slots``, ``steps`` (k and 2k), ``memory``
    (``"shared"`` or ``"global"``), ``timings`` and ``meaningful``.
    """
    working_set = check_int("working_set_bytes", working_set_bytes, 1)
    check_bool("shared", shared)
    stride_b = check_int("stride_bytes", stride_bytes, 1)
    k = check_int("steps", steps, 1)
    itemsize = np.dtype(np.int32).itemsize
    if working_set < itemsize:
        raise ValueError(
            f"working_set_bytes must hold at least one {itemsize}-byte element, "
            f"got {working_set}"
        )
    n_elements, stride = working_set // itemsize, max(1, stride_b // itemsize)
    chain = hierarchy_kernels.make_chain(n_elements, stride, seed)
    if shared and chain.nbytes > hierarchy_kernels.MAX_SHARED_CHAIN_BYTES:
        raise ValueError(
            f"a shared-memory chain must fit in {hierarchy_kernels.MAX_SHARED_CHAIN_BYTES} "
            f"bytes, got {chain.nbytes}"
        )
    chain_dev = cuda.to_device(chain)
    pos = cuda.to_device(np.zeros(1, dtype=chain.dtype))
    timings = []
    hops = 0
    for n_steps in (k, 2 * k):
        timings.append(time_cuda(hierarchy_kernels.launch_chase, chain_dev, n_steps, pos, shared,
                                 warmup=_WARMUP, repeats=_REPEATS))
        hops += (_WARMUP + _REPEATS) * n_steps
    hierarchy_kernels.check_chase(int(pos.copy_to_host()[0]), chain, hops)
    ns_per_hop = (timings[1].median - timings[0].median) / k * 1e9
    clock_khz = hardware.describe().sm_clock_khz
    return {
        "memory": "shared" if shared else "global",
        "working_set_bytes": working_set,
        "stride_bytes": stride_b,
        "slots": -(-n_elements // stride),
        "steps": (k, 2 * k),
        "ns_per_hop": ns_per_hop,
        "cycles_per_hop": None if clock_khz is None else ns_per_hop * clock_khz / 1e6,
        "timings": tuple(timings),
        "meaningful": all(t.meaningful for t in timings),
    }


def bandwidth(level: str) -> dict[str, Any]:
    """Read bandwidth of ``level`` (one of :data:`BANDWIDTH_LEVELS`), in GB/s.

    HBM: every thread of a full GPU sums its share of a 1 GiB float32 array. L2: the same
    kernel over :data:`WORKING_SETS` ``["L2"]`` read 512 times in one launch. Shared: every
    block reads its 4 KiB shared array 8192 times. The bytes counted are the bytes the
    kernel reads from that level (not the sums it writes, nor the 8 KiB each block copies
    into shared memory). The data are ones, so every sum is a count, checked after
    the timing (a mismatch raises ``RuntimeError``). Returns a dict: ``gbs``, ``bytes_read``,
    ``working_set_bytes``, ``timing`` and ``meaningful``.
    """
    check_choice("level", level, BANDWIDTH_LEVELS)
    blocks = resident_blocks(hierarchy_kernels.THREADS)
    out = cuda.to_device(np.full(blocks * hierarchy_kernels.THREADS, np.nan, dtype=np.float32))
    if level == "shared":
        data = cuda.to_device(np.ones(hierarchy_kernels.SHARED_WORDS, dtype=np.float32))
        args = (hierarchy_kernels.launch_shared_read, data, out, _SHARED_ITERS, blocks)
        bytes_read = blocks * _SHARED_ITERS * data.nbytes
        expected_total = bytes_read // data.dtype.itemsize
    else:
        n = _HBM_SIZE if level == "HBM" else WORKING_SETS["L2"] // 4
        reps = 1 if level == "HBM" else _L2_REPS
        data = cuda.to_device(np.ones(n, dtype=np.float32))
        args = (hierarchy_kernels.launch_read, data, out, reps, blocks)
        bytes_read = reps * data.nbytes
        expected_total = reps * n
    t = time_cuda(*args, warmup=_WARMUP, repeats=_REPEATS)
    total = out.copy_to_host().astype(np.float64).sum()
    if total != expected_total:
        raise RuntimeError(f"the {level} kernel read {total:g} values, expected {expected_total}")
    return {
        "level": level,
        "working_set_bytes": data.nbytes,
        "bytes_read": bytes_read,
        "gbs": gbps(bytes_read, t.median),
        "timing": t,
        "meaningful": t.meaningful,
    }


def measure(steps: int = DEFAULT_STEPS) -> dict[str, Any]:
    """Latency of shared memory, L1, L2 and HBM and bandwidth of shared memory, L2 and HBM.

    Returns ``{"latency": {level: latency dict}, "bandwidth": {level: bandwidth dict},
    "register_file_gbs": float or None}``, the input of :func:`table`.
    """
    lat = {"shared": latency(WORKING_SETS["L1"], steps, shared=True)}
    lat.update({level: latency(size, steps) for level, size in WORKING_SETS.items()})
    return {
        "latency": lat,
        "bandwidth": {level: bandwidth(level) for level in BANDWIDTH_LEVELS},
        "register_file_gbs": register_file_bandwidth_gbs(),
    }


_NOT_MEASURED = "not measured (simulator)"


def table(results: dict[str, Any]) -> str:
    """The articles' ratios next to this GPU's, as text, from :func:`measure`'s results.

    Two rows (shared vs global memory, registers vs global memory) and three columns: the
    articles' claim (their Table 1), the latency ratio HBM / shared measured here, the
    bandwidth ratio shared / HBM measured here. Registers have no latency to chase, and no
    kernel can read them alone: their bandwidth cell is the register-file bandwidth that FMAs
    imply (:func:`gpudl.estimate.register_file_bandwidth_gbs`) over the measured HBM
    bandwidth, derived, not measured. Results from the simulator print "not measured
    (simulator)".
    """
    check_instance("results", results, dict)
    try:
        lat_shared = results["latency"]["shared"]
        lat_hbm = results["latency"]["HBM"]
        bw_shared = results["bandwidth"]["shared"]
        bw_hbm = results["bandwidth"]["HBM"]
        register_gbs = results["register_file_gbs"]
    except (KeyError, TypeError) as err:
        raise ValueError(f"results must be what measure() returns; missing {err}") from None
    measured = all(r["meaningful"] for r in (lat_shared, lat_hbm, bw_shared, bw_hbm))
    if measured:
        latency_ratio = f"{lat_hbm['ns_per_hop'] / lat_shared['ns_per_hop']:.1f}x"
        bandwidth_ratio = f"{bw_shared['gbs'] / bw_hbm['gbs']:.1f}x"
        register_ratio = (
            "unknown (clock not reported)" if register_gbs is None
            else f"{register_gbs / bw_hbm['gbs']:.0f}x (derived, not measured)"
        )
    else:
        latency_ratio = bandwidth_ratio = register_ratio = _NOT_MEASURED
    rows = [
        ("", "the articles' claim", "your GPU: latency", "your GPU: bandwidth"),
        ("", "(their Table 1)", "HBM / shared", "shared / HBM"),
        ("shared vs global", ARTICLE_CLAIMS["shared"], latency_ratio, bandwidth_ratio),
        ("registers vs global", ARTICLE_CLAIMS["registers"], "none (nothing to chase)",
         register_ratio),
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(2, "  ".join("-" * w for w in widths))
    lines += [
        "registers: an FMA reads 3 register operands per core per clock; on a GPU the",
        "registers row is FP32 cores x 3 x 4 bytes x SM clock over the measured HBM bandwidth",
        "(derived, not measured).",
    ]
    return "\n".join(lines)
