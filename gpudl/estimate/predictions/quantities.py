"""The quantities a "Measured on a GPU" box predicts, and the datasheet figures they come from.

Book section: every chapter's "Measured on a GPU" boxes (:mod:`gpudl.estimate.predictions`).
A :class:`Prediction` holds one quantity's value on each reference GPU of :data:`GPUS`; the
helpers here make one from a model (bytes over the memory bandwidth, flops over a peak, a
quantity alike on every GPU), and :func:`shown` writes a value as the boxes and the labs do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpudl import hardware
from gpudl.checks import check_choice, check_real

__all__ = ["BYTES_MOVED", "FLOPS_OVER_PEAK", "GPUS", "KINDS", "LINKS", "UNITS", "Prediction",
           "alike", "bandwidth", "clock", "computed", "mlp_params", "moved", "nvlink", "pcie",
           "per_gpu", "shown", "time_unit", "timed"]

#: The book's reference GPUs, names of :data:`gpudl.hardware.SPECS`: every box predicts for each.
GPUS = ("H100 SXM", "H200 SXM")
#: One direction of each reference GPU's links, in bytes/s. The datasheets give both
#: directions together, 900 GB/s of NVLink and 128 GB/s of PCIe Gen5 (nvidia2022h100,
#: nvidia2024h200).
LINKS: dict[str, dict[str, float]] = {gpu: {"NVLink": 450e9, "PCIe": 64e9} for gpu in GPUS}
#: A bound is what no run on that GPU can beat; an estimate is what the model expects.
KINDS = ("bound", "estimate")
#: Display unit -> how many of it one SI unit (second, byte/s, flop/s, byte, or a plain number)
#: makes.
UNITS: dict[str, float] = {"ms": 1e3, "µs": 1e6, "GB/s": 1e-9, "TFLOP/s": 1e-12, "MB": 1e-6,
                           "": 1.0}


@dataclass(frozen=True)
class Prediction:
    """One predicted quantity of a box.

    ``quantity`` names it: a benchmark row's name (then ``rows`` holds it), or an English
    phrase with ``{placeholders}`` filled from ``fields``. ``values`` are its values on each
    GPU of :data:`GPUS`, in SI units (seconds, bytes/s, flop/s, bytes, or a plain number),
    shown in ``unit`` (:data:`UNITS`). ``model`` says in a phrase how it is computed,
    ``section`` is the label of the book section whose model it is, ``kind`` one of
    :data:`KINDS`. A stored run is held to it by :func:`measured_value`: ``field`` of each of
    ``rows`` (over the same field of the row ``over``, for a ratio), or the value at ``path``
    in the record when it has no rows."""

    quantity: str
    values: tuple[float, ...]
    unit: str
    model: str
    section: str
    kind: str
    rows: tuple[str, ...] = ()
    field: str = "median_s"
    over: str | None = None
    path: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()


#: The model of a time bounded by the bytes a kernel moves.
BYTES_MOVED = "bytes moved / memory bandwidth"
#: The model of a time bounded by the flops, at each precision's datasheet peak.
FLOPS_OVER_PEAK = {"fp32": "flops / FP32 peak", "tf32": "flops / TF32 peak",
                   "bf16": "flops / BF16 peak", "fp16": "flops / FP16 peak"}


def bandwidth(gpu: str) -> float:
    return hardware.SPECS[gpu].memory_bandwidth_gbs * 1e9


def clock(gpu: str) -> float:
    """The SM clock the datasheet's FP32 rate implies: 2 flops per core per clock."""
    spec = hardware.SPECS[gpu]
    return spec.fp32_tflops * 1e12 / (2 * spec.cuda_cores)


def per_gpu(value: Callable[[str], float]) -> tuple[float, ...]:
    return tuple(float(value(gpu)) for gpu in GPUS)


def time_unit(seconds: float) -> str:
    return "µs" if seconds < 1e-4 else "ms"


def timed(quantity: str, seconds: Callable[[str], float], model: str, section: str,
          rows: Sequence[str] = (), kind: str = "bound", field: str = "median_s",
          **fields: str) -> Prediction:
    """A time predicted on each GPU (in ms, or µs when it is short on the first one), held
    to the rows' ``field``."""
    values = per_gpu(seconds)
    return Prediction(quantity, values, time_unit(values[0]), model, section, kind,
                      tuple(rows), field, fields=tuple(fields.items()))


def moved(row: str, n_bytes: float, section: str) -> Prediction:
    """The time of the benchmark row ``row`` at the memory bandwidth: a bound."""
    return timed(row, lambda gpu: n_bytes / bandwidth(gpu), BYTES_MOVED, section, (row,))


def computed(quantity: str, flops: float, precision_: str, section: str,
              rows: Sequence[str] = (), **fields: str) -> Prediction:
    """The time of ``flops`` at the datasheet's peak of ``precision_``: a bound."""
    return timed(quantity, lambda gpu: flops / hardware.peak_flops(gpu, precision_),
                 FLOPS_OVER_PEAK[precision_], section, rows, **fields)


def alike(quantity: str, value: float, unit: str, model: str, section: str, kind: str,
          **keys: object) -> Prediction:
    """A quantity that the model gives alike on every GPU (a count, a share, a ratio)."""
    return Prediction(quantity, (float(value),) * len(GPUS), unit, model, section, kind,
                      **keys)


def mlp_params(dims: Sequence[int], biases: bool = True) -> int:
    """Weights (and biases, unless ``biases`` is false) of an MLP of layer widths ``dims``."""
    return sum(a * b + (b if biases else 0) for a, b in zip(dims[:-1], dims[1:], strict=False))




def pcie(gpu: str) -> float:
    """One direction of ``gpu``'s PCIe, bytes/s (:data:`LINKS`)."""
    return LINKS[gpu]["PCIe"]


def nvlink(gpu: str) -> float:
    """One direction of ``gpu``'s NVLink, bytes/s (:data:`LINKS`)."""
    return LINKS[gpu]["NVLink"]


def shown(value: float, unit: str) -> str:
    """``value`` (in SI units) in ``unit`` (:data:`UNITS`), to three significant digits and
    with thousands separators (a whole number of no unit, a count, as it is):
    ``shown(2.4e-4, "ms")`` is ``"0.240"``, ``shown(1000, "")`` is ``"1,000"``."""
    check_real("value", value, finite=True)
    scaled = value * UNITS[check_choice("unit", unit, tuple(UNITS))]
    if scaled == round(scaled) and (unit == "" or abs(scaled) >= 100):
        return f"{round(scaled):,}"  # a count, or a number of three digits or more
    digits = max(0, 2 - math.floor(math.log10(abs(scaled))))
    return f"{scaled:,.{digits}f}"
