"""What every parallel strategy is compared with: the toy models, their batches, and the same
training in one process.

Book section: *Chapter 5, "Why averaging gives large-batch training"* (a strategy is right when
it reproduces one process on the whole batch).

Each strategy of :mod:`gpudl.parallel` trains a model here on a batch here and must give what
one of the single-process runs here gives: the loss after an Adam step
(:func:`adam_step_loss`), Adam's parameters step by step (:func:`adam_run`), the gradients of
one backward pass (:func:`mlp_gradients`) or the losses and gradients of SGD steps on the
encoder (:func:`encoder_sgd_run`, the loop of :func:`sgd_steps`; a rank's share of it,
:func:`sgd_on_slice`, on :data:`MESH_CONFIG` after :func:`check_encoder_run`; under
``torchrun``, :func:`compare_under_torchrun`). The helpers that turn a rank's results into what one
process has to compare with live here too: :func:`whole` (a DTensor gathered),
:func:`flat_parameters`, :func:`local_bytes` and :func:`optimizer_state_bytes` (the state a
rank holds), and :func:`average_gradients`, plain data parallelism's average: the replicated
baseline of the sharded strategies. Context parallelism (Chapter 11) splits attention, and
must reproduce :func:`attention_gradients`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from gpudl.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_ints,
    check_positive,
    check_tensor,
    check_widths,
    largest,
    largest_difference,
)
from gpudl.models.encoder import DTYPES, EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.spawn import rank0_print, run_under_torchrun

__all__ = [
    "BATCH_PER_RANK",
    "MESH_CONFIG",
    "SHARDING_DIMS",
    "TIMELINE_BATCH_PER_RANK",
    "TIMELINE_DIMS",
    "ZERO_DIMS",
    "adam_run",
    "adam_step_loss",
    "attention_gradients",
    "average_gradients",
    "check_encoder_run",
    "compare_under_torchrun",
    "encoder_sgd_run",
    "flat_parameters",
    "gradient_difference",
    "local_bytes",
    "make_batch",
    "make_mlp",
    "mlp_gradients",
    "optimizer_state_bytes",
    "sgd_on_slice",
    "sgd_steps",
    "whole",
]

#: Samples per rank in the toy MLPs' batches.
BATCH_PER_RANK = 8
#: Chapter 6's MLP for FSDP2's bytes (its state counted with and without sharding), with
#: 98,880 parameters, and every Linear's dim 0 (256, 256, 64) divides by 4.
SHARDING_DIMS = (64, 256, 256, 64)
#: Chapter 6's MLP for ZeRO-1, with 30 inputs, two hidden layers of 64, 11 outputs, 6,859
#: parameters, an odd number, so that the flat buffer needs padding at every world size the
#: book uses (2, 3 and 4).
ZERO_DIMS = (30, 64, 64, 11)
#: Chapter 5's MLP for the gradient timeline, with 7 Linear layers, 1,042,240 parameters (4.0 MiB
#: of fp32 gradients). The first layers are the widest, so the backward pass still has most
#: of its work left when the last layers' buckets are all-reduced.
TIMELINE_DIMS = (1024, 512, 512, 256, 256, 128, 128, 64)
#: Samples per rank in the timeline's batch.
TIMELINE_BATCH_PER_RANK = 64


# --- the toy models and their batches ------------------------------------------------------


def make_mlp(dims: Sequence[int], seed: int = 0) -> nn.Sequential:
    """Linear layers of widths ``dims`` with ReLUs between, initialised from ``seed`` (the
    caller's random state is left as it was)."""
    dims = check_widths("dims", dims)
    check_int("seed", seed, 0)
    layers: list[nn.Module] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(d_in, d_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def make_batch(world_size: int, dims: Sequence[int], batch_per_rank: int = BATCH_PER_RANK,
               seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of a whole batch for ``make_mlp(dims)``, ``batch_per_rank`` samples
    for each rank (rank ``r`` takes rows ``[r b, (r + 1) b)``), the same for the same
    ``seed`` in every run."""
    dims = check_widths("dims", dims)
    n = check_int("batch_per_rank", batch_per_rank, 1) * check_int("world_size", world_size, 1)
    generator = torch.Generator().manual_seed(check_int("seed", seed, 0))
    return (torch.randn(n, dims[0], generator=generator),
            torch.randn(n, dims[-1], generator=generator))


# --- the single-process runs ------------------------------------------------------------------


def adam_step_loss(world_size: int, dims: Sequence[int] = SHARDING_DIMS,
                   lr: float = 1e-2) -> float:
    """The loss after one Adam step on the whole batch of ``world_size`` ranks
    (:func:`make_batch`, mean-squared error), in one process: what the replicated and the
    sharded runs of :mod:`gpudl.parallel.zero.fsdp` must reproduce."""
    check_positive("lr", lr)
    check_int("world_size", world_size, 1)
    model = make_mlp(dims)
    x, y = make_batch(world_size, dims)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), y).item()


def adam_run(world_size: int, steps: int, lr: float, dims: Sequence[int] = ZERO_DIMS) -> dict:
    """One process, ``torch.optim.Adam``, step ``s`` on the whole batch of ``world_size``
    ranks drawn with seed ``s``: what every sharded optimizer of :mod:`gpudl.parallel.zero`
    must reproduce. ``params``: the flat parameters after each step; ``losses``: the batch's
    loss before each step; ``state_bytes``: Adam's moments."""
    check_int("world_size", world_size, 1)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    model = make_mlp(dims)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    params, losses = [], []
    for step in range(steps):
        x, y = make_batch(world_size, dims, seed=step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        params.append(flat_parameters(model))
        losses.append(loss.item())
    return {"params": params, "losses": losses, "state_bytes": optimizer_state_bytes(optimizer)[0]}


def mlp_gradients(world_size: int, dims: Sequence[int] = TIMELINE_DIMS,
                  batch_per_rank: int = TIMELINE_BATCH_PER_RANK,
                  ranks: Sequence[int] | None = None
                  ) -> dict[str, torch.Tensor]:
    """The gradients of the mean-squared error of :func:`make_mlp` in one process, on the
    samples of ``ranks`` of :func:`make_batch` (all of the batch when ``None``): with all of
    it, what DDP must give every rank."""
    model = make_mlp(dims)
    x, y = make_batch(world_size, dims, batch_per_rank)
    if ranks is not None:
        for i, r in enumerate(check_ints("ranks", ranks, 0)):
            check_int(f"ranks[{i}]", r, 0, world_size - 1)
        rows = torch.cat([torch.arange(r * batch_per_rank, (r + 1) * batch_per_rank)
                          for r in ranks])
        x, y = x[rows], y[rows]
    nn.functional.mse_loss(model(x), y).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def sgd_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
              loss_of: Callable[[torch.Tensor], float] = lambda loss: loss.item(),
              gradient_of: Callable[[torch.Tensor], torch.Tensor] = torch.clone) -> dict:
    """``steps`` SGD steps of ``model`` on ``x, y`` (mean-squared error): ``losses`` (one per
    step, before its update, as ``loss_of`` reads it) and ``grads`` (one dict of parameter
    name to ``gradient_of`` its gradient per step). A parallel rank passes the functions that
    make its slice's loss the whole batch's and its shards' gradients whole."""
    check_instance("model", model, nn.Module)
    check_tensor("x", x)
    check_tensor("y", y)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_callable("loss_of", loss_of)
    check_callable("gradient_of", gradient_of)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, grads = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss_of(loss))
        grads.append({name: gradient_of(p.grad) for name, p in model.named_parameters()})
        optimizer.step()
    return {"losses": losses, "grads": grads}


def encoder_sgd_run(config: EncoderConfig, batch: int, steps: int, lr: float,
                    dtype: torch.dtype = torch.float32) -> dict:
    """``steps`` SGD steps of the whole encoder (:func:`gpudl.models.make_encoder`) in one
    process on the whole batch (:func:`sgd_steps`): what the pipeline, tensor-parallel, FSDP
    and two-dimensional runs must reproduce."""
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    model = make_encoder(config, dtype=dtype)
    x, y = encoder_batch(config, batch, dtype=dtype)
    return sgd_steps(model, x, y, steps, lr)


#: The encoder of the equivalence runs, four blocks, small enough for four ranks on two cores.
MESH_CONFIG = EncoderConfig(layers=4)


def check_encoder_run(config: object, batch: object, steps: object, lr: object,
                      dtype: object) -> None:
    """The arguments of every equivalence run on the encoder (FSDP2, the 2-D mesh): an
    encoder, a batch of at least one sample, at least one step of a learning rate > 0, and a
    floating-point dtype."""
    check_instance("config", config, EncoderConfig)
    check_int("batch", batch, 1)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_choice("dtype", dtype, DTYPES)


def sgd_on_slice(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                 data_group: dist.ProcessGroup | None, data_ways: int) -> dict:
    """SGD steps on this rank's slice (:func:`sgd_steps`); the loss reported is the whole
    batch's (the mean over the ``data_ways`` equal slices, all-reduced over ``data_group``),
    the gradients whole."""

    def whole_batch_loss(loss: torch.Tensor) -> float:
        total = loss.detach().clone()
        dist.all_reduce(total, group=data_group)
        return total.item() / data_ways

    return sgd_steps(model, x, y, steps, lr, whole_batch_loss, whole)


def gradient_difference(run: dict, reference: dict) -> float:
    """The largest difference between the gradients of two runs (dicts with ``grads``, one
    dict of parameter name -> gradient per step, as :func:`sgd_steps` returns), over every
    step and parameter of ``reference`` (NaN if any differs by NaN)."""
    return largest(largest_difference(run["grads"][s][k], g)
                   for s, step in enumerate(reference["grads"]) for k, g in step.items())


def _gradient_error(rank: int, world_size: int, worker: Callable[..., dict],
                    args: tuple) -> float:
    reference = encoder_sgd_run(MESH_CONFIG, 8, 2, 0.05)
    run = worker(rank, world_size, *args, MESH_CONFIG, 8, 2, 0.05, torch.float32)
    return gradient_difference(run, reference)


def compare_under_torchrun(argv: list[str] | None, prog: str, description: str, label: str,
                           worker: Callable[..., dict], *args: Any) -> None:
    """A strategy's command line under ``torchrun`` (``prog``, ``description``: its help;
    ``argv`` takes no argument): every rank runs ``worker(rank, world_size, *args, config,
    batch, steps, lr, dtype)`` on :data:`MESH_CONFIG` (two SGD steps, float32) and rank 0
    prints, after ``label``, the largest gradient difference from one process."""
    argparse.ArgumentParser(prog=prog, description=description).parse_args(argv)
    error = run_under_torchrun(_gradient_error, worker, args)
    rank0_print(f"{label}: largest gradient difference from one process {error:.2e}")


# --- attention, which context parallelism splits ---------------------------------------------


def attention_gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        grad_out: torch.Tensor | None = None) -> dict:
    """Attention of ``q``, ``k``, ``v`` ``(heads, seq, d)`` in one process, as torch computes
    it (``scaled_dot_product_attention``, in their dtype), with each row's log-sum-exp of
    scores, and, given ``grad_out``, the gradients of ``q``, ``k`` and ``v`` by autograd:
    ``{"out", "lse", "grad_q", "grad_k", "grad_v"}`` (the gradients ``None`` without
    ``grad_out``). Chapter 11's ring and head-parallel attention must reproduce it."""
    for name, t in (("q", q), ("k", k), ("v", v), ("grad_out", grad_out)):
        if t is not None or name != "grad_out":
            check_tensor(name, t, (torch.float32, torch.float64), ndim=3)
            if t.shape != q.shape:
                raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got "
                                 f"{tuple(t.shape)}")
    check_bool("causal", causal)
    q, k, v = (t.detach().clone().requires_grad_(grad_out is not None) for t in (q, k, v))
    out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q.detach() @ k.detach().transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
    result = {"out": out.detach(), "lse": torch.logsumexp(scores, -1), "grad_q": None,
              "grad_k": None, "grad_v": None}
    if grad_out is not None:
        out.backward(grad_out)
        result |= {"grad_q": q.grad, "grad_k": k.grad, "grad_v": v.grad}
    return result


# --- what a rank holds, as one process would see it -------------------------------------------


def whole(t: torch.Tensor) -> torch.Tensor:
    """``t`` whole, detached, on the CPU: a DTensor gathered from its shards."""
    check_tensor("t", t)
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All of ``model``'s parameters, flattened into one tensor on the CPU."""
    check_instance("model", model, nn.Module)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def local_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of this rank's part of each tensor (its local shard, for a DTensor)."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"tensors must be a list of tensors, got {type(tensors).__name__}")
    for i, t in enumerate(tensors):
        check_tensor(f"tensors[{i}]", t)
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    """``(state, steps)``: bytes of the tensors ``optimizer`` holds in its state on this rank,
    without and with only the ``"step"`` counters (which ZeRO's accounting leaves out)."""
    check_instance("optimizer", optimizer, torch.optim.Optimizer)
    states = list(optimizer.state.values())
    return (local_bytes([t for s in states for k, t in s.items()
                         if k != "step" and isinstance(t, torch.Tensor)]),
            local_bytes([s["step"] for s in states if isinstance(s.get("step"), torch.Tensor)]))


def average_gradients(model: nn.Module) -> None:
    """The collective of plain data parallelism: every rank ends with the mean gradient."""
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
