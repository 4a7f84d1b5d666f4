"""How many ways each strategy splits the work, checked once for every strategy.

Book section: *Chapter 6, "Two dimensions"*.

:class:`ParallelDegrees` holds the degrees of data, tensor and pipeline parallelism, whose
product is the number of ranks (as torchtitan's ``ParallelDims``), and the sharding degree: how
many ways the model state is sharded among the data-parallel ranks (1: replicated, as plain
data parallelism; ``data``: fully, as ZeRO and FSDP). Every strategy asks it whether its
degrees fit the world size (:meth:`ParallelDegrees.check_world_size`) and whether each divides
what it splits (:meth:`ParallelDegrees.check_divides`), so a size that does not split evenly
is one ``ValueError`` with one message style, before any process starts. Inside the ranks,
:meth:`ParallelDegrees.device_mesh` builds the device mesh each strategy shards over, its
dimensions named after the degrees (``"data"``, ``"tensor"``, ``"pipeline"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpudl.checks import check_choice, check_int

__all__ = ["ParallelDegrees"]

_MESH_DIMS = ("data", "tensor", "pipeline")
_WHAT = {"data": "data-parallel degree", "tensor": "tensor-parallel degree",
         "pipeline": "pipeline-parallel degree (stages)", "sharding": "sharding degree"}


@dataclass(frozen=True)
class ParallelDegrees:
    """How many ways each strategy splits the work: ``data`` (slices of the batch), ``tensor``
    (shards of every layer) and ``pipeline`` (stages) multiply to the number of ranks;
    ``sharding`` (shards of the model state among the data-parallel ranks) divides ``data``."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    sharding: int = 1

    def __post_init__(self) -> None:
        for name in _WHAT:
            check_int(name, getattr(self, name), 1)
        if self.data % self.sharding:
            raise ValueError(f"the sharding degree ({self.sharding}) must divide the "
                             f"data-parallel degree ({self.data}): the model state is "
                             "sharded among the data-parallel ranks")

    @property
    def world_size(self) -> int:
        """How many ranks the degrees need, ``data x tensor x pipeline``."""
        return self.data * self.tensor * self.pipeline

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless the degrees multiply to ``world_size``: every rank must have
        exactly one place in the grid."""
        check_int("world_size", world_size, 1)
        if self.world_size != world_size:
            raise ValueError(f"the parallel degrees must multiply to the world size: data "
                             f"{self.data} x tensor {self.tensor} x pipeline {self.pipeline} = "
                             f"{self.world_size}, but the world size is {world_size}")

    def check_divides(self, degree: str, what: str, size: int) -> int:
        """``ValueError`` unless the ``degree`` degree (``"data"``, ``"tensor"``,
        ``"pipeline"`` or ``"sharding"``) divides ``size``, the size of ``what``, so that every
        rank gets an equal share; returns the share."""
        ways = getattr(self, check_choice("degree", degree, tuple(_WHAT)))
        check_int("size", size, 1)
        if size % ways:
            raise ValueError(f"{what} ({size}) must be divisible by the {_WHAT[degree]} "
                             f"({ways}), so that every rank holds an equal share")
        return size // ways

    def device_mesh(self, device_type: str, dims: tuple[str, ...] = ("data",)) -> Any:
        """The ``torch.distributed`` device mesh of the current process group over ``dims``
        (names of degrees, in mesh order: ``("data", "tensor")`` is a ``data x tensor`` grid
        whose rows are data-parallel replicas), each dimension named as its degree. Called
        inside a rank; ``ValueError`` unless the degrees of ``dims`` multiply to the group's
        size."""
        from torch import distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if not isinstance(dims, tuple) or not dims:
            raise TypeError(f"dims must be a non-empty tuple of degree names, got {dims!r}")
        for i, dim in enumerate(dims):
            check_choice(f"dims[{i}]", dim, _MESH_DIMS)
        if len(set(dims)) != len(dims):
            raise ValueError(f"dims must name each degree once, got {dims!r}")
        shape = tuple(getattr(self, dim) for dim in dims)
        if not dist.is_initialized():
            raise RuntimeError("device_mesh needs a process group: call it inside a rank")
        if math.prod(shape) != dist.get_world_size():
            raise ValueError(f"the degrees of {dims} ({' x '.join(map(str, shape))}) must "
                             f"multiply to the process group's size, {dist.get_world_size()}")
        return init_device_mesh(device_type, shape, mesh_dim_names=dims)
