"""Training compute, utilisation, time, cost and energy, from first principles.

Book section: *Chapter 7, "Compute: C = 6ND"*, *"Utilisation: MFU"* and *"Time, cost and
energy"*. Units: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from __future__ import annotations

from gpudl.checks import check_int, check_positive, check_real

__all__ = ["mfu", "training_cost", "training_energy", "training_flops", "training_time"]


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
