"""What each Adam variant costs per step of a model, counted on the simulator.

Book section: *Chapter 4, "What each variant moves, counted"*.
"""

from __future__ import annotations

import torch

from gpudl import registry
from gpudl.checks import check_choice, check_ints
from gpudl.kernels import optim as optim_kernels
from gpudl.optim.adam import Adam

__all__ = ["TRACEABLE", "traffic_table"]


#: The variants whose accesses the simulator's tracer can count, the Numba ones (a Triton
#: kernel runs in Triton's interpreter, which the tracer does not see).
TRACEABLE = tuple(key for key, v in registry.variant_records("adam").items()
                  if v.kind == "numba")


def traffic_table(sizes: tuple[int, ...] = (200, 13, 64, 5),
                  variants: tuple[str, ...] = TRACEABLE) -> list[dict]:
    """For one Adam step of a model whose parameter tensors have ``sizes`` elements: the
    kernel launches and the bytes of device ("global") and shared memory each variant's
    kernels access (one of :data:`TRACEABLE`), counted access by access on the simulator
    (:func:`gpudl.kernels.optim.traffic`); run it through :func:`gpudl.trace.on_simulator`
    on a GPU. One row per variant: ``variant``, ``launches``, ``global_bytes``,
    ``shared_bytes``, ``params`` and the bytes per parameter."""
    n = sum(check_ints("sizes", sizes, 1))
    if isinstance(variants, str) or not isinstance(variants, tuple | list):
        raise TypeError(f"variants must be a tuple of variant names, got {variants!r}")
    for i, variant in enumerate(variants):
        check_choice(f"variants[{i}]", variant, TRACEABLE)
    rows = []
    for variant in variants:
        gen = torch.Generator().manual_seed(0)
        params = [torch.randn(s, generator=gen).requires_grad_() for s in sizes]
        opt = Adam(params, lr=1e-3, variant=variant)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()  # the first step (flattens the v4_multi_tensor buffers): not counted
        with optim_kernels.traffic() as t:
            opt.step()
        rows.append({"variant": variant, "launches": t.launches, "params": n,
                     "global_bytes": t.total("global"), "shared_bytes": t.total("shared"),
                     "global_bytes_per_param": t.total("global") / n,
                     "shared_bytes_per_param": t.total("shared") / n})
    return rows
