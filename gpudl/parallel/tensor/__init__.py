"""Tensor parallelism (Megatron-LM): each layer's matrices split across ranks, by hand with
the identity/all-reduce operator pair, and with DTensor's ``parallelize_module``.

Book section: *Chapter 6, "Tensor parallelism"*. One module per topic: :mod:`.comms` (the
operators ``f`` and ``g``), :mod:`.layers` (the split layers and blocks) and :mod:`.training`
(the runs against one process). Every public name is importable from
:mod:`gpudl.parallel.tensor` itself.

A :class:`ColumnParallelLinear` keeps this rank's slice of a linear layer's *output* features
(rows of ``weight``), so it needs the whole input and produces a slice of the output. A
:class:`RowParallelLinear` keeps a slice of the *input* features (columns of ``weight``): it
takes a slice of the input and produces a partial sum of the whole output. Chained, column
then row, they need no communication in between; the partial sums are added by one
all-reduce at the end. Two operators (Shoeybi et al. 2019) mark where ranks communicate:

* ``f`` (:func:`copy_to_parallel`), before the column-parallel layer: identity forward, and
  all-reduce backward (each rank's input gradient is a partial sum over its output slice);
* ``g`` (:func:`reduce_from_parallel`), after the row-parallel layer: all-reduce forward,
  identity backward.

The feed-forward network is column (``fc1``, with the fused bias + GeLU of
:mod:`gpudl.kernels.bias_gelu`) then row (``fc2``); attention is column for ``q``, ``k``,
``v`` (stacked into one product, so one ``f``), whole heads per rank, then row for ``out``.
A block therefore does two all-reduces forward (two ``g``) and two backward (two ``f``):
:func:`count_all_reduces` counts them. :data:`gpudl.parallel.encoder_plan.DTENSOR_PLAN` is
the same split for ``parallelize_module``.

``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.tensor`` runs both on
two processes and prints how far each is from one process.
"""

from importlib import import_module

from gpudl.parallel.tensor.comms import *
from gpudl.parallel.tensor.layers import *
from gpudl.parallel.tensor.training import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("comms", "layers", "training")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
