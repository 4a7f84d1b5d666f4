"""A tiny Transformer decoder: Chapter 6's encoder blocks made causal, with a KV cache, that
generates greedily in PyTorch.

Book section: *Chapter 9, "A tiny decoder, token for token"*.

:class:`TinyDecoder` is the PyTorch model: token and position embeddings, ``layers``
:class:`DecoderBlock` s (Chapter 6's post-LayerNorm block, whose attention sees only earlier
tokens and keeps their keys and values in a cache; ``kv_heads`` may divide ``heads``) and a
linear head over the vocabulary. :func:`generate_torch` prefills the prompt in one pass and
then decodes one token per step, each time taking the most likely token.

:class:`gpudl.models.kernel_decoder.KernelDecoder` runs the same weights on the book's
kernels, token for token the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
import torch

from gpudl.checks import check_instance, check_int, check_ints, check_tensor
from gpudl.kernels import decode
from gpudl.models.encoder import EncoderConfig, FeedForward

__all__ = ["DecoderConfig", "CausalSelfAttention", "DecoderBlock", "TinyDecoder",
           "make_decoder", "check_prompt", "generate_torch"]

Cache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of a :class:`TinyDecoder`: a vocabulary of ``vocab`` tokens, ``layers`` blocks
    of width ``hidden`` with ``heads`` query heads and ``kv_heads`` key and value heads, a
    feed-forward layer of ``ffn`` units, sequences of at most ``max_len`` tokens."""

    vocab: int = 40
    layers: int = 2
    hidden: int = 16
    heads: int = 2
    kv_heads: int = 1
    ffn: int = 32
    max_len: int = 16

    def __post_init__(self) -> None:
        for name in ("vocab", "layers", "hidden", "heads", "kv_heads", "ffn", "max_len"):
            check_int(name, getattr(self, name), 1)
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads "
                             f"({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads})")
        if self.head_dim > decode.MAX_HEAD_DIM:
            raise ValueError(f"the head size hidden / heads must be at most "
                             f"{decode.MAX_HEAD_DIM}, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _check_positions(start: object, s: int, config: DecoderConfig) -> None:
    check_int("start", start, 0)
    if start + s > config.max_len:
        raise ValueError(f"start ({start}) and the {s} new token(s) need {start + s} "
                         f"positions; max_len is {config.max_len}")


def _check_step(x: object, cache: object, start: object, config: DecoderConfig) -> None:
    """A block's input: float32 (batch, s, hidden) tokens at ``start`` and its cache."""
    check_tensor("x", x, (torch.float32,), ndim=3)
    if x.shape[2] != config.hidden:
        raise ValueError(f"x must be (batch, s, hidden = {config.hidden}), got "
                         f"{tuple(x.shape)}")
    _check_positions(start, x.shape[1], config)
    _check_layer_cache("cache", cache, x.shape[0], config)


def _check_tokens(tokens: object, cache: object, start: object, config: DecoderConfig
                  ) -> None:
    """The model's input: int64 token ids (batch, s) below ``vocab`` at ``start``, and a
    cache of one (keys, values) pair per block."""
    check_tensor("tokens", tokens, (torch.int64,), ndim=2)
    if tokens.numel() and not bool(((tokens >= 0) & (tokens < config.vocab)).all()):
        raise ValueError(f"tokens must be token ids from 0 to vocab - 1 = {config.vocab - 1}")
    _check_positions(start, tokens.shape[1], config)
    if not isinstance(cache, list):
        raise TypeError(f"cache must be a list of (keys, values) pairs (new_cache), got "
                        f"{type(cache).__name__}")
    if len(cache) != config.layers:
        raise ValueError(f"cache must hold one (keys, values) pair per block, "
                         f"{config.layers}, got {len(cache)}")
    for i, layer_cache in enumerate(cache):
        _check_layer_cache(f"cache[{i}]", layer_cache, tokens.shape[0], config)


def _check_layer_cache(name: str, cache: object, batch: int, config: DecoderConfig) -> None:
    """One block's cache: a pair of float32 tensors (batch, kv_heads, max_len, head_dim)."""
    if not isinstance(cache, tuple | list) or len(cache) != 2:
        raise TypeError(f"{name} must be a (keys, values) pair of tensors, got "
                        f"{type(cache).__name__}")
    shape = (batch, config.kv_heads, config.max_len, config.head_dim)
    for part, t in zip(("keys", "values"), cache, strict=True):
        check_tensor(f"{name} {part}", t, (torch.float32,), ndim=4)
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} {part} must have shape (batch, kv_heads, max_len, "
                             f"head_dim) = {shape}, got {tuple(t.shape)}")


class CausalSelfAttention(torch.nn.Module):
    """Chapter 6's self-attention with ``kv_heads`` key and value heads and a cache: the
    keys and values of the new tokens are written into it, and each query sees the cached
    tokens and the new ones up to its own position."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = check_instance("config", config, DecoderConfig)
        kv = config.kv_heads * config.head_dim
        self.q = torch.nn.Linear(config.hidden, config.hidden)
        self.k = torch.nn.Linear(config.hidden, kv)
        self.v = torch.nn.Linear(config.hidden, kv)
        self.out = torch.nn.Linear(config.hidden, config.hidden)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor],
                start: int) -> torch.Tensor:
        """(batch, s, hidden) tokens at positions ``start, ..., start + s - 1`` to the same
        shape; ``cache`` holds (batch, kv_heads, max_len, head_dim) keys and values."""
        c = self.config
        _check_step(x, cache, start, c)
        batch, s, _ = x.shape
        q = self.q(x).view(batch, s, c.heads, c.head_dim).transpose(1, 2)
        for store, proj in zip(cache, (self.k, self.v), strict=True):
            store[:, :, start:start + s] = proj(x).view(
                batch, s, c.kv_heads, c.head_dim).transpose(1, 2)
        group = c.heads // c.kv_heads
        k, v = (store[:, :, :start + s].repeat_interleave(group, dim=1) for store in cache)
        seen = torch.ones(s, start + s, dtype=torch.bool).tril(diagonal=start)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=seen)
        return self.out(out.transpose(1, 2).reshape(batch, s, c.hidden))


class DecoderBlock(torch.nn.Module):
    """Chapter 6's :class:`gpudl.models.encoder.EncoderBlock` made causal:
    ``x = norm1(x + attn(x))``, then ``x = norm2(x + mlp(x))``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        check_instance("config", config, DecoderConfig)
        self.attn = CausalSelfAttention(config)
        self.norm1 = torch.nn.LayerNorm(config.hidden)
        self.mlp = FeedForward(EncoderConfig(  # Chapter 6's, of this width
            layers=config.layers, hidden=config.hidden, heads=config.heads, ffn=config.ffn,
            seq=config.max_len))
        self.norm2 = torch.nn.LayerNorm(config.hidden)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor],
                start: int) -> torch.Tensor:
        """(batch, s, hidden) to the same shape, the cache extended (see
        :meth:`CausalSelfAttention.forward`)."""
        x = self.norm1(x + self.attn(x, cache, start))
        return self.norm2(x + self.mlp(x))


class TinyDecoder(torch.nn.Module):
    """Embeddings, :class:`DecoderBlock` s and a linear head: token ids (batch, s) at
    positions ``start, ...`` to logits (batch, s, vocab)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = check_instance("config", config, DecoderConfig)
        self.tok_emb = torch.nn.Embedding(config.vocab, config.hidden)
        self.pos_emb = torch.nn.Embedding(config.max_len, config.hidden)
        self.blocks = torch.nn.ModuleList(DecoderBlock(config) for _ in range(config.layers))
        self.head = torch.nn.Linear(config.hidden, config.vocab)

    def new_cache(self, batch: int) -> Cache:
        """Empty (zero) keys and values for ``batch`` sequences, one pair per block."""
        c = self.config
        shape = (check_int("batch", batch, 1), c.kv_heads, c.max_len, c.head_dim)
        return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(c.layers)]

    def forward(self, tokens: torch.Tensor, cache: Cache, start: int = 0) -> torch.Tensor:
        """Logits (batch, s, vocab) of tokens (batch, s) at positions ``start, ...``; the
        cache (:meth:`new_cache`) is extended with their keys and values."""
        _check_tokens(tokens, cache, start, self.config)
        positions = torch.arange(start, start + tokens.shape[1])
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x = block(x, layer_cache, start)
        return self.head(x)


def make_decoder(config: DecoderConfig = DecoderConfig(), seed: int = 0) -> TinyDecoder:
    """A :class:`TinyDecoder` initialised from ``seed`` (the caller's random state is left
    as it was), in evaluation mode."""
    check_instance("config", config, DecoderConfig)
    check_int("seed", seed, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyDecoder(config).eval()


def check_prompt(prompt: Sequence[int], new_tokens: int, config: DecoderConfig) -> None:
    """The checks of a generation: ``prompt`` token ids below ``config.vocab``, and room in
    ``config.max_len`` for the prompt and ``new_tokens`` (an int >= 1) tokens after it."""
    for i, token in enumerate(check_ints("prompt", prompt, 0)):
        if token >= config.vocab:
            raise ValueError(f"prompt[{i}] must be a token id below vocab = {config.vocab}, "
                             f"got {token}")
    check_int("new_tokens", new_tokens, 1)
    if len(prompt) + new_tokens - 1 > config.max_len:
        raise ValueError(f"the prompt ({len(prompt)} tokens) and new_tokens ({new_tokens}) "
                         f"need {len(prompt) + new_tokens - 1} positions; max_len is "
                         f"{config.max_len}")


@torch.no_grad()
def generate_torch(model: TinyDecoder, prompt: Sequence[int], new_tokens: int
                   ) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding in PyTorch: the prompt in one pass, then one token per step. Returns
    the ``new_tokens`` tokens and the logits each was chosen from."""
    check_instance("model", model, TinyDecoder)
    check_prompt(prompt, new_tokens, model.config)
    cache = model.new_cache(1)
    logits = model(torch.tensor([list(prompt)]), cache)[0, -1]
    tokens, seen = [int(logits.argmax())], [logits.numpy().copy()]
    for position in range(len(prompt), len(prompt) + new_tokens - 1):
        logits = model(torch.tensor([[tokens[-1]]]), cache, position)[0, -1]
        tokens.append(int(logits.argmax()))
        seen.append(logits.numpy().copy())
    return tokens, seen
