"""Context parallelism's costs: a ring-attention step's transfer against its computation, the
chunk length at which the computation hides the transfer on each GPU of the book's table, and
the bytes a GPU sends by ring and by head-parallel attention.

Book section: *Chapter 11*, when the ring hides its transfers (the activations per GPU are
:func:`gpudl.estimate.activation_memory` with ``context_parallel``). Units: bytes, seconds,
and bytes per second (not bits, not GB/s).

A ring step on one rank, ``c`` tokens per rank, ``a`` heads of size ``d``, ``e`` bytes per
element: the rank sends its key and value chunk, ``2 c a d e`` bytes, while it computes
``Q K^T`` and ``P V`` of its ``c`` queries against the ``c`` keys it holds, ``4 c^2 a d``
flops (half of that, at every step, for causal attention in the balanced layout). At link
bandwidth ``B`` and peak ``F`` the computation hides the transfer when
``4 c^2 a d / F >= 2 c a d e / B``, that is from ``c = e F / (2 B)`` (twice that when
causal): the heads and the head size cancel, and only the GPU's flops per byte of link
remain. At the datasheets' peaks; a kernel below peak computes longer and hides the transfer
from a shorter chunk, so these lengths are enough. The latency of each transfer (microseconds
over NVLink) is left out.
"""

from __future__ import annotations

import math

from gpudl.checks import check_bool, check_choice, check_int, check_positive
from gpudl.hardware import peak_flops

__all__ = ["NVLINK_BANDWIDTH", "ring_step_bytes", "ring_step_flops", "ring_step_time",
           "hiding_chunk", "hiding_chunks", "context_bytes_per_gpu"]

#: NVLink bandwidth of each GPU of the book's table that has it, one direction, in bytes/s,
#: with the BibTeX key of its datasheet. The datasheets give both directions together: V100
#: SXM2 300 GB/s, A100 SXM 600 GB/s, H100 and H200 SXM 900 GB/s (Chapter 5 quotes the A100's
#: and the H100's). The table's other GPUs (PCIe boards, a Jetson) have no NVLink here.
NVLINK_BANDWIDTH: dict[str, tuple[float, str]] = {
    "V100 SXM2 32GB": (150e9, "nvidia2018v100"),
    "A100 40GB SXM": (300e9, "nvidia2020a100"),
    "A100 80GB SXM": (300e9, "nvidia2020a100"),
    "H100 SXM": (450e9, "nvidia2022h100"),
    "H200 SXM": (450e9, "nvidia2024h200"),
}


def _check_shape(chunk: int, heads: int, head_dim: int) -> None:
    check_int("chunk", chunk, 1)
    check_int("heads", heads, 1)
    check_int("head_dim", head_dim, 1)


def ring_step_bytes(chunk: int, heads: int, head_dim: int, bytes_per_element: int = 2
                    ) -> float:
    """Bytes one rank sends in a ring step of the forward pass: its key and value chunk,
    ``2 chunk heads head_dim bytes_per_element``."""
    _check_shape(chunk, heads, head_dim)
    return float(2 * chunk * heads * head_dim * check_int("bytes_per_element", bytes_per_element,
                                                          1))


def ring_step_flops(chunk: int, heads: int, head_dim: int, causal: bool = False) -> float:
    """Flops of one rank's attention in a ring step: ``Q K^T`` and ``P V`` of ``chunk``
    queries against ``chunk`` keys, ``4 chunk^2 heads head_dim``; half of that when causal
    (the balanced layout: at every step a rank computes half of its pairs of pieces)."""
    _check_shape(chunk, heads, head_dim)
    return 4 * chunk**2 * heads * head_dim / (2 if check_bool("causal", causal) else 1)


def ring_step_time(chunk: int, heads: int, head_dim: int, bandwidth: float, peak: float, *,
                   bytes_per_element: int = 2, causal: bool = False) -> dict:
    """A ring step's ``transfer_s`` (:func:`ring_step_bytes` over ``bandwidth``, bytes/s)
    and ``compute_s`` (:func:`ring_step_flops` over ``peak``, flop/s), the step's ``step_s``
    when the transfer overlaps the computation (the longer of the two) and whether the
    computation ``hides`` the transfer."""
    transfer = ring_step_bytes(chunk, heads, head_dim, bytes_per_element) / check_positive(
        "bandwidth", bandwidth)
    compute = ring_step_flops(chunk, heads, head_dim, causal) / check_positive("peak", peak)
    return {"transfer_s": transfer, "compute_s": compute, "step_s": max(transfer, compute),
            "hides": compute >= transfer}


def hiding_chunk(bandwidth: float, peak: float, bytes_per_element: int = 2,
                 causal: bool = False) -> int:
    """The fewest tokens per rank at which a ring step's computation hides its transfer:
    ``ceil(bytes_per_element peak / (2 bandwidth))``, twice that when causal (see the module's
    docstring)."""
    check_positive("bandwidth", bandwidth)
    check_positive("peak", peak)
    check_int("bytes_per_element", bytes_per_element, 1)
    return math.ceil(bytes_per_element * peak * (2 if check_bool("causal", causal) else 1)
                     / (2 * bandwidth))


def hiding_chunks(causal: bool = False) -> dict[str, int]:
    """:func:`hiding_chunk` for each GPU of :data:`NVLINK_BANDWIDTH`, 16-bit elements at the
    tensor cores' FP16 peak with FP32 accumulation (the training case; BF16's, where a GPU has
    it)."""
    check_bool("causal", causal)
    return {name: hiding_chunk(bandwidth, peak_flops(name, "fp16"), 2, causal)
            for name, (bandwidth, _) in NVLINK_BANDWIDTH.items()}


def context_bytes_per_gpu(seq_len: int, heads: int, head_dim: int, world_size: int,
                          strategy: str = "ring", bytes_per_element: int = 2) -> float:
    """Bytes each of ``world_size`` GPUs sends in one attention layer's forward pass over
    ``seq_len`` tokens, ``s = seq_len / world_size`` each: by ``"ring"``, its key and value
    chunk at each of the ``W - 1`` transfers, ``2 (W - 1) s heads head_dim e``; by
    ``"ulysses"``, ``(W - 1) / W`` of its ``q``, ``k``, ``v`` (to the heads' ranks) and of the
    output (back), ``4 (W - 1) / W s heads head_dim e``. The ring's share of the keys and
    values, ``2 (W - 1) / W``, hardly falls as ``W`` grows; Ulysses sends ``W / 2`` times
    less."""
    check_int("seq_len", seq_len, 1)
    _check_shape(1, heads, head_dim)
    w = check_int("world_size", world_size, 1)
    check_choice("strategy", strategy, ("ring", "ulysses"))
    share = seq_len / w * heads * head_dim * check_int("bytes_per_element", bytes_per_element, 1)
    return 2 * (w - 1) * share if strategy == "ring" else 4 * (w - 1) / w * share
