"""Pipeline parallelism: the encoder's blocks cut into stages, one per rank.

Book section: *Chapter 6, "Pipeline parallelism"* and *"The bubble"*. One module per topic:
:mod:`.schedule` (the maths: stages, schedules, the simulated bubble), :mod:`.comms` (a
stage's sends and receives) and :mod:`.training` (the timed runs, by hand and by
``torch.distributed.pipelining``; ``torchrun --standalone --nproc_per_node=4 -m
gpudl.parallel.pipeline gpipe 8``). Every public name is importable from
:mod:`gpudl.parallel.pipeline` itself.
"""

from importlib import import_module

from gpudl.parallel.pipeline.comms import *
from gpudl.parallel.pipeline.schedule import *
from gpudl.parallel.pipeline.training import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("comms", "schedule", "training")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
