"""Mixture of experts and expert parallelism: a router sends each token to ``k`` of ``E`` expert
MLPs, the experts spread over the ranks, the tokens carried to them and back by two
all-to-alls, proven equal to one process.

Book section: *Chapter 11, Mixture of experts*. One module per topic: :mod:`.router` (top-k
gating, the capacity, the load-balancing loss), :mod:`.layer` (the layer in one process, the
reference), :mod:`.comms` (the all-to-alls, the naive all-gather and reduce-scatter, the
gradients' reductions), :mod:`.parallel` (the expert-parallel layer, real and naive) and
:mod:`.training` (the runs against one process, inside data parallelism). Every public name is
importable from :mod:`gpudl.parallel.experts` itself.

The entry points other code calls:

* ``MoELayer(config, dtype)(x, groups)``: the one-process layer, a :class:`MoEOutput` (the
  output, the load-balancing loss, each group's routing);
* ``moe_sgd_run(config, groups, tokens_per_group, steps, lr, dtype)``: its training steps;
* ``run_expert_parallel(runs, world_size, timeout)``: spawned ranks running each
  :class:`ExpertParallelRun`, each rank returning the same keys, whole;
* ``differences(result, reference)``: how far a run is from one process.

``torchrun --standalone --nproc_per_node=N -m gpudl.parallel.experts`` runs it under
``torchrun``.
"""

from importlib import import_module

from gpudl.parallel.experts.comms import *
from gpudl.parallel.experts.layer import *
from gpudl.parallel.experts.parallel import *
from gpudl.parallel.experts.router import *
from gpudl.parallel.experts.training import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("router", "layer", "comms", "parallel", "training")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
