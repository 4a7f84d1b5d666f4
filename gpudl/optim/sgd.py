"""``torch.optim.SGD`` whose step runs the book's SGD kernels.

Book section: *Chapter 4, "Kernels on a framework's tensors"*.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch

from gpudl.checks import check_bool
from gpudl.interop import KernelArrays
from gpudl.kernels import optim as optim_kernels
from gpudl.optim.tensors import (
    array_cache,
    check_group,
    check_loaded_state,
    check_params_argument,
    checked_gradient,
    hyperparameter,
    kernel_array,
    refuse_torch_options,
    run_closure,
    staged,
)

__all__ = ["SGD"]


class SGD(torch.optim.Optimizer):
    """``torch.optim.SGD`` (momentum, dampening, weight decay, Nesterov, maximize; ``lr`` and
    ``weight_decay`` a number or a one-element tensor) whose step is
    ``gpudl.kernels.optim.sgd_kernel`` (``sgd_momentum_kernel`` with momentum), one launch per
    float32 parameter. torch's ``foreach``, ``fused`` and ``differentiable`` are refused.
    ``kernel_arrays`` keeps the kernel arrays made from the tensors
    (:class:`gpudl.interop.KernelArrays`)."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float | torch.Tensor = 0,
                 nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        refuse_torch_options("SGD", foreach=foreach, fused=fused,
                              differentiable=differentiable)
        check_params_argument("SGD", params)
        optim_kernels.check_sgd_hyper(hyperparameter("lr", lr), momentum, dampening,
                           hyperparameter("weight_decay", weight_decay), nesterov)
        check_bool("maximize", maximize)
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        self.kernel_arrays = KernelArrays()
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, refusing parameters the kernel cannot update."""
        super().add_param_group(param_group)
        check_group(self, (torch.float32,), optim_kernels.check_sgd_hyper,
                    ("lr", "momentum", "dampening", "weight_decay", "nesterov"))
        self.kernel_arrays.capacity = array_cache(self._all_params()).capacity

    def _all_params(self) -> Iterable[torch.Tensor]:
        return chain.from_iterable(g["params"] for g in self.param_groups)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD step for every parameter that has a gradient; returns the closure's loss."""
        loss = run_closure(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = checked_gradient(p, "SGD")
                state = self.state[p]
                buf = state.get("momentum_buffer")
                first = buf is None
                k = optim_kernels.sgd_scalars(
                    first, hyperparameter("lr", group["lr"]), group["momentum"],
                    group["dampening"], hyperparameter("weight_decay", group["weight_decay"]),
                    group["nesterov"], group["maximize"])
                if k.has_momentum and first:  # poisoned: the kernel must write every element
                    buf = state["momentum_buffer"] = torch.full_like(p, float("nan"))
                tensors = {"param": p, "grad": g, "momentum_buffer": buf if k.has_momentum
                           else None}
                with staged(tensors, ("param", "momentum_buffer")) as t:
                    arrays, buf = self.kernel_arrays, t["momentum_buffer"]
                    optim_kernels.launch_sgd(
                        kernel_array(arrays, t["param"], "param"),
                        kernel_array(arrays, t["grad"], "grad"),
                        None if buf is None else kernel_array(arrays, buf, "momentum_buffer"), k)
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict``, after checking every momentum buffer against its
        parameter (:func:`gpudl.optim.tensors.check_loaded_state`)."""
        check_loaded_state("SGD", self, state_dict, ("momentum_buffer",))
        super().load_state_dict(state_dict)
