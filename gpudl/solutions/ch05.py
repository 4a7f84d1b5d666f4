"""Solutions to the exercises of Chapter 5, data parallelism.

Book section: Chapter 5, "Exercises": summing against averaging the replicas' gradients
(SGD and Adam), the weighted average that unequal shares need, the bytes each rank of a ring
sends for any tensor length, the number of buckets that minimises a step's time, and a ring
all-reduce's time from its bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from gpudl.checks import check_choice, check_int
from gpudl.estimate import allreduce_bytes_per_rank, allreduce_time, data_parallel_step_time
from gpudl.parallel.data import ring_chunks
from gpudl.parallel.one_process import make_mlp


def _gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The gradient of the mean-squared error over ``x, y``, parameter by parameter."""
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def simulated_replicas(dims: Sequence[int], x: torch.Tensor, y: torch.Tensor, world_size: int,
                       combine: str, optimizer: str, lr: float, steps: int) -> torch.Tensor:
    """Train ``make_mlp(dims)`` for ``steps`` steps on the batch ``x, y`` as ``world_size``
    replicas would (Chapter 5, exercise 1), in one process: each step every replica takes
    the gradient of its equal share of the batch, and the shares' gradients are combined by
    ``"mean"`` or ``"sum"`` before one ``"sgd"`` or ``"adam"`` update. Returns the parameters
    after the last step, flattened."""
    check_int("world_size", world_size, 1)
    if len(x) % world_size:
        raise ValueError(f"the batch of {len(x)} must split into {world_size} equal shares")
    check_choice("combine", combine, ("mean", "sum"))
    check_choice("optimizer", optimizer, ("sgd", "adam"))
    model = make_mlp(dims)
    params = list(model.parameters())
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(params, lr=lr)
    for _ in range(steps):
        shares = [_gradients(model, xs, ys) for xs, ys in
                  zip(x.chunk(world_size), y.chunk(world_size), strict=True)]
        for i, param in enumerate(params):
            total = torch.stack([grads[i] for grads in shares]).sum(dim=0)
            param.grad = total / world_size if combine == "mean" else total
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in params])


def weighted_average(dims: Sequence[int], x: torch.Tensor, y: torch.Tensor,
                     shares: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Replicas with unequal shares of a batch (Chapter 5, exercise 2): ``shares[r]``
    consecutive samples of ``x, y`` each. Returns the plain average of the replicas' mean
    gradients and the average weighted by ``shares[r] / sum(shares)``; only the second is the
    gradient of the whole batch's mean loss."""
    for i, share in enumerate(shares):
        check_int(f"shares[{i}]", share, 1)
    if sum(shares) != len(x):
        raise ValueError(f"shares must be positive ints adding up to the batch of {len(x)}, "
                         f"got {list(shares)}")
    model = make_mlp(dims)
    grads = [_gradients(model, xs, ys) for xs, ys in
             zip(x.split(list(shares)), y.split(list(shares)), strict=True)]
    total = sum(shares)
    plain = [sum(g[i] for g in grads) / len(shares) for i in range(len(grads[0]))]
    weighted = [sum(g[i] * (n / total) for g, n in zip(grads, shares, strict=True))
                for i in range(len(grads[0]))]
    return plain, weighted


def ring_bytes_per_rank(numel: int, world_size: int, itemsize: int = 4) -> list[int]:
    """The bytes each rank sends in :func:`gpudl.parallel.data.ring_all_reduce` of a tensor
    of ``numel`` elements (Chapter 5, exercise 3).

    In the reduce-scatter rank ``r`` sends chunks ``r, r - 1, ..., r - N + 2``: every chunk
    but ``r + 1`` (the one it ends up owning). In the all-gather it sends ``r + 1, r, ...,
    r - N + 3``: every chunk but ``r + 2``. So it sends the tensor twice, less chunks
    ``r + 1`` and ``r + 2`` (indices modulo ``N``)."""
    n = check_int("world_size", world_size, 1)
    if n == 1:
        return [0]
    sizes = [end - start for start, end in ring_chunks(check_int("numel", numel, 0), n)]
    return [(2 * numel - sizes[(r + 1) % n] - sizes[(r + 2) % n]) * itemsize for r in range(n)]


def best_bucket_count(compute_s: float, grad_bytes: float, world_size: int, bandwidth: float,
                      latency: float, backward_fraction: float = 2 / 3,
                      max_buckets: int = 64) -> tuple[int, float]:
    """The number of equal buckets, from 1 to ``max_buckets``, that minimises
    :func:`gpudl.estimate.data_parallel_step_time`, and that step time (Chapter 5,
    exercise 4). More buckets start communicating earlier, but each pays the latency."""
    check_int("max_buckets", max_buckets, 1)
    times = {n: data_parallel_step_time(compute_s, grad_bytes, world_size, bandwidth, latency,
                                        backward_fraction, n)
             for n in range(1, max_buckets + 1)}
    best = min(times, key=times.get)
    return best, times[best]


def ring_allreduce_time_and_bytes() -> tuple[float, float]:
    """Exercise 5: (seconds, bytes sent per GPU) for 1 GB over 8 GPUs at 400 GB/s."""
    n_bytes, world_size, bandwidth = 1e9, 8, 400e9
    return (
        allreduce_time(n_bytes, world_size, bandwidth),
        allreduce_bytes_per_rank(n_bytes, world_size),
    )
