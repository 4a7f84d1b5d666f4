"""Optimizer steps as kernels: SGD with momentum, Adam and AdamW, unfused to multi-tensor.

Book section: Chapter 4, "Optimizers on the GPU" (the update rules, the four Adam variants, the
bytes each moves, mixed precision) and "Does shared memory help Adam?" (claim C6).

Every kernel updates its arrays in place, element by element, as ``torch.optim`` does, and
follows the order of operations of torch's single-tensor code path (``foreach=False``), so
that NaN and infinity propagate as they do in torch: Adam's first moment is updated with
torch's ``lerp`` formula, its second moment as ``v * beta2 + ((1 - beta2) * g) * g`` and the
parameter as ``p + (-step_size * m) / denom``. All arithmetic is float32 on float32 state.

The Adam variants (:data:`VARIANTS`) compute the same thing and differ in how many times the
update crosses the memory bus:

* ``v1_unfused``: one kernel per elementwise operation, as an eager framework runs it;
* ``v2_fused``: one kernel, one pass: 28 bytes per parameter;
* ``v3_shared``: ``v2_fused`` with the four arrays staged through shared memory, as the source
  articles suggest; the same 28 bytes of device memory, plus the shared traffic;
* ``v4_multi_tensor``: ``v2_fused`` in a grid-stride loop over a grid sized to the GPU, so that one
  launch covers any number of elements: :mod:`gpudl.optim` keeps all the tensors of a
  parameter group in flat buffers and updates them with one launch per step.

:func:`adam_step_mixed` is the mixed-precision step: float16 or bfloat16 parameters and
gradients, float32 master weights and moments. :func:`traffic` counts the launches and the
bytes of device and shared memory each step asks for, on the simulator (:mod:`gpudl.trace`).

Accuracy: :func:`reference_adam` and :func:`reference_sgd` are torch's formulas in float64;
:func:`adam_error_bound` and :func:`sgd_error_bound` bound how far a float32 step may be from
them, elementwise, by adding the rounding errors along each result's path (derivation in their
docstrings), barring underflow and overflow.

One module per topic: :mod:`.hyper` (the hyperparameters and kernel scalars),
:mod:`.reference` (float64 references and error bounds), :mod:`.adam`, :mod:`.mixed`,
:mod:`.sgd` (the kernels), :mod:`.traffic` (how they are launched and counted). Every public
name is importable from :mod:`gpudl.kernels.optim` itself.
"""

from importlib import import_module

from gpudl.kernels.arrays import EPS32
from gpudl.kernels.optim.adam import *
from gpudl.kernels.optim.hyper import *
from gpudl.kernels.optim.mixed import *
from gpudl.kernels.optim.reference import *
from gpudl.kernels.optim.sgd import *
from gpudl.kernels.optim.traffic import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("hyper", "reference", "adam", "mixed", "sgd", "traffic")
__all__ = ["EPS32", *(name for module in _MODULES
                      for name in import_module(f"{__name__}.{module}").__all__)]
