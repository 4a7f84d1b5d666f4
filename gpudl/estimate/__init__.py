"""Cost models: what an operation should cost, from first principles, to hold measurements to.

Book section: one module per chapter's model: :mod:`.roofline` (*Chapter 2, "The roofline"*),
:mod:`.register_file` (*Chapter 2, "Latency and bandwidth per level"*),
:mod:`.collectives` (*Chapter 5, "A cost model for a step"*, and the all-reduce of *"What
connects GPUs"*),
:mod:`.bubble` (*Chapter 6, "The bubble"*), :mod:`.training_cost` and :mod:`.memory_per_gpu`
(*Chapter 7*), :mod:`.experts` (*Chapter 11, Mixture of experts*),
:mod:`.inference` and :mod:`.batching` (*Chapter 9*), :mod:`.context` (*Chapter 11*, when the
ring hides its transfers), and :mod:`.cli`, Chapter 7's calculators
on the command line. Every public name of the models
is importable from :mod:`gpudl.estimate` itself, and so are the measurements others published
(``gpudl.estimate.published``). ``gpudl.estimate.predictions``, what these models predict for
each "Measured on a GPU" box at the sizes its benchmark times, reads those sizes from
:mod:`gpudl.bench` and is imported by its own name only.

Units throughout: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from importlib import import_module

from gpudl.estimate.batching import *
from gpudl.estimate.bubble import *
from gpudl.estimate.collectives import *
from gpudl.estimate.context import *
from gpudl.estimate.experts import *
from gpudl.estimate.inference import *
from gpudl.estimate.memory_per_gpu import *
from gpudl.estimate.published import *
from gpudl.estimate.register_file import *
from gpudl.estimate.roofline import *
from gpudl.estimate.training_cost import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("batching", "bubble", "collectives", "context", "experts", "inference",
            "memory_per_gpu", "published", "register_file", "roofline", "training_cost")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
