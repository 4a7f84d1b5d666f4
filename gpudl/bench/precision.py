"""Chapter 7's measurements: the rate ``torch.matmul`` reaches in FP32 and BF16 here, and the
model flops utilisation (MFU) of the kernel MLP's training step.

Book section: *Chapter 7, "Measured on your machine"*.

``python -m gpudl bench precision`` runs :func:`run` and stores
``results/precision-<backend>.json``. Without a GPU the matmul rates are the CPU's (labelled
so), and the kernel MLP is not timed.
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
import torch

from gpudl.bench import row
from gpudl.bench.matmul import MLP_BATCH, MLP_SIZES
from gpudl.bench.timing import Timing, fp32_matmuls, time_cpu, time_cuda
from gpudl.checks import check_choice, check_int
from gpudl.estimate import mfu, training_flops

__all__ = ["BARS", "VIEWS", "DTYPES", "GPU_N", "matmul_timing", "measured_matmul_flops", "run"]

#: No speed goal; the rates are ceilings to hold an MFU to.
BARS: tuple[dict, ...] = ()
#: The book's boxes of this topic (``{gpudl-measured} precision <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"rates": ()}

#: The size of the square matrices multiplied on a GPU.
GPU_N = 8192

#: The dtypes measured, by name.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def matmul_timing(n: int, dtype: str = "float32", repeats: int = 5) -> Timing:
    """The timing of ``torch.matmul`` on two ``n x n`` matrices of ``dtype`` (``"float32"`` or
    ``"bfloat16"``): on a GPU there, with CUDA events and TF32 off (so that ``"float32"`` means
    float32); without one (the simulator backend) on the CPU, with the wall clock. The median
    of ``repeats`` runs."""
    size = check_int("n", n, 1)
    runs = check_int("repeats", repeats, 1)
    check_choice("dtype", dtype, DTYPES)
    on_gpu = backend.name() == "cuda"
    generator = torch.Generator().manual_seed(size)
    a, b = (torch.randn(size, size, generator=generator).to(DTYPES[dtype])
            .to("cuda" if on_gpu else "cpu") for _ in range(2))
    with fp32_matmuls("ieee"):
        return (time_cuda(torch.matmul, a, b, warmup=2, repeats=runs) if on_gpu
                else time_cpu(torch.matmul, a, b, warmup=1, repeats=runs))


def measured_matmul_flops(n: int, dtype: str = "float32", repeats: int = 5) -> float:
    """The flop/s ``torch.matmul`` reaches on two ``n x n`` matrices of ``dtype`` here
    (:func:`matmul_timing`): ``2 n**3`` flops over the median time. A ceiling measured with
    the vendor's library, not a datasheet peak: it is the honest peak to hold a CPU's MFU to,
    since no datasheet gives one here."""
    timing = matmul_timing(n, dtype, repeats)  # checks n before 2 n**3 is computed
    return 2 * n**3 / timing.median


def _kernel_mlp_step() -> Timing:
    """One training step (``loss_and_grads`` then ``sgd_step``) of the kernel MLP of
    :mod:`gpudl.bench.matmul` on its batch, the data on the device (a GPU only)."""
    from numba import cuda

    from gpudl.models import KernelMLP

    model = KernelMLP(MLP_SIZES, seed=0)
    rng = np.random.default_rng(0)
    xb = cuda.to_device(rng.random((MLP_BATCH, MLP_SIZES[0]), dtype=np.float32))
    yb = cuda.to_device(rng.integers(0, MLP_SIZES[-1], MLP_BATCH))
    return time_cuda(lambda: (model.loss_and_grads(xb, yb), model.sgd_step(0.01)),
                     warmup=2, repeats=5)


def run(n: int | None = None) -> dict:
    """``torch.matmul`` at ``n`` (8,192 on a GPU, 512 on the CPU) in FP32 and BF16 (rows
    ``"torch.matmul <dtype> n=<n>"``, on ``device`` "cuda" or "cpu"); on a GPU also the kernel
    MLP's training step (row ``"kernel MLP step"``) and its ``mfu``: model flops (6 x weights x
    batch) per second over ``peak_flops``, the FP32 peak derived from the driver's facts (or,
    where the driver gives no clock, the FP32 rate just measured: ``peak_source`` says)."""
    n = backend.pick(gpu=GPU_N, sim=512) if n is None else check_int("n", n, 1)
    device = "cuda" if backend.name() == "cuda" else "cpu"
    print(f"[precision] torch.matmul {n} x {n} on the {device}", flush=True)
    rows = [row(f"torch.matmul {dtype} n={n}", matmul_timing(n, dtype), n_flops=2 * n**3,
                dtype=dtype, n=n, device=device) for dtype in DTYPES]
    body: dict = {"n": n, "device": device, "rows": rows, "bars": [], "mfu": None,
                  "peak_flops": None, "peak_source": None}
    if device == "cuda":
        from gpudl.hardware import describe

        weights = sum(a * b for a, b in zip(MLP_SIZES[:-1], MLP_SIZES[1:], strict=False))
        step = row("kernel MLP step", _kernel_mlp_step(),
                   n_flops=training_flops(weights, MLP_BATCH), sizes=list(MLP_SIZES),
                   batch=MLP_BATCH)
        rows.append(step)
        derived = describe().peak_fp32_tflops
        peak = rows[0]["tflops"] * 1e12 if derived is None else derived * 1e12
        body |= {"peak_flops": peak, "peak_source": "measured torch.matmul float32"
                 if derived is None else "FP32 peak from the driver's facts",
                 "mfu": mfu(MLP_BATCH / step["median_s"], training_flops(weights, 1), 1, peak)}
    return body
