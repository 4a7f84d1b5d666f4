"""A small BERT-style encoder: the model Chapter 6 splits across ranks.

Book section: *Chapter 6, "A 12-layer encoder"*.

:func:`make_encoder` stacks :class:`EncoderBlock` s (self-attention and a feed-forward network,
each followed by a residual addition and a LayerNorm) of the sizes in an
:class:`EncoderConfig`; :func:`encoder_batch` is the fixed batch every parallel run of it is
compared on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gpudl.checks import check_choice, check_instance, check_int, check_tensor

__all__ = [
    "DTYPES",
    "BERT_BASE",
    "EncoderConfig",
    "SelfAttention",
    "FeedForward",
    "EncoderBlock",
    "make_encoder",
    "attend",
    "encoder_batch",
]


@dataclass(frozen=True)
class EncoderConfig:
    """Sizes of the encoder of :func:`make_encoder`: ``layers`` blocks of width ``hidden``
    with ``heads`` attention heads and a feed-forward layer of ``ffn`` units, on sequences of
    ``seq`` tokens. The defaults are tiny (CPU-sized); :data:`BERT_BASE` is BERT's base model."""

    layers: int = 12
    hidden: int = 32
    heads: int = 4
    ffn: int = 64
    seq: int = 8

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "seq"):
            check_int(name, getattr(self, name), 1)
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads "
                             f"({self.heads}): each head takes hidden / heads features")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


#: Devlin et al.'s BERT-base (2019), with 12 layers of width 768, 12 heads and 3072
#: feed-forward units, on sequences of up to 512 tokens.
BERT_BASE = EncoderConfig(layers=12, hidden=768, heads=12, ffn=3072, seq=512)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Scaled dot-product attention of (batch, seq, heads * head_dim) projections, head by
    head, with the heads merged back into the last dimension. The number of heads is read
    from the shapes, so a rank that holds only some of the heads runs it unchanged."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ndim=3)
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v must have one shape, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[2] % check_int("head_dim", head_dim, 1):
        raise ValueError(f"head_dim ({head_dim}) must divide the width {q.shape[2]}")
    batch, seq, _ = q.shape
    q, k, v = (t.view(batch, seq, -1, head_dim).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # (batch, heads, seq, seq)
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(batch, seq, -1)


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention: query, key and value projections ``q``, ``k``, ``v``, the
    heads attended separately (:func:`attend`), and the output projection ``out``."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        check_instance("config", config, EncoderConfig)
        self.head_dim = config.head_dim
        self.q, self.k, self.v, self.out = (torch.nn.Linear(config.hidden, config.hidden)
                                            for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) to the same shape."""
        return self.out(attend(self.q(x), self.k(x), self.v(x), self.head_dim))


class FeedForward(torch.nn.Module):
    """``fc2(gelu(fc1(x)))``, the position-wise feed-forward network (exact, erf GeLU)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        check_instance("config", config, EncoderConfig)
        self.fc1 = torch.nn.Linear(config.hidden, config.ffn)
        self.fc2 = torch.nn.Linear(config.ffn, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., hidden) to the same shape, token by token."""
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class EncoderBlock(torch.nn.Module):
    """One encoder layer as in BERT: ``x = norm1(x + attn(x))``, then
    ``x = norm2(x + mlp(x))`` (a LayerNorm after each residual addition; no dropout)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        check_instance("config", config, EncoderConfig)
        self.attn = SelfAttention(config)
        self.norm1 = torch.nn.LayerNorm(config.hidden)
        self.mlp = FeedForward(config)
        self.norm2 = torch.nn.LayerNorm(config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) to the same shape."""
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


def make_encoder(config: EncoderConfig = EncoderConfig(), seed: int = 0,
                 dtype: torch.dtype = torch.float32) -> torch.nn.Sequential:
    """``config.layers`` :class:`EncoderBlock` in a row, initialised from ``seed`` (the
    caller's random state is left as it was). It maps (batch, seq, hidden) to the same shape;
    BERT's token embeddings and output heads are left out, since the 12 blocks are what is
    split across GPUs. A slice (``encoder[3:6]``) is a stage that shares the blocks and keeps
    their names (``"3.attn.q.weight"``)."""
    _check_setup(config, seed, dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = [EncoderBlock(config) for _ in range(config.layers)]
    return torch.nn.Sequential(*blocks).to(dtype=dtype)


def encoder_batch(config: EncoderConfig, batch: int, seed: int = 1,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets, each (batch, seq, hidden), the same in every run; the
    loss of Chapter 6 is their mean-squared error."""
    _check_setup(config, seed, dtype)
    check_int("batch", batch, 1)
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, config.seq, config.hidden)
    return (torch.randn(shape, generator=generator, dtype=dtype),
            torch.randn(shape, generator=generator, dtype=dtype))


#: The dtypes an encoder is built in.
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _check_setup(config: object, seed: object, dtype: object) -> None:
    check_instance("config", config, EncoderConfig)
    check_int("seed", seed, 0)
    check_choice("dtype", dtype, DTYPES)
