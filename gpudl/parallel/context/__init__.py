"""Context parallelism: attention over a long sequence split across ranks, by the sequence (ring
attention) or by the heads (DeepSpeed-Ulysses), proven equal to one process, forward and
backward.

Book section: *Chapter 11*, long sequences. One module per topic:

* :mod:`.layout`: which tokens each rank holds (the contiguous layout, and the load-balanced
  one for causal attention) and what a world size must be;
* :mod:`.blocks`: the maths on one rank, one chunk of keys at a time, merged by the
  online-softmax rule of Chapters 8 and 9 (:mod:`gpudl.kernels.online_softmax`);
* :mod:`.comms`: the ring's transfers (posted before the computation they overlap) and the
  all-to-all, from sends and receives;
* :mod:`.ring`: ring attention, forward and backward;
* :mod:`.ulysses`: head-parallel attention;
* :mod:`.run`: both on spawned ranks for host tensors, :func:`context_attention` and
  :func:`run_context_jobs`;
* :mod:`.timing`: a ring step against its computation alone, timed on each rank.

When each wins: the ring sends the keys and values round once per pass, ``2 (W - 1) / W`` of
them per rank whatever the world size ``W``, and hides it behind the computation once the
chunks are long enough (:func:`gpudl.estimate.hiding_chunk`); it works for any number of heads
and needs only a link to the next rank. Ulysses sends less, ``4 (W - 1) / W^2`` of ``q``,
``k``, ``v`` and ``o``, falling with ``W``, but cannot hide it, needs the heads to divide by
``W`` and every rank to talk to every other: the better choice inside a node of fast links
while ``W`` is at most the heads (:func:`gpudl.estimate.context_bytes_per_gpu`).

Every public name is importable from :mod:`gpudl.parallel.context` itself.
"""

from importlib import import_module

from gpudl.parallel.context.blocks import *
from gpudl.parallel.context.comms import *
from gpudl.parallel.context.layout import *
from gpudl.parallel.context.ring import *
from gpudl.parallel.context.run import *
from gpudl.parallel.context.timing import *
from gpudl.parallel.context.ulysses import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("layout", "blocks", "comms", "ring", "ulysses", "run", "timing")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
