"""Expert parallelism: the experts of a mixture-of-experts layer spread over the ranks, the
tokens carried to them and back, by two all-to-alls or, naively, by an all-gather and a
reduce-scatter.

Book section: *Chapter 11, Expert parallelism*.

Each of the ``P`` ranks of the expert-parallel group holds the router and ``E / P`` experts,
and routes its own tokens (one GShard group per rank, so it drops what the one-process layer
drops for that group). :class:`ExpertParallelMoE` then

1. sorts its kept choices' tokens by expert (the rows of
   :func:`gpudl.parallel.experts.router.route`);
2. tells every rank how many rows it will send each of that rank's experts
   (:func:`~gpudl.parallel.experts.comms.exchange_counts`), and sends them: the dispatch
   all-to-all, of uneven sizes (an expert may get no row, a rank nothing);
3. regroups what it received (source by source) expert by expert and runs its experts;
4. sends each row back to the rank it came from: the combine all-to-all;
5. adds each token's rows, weighted by their gates, in its own order.

:class:`NaiveExpertParallelMoE` replaces steps 2 and 4: every rank all-gathers every rank's
buffer, padded to the capacity (a fixed size, so no count travels), picks out its experts'
rows, and the outputs are reduce-scattered back. It moves about ``P`` times the bytes of the
all-to-alls, and every rank holds every rank's tokens.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from gpudl.checks import check_instance, check_tensor
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.experts.comms import (
    all_to_all,
    exchange_counts,
    gather_tokens,
    scatter_tokens,
)
from gpudl.parallel.experts.layer import MoELayer, MoEOutput, experts_loop, pad_to_capacity
from gpudl.parallel.experts.router import Routing, combine, route

__all__ = ["EXPERT_WEIGHTS", "ExpertParallelMoE", "NaiveExpertParallelMoE", "full_gradients",
           "by_local_expert"]

#: The experts' stacked weights, split along dim 0 among the ranks.
EXPERT_WEIGHTS = ("w1", "b1", "w2", "b2")


def by_local_expert(received: torch.Tensor) -> torch.Tensor:
    """The order that groups received rows by expert: ``received`` (ranks, local experts)
    counts the rows each rank sent each of this rank's experts, which arrive rank by rank,
    each rank's expert by expert. Returns the row indices, expert by expert (rank by rank
    within an expert)."""
    ranks, local = check_tensor("received", received, ndim=2).shape
    experts = torch.arange(local, device=received.device).repeat(ranks)
    expert_of = torch.repeat_interleave(experts, received.flatten())
    return torch.argsort(expert_of, stable=True)


class ExpertParallelMoE(nn.Module):
    """This rank's part of ``layer`` in the expert-parallel ``group``: the router (a copy, as
    every rank has) and experts ``[r E / P, (r + 1) E / P)`` of rank ``r`` of ``P``; tokens
    travel by two all-to-alls."""

    def __init__(self, layer: MoELayer, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.config = check_instance("layer", layer, MoELayer).config
        self.group = group
        ranks, rank = dist.get_world_size(group), dist.get_rank(group)
        local = ParallelDegrees(data=ranks, expert=ranks).check_divides(
            "expert", "experts", self.config.experts)
        self.first = rank * local
        self.router = nn.Parameter(layer.router.detach().clone())
        for name in EXPERT_WEIGHTS:
            whole = getattr(layer, name).detach()
            setattr(self, name, nn.Parameter(whole[self.first:self.first + local].clone()))

    @property
    def local_experts(self) -> int:
        """How many experts this rank holds."""
        return len(self.w1)

    def forward(self, x: torch.Tensor) -> MoEOutput:
        """The layer on this rank's tokens ``x`` (tokens, hidden), routed as one group."""
        routing = route(x @ self.router.T, self.config.top_k, self.config.capacity_factor)
        rows = self.run_experts(x[routing.sources], routing)
        return MoEOutput(combine(rows, routing, len(x)), routing.aux, (routing,))

    def experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """This rank's experts on ``rows`` sorted by local expert, ``counts`` of each."""
        return experts_loop(rows, counts, self.w1, self.b1, self.w2, self.b2)

    def run_experts(self, rows: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Every expert's output for this rank's ``rows`` (sorted by expert): the dispatch
        all-to-all, this rank's experts on what it received, the combine all-to-all."""
        received = exchange_counts(routing.kept_counts, self.group)
        sent = routing.kept_counts.view(len(received), -1).sum(1).tolist()
        arrived = received.sum(1).tolist()
        order = by_local_expert(received)
        inputs = all_to_all(rows, arrived, sent, self.group)[order]
        outputs = self.experts(inputs, received.sum(0))[torch.argsort(order)]
        return all_to_all(outputs, sent, arrived, self.group)


class NaiveExpertParallelMoE(ExpertParallelMoE):
    """:class:`ExpertParallelMoE` with the naive dispatch: each rank's rows padded to
    ``experts x capacity``, all-gathered to every rank, and the experts' outputs (zero
    where another rank's experts answer) reduce-scattered back."""

    def run_experts(self, rows: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Every expert's output for this rank's ``rows``, through the padded buffers."""
        experts, capacity = self.config.experts, routing.capacity
        buffer, index = pad_to_capacity(rows, routing.kept_counts, capacity)
        gathered = gather_tokens(buffer, self.group).flatten(0, 1)  # (ranks x experts x C, h)
        counts = gather_tokens(routing.kept_counts[None], self.group)
        mine = counts[:, self.first:self.first + self.local_experts]
        flat = torch.cat([(rank * experts + self.first + e) * capacity
                          + torch.arange(n, device=rows.device)
                          for e in range(self.local_experts)
                          for rank, n in enumerate(mine[:, e].tolist())])
        outputs = self.experts(gathered[flat], mine.sum(0))
        answered = torch.zeros_like(gathered).index_put((flat,), outputs)
        mine_back = scatter_tokens(answered.view(-1, capacity, rows.shape[1]), self.group)
        return mine_back[index]


def full_gradients(module: ExpertParallelMoE) -> dict[str, torch.Tensor]:
    """``module``'s gradients whole and named as :class:`MoELayer`'s, on the CPU: the experts'
    gathered from the ranks of its group (after their reduction), the router's as it is."""
    grads = {"router": module.router.grad.detach().cpu()}
    for name in EXPERT_WEIGHTS:
        grads[name] = gather_tokens(getattr(module, name).grad.detach(),
                                    module.group).cpu()
    return grads
