"""A mixture-of-experts layer in one process: the reference every expert-parallel run must
reproduce.

Book section: *Chapter 11, Mixture of experts*.

:class:`MoELayer` holds a router and ``E`` expert MLPs (``hidden -> ffn -> hidden`` with a
GeLU), their weights stacked as ``(E, ...)`` tensors. Its forward pass routes each group of
tokens with :func:`gpudl.parallel.experts.router.route`, gathers the kept choices' tokens into
rows sorted by expert, runs each expert on its rows (:func:`experts_loop`) and adds each
token's rows back, weighted by their gates (:func:`gpudl.parallel.experts.router.combine`).
A *group* is GShard's: the tokens whose choices share one capacity per expert. Expert
parallelism routes each rank's tokens as a group, so the one-process layer is called with as
many groups as there are ranks, and drops the same choices.

:func:`experts_grouped` computes the same rows as one batched product over buffers padded to
the capacity (GShard's dispatch tensor): one launch for all the experts, paid for in padding.
:func:`moe_batch` is the batch every run is compared on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from gpudl.checks import (
    check_choice,
    check_instance,
    check_int,
    check_positive,
    check_real,
    check_tensor,
)
from gpudl.estimate.experts import expert_capacity
from gpudl.models.encoder import DTYPES
from gpudl.parallel.experts.router import Routing, combine, route

__all__ = ["MOE_CONFIG", "MoEConfig", "MoELayer", "MoEOutput", "experts_grouped",
           "experts_loop", "moe_batch", "pad_to_capacity"]


@dataclass(frozen=True)
class MoEConfig:
    """A mixture-of-experts layer: tokens of ``hidden`` values, ``experts`` MLPs of ``ffn``
    units, each token sent to ``top_k`` of them, each expert taking at most
    ``capacity_factor`` times its even share of a group's choices
    (:func:`gpudl.estimate.expert_capacity`); ``aux_weight`` weighs the load-balancing loss in
    the training loss. ``router_skew`` adds ``router_skew x (1 - 2 e / (E - 1))`` to the
    router's weight from input feature 0 for expert ``e`` (:func:`moe_batch` holds that
    feature at 1): the first experts are favoured and the last starved, so that some expert
    gets no token and others drop some, as an untrained router does. ``seed`` draws the
    weights."""

    hidden: int = 8
    ffn: int = 16
    experts: int = 8
    top_k: int = 2
    capacity_factor: float = 1.0
    aux_weight: float = 0.01
    router_skew: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden", "ffn", "experts", "top_k"):
            check_int(name, getattr(self, name), 1)
        check_positive("capacity_factor", self.capacity_factor)
        check_real("aux_weight", self.aux_weight, 0)
        check_real("router_skew", self.router_skew)
        check_int("seed", self.seed, 0)
        # top_k <= experts, with the calculators' message
        expert_capacity(1, self.experts, self.top_k, self.capacity_factor)


#: The layer of the equivalence runs, with 8 experts, top-2, a capacity factor of 1 and a router so
#: skewed that in every group of 16 tokens about half the choices are dropped and experts 5 to
#: 7 get none (on 4 ranks, the last rank's experts receive nothing).
MOE_CONFIG = MoEConfig(router_skew=2.5)


@dataclass(frozen=True)
class MoEOutput:
    """A forward pass of the layer: ``output`` (tokens, hidden), ``aux`` (the mean over the
    groups of their load-balancing losses) and each group's :class:`Routing`."""

    output: torch.Tensor
    aux: torch.Tensor
    routings: tuple[Routing, ...]


def experts_loop(rows: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor,
                 b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """Each expert's MLP on its rows: ``rows`` are sorted by expert, ``counts[e]`` of them
    expert ``e``'s, whose weights are ``w1[e]`` (ffn, hidden), ``b1[e]``, ``w2[e]`` (hidden,
    ffn) and ``b2[e]``. One product per expert, as many launches as experts; an expert with
    no row still runs (on none), so that its weights take part in the backward pass."""
    check_tensor("rows", rows, ndim=2)
    check_tensor("counts", counts, ndim=1)
    if int(counts.sum()) != len(rows) or len(counts) != len(w1):
        raise ValueError(f"counts must give the rows of each of the {len(w1)} experts, "
                         f"{len(rows)} in all, got {counts.tolist()}")
    outs = []
    for e, chunk in enumerate(rows.split(counts.tolist())):
        hidden = nn.functional.gelu(chunk @ w1[e].T + b1[e])
        outs.append(hidden @ w2[e].T + b2[e])
    return torch.cat(outs)


def pad_to_capacity(rows: torch.Tensor, counts: torch.Tensor, capacity: int
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``rows`` sorted by expert (``counts[e]`` of them expert ``e``'s) in one ``(experts,
    capacity, hidden)`` buffer, each expert's rows first and zeros after (GShard's dispatch
    tensor), and the ``(expert, position)`` of each row, which reads them back:
    ``buffer[index]`` is ``rows``. Differentiable in ``rows``."""
    check_tensor("rows", rows, ndim=2)
    check_tensor("counts", counts, ndim=1)
    check_int("capacity", capacity, 1)
    if int(counts.max()) > capacity or int(counts.sum()) != len(rows):
        raise ValueError(f"counts must give the rows of each expert, {len(rows)} in all, each "
                         f"at most the capacity ({capacity}), got {counts.tolist()}")
    expert_of = torch.repeat_interleave(torch.arange(len(counts), device=rows.device), counts)
    position = (torch.arange(len(rows), device=rows.device)
                - (counts.cumsum(0) - counts)[expert_of])
    index = (expert_of, position)
    return rows.new_zeros(len(counts), capacity, rows.shape[1]).index_put(index, rows), index


def experts_grouped(rows: torch.Tensor, counts: torch.Tensor, capacity: int,
                    w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                    b2: torch.Tensor) -> torch.Tensor:
    """:func:`experts_loop`'s result by two batched products (``torch.baddbmm``) over the
    buffer of :func:`pad_to_capacity`: one launch per product whatever the number of
    experts, and ``experts x capacity`` rows computed where ``len(rows)`` are needed."""
    buffer, index = pad_to_capacity(rows, counts, capacity)
    hidden = nn.functional.gelu(torch.baddbmm(b1[:, None, :], buffer, w1.transpose(1, 2)))
    return torch.baddbmm(b2[:, None, :], hidden, w2.transpose(1, 2))[index]


class MoELayer(nn.Module):
    """The router (``router``: experts x hidden) and the experts' stacked weights (``w1``:
    experts x ffn x hidden, ``b1``, ``w2``: experts x hidden x ffn, ``b2``) of a
    :class:`MoEConfig`, drawn from its seed."""

    def __init__(self, config: MoEConfig = MOE_CONFIG, dtype: torch.dtype = torch.float32
                 ) -> None:
        super().__init__()
        self.config = check_instance("config", config, MoEConfig)
        check_choice("dtype", dtype, DTYPES)
        e, h, f = config.experts, config.hidden, config.ffn
        generator = torch.Generator().manual_seed(config.seed)

        def draw(*shape: int, fan_in: int) -> nn.Parameter:
            weights = torch.randn(*shape, generator=generator, dtype=torch.float64)
            return nn.Parameter((weights / math.sqrt(fan_in)).to(dtype))

        self.router = draw(e, h, fan_in=h)
        with torch.no_grad():
            ramp = 1 - 2 * torch.arange(e, dtype=torch.float64) / max(e - 1, 1)
            self.router[:, 0] += (config.router_skew * ramp).to(dtype)
        self.w1, self.b1 = draw(e, f, h, fan_in=h), draw(e, f, fan_in=h)
        self.w2, self.b2 = draw(e, h, f, fan_in=f), draw(e, h, fan_in=f)

    def forward(self, x: torch.Tensor, groups: int = 1) -> MoEOutput:
        """The layer on ``x`` (tokens, hidden), its tokens cut into ``groups`` equal groups
        in order, each routed with its own capacity."""
        check_tensor("x", x, ndim=2)
        check_int("groups", groups, 1)
        if len(x) % groups or x.shape[1] != self.config.hidden:
            raise ValueError(f"x must be (tokens, {self.config.hidden}) with the tokens a "
                             f"multiple of groups ({groups}), got {tuple(x.shape)}")
        outputs, routings = [], []
        for part in x.split(len(x) // groups):
            routing = route(part @ self.router.T, self.config.top_k,
                            self.config.capacity_factor)
            rows = experts_loop(part[routing.sources], routing.kept_counts, self.w1, self.b1,
                                self.w2, self.b2)
            outputs.append(combine(rows, routing, len(part)))
            routings.append(routing)
        aux = torch.stack([r.aux for r in routings]).mean()
        return MoEOutput(torch.cat(outputs), aux, tuple(routings))


def moe_batch(config: MoEConfig, tokens: int, seed: int = 1,
              dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets, each (tokens, hidden), the same for the same ``seed``: standard
    normals, with input feature 0 held at 1 (the feature ``router_skew`` acts on)."""
    check_instance("config", config, MoEConfig)
    check_int("tokens", tokens, 1)
    check_int("seed", seed, 0)
    check_choice("dtype", dtype, DTYPES)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, config.hidden, generator=generator, dtype=torch.float64)
    x[:, 0] = 1.0
    y = torch.randn(tokens, config.hidden, generator=generator, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)
