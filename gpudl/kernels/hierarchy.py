"""Latency and bandwidth per level of the GPU memory hierarchy, measured by kernels.

Book section: Chapter 2, "Latency and bandwidth per level".

Two questions, two kinds of kernel:

* **Latency** (how long one load takes when nothing hides it): one thread follows a pointer
  chain, ``j = chain[j]``, through a working set sized to fit one level (L1, L2, or nothing:
  HBM), or through shared memory. Each load needs the result of the one before, so the hops
  cannot overlap and the time per hop is the latency of the level that holds the chain.
* **Bandwidth** (how many bytes per second a level delivers when every SM keeps it busy):
  many threads read independent values and sum them, from a large array (HBM), from a small
  array read over and over (L2) or from a shared-memory array (shared memory).

:func:`measure` runs them all and :func:`table` sets the ratios next to the claim of the
articles the book corrects (their Table 1: shared memory "2-10x", registers "20-30x" faster
than global memory).

On Numba's CUDA simulator the kernels run at tiny sizes on the CPU: their results are checked
(the final index of every chase, the sums of every bandwidth kernel) but their times say
nothing about a GPU, and every result says so (``meaningful=False``).
"""

from __future__ import annotations

import functools
from typing import Any

from gpudl import backend, hardware, timing
from gpudl.checks import check_float32_array, check_int

# isort: split
import numpy as np
from numba import cuda, float32, int32, njit, uint64

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "KiB",
    "MiB",
    "GiB",
    "LINE_BYTES",
    "WORKING_SETS",
    "DEFAULT_STEPS",
    "MAX_SHARED_CHAIN_BYTES",
    "SHARED_WORDS",
    "BANDWIDTH_LEVELS",
    "ARTICLE_CLAIMS",
    "make_chain",
    "reference_chase",
    "pointer_chase",
    "latency",
    "reference_read_sums",
    "read_sums",
    "reference_shared_sums",
    "shared_sums",
    "bandwidth",
    "register_file_bandwidth_gbs",
    "measure",
    "table",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: Bytes between two slots of a chain, one L1 cache line (128 bytes, four 32-byte sectors),
#: so every hop lands on a line (and a sector) that the previous hop did not bring in.
LINE_BYTES = 128


def _l2_working_set() -> int:
    """A quarter of the GPU's L2 (at most 16 MiB), or 4 MiB when its size is unknown."""
    l2 = hardware.describe().l2_cache_bytes
    return 4 * MiB if l2 is None else min(l2 // 4, 16 * MiB)


#: Working set of the pointer chase for each level, in bytes. For L1 16 KiB, well inside the
#: L1 of any GPU since Volta (128-256 KiB, shared with shared memory); for L2 far above any
#: L1, a quarter of the L2 so that it stays resident (H100's 50 MB L2 is two partitions of
#: 25 MB); for HBM (or GDDR, device memory) 1 GiB, far beyond any L2. Random hops over it miss the
#: TLBs at times, which is part of what a load from device memory costs. On the simulator
#: the sizes are tiny and the three levels are one (the CPU's memory).
WORKING_SETS: dict[str, int] = {
    "L1": backend.pick(gpu=16 * KiB, sim=512),
    "L2": backend.pick(gpu=_l2_working_set(), sim=2 * KiB),
    "HBM": backend.pick(gpu=GiB, sim=8 * KiB),
}

#: Hops per launch of the chase (and twice as many for the second launch of the slope). At
#: least as many as the L2 working set has slots (16 MiB / 128 bytes), so the timed hops of
#: the cache-resident levels all hit lines an earlier hop brought in.
DEFAULT_STEPS = backend.pick(gpu=1 << 17, sim=32)

#: The largest chain the shared-memory chase takes, the 48 KiB of dynamic shared memory a
#: block gets without opting in to more.
MAX_SHARED_CHAIN_BYTES = 48 * KiB

_WARMUP = backend.pick(gpu=2, sim=0)
_REPEATS = backend.pick(gpu=7, sim=1)
_THREADS = backend.pick(gpu=256, sim=32)  # threads per block of the multi-thread kernels



# ------------------------------------------------------------------------------------------
# Latency: pointer chasing
# ------------------------------------------------------------------------------------------


def make_chain(n_elements: int, stride_elements: int, seed: int = 0) -> np.ndarray:
    """A pointer chain: one random cycle through the slots ``0, stride, 2 stride, ...``.

    ``chain[s]`` is the slot after slot ``s``; following it from any slot visits every slot
    once before coming back. The other elements hold -1 (never read by a correct chase).
    Slots one cache line apart (``stride_elements * itemsize >= 128`` bytes) put every hop
    on a new line. The order is a random permutation rather than ``s -> s + stride``: a
    regular stride lets the hardware (and the compiler) guess the next address, a random
    order leaves it nothing to predict. int32 when the indices fit, else int64.
    """
    n = check_int("n_elements", n_elements, 1)
    stride = check_int("stride_elements", stride_elements, 1)
    dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64
    slots = np.arange(0, n, stride, dtype=dtype)
    order = slots[np.random.default_rng(seed).permutation(slots.size)]
    chain = np.full(n, -1, dtype=dtype)
    chain[order] = np.roll(order, -1)
    return chain


@njit
def _host_chase(chain, start, steps):
    j = start
    for _ in range(steps):
        j = chain[j]
    return j


def reference_chase(chain: np.ndarray, steps: int, start: int = 0) -> int:
    """The index reached after ``steps`` hops from ``start``, followed on the CPU."""
    _check_chain(chain)
    check_int("steps", steps, 1)
    if not 0 <= check_int("start", start, 0) < chain.size or chain[start] < 0:
        raise ValueError(f"start must be a slot of the chain, got {start}")
    return int(_host_chase(chain, chain.dtype.type(start), steps))


# x[i] for an index i >= 0, read as unsigned: numba wraps negative indices around (x[-1] is
# the last element), which costs three integer instructions before every load of a signed
# index; an unsigned one leaves only the address computation (one multiply-add).
@cuda.jit(device=True)
def _load(x, i):
    return x[uint64(i)]


# One thread, because a latency is the time of one load that nothing overlaps: with more
# threads the SM would issue their loads while the first one is in flight and we would time
# throughput. The chase starts at pos[0] and leaves its final index there: the store keeps
# the compiler from dropping the loads, and the next launch carries on where this one
# stopped, so repeated launches over the HBM working set keep reaching lines that no earlier
# launch left in L2. Between two loads there is only the address computation, as in a
# pointer chase written in CUDA C: a few cycles, part of every hop's time on every level.
@cuda.jit
def _chase_kernel(chain, steps, pos):
    j = pos[0]
    for _ in range(steps):
        j = _load(chain, j)
    pos[0] = j


# The same chase inside shared memory: the block first copies the chain into dynamic shared
# memory (all its threads, coalesced), then thread 0 alone chases it. Shared memory has no
# lines and no cache in front of it, so every hop costs the same.
@cuda.jit
def _shared_chase_kernel(chain, steps, pos):
    s = cuda.shared.array(0, dtype=int32)
    for i in range(cuda.threadIdx.x, chain.size, cuda.blockDim.x):
        s[i] = chain[i]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        j = pos[0]
        for _ in range(steps):
            j = _load(s, j)
        pos[0] = j


def _launch_chase(chain: Array, steps: int, pos: Array, shared: bool) -> None:
    if shared:
        _shared_chase_kernel[1, _THREADS, 0, chain.nbytes](chain, steps, pos)
    else:
        _chase_kernel[1, 1](chain, steps, pos)


def _check_chain(chain: object, shared: bool = False) -> None:
    if not isinstance(chain, np.ndarray):
        raise TypeError(f"chain must be a NumPy array from make_chain, got {type(chain).__name__}")
    wanted = (np.int32,) if shared else (np.int32, np.int64)
    if chain.dtype not in wanted or chain.ndim != 1:
        raise TypeError(
            f"chain must be a 1-D array of {' or '.join(np.dtype(t).name for t in wanted)}, "
            f"got {chain.ndim}-D {chain.dtype}"
        )
    if chain.size == 0:
        raise ValueError("chain must not be empty")
    if shared and chain.nbytes > MAX_SHARED_CHAIN_BYTES:
        raise ValueError(
            f"a shared-memory chain must fit in {MAX_SHARED_CHAIN_BYTES} bytes, "
            f"got {chain.nbytes}"
        )


def _check_chase_result(got: int, chain: np.ndarray, steps: int) -> None:
    expected = reference_chase(chain, steps)
    if got != expected:
        raise RuntimeError(
            f"the chase ended at index {got} after {steps} hops, the CPU at {expected}"
        )


def pointer_chase(chain: np.ndarray, steps: int, shared: bool = False) -> int:
    """Follow ``chain`` for ``steps`` hops from slot 0 in one GPU thread; the final index.

    ``shared=True`` chases a copy of the chain in shared memory (int32, at most
    :data:`MAX_SHARED_CHAIN_BYTES`). The result is checked against :func:`reference_chase`
    (a mismatch raises ``RuntimeError``).
    """
    _check_chain(chain, shared)
    check_int("steps", steps, 1)
    pos = cuda.to_device(np.zeros(1, dtype=chain.dtype))
    _launch_chase(cuda.to_device(chain), steps, pos, shared)
    got = int(pos.copy_to_host()[0])
    _check_chase_result(got, chain, steps)
    return got


def latency(
    working_set_bytes: int,
    steps: int = DEFAULT_STEPS,
    *,
    shared: bool = False,
    stride_bytes: int = LINE_BYTES,
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
    stride_b = check_int("stride_bytes", stride_bytes, 1)
    k = check_int("steps", steps, 1)
    itemsize = np.dtype(np.int32).itemsize
    if working_set < itemsize:
        raise ValueError(
            f"working_set_bytes must hold at least one {itemsize}-byte element, "
            f"got {working_set}"
        )
    n_elements, stride = working_set // itemsize, max(1, stride_b // itemsize)
    chain = make_chain(n_elements, stride, seed)
    _check_chain(chain, shared)
    chain_dev = cuda.to_device(chain)
    pos = cuda.to_device(np.zeros(1, dtype=chain.dtype))
    timings = []
    hops = 0
    for n_steps in (k, 2 * k):
        timings.append(timing.time_cuda(
            _launch_chase, chain_dev, n_steps, pos, shared, warmup=_WARMUP, repeats=_REPEATS
        ))
        hops += (_WARMUP + _REPEATS) * n_steps
    _check_chase_result(int(pos.copy_to_host()[0]), chain, hops)
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


# ------------------------------------------------------------------------------------------
# Bandwidth: HBM and L2 (one kernel), shared memory
# ------------------------------------------------------------------------------------------

#: Levels :func:`bandwidth` measures.
BANDWIDTH_LEVELS = ("shared", "L2", "HBM")


@functools.cache
def _blocks() -> int:
    """Eight blocks of 256 threads per SM: 2048 threads, as many as any SM holds (where an
    SM holds fewer, the other blocks wait their turn); two blocks on the simulator."""
    if backend.is_simulator():
        return 2
    return 8 * cuda.get_current_device().MULTIPROCESSOR_COUNT


# Many threads, each summing every T-th float of the array (T: the threads of the grid), so
# a warp's 32 loads are 32 consecutive floats (coalesced) and the whole GPU reads at once.
# Four independent loads per iteration: a thread issues all four before it needs the first,
# which puts enough bytes in flight to cover the memory latency. Each thread writes its sum
# once: a load whose value nobody uses would be removed by the compiler. With reps > 1 the
# array is read again and again (the L2 measurement, on an array that fits in L2); in each
# repetition thread g takes the part of the array that thread g + B took in the previous one
# (B: threads per block), so an SM does not find its previous repetition's data in its own
# L1 and the reads are served by L2.
@cuda.jit
def _read_kernel(a, out, reps):
    g = cuda.grid(1)
    n_threads = cuda.gridsize(1)
    v = g
    acc = float32(0.0)
    for _ in range(reps):
        i = v
        while i + 3 * n_threads < a.size:
            acc += (_load(a, i) + _load(a, i + n_threads)) + (
                _load(a, i + 2 * n_threads) + _load(a, i + 3 * n_threads)
            )
            i += 4 * n_threads
        while i < a.size:
            acc += _load(a, i)
            i += n_threads
        v += cuda.blockDim.x
        if v >= n_threads:
            v -= n_threads
    out[g] = acc


def reference_read_sums(
    a: np.ndarray, reps: int, blocks: int, threads_per_block: int
) -> np.ndarray:
    """What :func:`read_sums` computes, in float64 on the host: thread g's sum over the
    repetitions r of the elements ``v, v + T, v + 2T, ...`` with ``v = (g + r B) mod T``."""
    n_threads = blocks * threads_per_block
    padded = np.zeros(-(-a.size // n_threads) * n_threads)
    padded[: a.size] = a
    per_start = padded.reshape(-1, n_threads).sum(axis=0)
    g = np.arange(n_threads)
    return sum(per_start[(g + r * threads_per_block) % n_threads] for r in range(reps))


def read_sums(
    a: Array, reps: int = 1, blocks: int | None = None, threads_per_block: int = _THREADS
) -> Array:
    """Run the HBM/L2 read kernel on the float32 vector ``a``: one sum per thread.

    ``blocks`` defaults to enough to fill the GPU (2 on the simulator). Host input gives a
    host result, a device array a device array.
    """
    blocks = _blocks() if blocks is None else blocks
    _check_launch(reps=reps, blocks=blocks, threads_per_block=threads_per_block)
    on_device = _check_vector("a", a)
    a_dev = a if on_device else cuda.to_device(a)
    out = cuda.to_device(np.full(blocks * threads_per_block, np.nan, dtype=np.float32))
    _read_kernel[blocks, threads_per_block](a_dev, out, reps)
    return out if on_device else out.copy_to_host()


#: Floats in the shared array of the shared-memory bandwidth kernel (4 KiB, a power of two:
#: an offset wraps around with a mask). Each block holds it twice over, 8 KiB.
SHARED_WORDS = 1024
_SHARED_MASK = SHARED_WORDS - 1
_SHARED_ARRAY = 2 * SHARED_WORDS  # a name, not an expression: numba needs a constant size
_PER_THREAD = SHARED_WORDS // _THREADS  # words each thread reads per iteration


# Each block copies SHARED_WORDS floats into shared memory twice over (s[i] = src[i mod
# SHARED_WORDS] for i < 2 * SHARED_WORDS), then in iteration it every thread t reads the
# words base + k * _THREADS, k < _PER_THREAD, with base = t + (32 * it mod SHARED_WORDS), and
# sums them. Conflict-free: shared memory has 32 banks of 4 bytes and the 32 lanes of a warp
# read 32 consecutive words, one per bank, so each warp's load is served in one pass. The
# block size is a compile-time constant and the array is doubled so that no index wraps:
# the loads of an iteration sit at constant offsets from one base address, with no index
# arithmetic between them. The base moves each iteration, or the compiler would load the
# words once and reuse them from registers; one sum is written per thread so that no load
# is dead. Launch with exactly _THREADS threads per block.
@cuda.jit
def _shared_read_kernel(src, out, iters):
    s = cuda.shared.array(_SHARED_ARRAY, dtype=float32)
    t = cuda.threadIdx.x
    for k in range(2 * _PER_THREAD):
        s[t + k * _THREADS] = src[(t + k * _THREADS) & _SHARED_MASK]
    cuda.syncthreads()
    acc = float32(0.0)
    for it in range(iters):
        base = t + ((32 * it) & _SHARED_MASK)
        for k in range(_PER_THREAD):
            acc += _load(s, base + k * _THREADS)
    out[cuda.grid(1)] = acc


def reference_shared_sums(src: np.ndarray, iters: int, blocks: int) -> np.ndarray:
    """What :func:`shared_sums` computes, in float64 on the host: thread t of every block
    sums ``src[(t + 32 it + k T) mod SHARED_WORDS]`` over ``it < iters`` and
    ``k < SHARED_WORDS / T`` (T: threads per block)."""
    t = np.arange(_THREADS)[:, None, None]
    it = np.arange(iters)[None, :, None]
    k = np.arange(_PER_THREAD)[None, None, :]
    words = np.asarray(src, dtype=np.float64)[(t + 32 * it + k * _THREADS) % SHARED_WORDS]
    return np.tile(words.sum(axis=(1, 2)), blocks)


def shared_sums(src: Array, iters: int, blocks: int | None = None) -> Array:
    """Run the shared-memory read kernel on ``src`` (:data:`SHARED_WORDS` float32 values,
    copied into every block's shared array): one sum per thread, 256 threads per block (32
    on the simulator)."""
    blocks = _blocks() if blocks is None else blocks
    _check_launch(iters=iters, blocks=blocks)
    on_device = _check_vector("src", src)
    if src.size != SHARED_WORDS:
        raise ValueError(f"src must have {SHARED_WORDS} elements, got {src.size}")
    src_dev = src if on_device else cuda.to_device(src)
    out = cuda.to_device(np.full(blocks * _THREADS, np.nan, dtype=np.float32))
    _shared_read_kernel[blocks, _THREADS](src_dev, out, iters)
    return out if on_device else out.copy_to_host()


# Problem sizes. HBM: 1 GiB read once. L2: the L2 working set read 512 times in one launch.
# Shared: each block reads its 4 KiB 8192 times.
_HBM_SIZE = backend.pick(gpu=GiB // 4, sim=2048)
_L2_REPS = backend.pick(gpu=512, sim=4)
_SHARED_ITERS = backend.pick(gpu=8192, sim=2)


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
    if level not in BANDWIDTH_LEVELS:
        raise ValueError(f"level must be one of {BANDWIDTH_LEVELS}, got {level!r}")
    blocks, threads = _blocks(), _THREADS
    out = cuda.to_device(np.full(blocks * threads, np.nan, dtype=np.float32))
    if level == "shared":
        data = cuda.to_device(np.ones(SHARED_WORDS, dtype=np.float32))
        launch = lambda: _shared_read_kernel[blocks, threads](data, out, _SHARED_ITERS)
        bytes_read = blocks * _SHARED_ITERS * data.nbytes
        expected_total = bytes_read // data.dtype.itemsize
    else:
        n = _HBM_SIZE if level == "HBM" else WORKING_SETS["L2"] // 4
        reps = 1 if level == "HBM" else _L2_REPS
        data = cuda.to_device(np.ones(n, dtype=np.float32))
        launch = lambda: _read_kernel[blocks, threads](data, out, reps)
        bytes_read = reps * data.nbytes
        expected_total = reps * n
    t = timing.time_cuda(launch, warmup=_WARMUP, repeats=_REPEATS)
    total = out.copy_to_host().astype(np.float64).sum()
    if total != expected_total:
        raise RuntimeError(f"the {level} kernel read {total:g} values, expected {expected_total}")
    return {
        "level": level,
        "working_set_bytes": data.nbytes,
        "bytes_read": bytes_read,
        "gbs": timing.gbps(bytes_read, t.median),
        "timing": t,
        "meaningful": t.meaningful,
    }


# ------------------------------------------------------------------------------------------
# All levels, and the table of ratios
# ------------------------------------------------------------------------------------------

#: The articles' Table 1, how much faster than global memory each level is said to be.
ARTICLE_CLAIMS = {"shared": "2-10x", "registers": "20-30x"}


def register_file_bandwidth_gbs(info: hardware.DeviceInfo | None = None) -> float | None:
    """The register-file bandwidth an FMA stream implies, in GB/s: derived, not measured.

    Every FP32 core can start one fused multiply-add per clock, which reads three 4-byte
    register operands: ``cores * 3 * 4 bytes * SM clock``. ``None`` when a fact is unknown
    (on the simulator). ``info`` defaults to :func:`gpudl.hardware.describe`.
    """
    info = hardware.describe() if info is None else info
    if None in (info.sm_count, info.fp32_cores_per_sm, info.sm_clock_khz):
        return None
    return info.sm_count * info.fp32_cores_per_sm * 3 * 4 * info.sm_clock_khz * 1e3 / 1e9


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
    imply (:func:`register_file_bandwidth_gbs`) over the measured HBM bandwidth, derived,
    not measured. Results from the simulator print "not measured (simulator)".
    """
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
        "registers: an FMA reads 3 register operands per core per clock; the registers row",
        "is FP32 cores x 3 x 4 bytes x SM clock over the HBM bandwidth: derived, not measured.",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------


def _check_launch(**counts: object) -> None:
    for name, value in counts.items():
        check_int(name, value, 1)
    threads = counts.get("threads_per_block", 32)
    if threads > 1024 or threads % 32:
        raise ValueError(
            f"threads_per_block must be a multiple of 32 between 32 and 1024, got {threads}"
        )


def _check_vector(name: str, x: object) -> bool:
    """Check a non-empty, 1-D, contiguous float32 vector; return True if it is on the device."""
    on_device = check_float32_array(name, x, 1)
    if x.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {x.shape}")
    return on_device
