"""The router of a mixture-of-experts layer: top-k gating over softmax scores, a capacity per
expert, the tokens over it dropped, and Switch Transformer's load-balancing loss.

Book section: *Chapter 11, The router*.

:func:`route` turns one group's router logits into a :class:`Routing`: each token's ``k``
experts (the largest softmax scores), their gate weights (the chosen scores renormalized to
sum to 1, as Mixtral does), which choices fit their expert's capacity
(:func:`gpudl.estimate.expert_capacity`), and where each kept choice lands in the buffer of
rows sorted by expert. Priority, when an expert is full, is GShard's: every token's first
choice before any second choice, and within a choice, tokens in order. Every implementation
of the layer (one process, the ranks of expert parallelism) routes a group with this one
function, so the same choices are dropped everywhere. The load-balancing loss is Switch
Transformer's (Fedus et al. 2021), with the fraction of the ``k x tokens`` choices in place of
the fraction of tokens, so that it is 1 when the load is even, whatever ``k`` is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpudl.checks import check_instance, check_int, check_tensor
from gpudl.estimate.experts import expert_capacity

__all__ = ["Routing", "combine", "load_balancing_loss", "route"]


@dataclass(frozen=True)
class Routing:
    """Where one group's tokens go. ``choices`` (tokens, k): each token's experts, best
    first; ``gates`` (tokens, k): their weights, differentiable (they carry the router's
    gradient); ``slots`` (tokens, k): the row of each choice in the buffer sorted by expert,
    ``-1`` where it was dropped; ``sources`` (rows,): the token each row of that buffer holds;
    ``kept_counts`` (experts,): rows per expert (at most ``capacity``); ``counts`` (experts,):
    choices per expert before any was dropped; ``aux``: the load-balancing loss."""

    choices: torch.Tensor
    gates: torch.Tensor
    slots: torch.Tensor
    sources: torch.Tensor
    kept_counts: torch.Tensor
    counts: torch.Tensor
    capacity: int
    aux: torch.Tensor

    @property
    def dropped(self) -> int:
        """How many choices did not fit their expert's capacity."""
        return int((self.slots < 0).sum())

    @property
    def row_gates(self) -> torch.Tensor:
        """The gate of each row of the sorted buffer (differentiable)."""
        kept = self.slots >= 0
        gates = torch.zeros(len(self.sources), dtype=self.gates.dtype, device=self.gates.device)
        return gates.index_put((self.slots[kept],), self.gates[kept])


def load_balancing_loss(probs: torch.Tensor, counts: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch Transformer's auxiliary loss ``E x sum_e f_e x P_e``: ``f_e``, the fraction of
    the ``k x tokens`` choices that went to expert ``e`` (counted, so no gradient flows
    through it), and ``P_e``, the mean router probability of ``e`` (differentiable). Its
    minimum, 1, is an even load; a router that sends everything to one expert scores up to
    ``E``."""
    check_tensor("probs", probs, ndim=2)
    check_tensor("counts", counts, ndim=1)
    tokens, experts = probs.shape
    fraction = counts.to(probs.dtype) / (check_int("top_k", top_k, 1) * tokens)
    return experts * (fraction * probs.mean(0)).sum()


def route(logits: torch.Tensor, top_k: int, capacity_factor: float) -> Routing:
    """Route one group of tokens from its router ``logits`` (tokens, experts): the ``top_k``
    largest softmax scores of each token, renormalized to sum to 1; each expert keeps the
    first ``capacity`` choices sent to it (every token's first choice before any second
    one), the rest are dropped."""
    check_tensor("logits", logits, ndim=2)
    tokens, experts = logits.shape
    capacity = expert_capacity(tokens, experts, top_k, capacity_factor)
    probs = torch.softmax(logits, dim=-1)
    top, choices = probs.topk(top_k, dim=-1)
    gates = top / top.sum(-1, keepdim=True)
    # choice-major order: all first choices (tokens in order), then all second choices, ...
    flat = choices.t().reshape(-1)
    one_hot = torch.nn.functional.one_hot(flat, experts)
    position = (one_hot.cumsum(0) - 1).gather(1, flat[:, None])[:, 0]
    counts = one_hot.sum(0)
    kept_counts = counts.clamp(max=capacity)
    offsets = kept_counts.cumsum(0) - kept_counts
    kept = position < capacity
    slots_flat = torch.where(kept, offsets[flat] + position, -1)
    slots = slots_flat.view(top_k, tokens).t().contiguous()
    token_of = torch.arange(tokens, device=logits.device).repeat(top_k)
    sources = torch.empty(int(kept.sum()), dtype=torch.long, device=logits.device)
    sources[slots_flat[kept]] = token_of[kept]
    return Routing(choices, gates, slots, sources, kept_counts, counts, capacity,
                   load_balancing_loss(probs, counts, top_k))


def combine(rows: torch.Tensor, routing: Routing, tokens: int) -> torch.Tensor:
    """The layer's output for ``tokens`` tokens from the experts' output ``rows`` (sorted by
    expert, as ``routing.sources``): each token's rows weighted by their gates and summed
    (a dropped choice adds nothing). Differentiable in ``rows`` and in the gates."""
    check_tensor("rows", rows, ndim=2)
    check_instance("routing", routing, Routing)
    check_int("tokens", tokens, 1)
    out = rows.new_zeros(tokens, rows.shape[1])
    return out.index_add(0, routing.sources, rows * routing.row_gates[:, None])

