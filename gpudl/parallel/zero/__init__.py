"""ZeRO: the model state sharded across the data-parallel ranks.

Book section: *Chapter 6, "Sharding the model state: ZeRO"* (stage 1), "FSDP2: the
parameters too" and "Sharding the encoder" (stage 3, by FSDP2).

In plain data parallelism every rank holds the whole model, its gradients and the whole Adam
state, and every rank performs the same update. ZeRO stage 1 (Rajbhandari et al. 2020) keeps
the replicated model and gradients but gives each of the ``N`` ranks one ``1/N`` shard of the
optimizer: each rank keeps the moments of its shard only and updates only its shard. One
module per topic:

* :mod:`.comms`: the collectives on flat buffers (reduce-scatter, all-gather, and the naive
  all-reduce then slice);
* :mod:`.optimizer`: :class:`ZeroAdam` and :class:`NaiveZeroAdam`, the flat padded buffer and
  each rank's shard of it (the maths: ``torch.optim.Adam`` on one flat tensor);
* :mod:`.training`: a small MLP trained with each, and with PyTorch's
  ``ZeroRedundancyOptimizer``, against one process's Adam
  (``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.zero``);
* :mod:`.fsdp`: FSDP2 (ZeRO stage 3): the bytes of model state each rank holds, replicated
  or sharded, and the encoder sharded block by block against one process
  (``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.zero.fsdp``).

Every public name of stage 1 is importable from :mod:`gpudl.parallel.zero` itself; stage 3's
from :mod:`gpudl.parallel.zero.fsdp`.
"""

from importlib import import_module

from gpudl.parallel.zero.comms import *
from gpudl.parallel.zero.optimizer import *
from gpudl.parallel.zero.training import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("comms", "optimizer", "training")
#: Public names of the modules that stay in their module: not re-exported.
_KEPT_IN_MODULE = {"all_gather_flat", "reduce_scatter_flat"}
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__
           if name not in _KEPT_IN_MODULE]
