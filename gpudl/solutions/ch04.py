"""Solutions to the exercises of Chapter 4, optimizers on the GPU.

Book section: Chapter 4, "Exercises": the bytes one optimizer step moves per parameter, the
least time an Adam step can take on a GPU and where it sits on the roofline, how many
parameters' moments all of a GPU's shared memory could hold, and a model of a step's time
that counts kernel launches as well as bytes.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
from gpudl.checks import check_choice, check_int
from gpudl.estimate import roofline
from gpudl.hardware import SM_LIMITS, spec

FP32, HALF = 4, 2  # bytes per value

#: The kernels of torch's single-tensor Adam without weight decay, one per operation, each
#: with the values it reads and writes per element, as a pair.
UNFUSED_ADAM_OPS = {
    "m.lerp_(g, 1 - beta1)": (2, 1),
    "v.mul_(beta2)": (1, 1),
    "v.addcmul_(g, g, 1 - beta2)": (2, 1),
    "denom = v.sqrt()": (1, 1),
    "denom.div_(sqrt(bias_correction2))": (1, 1),
    "denom.add_(eps)": (1, 1),
    "p.addcdiv_(m, denom, -step_size)": (3, 1),
}


def step_bytes_per_param() -> dict[str, int]:
    """Device-memory bytes one step moves per parameter (Chapter 4, exercise 1): each value
    read or written once per step, nothing cached between kernels."""
    unfused_values = sum(r + w for r, w in UNFUSED_ADAM_OPS.values())
    return {
        "sgd": 2 * FP32 + FP32,  # read p, g; write p
        "sgd_momentum": 3 * FP32 + 2 * FP32,  # read p, g, buf; write p, buf
        "adam_v2_fused": 4 * FP32 + 3 * FP32,  # read p, g, m, v; write p, m, v
        "adam_v1_unfused": unfused_values * FP32,  # 11 reads and 7 writes
        # read g (half), master, m, v; write master, m, v, p (half)
        "adam_mixed": HALF + 3 * FP32 + 3 * FP32 + HALF,
        "adam_bf16_no_master": 4 * HALF + 3 * HALF,  # everything in bfloat16
    }


def adam_time_bound(n_params: int, gpu: str = "H100 SXM", bytes_per_param: int = 28,
                    flops_per_param: int = 12) -> dict[str, float]:
    """The least time one Adam step over ``n_params`` parameters can take on ``gpu`` (its
    datasheet bandwidth), its arithmetic intensity, the flop rate the roofline allows at
    that intensity and its fraction of the FP32 peak (Chapter 4, exercise 2)."""
    n_params = check_int("n_params", n_params, 1)
    s = spec(gpu)
    bandwidth, peak = s.memory_bandwidth_gbs * 1e9, s.fp32_tflops * 1e12
    intensity = flops_per_param / bytes_per_param
    attainable = roofline(intensity, peak, bandwidth)
    return {"time_s": n_params * bytes_per_param / bandwidth, "intensity": intensity,
            "attainable_flops": attainable, "fraction_of_peak": attainable / peak}


def shared_memory_adam_capacity(gpu: str = "H100 SXM") -> int:
    """How many parameters' Adam moments (two float32 values, 8 bytes) all the shared memory
    of ``gpu`` could hold at once, every SM at its largest carveout (Chapter 4, exercise
    3)."""
    s = spec(gpu)
    return s.sm_count * SM_LIMITS[s.compute_capability].shared_memory // (2 * FP32)


#: Kernel launches per parameter tensor and bytes per parameter of each Adam variant;
#: ``v4_multi_tensor`` launches once per step whatever the number of tensors.
VARIANT_COSTS = {"v1_unfused": (7, 72), "v2_fused": (1, 28), "v3_shared": (1, 28),
                 "v4_multi_tensor": (None, 28)}


def step_time_model(sizes: list[int], variant: str, launch_s: float,
                    bandwidth: float) -> dict[str, float]:
    """A model of one Adam step's time for tensors of ``sizes`` parameters: launches times a
    fixed cost per launch ``launch_s``, plus the bytes over ``bandwidth`` (bytes/s), the two
    not overlapping (Chapter 4, exercise 4). Returns ``launches``, ``bytes`` and
    ``time_s``."""
    check_choice("variant", variant, VARIANT_COSTS)
    per_tensor, per_param = VARIANT_COSTS[variant]
    launches = 1 if per_tensor is None else per_tensor * len(sizes)
    n_bytes = per_param * sum(check_int("size", s, 1) for s in sizes)
    return {"launches": launches, "bytes": n_bytes,
            "time_s": launches * launch_s + n_bytes / bandwidth}


def break_even_size(launch_s: float, bandwidth: float, bytes_per_param: int = 28) -> float:
    """The tensor size whose fused step spends as long moving bytes as launching: below it
    the fixed cost of the launch dominates."""
    return launch_s * bandwidth / bytes_per_param
