"""Data parallelism: every rank holds the whole model, trains on its share of each global batch
and averages its gradients with the others, proven equal to one process on the whole batch.

Book section: *Chapter 5, "Data parallelism"* (and *"The backward pass across GPUs"* for the
gradient timeline). One module per topic:

* :mod:`.sampling`: the setup, its data set, and who trains on what (``DistributedSampler``);
* :mod:`.comms`: the collectives: the ring all-reduce from sends and receives, the broadcast
  and the replica check;
* :mod:`.timeline`: when DDP's gradients become ready and its buckets are all-reduced;
* :mod:`.buckets`: gradient buckets by hand (each ``.grad`` a view of its bucket, or packed by
  a kernel of :mod:`gpudl.kernels.buckets`);
* :mod:`.training`: the four strategies (``single``, ``manual``, ``bucketed``, ``ddp``), run
  and compared; ``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.data --strategy
  ddp`` runs one under ``torchrun``.

Every public name is importable from :mod:`gpudl.parallel.data` itself.
"""

from importlib import import_module

from gpudl.parallel.data.buckets import *
from gpudl.parallel.data.comms import *
from gpudl.parallel.data.sampling import *
from gpudl.parallel.data.timeline import *
from gpudl.parallel.data.training import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("sampling", "comms", "timeline", "buckets", "training")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
