"""How many ways each strategy splits the work, checked once for every strategy.

Book section: *Chapter 6, "Two dimensions"*; the context and expert degrees, *Chapter 11,
Five dimensions*.

:class:`ParallelDegrees` holds the degrees of data, tensor, pipeline and context parallelism,
whose product is the number of ranks (as torchtitan's ``ParallelDims``), and two degrees that
split a group of those ranks rather than add ranks of their own:

* ``sharding``: how many ways the model state is sharded among the data-parallel ranks (1:
  replicated, as plain data parallelism; ``data``: fully, as ZeRO and FSDP);
* ``expert``: how many ways the experts of a mixture-of-experts layer are spread. The
  expert-parallel ranks are drawn from the ``data x context`` ranks, those that hold the same
  layers and see different tokens (torchtitan's and Megatron-LM's layout): tokens travel to
  the rank of their expert and back, so expert parallelism needs no rank of its own. Each
  expert is then held by ``data x context / expert`` ranks (:attr:`ParallelDegrees.expert_data`,
  Megatron-LM's "expert data parallelism"), over which its gradients are reduced.

``context`` splits every sequence into ``context`` chunks (ring attention); a context-parallel
rank holds the same weights as the others of its group, so its degree multiplies the world
size as ``data``'s does.

Every strategy asks it whether its degrees fit the world size
(:meth:`ParallelDegrees.check_world_size`) and whether each divides what it splits
(:meth:`ParallelDegrees.check_divides`), so a size that does not split evenly is one
``ValueError`` with one message style, before any process starts. Inside the ranks,
:meth:`ParallelDegrees.device_mesh` builds the device mesh each strategy shards over, its
dimensions named after the degrees (``"data"``, ``"tensor"``, ``"pipeline"``,
``"context"``, and, for the experts, ``"expert_data" x "expert"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpudl.checks import check_choice, check_int

__all__ = ["ParallelDegrees"]

#: The dimensions a device mesh can have: the four degrees that multiply to the world size,
#: and the two that split ``data x context`` for the experts.
_MESH_DIMS = ("data", "tensor", "pipeline", "context", "expert_data", "expert")
_WHAT = {"data": "data-parallel degree", "tensor": "tensor-parallel degree",
         "pipeline": "pipeline-parallel degree (stages)", "sharding": "sharding degree",
         "context": "context-parallel degree", "expert": "expert-parallel degree"}


@dataclass(frozen=True)
class ParallelDegrees:
    """How many ways each strategy splits the work: ``data`` (slices of the batch), ``tensor``
    (shards of every layer), ``pipeline`` (stages) and ``context`` (chunks of every sequence)
    multiply to the number of ranks; ``sharding`` (shards of the model state among the
    data-parallel ranks) divides ``data``; ``expert`` (groups of experts) divides ``data x
    context``."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    sharding: int = 1
    context: int = 1
    expert: int = 1

    def __post_init__(self) -> None:
        for name in _WHAT:
            check_int(name, getattr(self, name), 1)
        if self.data % self.sharding:
            raise ValueError(f"the sharding degree ({self.sharding}) must divide the "
                             f"data-parallel degree ({self.data}): the model state is "
                             "sharded among the data-parallel ranks")
        if (self.data * self.context) % self.expert:
            raise ValueError(f"the expert-parallel degree ({self.expert}) must divide data x "
                             f"context ({self.data} x {self.context}): the experts are spread "
                             "over ranks that hold the same layers and see different tokens")

    @property
    def world_size(self) -> int:
        """How many ranks the degrees need, ``data x tensor x pipeline x context``."""
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def expert_data(self) -> int:
        """How many ranks hold each expert, ``data x context / expert``: the group over which
        an expert's gradients are reduced."""
        return self.data * self.context // self.expert

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless the degrees multiply to ``world_size``: every rank must have
        exactly one place in the grid."""
        check_int("world_size", world_size, 1)
        if self.world_size != world_size:
            context = f" x context {self.context}" if self.context > 1 else ""
            raise ValueError(f"the parallel degrees must multiply to the world size: data "
                             f"{self.data} x tensor {self.tensor} x pipeline {self.pipeline}"
                             f"{context} = {self.world_size}, but the world size is "
                             f"{world_size}")

    def check_divides(self, degree: str, what: str, size: int) -> int:
        """``ValueError`` unless the ``degree`` degree (``"data"``, ``"tensor"``,
        ``"pipeline"``, ``"sharding"``, ``"context"`` or ``"expert"``) divides ``size``, the
        size of ``what``, so that every rank gets an equal share; returns the share."""
        ways = getattr(self, check_choice("degree", degree, tuple(_WHAT)))
        check_int("size", size, 1)
        if size % ways:
            raise ValueError(f"{what} ({size}) must be divisible by the {_WHAT[degree]} "
                             f"({ways}), so that every rank holds an equal share")
        return size // ways

    def device_mesh(self, device_type: str, dims: tuple[str, ...] = ("data",)) -> Any:
        """The ``torch.distributed`` device mesh of the current process group over ``dims``
        (names of degrees, in mesh order: ``("data", "tensor")`` is a ``data x tensor`` grid
        whose rows are data-parallel replicas), each dimension named as its degree.
        ``"expert_data"`` and ``"expert"`` split the ``data x context`` ranks (rank ``r`` of
        them is expert group ``r % expert``), so they stand in a mesh without ``"data"`` and
        ``"context"``. Called inside a rank; ``ValueError`` unless the degrees of ``dims``
        multiply to the group's size."""
        from torch import distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if not isinstance(dims, tuple) or not dims:
            raise TypeError(f"dims must be a non-empty tuple of degree names, got {dims!r}")
        for i, dim in enumerate(dims):
            check_choice(f"dims[{i}]", dim, _MESH_DIMS)
        if len(set(dims)) != len(dims):
            raise ValueError(f"dims must name each degree once, got {dims!r}")
        if {"expert", "expert_data"} & set(dims) and {"data", "context"} & set(dims):
            raise ValueError(f"dims {dims!r}: 'expert' and 'expert_data' split the data x "
                             "context ranks, so they cannot stand beside 'data' or 'context'")
        shape = tuple(getattr(self, dim) for dim in dims)
        if not dist.is_initialized():
            raise RuntimeError("device_mesh needs a process group: call it inside a rank")
        if math.prod(shape) != dist.get_world_size():
            raise ValueError(f"the degrees of {dims} ({' x '.join(map(str, shape))}) must "
                             f"multiply to the process group's size, {dist.get_world_size()}")
        return init_device_mesh(device_type, shape, mesh_dim_names=dims)
