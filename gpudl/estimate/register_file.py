"""The register file's bandwidth, derived from the device's facts rather than measured.

Book section: Chapter 2, "Latency and bandwidth per level".

No kernel can time the register file on its own (every instruction reads it), so the book
derives the bandwidth an FMA stream implies from the SM count, the FP32 cores per SM and the
SM clock. :mod:`gpudl.bench.hierarchy` sets it beside the measured levels, and
:func:`gpudl.plots.memory_levels` draws it for the GPUs of the table.
"""

from __future__ import annotations

from gpudl import hardware

__all__ = ["register_file_bandwidth_gbs"]


def register_file_bandwidth_gbs(info: hardware.DeviceInfo | None = None) -> float | None:
    """The register-file bandwidth an FMA stream implies, in GB/s: derived, not measured.

    Every FP32 core can start one fused multiply-add per clock, which reads three 4-byte
    register operands: ``cores * 3 * 4 bytes * SM clock``. ``None`` when a fact is unknown
    (on the simulator). ``info`` defaults to :func:`gpudl.hardware.describe`.
    """
    info = hardware.describe() if info is None else info
    if not isinstance(info, hardware.DeviceInfo):
        raise TypeError(f"info must be a gpudl.hardware.DeviceInfo, got {type(info).__name__}")
    if None in (info.sm_count, info.fp32_cores_per_sm, info.sm_clock_khz):
        return None
    return info.sm_count * info.fp32_cores_per_sm * 3 * 4 * info.sm_clock_khz * 1e3 / 1e9
