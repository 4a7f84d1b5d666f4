"""Inference on the roofline: the KV cache's size, the intensity of prefill and of a decode
step, the batch at which decoding turns compute-bound, and what serving costs.

Book section: *Chapter 9, "Prefill and decode on the roofline"*, *"The KV cache"* and
*"Weight-only int8"*, and *Chapter 7, "Serving the model"* (tokens per unit of price). Units:
bytes, seconds, and bytes per second (not bits, not GB/s).

A decoder of ``N`` parameters stored in ``bytes_per_param`` bytes each does about ``2 N``
flops per token (a multiply-add per weight, Chapter 3) and, in a decode step, must read
every weight once whatever the batch ``b``: ``2 N b`` flops for ``N bytes_per_param`` bytes
of weights, plus the KV cache each sequence attends to. At batch 1 in bf16 that is one flop
per byte, far left of every GPU's ridge point; prefill processes a prompt's ``s`` tokens in
one pass and reaches about ``s`` flops per byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudl.checks import check_instance, check_int, check_positive, check_real

__all__ = [
    "ModelShape", "MODELS",
    "kv_cache_bytes", "decode_flops", "decode_bytes", "decode_intensity", "prefill_intensity",
    "critical_batch", "decode_step_time", "prefill_time", "decode_tokens_per_second",
    "tokens_per_price",
]


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int,
                   bytes_per_value: float = 2) -> float:
    """Bytes of the KV cache for ``tokens`` tokens: a key and a value of ``head_dim`` values
    per cache head and layer, ``2 * layers * kv_heads * head_dim * tokens * bytes_per_value``.

    Book section: *Chapter 9, "The KV cache"*. Multi-head attention caches ``kv_heads =
    heads``; grouped-query attention fewer (Llama 2 70B: 8 for 64 query heads), multi-query
    attention one. Llama 2 7B (32 layers, 32 heads of 128, fp16) takes 0.5 MiB per token."""
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        check_int(name, value, 1)
    check_int("tokens", tokens, 0)
    check_positive("bytes_per_value", bytes_per_value)
    return float(2 * layers * kv_heads * head_dim * tokens * bytes_per_value)


@dataclass(frozen=True)
class ModelShape:
    """A published decoder's shape: ``params`` (nominal, as its name gives it), ``layers``,
    query ``heads``, ``kv_heads`` and ``head_dim``; ``source`` is a key of
    ``book/references.bib``."""

    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    source: str

    def __post_init__(self) -> None:
        check_instance("name", self.name, str)
        check_instance("source", self.source, str)
        check_positive("params", self.params)
        for name in ("layers", "heads", "kv_heads", "head_dim"):
            check_int(name, getattr(self, name), 1)
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads}): each key and value head serves a group")

    def kv_bytes_per_token(self, bytes_per_value: float = 2) -> float:
        """:func:`kv_cache_bytes` of one token."""
        return kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, 1, bytes_per_value)


#: Name -> :class:`ModelShape` of the models whose published KV-cache figures Chapter 9
#: reproduces, from their released configurations. OPT-13B is the vLLM paper's example (40
#: layers of width 5,120, 40 heads); Llama 2 7B has 32 layers of 32 heads of 128; Llama 2 70B
#: has 80 layers of 64 query heads sharing 8 key and value heads.
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("OPT-13B", 13e9, 40, 40, 40, 128, "kwon2023vllm"),
    ModelShape("Llama 2 7B", 7e9, 32, 32, 32, 128, "metallama2023llama27b"),
    ModelShape("Llama 2 70B", 70e9, 80, 64, 8, 128, "metallama2023llama270b"),
)}


def _check_model(n_params: float, batch: int, context_tokens: int, kv_bytes_per_token: float,
                 bytes_per_param: float) -> None:
    check_positive("n_params", n_params)
    check_int("batch", batch, 1)
    check_int("context_tokens", context_tokens, 0)
    check_real("kv_bytes_per_token", kv_bytes_per_token, 0, finite=True)
    check_positive("bytes_per_param", bytes_per_param)


def decode_flops(n_params: float, batch: int) -> float:
    """Flops of one decode step of ``batch`` sequences: ``2 N`` per new token (the attention
    scores' ``4 d`` per layer, head and cached token are small beside it at short contexts
    and left out)."""
    check_positive("n_params", n_params)
    return 2.0 * n_params * check_int("batch", batch, 1)


def decode_bytes(n_params: float, batch: int, context_tokens: int = 0,
                 kv_bytes_per_token: float = 0, bytes_per_param: float = 2) -> float:
    """Bytes one decode step reads: every weight once (``N bytes_per_param``), shared by the
    ``batch`` sequences, plus the KV cache of the ``context_tokens`` cached tokens of all of
    them (``kv_bytes_per_token`` each, :func:`kv_cache_bytes` of one token)."""
    _check_model(n_params, batch, context_tokens, kv_bytes_per_token, bytes_per_param)
    return n_params * bytes_per_param + context_tokens * kv_bytes_per_token


def decode_intensity(n_params: float, batch: int, context_tokens: int = 0,
                     kv_bytes_per_token: float = 0, bytes_per_param: float = 2) -> float:
    """Flops per byte of a decode step (:func:`decode_flops` over :func:`decode_bytes`):
    ``2 b / bytes_per_param`` without a cache, ``b`` flops per byte in bf16."""
    return decode_flops(n_params, batch) / decode_bytes(
        n_params, batch, context_tokens, kv_bytes_per_token, bytes_per_param)


def prefill_intensity(n_params: float, prompt_tokens: int, kv_bytes_per_token: float = 0,
                      bytes_per_param: float = 2) -> float:
    """Flops per byte of prefilling one prompt of ``prompt_tokens`` tokens in one pass:
    ``2 N s`` flops for the weights read once and the ``s`` tokens' cache entries written."""
    check_int("prompt_tokens", prompt_tokens, 1)
    _check_model(n_params, 1, prompt_tokens, kv_bytes_per_token, bytes_per_param)
    return (2.0 * n_params * prompt_tokens
            / (n_params * bytes_per_param + prompt_tokens * kv_bytes_per_token))


def critical_batch(peak_flops: float, peak_bandwidth: float, n_params: float,
                   kv_bytes_per_sequence: float = 0, bytes_per_param: float = 2) -> int | None:
    """The smallest batch at which a decode step reaches the ridge point ``R = peak_flops /
    peak_bandwidth``, each sequence bringing ``kv_bytes_per_sequence`` bytes of cache.

    Book section: *Chapter 9, "Prefill and decode on the roofline"*. From
    ``2 N b / (N bytes_per_param + b K) >= R``: ``b >= R N bytes_per_param / (2 N - R K)``,
    ``ceil(R)`` in bf16 without a cache. ``None`` when ``2 N <= R K``: every sequence's cache
    then costs more bytes than its flops can pay for, and no batch is compute-bound."""
    ridge = check_positive("peak_flops", peak_flops) / check_positive(
        "peak_bandwidth", peak_bandwidth)
    check_positive("n_params", n_params)
    check_real("kv_bytes_per_sequence", kv_bytes_per_sequence, 0, finite=True)
    check_positive("bytes_per_param", bytes_per_param)
    room = 2 * n_params - ridge * kv_bytes_per_sequence
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * n_params * bytes_per_param / room - 1e-9))


def decode_step_time(n_params: float, batch: int, peak_flops: float, peak_bandwidth: float,
                     context_tokens: int = 0, kv_bytes_per_token: float = 0,
                     bytes_per_param: float = 2) -> float:
    """Seconds of one decode step at the roofline: the longer of its flops at the peak and
    its bytes at the bandwidth (a lower bound; a real step adds launches and overheads)."""
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    return max(decode_flops(n_params, batch) / peak_flops,
               decode_bytes(n_params, batch, context_tokens, kv_bytes_per_token,
                            bytes_per_param) / peak_bandwidth)


def prefill_time(n_params: float, tokens: int, peak_flops: float, peak_bandwidth: float,
                 kv_bytes_per_token: float = 0, bytes_per_param: float = 2) -> float:
    """Seconds to prefill ``tokens`` prompt tokens in one pass at the roofline: ``2 N`` flops
    each at the peak, or the weights read once and the tokens' cache written."""
    check_int("tokens", tokens, 1)
    _check_model(n_params, 1, tokens, kv_bytes_per_token, bytes_per_param)
    return max(2.0 * n_params * tokens / check_positive("peak_flops", peak_flops),
               (n_params * bytes_per_param + tokens * kv_bytes_per_token)
               / check_positive("peak_bandwidth", peak_bandwidth))


def decode_tokens_per_second(n_params: float, batch: int, peak_flops: float,
                             peak_bandwidth: float, context_tokens: int = 0,
                             kv_bytes_per_token: float = 0, bytes_per_param: float = 2
                             ) -> float:
    """Tokens per second of a decode step at the roofline, ``batch / decode_step_time``: an
    upper bound for one GPU holding the whole model."""
    return batch / decode_step_time(n_params, batch, peak_flops, peak_bandwidth,
                                    context_tokens, kv_bytes_per_token, bytes_per_param)


def tokens_per_price(tokens_per_second: float, price_per_gpu_hour: float,
                     n_gpus: int = 1) -> float:
    """Tokens generated per unit of price (per dollar for a price in dollars) by ``n_gpus``
    GPUs rented at ``price_per_gpu_hour`` that together make ``tokens_per_second``.

    Book section: *Chapter 7, "Serving the model"*: ``tokens_per_second * 3600 / (n_gpus *
    price_per_gpu_hour)``. The price is the reader's, in any currency, as in Chapter 7."""
    check_positive("tokens_per_second", tokens_per_second)
    check_positive("price_per_gpu_hour", price_per_gpu_hour)
    return tokens_per_second * 3600 / (check_int("n_gpus", n_gpus, 1) * price_per_gpu_hour)
