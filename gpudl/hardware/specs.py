"""A table of real GPUs, from their vendors' datasheets.

Book section: *Chapter 1, "Streaming multiprocessors and CUDA cores"* (the table of GPUs the
book talks about).

:data:`SPECS` holds each GPU's published figures with the BibTeX key of its source in
``book/references.bib``; :func:`spec` looks one up and :func:`datasheet_number` prints a figure
as datasheets do.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudl.checks import check_choice, check_real

__all__ = ["GpuSpec", "SPECS", "datasheet_number", "spec"]

@dataclass(frozen=True)
class GpuSpec:
    """One GPU's published figures. Tensor rates are dense (without 2:4 sparsity).

    ``fp16_tensor_tflops`` is FP16 inputs with FP32 accumulation, the mixed-precision training
    case; ``None`` where the GPU has no tensor cores (and ``bf16_tflops`` also where its tensor
    cores have no bfloat16). ``tf32_tflops`` is the tensor cores' TF32 rate (float32 products
    with inputs rounded to 10-bit mantissas, Chapter 8), ``None`` where the GPU has none or
    the source does not give it. ``cuda_cores`` is the published count, which must equal
    ``sm_count * fp32_cores_per_sm``. ``source`` is a key of ``book/references.bib``, or
    several separated by commas. ``year`` is the year the GPU first shipped.
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
            1.581, None, None, 244, "nvidia2010gtx580,krizhevsky2012imagenet"),
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
    # Announced in November 2023, shipped from 2024.
    GpuSpec("H200 SXM", "Hopper", 2024, (9, 0), 132, 128, 16896, 141.0, "HBM3e", 4800.0,
            67.0, 989.0, 989.0, 700, "nvidia2024h200,nvidia2023h200news", tf32_tflops=494.5),
]

#: GPU name -> :class:`GpuSpec`, from the vendors' datasheets (rendered in Chapter 1).
SPECS: dict[str, GpuSpec] = {s.name: s for s in _SPEC_LIST}


def datasheet_number(value: float | None) -> str:
    """A spec value as datasheets print it: 0.236, 19.5, 1,555; ``"none"`` when absent."""
    if value is None:
        return "none"
    check_real("value", value, 0)
    if value < 10:
        return f"{value:.3g}"
    return f"{value:,.1f}".removesuffix(".0")


def spec(name: str, argument: str = "name") -> GpuSpec:
    """The :class:`GpuSpec` called ``name``; a ``ValueError`` lists the known names (a
    ``TypeError`` if ``name`` is not a str), naming ``argument``."""
    return SPECS[check_choice(argument, name, SPECS)]
