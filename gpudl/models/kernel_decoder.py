"""The tiny decoder on the book's kernels: one token per step into buffers allocated once,
each step's launches counted and its bytes traced.

Book section: *Chapter 9, "A tiny decoder, token for token"* and *"Launches and CUDA graphs"*.

:class:`KernelDecoder` runs the weights of a :class:`gpudl.models.decoder.TinyDecoder` on the
kernels of :mod:`gpudl.kernels.decoder_layers` and :mod:`gpudl.kernels.decode`, one token per
step (its prompt too, one position at a time), and generates the tokens PyTorch generates.
Every kernel of a step goes through one ``launch`` function, so a step's launches can be
counted (:func:`launches_per_step`), traced for their bytes
(:meth:`KernelDecoder.traced_step_bytes`, :func:`step_bytes_after`), put on a stream, or
captured in a CUDA graph (:mod:`gpudl.models.graphs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.checks import check_callable, check_choice, check_instance, check_int
from gpudl.kernels import decode
from gpudl.kernels import decoder_layers as layers
from gpudl.kernels.arrays import poisoned
from gpudl.models.decoder import TinyDecoder, check_prompt

__all__ = ["KernelDecoder", "launches_per_step", "step_bytes_after"]

Launch = Callable[..., None]


def _device(t: torch.Tensor) -> Any:
    return cuda.to_device(np.ascontiguousarray(t.detach().numpy(), np.float32))


class KernelDecoder:
    """``model``'s weights on the device and one step of one sequence on the book's kernels,
    attention by ``decode.VARIANTS[attention]`` (one of ``decode.TRACEABLE``, whose launches
    a graph records). State lives in device buffers: ``tokens``, ``positions`` and
    ``lengths`` (int32, one per sequence), the caches (poisoned until written) and the
    activations."""

    def __init__(self, model: TinyDecoder, attention: str = "v1_one_block_per_head") -> None:
        check_instance("model", model, TinyDecoder)
        check_choice("attention", attention, decode.TRACEABLE)  # its graph records them
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
        check_prompt(prompt, new_tokens, self.config)
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
    check_prompt(prompt, 1, model.config)
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
