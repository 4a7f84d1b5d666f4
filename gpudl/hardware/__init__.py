"""The GPU itself: the current device's facts, a table of real GPUs, comparing them, and the
occupancy rules.

Book section: *Chapter 1, GPU hardware and SIMT* (one module per topic: :mod:`.device`,
:mod:`.specs`, :mod:`.sm_limits`) and *Chapter 7, "Choosing a GPU"* (:mod:`.choosing`). Every
public name is importable from :mod:`gpudl.hardware` itself.
"""

from gpudl.hardware.choosing import PRECISIONS, compare_gpus, peak_flops
from gpudl.hardware.device import FP32_CORES_PER_SM, SIMULATOR_NAME, DeviceInfo, describe
from gpudl.hardware.sm_limits import SM_LIMITS, Occupancy, SmLimits, occupancy
from gpudl.hardware.specs import SPECS, GpuSpec, datasheet_number, spec

__all__ = [
    "DeviceInfo",
    "describe",
    "FP32_CORES_PER_SM",
    "SIMULATOR_NAME",
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
