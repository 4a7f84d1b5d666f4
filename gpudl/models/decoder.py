"""A tiny Transformer decoder: Chapter 6's encoder blocks made causal, with a KV cache, that
generates greedily in PyTorch and on the book's kernels, token for token the same.

Book section: *Chapter 9, "A tiny decoder, token for token"* and *"Launches and CUDA graphs"*.

:class:`TinyDecoder` is the PyTorch model: token and position embeddings, ``layers``
:class:`DecoderBlock` s (Chapter 6's post-LayerNorm block, whose attention sees only earlier
tokens and keeps their keys and values in a cache; ``kv_heads`` may divide ``heads``) and a
linear head over the vocabulary. :func:`generate_torch` prefills the prompt in one pass and
then decodes one token per step, each time taking the most likely token.

:class:`KernelDecoder` runs the same weights on the kernels of
:mod:`gpudl.kernels.decoder_layers` and :mod:`gpudl.kernels.decode`, one token per step
(its prompt too, one position at a time), into buffers allocated once. Every kernel of a
step goes through one ``launch`` function, so a step's launches can be counted, traced for
their bytes (:meth:`KernelDecoder.traced_step_bytes`), put on a stream, or captured in a CUDA
graph (:mod:`gpudl.models.graphs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.checks import (
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_ints,
    check_tensor,
)
from gpudl.kernels import decode
from gpudl.kernels import decoder_layers as layers
from gpudl.kernels.arrays import poisoned
from gpudl.models.encoder import EncoderConfig, FeedForward

__all__ = ["DecoderConfig", "CausalSelfAttention", "DecoderBlock", "TinyDecoder",
           "make_decoder", "generate_torch", "KernelDecoder", "launches_per_step",
           "step_bytes_after"]

Launch = Callable[..., None]
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


def _check_prompt(prompt: Sequence[int], new_tokens: int, config: DecoderConfig) -> None:
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
    _check_prompt(prompt, new_tokens, model.config)
    cache = model.new_cache(1)
    logits = model(torch.tensor([list(prompt)]), cache)[0, -1]
    tokens, seen = [int(logits.argmax())], [logits.numpy().copy()]
    for position in range(len(prompt), len(prompt) + new_tokens - 1):
        logits = model(torch.tensor([[tokens[-1]]]), cache, position)[0, -1]
        tokens.append(int(logits.argmax()))
        seen.append(logits.numpy().copy())
    return tokens, seen


def _device(t: torch.Tensor) -> Any:
    return cuda.to_device(np.ascontiguousarray(t.detach().numpy(), np.float32))


class KernelDecoder:
    """``model``'s weights on the device and one step of one sequence on the book's kernels,
    attention by ``decode.VARIANTS[attention]``. State lives in device buffers: ``tokens``,
    ``positions`` and ``lengths`` (int32, one per sequence), the caches (poisoned until
    written) and the activations."""

    def __init__(self, model: TinyDecoder, attention: str = "v1_one_block_per_head") -> None:
        check_instance("model", model, TinyDecoder)
        check_choice("attention", attention, tuple(decode.VARIANTS))
        self.config = c = model.config
        self.attention = attention
        self.embeddings = (_device(model.tok_emb.weight), _device(model.pos_emb.weight))
        self.blocks = []
        for block in model.blocks:
            linear = {name: (_device(lin.weight.T), _device(lin.bias)) for name, lin in (
                ("q", block.attn.q), ("k", block.attn.k), ("v", block.attn.v),
                ("out", block.attn.out), ("fc1", block.mlp.fc1), ("fc2", block.mlp.fc2))}
            norms = [(_device(n.weight), _device(n.bias)) for n in (block.norm1, block.norm2)]
            cache = [poisoned((1, c.kv_heads, c.max_len, c.head_dim)) for _ in range(2)]
            self.blocks.append((linear, norms, cache))
        self.head = (_device(model.head.weight.T), _device(model.head.bias))
        self.eps = np.float32(model.blocks[0].norm1.eps)
        kv = c.kv_heads * c.head_dim
        shapes = {"x": c.hidden, "y": c.hidden, "q": c.hidden, "k": kv, "v": kv,
                  "attended": c.hidden, "proj": c.hidden, "x1": c.hidden, "h": c.ffn,
                  "f": c.hidden, "logits": c.vocab}
        self.buffers = {name: poisoned((1, n)) for name, n in shapes.items()}
        self.tokens, self.positions, self.lengths = (
            cuda.to_device(np.zeros(1, np.int32)) for _ in range(3))
        splits = -(-c.max_len // decode.SPLIT_SIZE)
        self.split_workspace = (poisoned((1, c.heads, splits)), poisoned((1, c.heads, splits)),
                                poisoned((1, c.heads, splits, c.head_dim)))

    def _linear(self, launch: Launch, x: Any, weights: tuple[Any, Any], y: Any,
                gelu: bool = False) -> None:
        blocks = -(-y.shape[1] // layers.THREADS)
        launch(layers.v1_linear, (blocks, 1), layers.THREADS, x, *weights, y, gelu)

    def _attend(self, launch: Launch, cache: list[Any]) -> None:
        c, buf = self.config, self.buffers
        q = buf["q"].reshape(1, c.heads, c.head_dim)
        out = buf["attended"].reshape(1, c.heads, c.head_dim)
        extra = {"workspace": self.split_workspace} if self.attention == "v2_split_kv" else {}
        decode.VARIANTS[self.attention](q, *cache, self.lengths, out, launch=launch, **extra)

    def step(self, launch: Launch = decode.plain_launch) -> None:
        """One token: from ``tokens`` at ``positions`` to ``logits``, the cache extended
        and the next token chosen into ``tokens`` (``positions`` advanced). Every kernel
        through ``launch(kernel, griddim, blockdim, *args)``."""
        check_callable("launch", launch)
        buf, t = self.buffers, layers.THREADS
        launch(layers.v1_embed, 1, t, self.tokens, self.positions, *self.embeddings,
               buf["x"], self.lengths)
        x, other = buf["x"], buf["y"]
        for linear, norms, cache in self.blocks:
            for name in ("q", "k", "v"):
                self._linear(launch, x, linear[name], buf[name])
            launch(layers.v1_append_kv, 1, t, buf["k"], buf["v"], self.positions, *cache)
            self._attend(launch, cache)
            self._linear(launch, buf["attended"], linear["out"], buf["proj"])
            launch(layers.v1_add_layernorm, 1, t, x, buf["proj"], *norms[0], buf["x1"],
                   self.eps)
            self._linear(launch, buf["x1"], linear["fc1"], buf["h"], gelu=True)
            self._linear(launch, buf["h"], linear["fc2"], buf["f"])
            launch(layers.v1_add_layernorm, 1, t, buf["x1"], buf["f"], *norms[1], other,
                   self.eps)
            x, other = other, x
        self._linear(launch, x, self.head, buf["logits"])
        launch(layers.v1_argmax_next, 1, t, buf["logits"], self.tokens, self.positions,
               self.lengths)

    def set_token(self, token: int, position: int) -> None:
        """Put ``token`` at ``position`` as the next step's input (a prompt token): the
        kernels index the embeddings and the caches with them, unchecked."""
        check_int("token", token, 0, self.config.vocab - 1)
        check_int("position", position, 0, self.config.max_len - 1)
        self.tokens.copy_to_device(np.array([token], np.int32))
        self.positions.copy_to_device(np.array([position], np.int32))

    def generate(self, prompt: Sequence[int], new_tokens: int,
                 run_step: Callable[[], None] | None = None
                 ) -> tuple[list[int], list[np.ndarray]]:
        """Greedy decoding: the prompt one token per step, then ``new_tokens`` tokens, each
        step by ``run_step`` (:meth:`step` unless given: a CUDA graph's replay, say).
        Returns the tokens and the logits each was chosen from."""
        _check_prompt(prompt, new_tokens, self.config)
        if run_step is not None:
            check_callable("run_step", run_step)
        run_step = run_step or self.step
        for position, token in enumerate(prompt):
            self.set_token(token, position)
            run_step()
        tokens, seen = [], []
        for _ in range(new_tokens):
            if tokens:
                run_step()
            tokens.append(int(self.tokens.copy_to_host()[0]))
            seen.append(self.buffers["logits"].copy_to_host()[0])
        return tokens, seen

    def traced_step_bytes(self) -> dict[str, int]:
        """Run one step under :func:`gpudl.trace.trace` (simulator only) and count the bytes
        of device memory it reads and writes, by kind: ``"weights"`` (embeddings, linear
        layers, norms), ``"kv cache"`` and ``"other"`` (activations, tokens, lengths)."""
        from gpudl.trace import trace

        counts = {"weights": 0, "kv cache": 0, "other": 0}
        weights = {"tok_emb", "pos_emb", "w_t", "bias", "gamma", "beta"}

        def traced(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
            for a in trace(kernel, griddim, blockdim, *args).accesses:
                if a.kind == "global":
                    kind = ("weights" if a.array in weights else
                            "kv cache" if a.array in ("k_cache", "v_cache") else "other")
                    counts[kind] += a.size

        self.step(traced)
        return counts


def step_bytes_after(model: TinyDecoder, prompt: Sequence[int]) -> dict[str, int]:
    """:meth:`KernelDecoder.traced_step_bytes` of the step that follows ``prompt`` (the
    first generated token's): a function of picklable arguments, so that
    :func:`gpudl.trace.on_simulator` can run it in a child process from a GPU."""
    check_instance("model", model, TinyDecoder)
    _check_prompt(prompt, 1, model.config)
    decoder = KernelDecoder(model)
    decoder.generate(prompt, 1)
    return decoder.traced_step_bytes()


def launches_per_step(decoder: KernelDecoder) -> dict[str, int]:
    """The kernels one step launches, by name, counted by running a step (which advances the
    decoder's state like any step)."""
    check_instance("decoder", decoder, KernelDecoder)
    counted: dict[str, int] = {}

    def counting(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        name = kernel.py_func.__name__
        counted[name] = counted.get(name, 0) + 1
        kernel[griddim, blockdim](*args)

    decoder.step(counting)
    return counted
