"""Cost models: what an operation should cost, from first principles, to hold measurements to.

Book section: *Chapter 1, "What connects GPUs"* and *Chapter 5, "Data parallelism"* (the ring
all-reduce and its fit to measurements), *Chapter 2, "The roofline"* and *"Memory across GPUs"*,
and *Chapter 7, "A case study and choosing a GPU"* (training compute, time, cost and energy;
activation memory).

Units throughout: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from __future__ import annotations

import numpy as np

from gpudl.checks import check_bool, check_choice, check_int, check_positive, check_real

__all__ = [
    "bubble_fraction",
    "allreduce_bytes_per_rank",
    "allreduce_time",
    "data_parallel_step_time",
    "fit_allreduce",
    "model_state_memory",
    "training_flops",
    "mfu",
    "training_time",
    "training_cost",
    "training_energy",
    "activation_memory",
    "RECOMPUTE",
    "roofline",
    "ridge_point",
    "KERNEL_INTENSITY",
]


def allreduce_bytes_per_rank(n_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``n_bytes``.

    The ring cuts the buffer into ``N`` chunks. Reduce-scatter takes ``N - 1`` steps, each
    sending one chunk of ``n_bytes / N``; all-gather takes as many again. In all
    ``2 (N - 1) / N * n_bytes``: almost twice the buffer, whatever ``N`` is.
    """
    check_real("n_bytes", n_bytes, 0)
    check_int("world_size", world_size, 1)
    return 2 * (world_size - 1) / world_size * n_bytes


def allreduce_time(
    n_bytes: float, world_size: int, bandwidth: float, latency: float = 0.0
) -> float:
    """Seconds for a ring all-reduce of ``n_bytes`` over ``world_size`` ranks.

    ``bandwidth`` is what each rank's link carries one way, in bytes/s; ``latency`` is the
    fixed cost of one of the ``2 (N - 1)`` steps, in seconds::

        time = 2 (N - 1) / N * n_bytes / bandwidth + 2 (N - 1) * latency

    Measured all-reduces report the bandwidth this model implies as *bus bandwidth*
    (``busbw``, the nccl-tests convention), so the two can be compared directly.
    """
    check_int("world_size", world_size, 1)
    check_real("bandwidth", bandwidth, 0, strict=True)
    check_real("latency", latency, 0)
    steps = 2 * (world_size - 1)
    return allreduce_bytes_per_rank(n_bytes, world_size) / bandwidth + steps * latency


def fit_allreduce(
    sizes_bytes: list[float], times_s: list[float], world_size: int
) -> tuple[float, float]:
    """Fit the ring model's ``(latency, bandwidth)`` to measured all-reduce times.

    Least squares of ``time = 2 (N - 1) * latency + 2 (N - 1) / N * size / bandwidth`` over the
    measurements, which is linear in ``latency`` and ``1 / bandwidth``. If noise makes the
    best latency negative, latency is fixed at 0 and the bandwidth refitted. Needs at least
    two distinct sizes; returns seconds and bytes/s.
    """
    check_int("world_size", world_size, 1)
    if world_size < 2:
        raise ValueError("an all-reduce over one rank moves nothing: fit with world_size >= 2")
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    times = np.asarray(times_s, dtype=np.float64)
    if sizes.ndim != 1 or sizes.shape != times.shape:
        raise ValueError(f"sizes and times must be 1-D of one length, got {sizes.shape}, "
                         f"{times.shape}")
    if np.unique(sizes).size < 2:
        raise ValueError("need measurements at two or more distinct sizes to fit two parameters")
    if not (np.isfinite(sizes).all() and np.isfinite(times).all()) or (sizes < 0).any() or (
            times <= 0).any():
        raise ValueError("sizes must be finite and >= 0, times finite and > 0")
    steps = 2 * (world_size - 1)
    per_rank = steps / world_size * sizes
    (latency, inverse_bandwidth), *_ = np.linalg.lstsq(
        np.column_stack([np.full_like(sizes, steps), per_rank]), times, rcond=None)
    if latency < 0:
        latency, inverse_bandwidth = 0.0, float(per_rank @ times / (per_rank @ per_rank))
    if not inverse_bandwidth > 0:
        raise ValueError("the times do not grow with size: no positive bandwidth fits them")
    return float(latency), float(1 / inverse_bandwidth)


def model_state_memory(
    n_params: float,
    *,
    n_gpus: int = 1,
    zero_stage: int = 0,
    optimizer: str = "adam",
    precision: str = "mixed",
) -> float:
    """Bytes of model state (parameters, gradients, optimizer state) that each GPU holds.

    Book section: *Chapter 2, "Memory across GPUs"*. The accounting of ZeRO (Rajbhandari et
    al. 2020), in bytes per parameter::

        optimizer  precision  params  grads  optimizer state (K)
        adam       mixed      2       2      12  fp32 master copy, momentum, variance
        adam       fp32       4       4       8  momentum, variance (params are the master)
        sgd        mixed      2       2       8  fp32 master copy, momentum
        sgd        fp32       4       4       4  momentum

    (SGD means SGD with momentum.) Stage 0 is plain data parallelism: every GPU holds it all.
    ZeRO stage 1 divides the optimizer state among the ``n_gpus`` GPUs, stage 2 the gradients
    as well, stage 3 the parameters as well. Not counted: Adam's step counter, activations,
    temporary buffers and fragmentation.
    """
    check_positive("n_params", n_params)
    check_int("n_gpus", n_gpus, 1)
    if check_int("zero_stage", zero_stage, 0) > 3:
        raise ValueError(f"zero_stage must be from 0 to 3, got {zero_stage}")
    check_choice("optimizer", optimizer, ("adam", "sgd"))
    check_choice("precision", precision, ("mixed", "fp32"))
    params, grads, state = {
        ("adam", "mixed"): (2, 2, 12), ("adam", "fp32"): (4, 4, 8),
        ("sgd", "mixed"): (2, 2, 8), ("sgd", "fp32"): (4, 4, 4),
    }[optimizer, precision]
    ways = lambda stage: n_gpus if zero_stage >= stage else 1  # how many GPUs share it
    return n_params * (params / ways(3) + grads / ways(2) + state / ways(1))


# --------------------------------------------------------------------------------------------
# Training compute, time, cost and energy; activation memory (Chapter 7).
# --------------------------------------------------------------------------------------------


def training_flops(
    n_params: float,
    n_tokens: float,
    *,
    n_layers: int | None = None,
    n_heads: int | None = None,
    head_dim: int | None = None,
    seq_len: int | None = None,
) -> float:
    """Model flops to train ``n_params`` parameters on ``n_tokens`` tokens: ``6 N D``.

    Book section: *Chapter 7, "Compute: C = 6ND"*. Each parameter takes part in one
    multiply-add per token in the forward pass and in two in the backward pass (Chapter 3,
    "Counting flops"): 6 flops per parameter and token (Kaplan et al. 2020). The attention
    scores multiply activations by activations and use no parameter; given the number of
    layers ``L``, heads ``H``, head size ``Q`` and the sequence length ``T`` (all four or
    none), their products are added as the PaLM paper counts them (Chowdhery et al. 2022,
    Appendix B), over the full ``T x T`` score matrix::

        C = (6 N + 12 L H Q T) D

    (per layer and token, ``Q K^T`` and the product with ``V`` take ``2 H Q T`` flops each
    forward, ``4 H Q T``, and the backward pass twice that).
    """
    check_positive("n_params", n_params)
    check_positive("n_tokens", n_tokens)
    sizes = {"n_layers": n_layers, "n_heads": n_heads, "head_dim": head_dim,
             "seq_len": seq_len}
    given = [name for name, value in sizes.items() if value is not None]
    if not given:
        return 6 * n_params * n_tokens
    if len(given) < len(sizes):
        missing = [name for name in sizes if name not in given]
        raise ValueError(f"the attention term needs all of n_layers, n_heads, head_dim and "
                         f"seq_len: got {', '.join(given)}, missing {', '.join(missing)}")
    layers, heads, size, seq = (check_int(name, value, 1) for name, value in sizes.items())
    return (6 * n_params + 12 * layers * heads * size * seq) * n_tokens


def mfu(
    tokens_per_second: float, flops_per_token: float, n_gpus: int, peak_flops_per_gpu: float
) -> float:
    """Model flops utilisation: the model flops a run does per second over its GPUs' peak.

    Book section: *Chapter 7, "Utilisation: MFU"*. With ``flops_per_token`` from
    :func:`training_flops` (``training_flops(n, 1)`` for ``6 N``)::

        MFU = tokens_per_second * flops_per_token / (n_gpus * peak_flops_per_gpu)

    (Chowdhery et al. 2022, Section 4.1). Only the flops the model needs count: recomputed
    activations make the GPUs do more, which *hardware* flops utilisation would count. A
    result above 1 is returned, not refused: it means the throughput given is more than the
    GPUs can compute at their peak, so that the inputs cannot all be true.
    """
    check_positive("tokens_per_second", tokens_per_second)
    check_positive("flops_per_token", flops_per_token)
    gpus = check_int("n_gpus", n_gpus, 1)
    check_positive("peak_flops_per_gpu", peak_flops_per_gpu)
    return tokens_per_second * flops_per_token / (gpus * peak_flops_per_gpu)


def _check_fraction(name: str, value: object) -> None:
    if not 0 < check_real(name, value) <= 1:
        raise ValueError(f"{name} must be in (0, 1], a fraction of the peak, got {value!r}")


def training_time(flops: float, n_gpus: int, peak_flops_per_gpu: float, mfu: float) -> float:
    """Seconds to do ``flops`` model flops on ``n_gpus`` GPUs running at ``mfu`` of their peak.

    Book section: *Chapter 7, "Time, cost and energy"*::

        time = flops / (n_gpus * peak_flops_per_gpu * mfu)

    ``mfu`` must be in (0, 1]: no run computes faster than its GPUs' peak.
    """
    check_positive("flops", flops)
    gpus = check_int("n_gpus", n_gpus, 1)
    check_positive("peak_flops_per_gpu", peak_flops_per_gpu)
    _check_fraction("mfu", mfu)
    return flops / (gpus * peak_flops_per_gpu * mfu)


def training_cost(seconds: float, n_gpus: int, price_per_gpu_hour: float) -> float:
    """What ``n_gpus`` GPUs rented for ``seconds`` cost at ``price_per_gpu_hour``.

    Book section: *Chapter 7, "Time, cost and energy"*. The result is in the currency of the
    price, which the reader supplies: ``seconds / 3600 * n_gpus * price_per_gpu_hour``.
    """
    check_positive("seconds", seconds)
    gpus = check_int("n_gpus", n_gpus, 1)
    check_positive("price_per_gpu_hour", price_per_gpu_hour)
    return seconds / 3600 * gpus * price_per_gpu_hour


def training_energy(seconds: float, n_gpus: int, watts_per_gpu: float) -> float:
    """Joules that ``n_gpus`` GPUs drawing ``watts_per_gpu`` use in ``seconds``.

    Book section: *Chapter 7, "Energy"*: power times time. With a datasheet's board power
    (TDP) it is an upper bound for the GPUs alone: it leaves out the CPUs, memory, network,
    cooling and power conversion of the machines around them. 3.6e6 J is one kWh.
    """
    check_positive("seconds", seconds)
    gpus = check_int("n_gpus", n_gpus, 1)
    check_positive("watts_per_gpu", watts_per_gpu)
    return seconds * gpus * watts_per_gpu


#: What :func:`activation_memory` can leave out and recompute in the backward pass.
RECOMPUTE = ("none", "selective", "full")


def activation_memory(
    seq_len: int, batch_size: int, hidden: int, n_heads: int, *, recompute: str = "none",
    fused_attention: bool = False,
) -> float:
    """Bytes of activations one Transformer layer keeps for its backward pass.

    Book section: *Chapter 7, "Memory: activations"* and *Chapter 8, "What fused attention
    saves"*. The accounting of Korthikanti et al. (2022) for a GPT-style layer (attention and
    a feed-forward block four times as wide, 16-bit activations, 1-byte dropout masks), with
    ``s = seq_len``, ``b = batch_size``, ``h = hidden`` and ``a = n_heads``, without tensor or
    sequence parallelism::

        recompute="none":       s b h (34 + 5 a s / h)
        recompute="selective":  34 s b h     (the a s^2 b score matrices are recomputed)
        recompute="full":       2 s b h      (only the layer's input is kept)

    ``34 s b h`` are the inputs of the layer's products, norms and activation functions and
    the dropout masks; ``5 a s^2 b`` the softmax output, its dropout mask and its dropped-out
    copy, which grow with the square of the sequence. With full recomputation the backward
    pass rebuilds one layer's activations at a time, so that layer's full amount is needed
    again, briefly, on top of the stored inputs of all layers.

    ``fused_attention=True`` is a fused kernel (FlashAttention, Chapter 8): it never stores
    the scores, and its backward pass recomputes them from Q, K and V (already counted in the
    ``34 s b h``) and one float32 log-sum-exp per row of scores, ``4 a s b`` bytes (a dropout
    mask is regenerated from the random generator's state, not stored). Without
    recomputation a layer then keeps ``s b h (34 + 4 a / h)``; selective and full
    recomputation keep what they kept.
    """
    s = check_int("seq_len", seq_len, 1)
    b = check_int("batch_size", batch_size, 1)
    h = check_int("hidden", hidden, 1)
    a = check_int("n_heads", n_heads, 1)
    check_choice("recompute", recompute, RECOMPUTE)
    check_bool("fused_attention", fused_attention)
    if recompute == "full":
        return float(2 * s * b * h)
    if recompute == "selective":
        return float(34 * s * b * h)
    if fused_attention:
        return float(s * b * h * 34 + 4 * a * s * b)
    return float(s * b * h * 34 + 5 * a * s * s * b)


def roofline(
    intensity: float | np.ndarray, peak_flops: float, peak_bandwidth: float
) -> float | np.ndarray:
    """Attainable flop/s for an arithmetic intensity, by the roofline model.

    Book section: *Chapter 2, "The roofline"*. ``intensity`` is flops per byte moved to or
    from memory (a number, or a NumPy array of them), ``peak_flops`` in flop/s and
    ``peak_bandwidth`` in bytes/s::

        attainable = min(peak_flops, intensity * peak_bandwidth)

    Below the ridge point (:func:`ridge_point`) a kernel cannot be fed fast enough and is
    memory-bound; above it, compute-bound. A float for a number, an array for an array.
    """
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    if isinstance(intensity, np.ndarray):
        if intensity.dtype.kind not in "iuf":
            raise TypeError(f"intensity must have a real dtype, got {intensity.dtype}")
        if np.isnan(intensity).any() or (intensity < 0).any():
            raise ValueError("intensity must be >= 0 everywhere, got a negative or NaN value")
        return np.minimum(float(peak_flops), intensity * float(peak_bandwidth))
    check_real("intensity", intensity, 0)
    return float(min(peak_flops, intensity * peak_bandwidth))


def ridge_point(peak_flops: float, peak_bandwidth: float) -> float:
    """The intensity (flop/byte) where the roofline bends: ``peak_flops / peak_bandwidth``.

    Book section: *Chapter 2, "The roofline"*. H100 SXM: 67e12 flop/s FP32 over 3.35e12
    bytes/s is 20 flop/byte; a kernel doing fewer flops per byte is memory-bound.
    """
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    return float(peak_flops / peak_bandwidth)


#: Arithmetic intensity (flop per byte moved, float32) of kernels this book writes, derived
#: from what each reads, writes and computes (Chapter 2, "The roofline"). Adam: 28 bytes
#: (read p, g, m, v; write p, m, v) for about 12 operations. Matmul: at most, since 12 n**2
#: bytes is the least traffic an n x n product can have.
KERNEL_INTENSITY: dict[str, float] = {
    "vector add (1 flop, 12 B)": 1 / 12,
    "SAXPY (2 flops, 12 B)": 2 / 12,
    "sum (1 flop, 4 B)": 1 / 4,
    "fp32 Adam (about 12 flops, 28 B)": 12 / 28,
    "matmul n=4096 (at most: 2n^3 flops, 12n^2 B)": 2 * 4096**3 / (12 * 4096**2),
}


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The fraction of a pipeline's time each stage sits idle: ``(p - 1) / (m + p - 1)``.

    Book section: *Chapter 6, "The bubble"*. With ``p`` stages of equal cost and a batch cut
    into ``m`` micro-batches, a GPipe or 1F1B step lasts ``m + p - 1`` forward-and-backward
    slots, of which each stage computes in ``m``: the first stage waits ``p - 1`` slots for the
    last one's first backward, the last waited ``p - 1`` slots for its first input (Huang et
    al. 2019). ``m = 1`` is the unpipelined split: ``(p - 1) / p`` idle, one stage busy at a
    time. The fraction falls below ``1/5`` once ``m >= 4 (p - 1)``.
    """
    p = check_int("stages", stages, 1)
    m = check_int("microbatches", microbatches, 1)
    return (p - 1) / (m + p - 1)


def data_parallel_step_time(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    bandwidth: float,
    latency: float = 0.0,
    backward_fraction: float = 2 / 3,
    n_buckets: int = 1,
) -> float:
    """Seconds per data-parallel training step: the computation plus the part of the gradient
    all-reduce that the backward pass does not hide.

    Book section: *Chapter 5, "A cost model for a step"*. ``compute_s`` is one rank's forward,
    backward and update on its share of the batch, ``backward_fraction`` of it the backward
    pass (about 2/3: backward does twice the forward's products, Chapter 3). The
    ``grad_bytes`` of gradients are cut into ``n_buckets`` equal buckets, which become ready
    at even intervals during the backward pass (the last at its end); each bucket's
    all-reduce takes :func:`allreduce_time` and starts when its bucket is ready and the
    previous all-reduce has finished. The update waits for the last one::

        c = allreduce_time(grad_bytes / n, N, bandwidth, latency)
        end = max over buckets i = 0 .. n-1 of (i + 1) / n * T_backward + (n - i) * c
        step = compute_s + max(0, end - T_backward)

    One bucket hides nothing: ``compute_s + allreduce_time(grad_bytes, ...)``. Many buckets
    hide all but the last bucket's all-reduce when the communication is shorter than the
    backward pass, but each pays the latency.
    """
    check_real("compute_s", compute_s, 0)
    check_real("grad_bytes", grad_bytes, 0)
    check_real("backward_fraction", backward_fraction, 0)
    if backward_fraction > 1:
        raise ValueError(f"backward_fraction must be from 0 to 1, got {backward_fraction!r}")
    n = check_int("n_buckets", n_buckets, 1)
    per_bucket = allreduce_time(grad_bytes / n, world_size, bandwidth, latency)
    backward = backward_fraction * compute_s
    end = max((i + 1) / n * backward + (n - i) * per_bucket for i in range(n))
    return compute_s + max(0.0, end - backward)
