"""The current device's facts, read from the CUDA driver (through numba), and the peak rates
they imply.

Book section: *Chapter 1, "Streaming multiprocessors and CUDA cores"*.

:func:`describe` reads the facts and derives the device's peak memory bandwidth and FP32 rate.
On Numba's CUDA simulator there is no device: it says so and leaves every fact it cannot know
as ``None``. Per-compute-capability facts come from the CUDA C++ Programming Guide ("Compute
Capabilities": FP32 cores per SM) and the CUDA C++ Best Practices Guide ("Throughput of Native
Arithmetic Instructions").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudl import backend

# isort: split
from numba import cuda

__all__ = ["FP32_CORES_PER_SM", "SIMULATOR_NAME", "DeviceInfo", "describe"]

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
