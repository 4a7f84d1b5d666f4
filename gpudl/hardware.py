"""Device facts, a table of real GPUs, and the CUDA occupancy rules.

Book section: Chapter 1, GPU hardware and SIMT.

* :func:`describe` reads the current device's facts from the CUDA driver (through numba) and
  derives its peak memory bandwidth and FP32 rate. On Numba's CUDA simulator there is no device:
  it says so and leaves every fact it cannot know as ``None``.
* :data:`SPECS` holds vendor datasheet numbers for GPUs the book talks about, each with the
  BibTeX key of its source in ``book/references.bib``; :func:`spec` looks one up.
* :func:`peak_flops` and :func:`compare_gpus` compare GPUs for Chapter 7 ("Choosing a GPU"):
  datasheet peaks per precision, memory and power (the matmul rate this machine reaches is
  measured by :mod:`gpudl.bench.precision`).
* :func:`occupancy` applies the rules of NVIDIA's occupancy calculator (``cuda_occupancy.h``) to
  a block size, a register count and a shared-memory size, and says which resource limits how
  many blocks an SM holds at once.

Per-compute-capability facts come from the CUDA C++ Programming Guide ("Compute Capabilities":
FP32 cores per SM, per-SM limits) and the CUDA C++ Best Practices Guide ("Throughput of Native
Arithmetic Instructions"); the allocation rules from ``cuda_occupancy.h`` in the CUDA Toolkit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudl import backend
from gpudl.checks import check_choice, check_compute_capability, check_int, check_positive

# isort: split
from numba import cuda

__all__ = [
    "DeviceInfo",
    "describe",
    "FP32_CORES_PER_SM",
    "GpuSpec",
    "SPECS",
    "spec",
    "datasheet_number",
    "PRECISIONS",
    "peak_flops",
    "compare_gpus",
    "SmLimits",
    "SM_LIMITS",
    "Occupancy",
    "occupancy",
]

SIMULATOR_NAME = "Numba CUDA simulator (no GPU)"

# FP32 results per clock per SM, i.e. FP32 "CUDA cores" per SM, by compute capability. 2.x and
# 3.x: the Arithmetic Instructions throughput table of older Programming Guides
# (nvidia2016cudaguide8); 5.x to 12.0: the Programming Guide's per-architecture SM descriptions
# (nvidia2025cudaguide) and the Best Practices Guide's throughput table, 32-bit floating-point
# add, multiply, multiply-add (nvidia2025bestpractices).
FP32_CORES_PER_SM: dict[tuple[int, int], int] = {
    (2, 0): 32, (2, 1): 48,
    (3, 0): 192, (3, 2): 192, (3, 5): 192, (3, 7): 192,
    (5, 0): 128, (5, 2): 128, (5, 3): 128,
    (6, 0): 64, (6, 1): 128, (6, 2): 128,
    (7, 0): 64, (7, 2): 64, (7, 5): 64,
    (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
    (9, 0): 128, (10, 0): 128, (12, 0): 128,
}  # fmt: skip


# --------------------------------------------------------------------------------------------
# The current device.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """Facts about one device; ``None`` where the backend or the driver does not give them.

    ``peak_memory_bandwidth_gbs`` and ``peak_fp32_tflops`` are derived from the others: the
    memory moves data on both clock edges (2 x memory clock x bus width / 8 bytes per second),
    and each FP32 core completes one fused multiply-add, 2 flops, per SM clock.
    """

    backend: str  # "cuda" or "simulator"
    name: str
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None
    fp32_cores_per_sm: int | None = None
    warp_size: int | None = None
    max_threads_per_block: int | None = None
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    max_shared_memory_per_block: int | None = None  # bytes, without opting in
    max_shared_memory_per_block_optin: int | None = None  # bytes
    max_shared_memory_per_sm: int | None = None  # bytes
    registers_per_block: int | None = None
    registers_per_sm: int | None = None
    l2_cache_bytes: int | None = None
    memory_bytes: int | None = None
    memory_clock_khz: int | None = None
    memory_bus_width_bits: int | None = None
    sm_clock_khz: int | None = None
    peak_memory_bandwidth_gbs: float | None = field(init=False)
    peak_fp32_tflops: float | None = field(init=False)

    def __post_init__(self) -> None:
        bandwidth = None
        if self.memory_clock_khz is not None and self.memory_bus_width_bits is not None:
            bandwidth = 2 * self.memory_clock_khz * 1e3 * self.memory_bus_width_bits / 8 / 1e9
        flops = None
        if None not in (self.sm_count, self.fp32_cores_per_sm, self.sm_clock_khz):
            flops = self.sm_count * self.fp32_cores_per_sm * 2 * self.sm_clock_khz * 1e3 / 1e12
        object.__setattr__(self, "peak_memory_bandwidth_gbs", bandwidth)
        object.__setattr__(self, "peak_fp32_tflops", flops)

    def summary(self) -> str:
        """The facts as short lines of text, unknown ones marked as such."""
        unknown = (
            "unknown (simulator)" if self.backend == "simulator"
            else "unknown (not reported by the driver)"
        )

        def show(value: object, fmt: str) -> str:
            return unknown if value is None else fmt.format(value)

        cc = self.compute_capability
        rows = [
            ("backend", self.backend),
            ("compute capability", unknown if cc is None else f"{cc[0]}.{cc[1]}"),
            ("SMs", show(self.sm_count, "{}")),
            ("FP32 cores per SM", show(self.fp32_cores_per_sm, "{}")),
            ("warp size", show(self.warp_size, "{} threads")),
            ("max threads per block", show(self.max_threads_per_block, "{}")),
            ("max threads per SM", show(self.max_threads_per_sm, "{}")),
            ("max blocks per SM", show(self.max_blocks_per_sm, "{}")),
            ("shared memory per block", show(_scaled(self.max_shared_memory_per_block, 1024),
                                             "{:g} KiB")),
            ("  with opt-in", show(_scaled(self.max_shared_memory_per_block_optin, 1024),
                                   "{:g} KiB")),
            ("shared memory per SM", show(_scaled(self.max_shared_memory_per_sm, 1024),
                                          "{:g} KiB")),
            ("registers per block", show(self.registers_per_block, "{}")),
            ("registers per SM", show(self.registers_per_sm, "{}")),
            ("L2 cache", show(_scaled(self.l2_cache_bytes, 2**20), "{:g} MiB")),
            ("memory", show(_scaled(self.memory_bytes, 2**30), "{:.1f} GiB")),
            ("memory clock", show(_scaled(self.memory_clock_khz, 1e3), "{:g} MHz")),
            ("memory bus width", show(self.memory_bus_width_bits, "{} bits")),
            ("SM clock", show(_scaled(self.sm_clock_khz, 1e3), "{:g} MHz")),
            ("peak memory bandwidth", show(self.peak_memory_bandwidth_gbs, "{:.1f} GB/s")),
            ("peak FP32", show(self.peak_fp32_tflops, "{:.2f} TFLOP/s")),
        ]
        width = max(len(label) for label, _ in rows)
        return "\n".join([self.name] + [f"  {label:<{width}}  {text}" for label, text in rows])


def _scaled(value: int | None, unit: float) -> float | None:
    return None if value is None else value / unit


def describe() -> DeviceInfo:
    """Facts about the current device, read from the CUDA driver (or the simulator's none)."""
    if backend.is_simulator():
        # The simulator's device object reports compute capability (5, 2), which describes no
        # real hardware: it is not passed on.
        return DeviceInfo(backend="simulator", name=SIMULATOR_NAME, warp_size=backend.WARP_SIZE)
    from numba.cuda.cudadrv.error import CudaDriverError

    dev = cuda.get_current_device()

    def attribute(name: str) -> int | None:
        # Named after the driver's CU_DEVICE_ATTRIBUTE_*; some (the clocks) may be missing or
        # refused by newer drivers, or read as 0.
        try:
            value = int(getattr(dev, name))
        except (AttributeError, CudaDriverError):
            return None
        return value if value > 0 else None

    cc = tuple(dev.compute_capability)
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceInfo(
        backend="cuda",
        name=name,
        compute_capability=cc,
        sm_count=attribute("MULTIPROCESSOR_COUNT"),
        fp32_cores_per_sm=FP32_CORES_PER_SM.get(cc),
        warp_size=attribute("WARP_SIZE"),
        max_threads_per_block=attribute("MAX_THREADS_PER_BLOCK"),
        max_threads_per_sm=attribute("MAX_THREADS_PER_MULTIPROCESSOR"),
        max_blocks_per_sm=attribute("MAX_BLOCKS_PER_MULTIPROCESSOR"),
        max_shared_memory_per_block=attribute("MAX_SHARED_MEMORY_PER_BLOCK"),
        max_shared_memory_per_block_optin=attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        max_shared_memory_per_sm=attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        registers_per_block=attribute("MAX_REGISTERS_PER_BLOCK"),
        registers_per_sm=attribute("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        l2_cache_bytes=attribute("L2_CACHE_SIZE"),
        memory_bytes=int(cuda.current_context().get_memory_info().total),
        memory_clock_khz=attribute("MEMORY_CLOCK_RATE"),
        memory_bus_width_bits=attribute("GLOBAL_MEMORY_BUS_WIDTH"),
        sm_clock_khz=attribute("CLOCK_RATE"),
    )


# --------------------------------------------------------------------------------------------
# Real GPUs, from their vendor's datasheets.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's published figures. Tensor rates are dense (without 2:4 sparsity).

    ``fp16_tensor_tflops`` is FP16 inputs with FP32 accumulation, the mixed-precision training
    case; ``None`` where the GPU has no tensor cores (and ``bf16_tflops`` also where its tensor
    cores have no bfloat16). ``tf32_tflops`` is the tensor cores' TF32 rate (float32 products
    with inputs rounded to 10-bit mantissas, Chapter 8), ``None`` where the GPU has none or
    the source does not give it. ``cuda_cores`` is the published count, which must equal
    ``sm_count * fp32_cores_per_sm``. ``source`` is a key of ``book/references.bib``.
    """

    name: str
    architecture: str
    year: int
    compute_capability: tuple[int, int]
    sm_count: int
    fp32_cores_per_sm: int
    cuda_cores: int
    memory_gb: float
    memory_type: str
    memory_bandwidth_gbs: float
    fp32_tflops: float
    fp16_tensor_tflops: float | None
    bf16_tflops: float | None
    tdp_watts: float
    source: str
    tf32_tflops: float | None = None


_SPEC_LIST = [
    # Each SM has 32 cores (Fermi whitepaper); 1,581 GFLOP/s = 512 cores x 2 x 1,544 MHz. The
    # reference card has 1.5 GB; AlexNet was trained on two 3 GB boards (Krizhevsky et al.
    # 2012), which keep the reference card's 384-bit, 4,008 MT/s memory.
    GpuSpec("GTX 580 3GB", "Fermi", 2010, (2, 0), 16, 32, 512, 3.0, "GDDR5", 192.4,
            1.581, None, None, 244, "nvidia2010gtx580"),
    # SXM2 figures from the V100 datasheet (the 32 GB model was announced in 2018); SM count
    # from the Volta whitepaper. Volta's tensor cores have no bfloat16.
    GpuSpec("V100 SXM2 32GB", "Volta", 2018, (7, 0), 80, 64, 5120, 32.0, "HBM2", 900.0,
            15.7, 125.0, None, 300, "nvidia2018v100"),
    # Jetson Nano: one Maxwell SM. NVIDIA quotes 472 GFLOPS, which is FP16; FP16 runs at twice
    # the FP32 rate on compute capability 5.3, so FP32 is 236 GFLOP/s (128 x 2 x 921.6 MHz).
    # Power modes are 5 W and 10 W. No tensor cores.
    GpuSpec("Jetson Nano", "Maxwell", 2019, (5, 3), 1, 128, 128, 4.0, "LPDDR4", 25.6,
            0.236, None, None, 10, "nvidia2019jetsonnano"),
    # The datasheet quotes 624 TFLOPS FP16/BF16 "with sparsity"; dense is half, 312.
    # TF32: 312 TFLOPS with sparsity, 156 dense.
    GpuSpec("A100 40GB SXM", "Ampere", 2020, (8, 0), 108, 64, 6912, 40.0, "HBM2", 1555.0,
            19.5, 312.0, 312.0, 400, "nvidia2020a100", tf32_tflops=156.0),
    GpuSpec("A100 80GB SXM", "Ampere", 2020, (8, 0), 108, 64, 6912, 80.0, "HBM2e", 2039.0,
            19.5, 312.0, 312.0, 400, "nvidia2020a100", tf32_tflops=156.0),
    # The datasheet's "Tensor performance 309.7 TFLOPS" is with sparsity: dense 154.8, which
    # is 84 SMs x 1,024 FP16 flops per clock x 1.8 GHz. Professional GA102 boards (A6000,
    # A40) run FP32 accumulation and BF16 at that full rate (the A40 datasheet lists both).
    GpuSpec("RTX A6000", "Ampere", 2020, (8, 6), 84, 128, 10752, 48.0, "GDDR6", 768.0,
            38.7, 154.8, 154.8, 300, "nvidia2020a6000"),
    # FP16 and BF16 tensor: 1,979 TFLOPS "with sparsity" in the datasheet, dense 989; TF32:
    # 989 with sparsity, 494.5 dense.
    GpuSpec("H100 SXM", "Hopper", 2022, (9, 0), 132, 128, 16896, 80.0, "HBM3", 3350.0,
            67.0, 989.0, 989.0, 700, "nvidia2022h100", tf32_tflops=494.5),
    # Ada whitepaper: FP16 tensor 165.2 TFLOPS with FP32 accumulate (330.3 with FP16
    # accumulate, GeForce runs FP32 accumulation at half rate), BF16 165.2, TF32 82.6; dense.
    GpuSpec("RTX 4090", "Ada Lovelace", 2022, (8, 9), 128, 128, 16384, 24.0, "GDDR6X", 1008.0,
            82.6, 165.2, 165.2, 450, "nvidia2022ada", tf32_tflops=82.6),
    # The datasheet's FP16 and BF16 tensor 242 TFLOPS are with sparsity: dense 121; TF32 120
    # with sparsity, 60 dense.
    GpuSpec("L4", "Ada Lovelace", 2023, (8, 9), 58, 128, 7424, 24.0, "GDDR6", 300.0,
            30.3, 121.0, 121.0, 72, "nvidia2023l4", tf32_tflops=60.0),
    # The H100's GPU with 141 GB of HBM3e: the datasheet lists the same compute figures
    # (FP16/BF16 1,979 TFLOPS with sparsity, so 989 dense; TF32 989 sparse, 494.5 dense).
    GpuSpec("H200 SXM", "Hopper", 2024, (9, 0), 132, 128, 16896, 141.0, "HBM3e", 4800.0,
            67.0, 989.0, 989.0, 700, "nvidia2024h200", tf32_tflops=494.5),
]

#: GPU name -> :class:`GpuSpec`, from the vendors' datasheets (rendered in Chapter 1).
SPECS: dict[str, GpuSpec] = {s.name: s for s in _SPEC_LIST}


def datasheet_number(value: float | None) -> str:
    """A spec value as datasheets print it: 0.236, 19.5, 1,555; ``"none"`` when absent."""
    if value is None:
        return "none"
    if value < 10:
        return f"{value:.3g}"
    return f"{value:,.1f}".removesuffix(".0")


def spec(name: str) -> GpuSpec:
    """The :class:`GpuSpec` called ``name``; a ``KeyError`` lists the known names."""
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"no GPU called {name!r}; known: {', '.join(SPECS)}") from None


# --------------------------------------------------------------------------------------------
# Comparing GPUs (Chapter 7, "Choosing a GPU").
# --------------------------------------------------------------------------------------------

#: The precisions :func:`peak_flops` knows, and the :class:`GpuSpec` field each one reads:
#: FP32 on the CUDA cores, FP16 (with FP32 accumulation), BF16 and TF32 on the tensor cores.
PRECISIONS: dict[str, str] = {
    "fp32": "fp32_tflops", "fp16": "fp16_tensor_tflops", "bf16": "bf16_tflops",
    "tf32": "tf32_tflops",
}


def peak_flops(name: str, precision: str = "bf16") -> float:
    """The datasheet's dense peak of the GPU called ``name``, in flop/s.

    Book section: *Chapter 7, "Choosing a GPU"* and *Chapter 8, "Tensor cores"*.
    ``precision`` is ``"fp32"``, ``"fp16"`` (tensor cores with FP32 accumulation, the
    mixed-precision training case), ``"bf16"`` or ``"tf32"`` (see :data:`PRECISIONS`). An
    unknown name raises :func:`spec`'s ``KeyError``, which lists the known ones; a GPU
    without such units (a V100 has no BF16) raises a ``ValueError``.
    """
    check_choice("precision", precision, tuple(PRECISIONS))
    gpu = spec(name)
    tflops = getattr(gpu, PRECISIONS[precision])
    if tflops is None:
        has = [p for p, f in PRECISIONS.items() if getattr(gpu, f) is not None]
        raise ValueError(f"{name} has no {precision} units; it has {', '.join(has)}")
    return tflops * 1e12


def _training_tflops(gpu: GpuSpec) -> float:
    """The rate mixed-precision training can use: BF16, else FP16 tensor cores, else FP32."""
    return next(t for t in (gpu.bf16_tflops, gpu.fp16_tensor_tflops, gpu.fp32_tflops)
                if t is not None)


def compare_gpus(bytes_per_gpu: float | None = None,
                 names: Sequence[str] | None = None) -> list[dict]:
    """One row per GPU of :data:`SPECS` (or of ``names``, in that order), for choosing one.

    Book section: *Chapter 7, "Choosing a GPU"*. Each row has the datasheet's ``name``,
    ``memory_gb``, ``bandwidth_gbs``, ``fp32_tflops`` and ``tdp_watts``; ``training_tflops``,
    the dense rate of mixed-precision training (BF16 tensor cores, else FP16, else FP32);
    ``tflop_per_joule``, that rate over the board power (teraflops per joule at the peak);
    and ``fits``: whether ``bytes_per_gpu`` (say, from
    :func:`gpudl.estimate.model_state_memory` plus activations) fit in its memory, taken as
    the datasheet's gigabytes of 10**9 bytes (``None`` when no size is given).
    """
    if bytes_per_gpu is not None:
        check_positive("bytes_per_gpu", bytes_per_gpu)
    if isinstance(names, str):
        raise TypeError(f"names must be a sequence of GPU names, got the str {names!r}")
    rows = []
    for gpu in (SPECS.values() if names is None else [spec(n) for n in names]):
        rate = _training_tflops(gpu)
        rows.append({
            "name": gpu.name,
            "memory_gb": gpu.memory_gb,
            "bandwidth_gbs": gpu.memory_bandwidth_gbs,
            "fp32_tflops": gpu.fp32_tflops,
            "training_tflops": rate,
            "tdp_watts": gpu.tdp_watts,
            "tflop_per_joule": rate / gpu.tdp_watts,
            "fits": None if bytes_per_gpu is None else bytes_per_gpu <= gpu.memory_gb * 1e9,
        })
    return rows


# --------------------------------------------------------------------------------------------
# Occupancy.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmLimits:
    """What one SM of a compute capability offers to resident blocks (bytes for memory)."""

    max_warps: int
    max_blocks: int
    max_registers_per_block: int
    shared_memory: int  # the largest shared-memory carveout
    max_shared_memory_per_block: int  # with opt-in
    shared_memory_unit: int  # allocation granularity
    reserved_shared_memory: int  # per block, for the system (CUDA 11 and later, CC 8.0+)
    register_partitions: int = 4  # registers are split between the SM's warp schedulers
    registers: int = 65536
    register_unit: int = 256  # registers are allocated per warp, in units of 256
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024


_K = 1024
# Programming Guide, "Technical Specifications per Compute Capability", and cuda_occupancy.h
# (shared-memory granularity 256 bytes up to 7.x and 128 from 8.0; GP100, 6.0, has two
# register partitions). Devices of 5.3 and 6.2 (Jetson TX1/Nano, TX2) allow 32 K registers
# per block.
SM_LIMITS: dict[tuple[int, int], SmLimits] = {
    (5, 0): SmLimits(64, 32, 64 * _K, 64 * _K, 48 * _K, 256, 0),
    (5, 2): SmLimits(64, 32, 64 * _K, 96 * _K, 48 * _K, 256, 0),
    (5, 3): SmLimits(64, 32, 32 * _K, 64 * _K, 48 * _K, 256, 0),
    (6, 0): SmLimits(64, 32, 64 * _K, 64 * _K, 48 * _K, 256, 0, register_partitions=2),
    (6, 1): SmLimits(64, 32, 64 * _K, 96 * _K, 48 * _K, 256, 0),
    (6, 2): SmLimits(64, 32, 32 * _K, 64 * _K, 48 * _K, 256, 0),
    (7, 0): SmLimits(64, 32, 64 * _K, 96 * _K, 96 * _K, 256, 0),
    (7, 2): SmLimits(64, 32, 64 * _K, 96 * _K, 96 * _K, 256, 0),
    (7, 5): SmLimits(32, 16, 64 * _K, 64 * _K, 64 * _K, 256, 0),
    (8, 0): SmLimits(64, 32, 64 * _K, 164 * _K, 163 * _K, 128, _K),
    (8, 6): SmLimits(48, 16, 64 * _K, 100 * _K, 99 * _K, 128, _K),
    (8, 7): SmLimits(48, 16, 64 * _K, 164 * _K, 163 * _K, 128, _K),
    (8, 9): SmLimits(48, 24, 64 * _K, 100 * _K, 99 * _K, 128, _K),
    (9, 0): SmLimits(64, 32, 64 * _K, 228 * _K, 227 * _K, 128, _K),
    (10, 0): SmLimits(64, 32, 64 * _K, 228 * _K, 227 * _K, 128, _K),
}

# Which limit to name when several allow the same number of blocks.
_LIMIT_ORDER = ("warps", "blocks", "registers", "shared_memory")


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel one SM holds at once, and what stops it holding more.

    ``blocks_by_*`` are the block counts each resource alone would allow (``None``: the kernel
    uses none of it); ``limit`` names the smallest (the first of warps, blocks, registers,
    shared_memory on a tie). ``occupancy`` is active warps / the SM's maximum warps.
    """

    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float
    limit: str
    warps_per_block: int
    registers_per_warp: int  # allocated, after rounding
    shared_memory_per_block: int  # allocated, after rounding, including the reserved part
    blocks_by_warps: int
    blocks_by_blocks: int
    blocks_by_registers: int
    blocks_by_shared_memory: int | None


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit



def _sm_limits(compute_capability: object) -> SmLimits:
    supported = ", ".join(f"({a}, {b})" for a, b in SM_LIMITS)
    compute_capability = check_compute_capability("compute_capability", compute_capability)
    if compute_capability not in SM_LIMITS:
        raise ValueError(
            f"no occupancy table for compute capability {compute_capability}; "
            f"supported: {supported}"
        )
    return SM_LIMITS[compute_capability]


def occupancy(
    threads_per_block: int,
    registers_per_thread: int,
    shared_mem_per_block: int,
    compute_capability: tuple[int, int],
) -> Occupancy:
    """Resident blocks and warps per SM for a kernel, by the CUDA occupancy calculator's rules.

    ``shared_mem_per_block`` is in bytes (static plus dynamic). The SM is assumed to give
    shared memory its largest carveout, as the driver does for a kernel that needs it.
    """
    threads = check_int("threads_per_block", threads_per_block, 1)
    regs = check_int("registers_per_thread", registers_per_thread, 1)
    smem = check_int("shared_mem_per_block", shared_mem_per_block, 0)
    sm = _sm_limits(compute_capability)
    if threads > sm.max_threads_per_block:
        raise ValueError(
            f"threads_per_block {threads} exceeds the maximum block size "
            f"{sm.max_threads_per_block}: the block cannot launch"
        )
    if regs > sm.max_registers_per_thread:
        raise ValueError(
            f"registers_per_thread {regs} exceeds the maximum {sm.max_registers_per_thread} "
            "per thread: the block cannot launch"
        )
    if smem > sm.max_shared_memory_per_block:
        raise ValueError(
            f"shared_mem_per_block {smem} bytes exceeds the per-block maximum "
            f"{sm.max_shared_memory_per_block} bytes: the block cannot launch"
        )

    warps_per_block = -(-threads // backend.WARP_SIZE)
    regs_per_warp = _round_up(regs * backend.WARP_SIZE, sm.register_unit)
    # The hardware checks a block's registers as if its warps were spread over all four
    # partitions (cuda_occupancy.h; CC 6.0 is held to the same check as 6.1 and 6.2).
    if regs_per_warp * _round_up(warps_per_block, 4) > sm.max_registers_per_block:
        raise ValueError(
            f"{threads} threads x {regs} registers need "
            f"{regs_per_warp * _round_up(warps_per_block, 4)} registers as allocated, more "
            f"than the {sm.max_registers_per_block} a block may have: the block cannot launch"
        )
    # Each partition holds whole warps: warps per SM = partitions x floor(its registers / a
    # warp's registers).
    per_partition = sm.registers // sm.register_partitions
    warps_by_registers = per_partition // regs_per_warp * sm.register_partitions
    smem_per_block = _round_up(smem + sm.reserved_shared_memory, sm.shared_memory_unit)

    by_limit = {
        "warps": sm.max_warps // warps_per_block,
        "blocks": sm.max_blocks,
        "registers": warps_by_registers // warps_per_block,
        "shared_memory": sm.shared_memory // smem_per_block if smem_per_block else None,
    }
    blocks = min(n for n in by_limit.values() if n is not None)
    limit = next(name for name in _LIMIT_ORDER if by_limit[name] == blocks)
    warps = blocks * warps_per_block
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=warps,
        occupancy=warps / sm.max_warps,
        limit=limit,
        warps_per_block=warps_per_block,
        registers_per_warp=regs_per_warp,
        shared_memory_per_block=smem_per_block,
        blocks_by_warps=by_limit["warps"],
        blocks_by_blocks=by_limit["blocks"],
        blocks_by_registers=by_limit["registers"],
        blocks_by_shared_memory=by_limit["shared_memory"],
    )
