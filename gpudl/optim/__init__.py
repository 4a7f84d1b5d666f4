"""``torch.optim`` optimizers whose ``step()`` runs the book's kernels: SGD, Adam and AdamW.

Book section: Chapter 4, "Kernels on a framework's tensors", "Multi-tensor: one launch for the
whole model" and "What a launch costs".

:class:`SGD`, :class:`Adam` and :class:`AdamW` are :class:`torch.optim.Optimizer` subclasses with
torch's constructor signatures and checks, used exactly as torch's are (parameter groups,
``zero_grad``, a ``closure``, learning-rate schedulers, ``state_dict`` and ``load_state_dict``,
whose layout is torch's). Their ``step()`` launches :mod:`gpudl.kernels.optim`'s kernels on the
tensors' own memory (``gpudl.interop.as_kernel_array``): nothing is copied.

Adam and AdamW take a ``variant``, one of :data:`gpudl.kernels.optim.VARIANTS`. ``v1_unfused``,
``v2_fused`` and ``v3_shared`` launch their kernels once per parameter tensor.
``v4_multi_tensor`` (the default) launches one kernel per parameter group: at its first step it
moves the group's parameters, gradients and moments into flat buffers, one per kind, with every
tensor a view into them (PyTorch FSDP's flat parameters, DeepSpeed's and Megatron's contiguous
buffers do the same); a group of one contiguous parameter keeps it where it is, as its own flat
buffer. Backward passes then accumulate gradients straight into the flat gradient buffer, and
:meth:`Adam.zero_grad` zeroes it in place instead of setting gradients to ``None``.

The host's work per step is kept out of the way of the GPU's. Kernel arrays are made once per
tensor memory and kept (:class:`gpudl.interop.KernelArrays`), the kernel scalars once per step
and hyperparameters. A flat group keeps one step counter for its parameters: each parameter's
``state["step"]`` (torch's layout, in ``state_dict`` too) is a view of one element of it, and
one tensor operation advances them all. Once every parameter of a group has its state in the
flat buffers, at one step count, ``step()`` checks in C-level passes over the parameters that
each gradient and parameter is still its view of the buffers, and launches once: no Python
runs per parameter. Anything else (a new gradient tensor, a parameter without a gradient, a
state loaded from a checkpoint) takes the general path, which adopts it into the buffers.

Parameters may be float32, or float16 or bfloat16 with the ``v2_fused`` or ``v4_multi_tensor``
variant: then the optimizer keeps float32 master weights (state ``"master"``) and moments,
and writes the parameters rounded to nearest even (mixed precision). The kernels run on the
default CUDA stream, where PyTorch also runs its work unless it is told to use another one.

One module per topic: :mod:`.tensors` (what the optimizers share), :mod:`.sgd`, :mod:`.adam`
(the optimizer, whose parts are :mod:`.flat_buffers`, :mod:`.gradient_hooks` and
:mod:`.adam_steps`) and :mod:`.variant_costs`. The public names of :mod:`.sgd`, :mod:`.adam` and
:mod:`.variant_costs` are importable from :mod:`gpudl.optim` itself.
"""

from importlib import import_module

from gpudl.optim.adam import *
from gpudl.optim.sgd import *
from gpudl.optim.tensors import LOW_PRECISION
from gpudl.optim.variant_costs import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("adam", "sgd", "variant_costs")
__all__ = ["LOW_PRECISION", *(name for module in _MODULES
                              for name in import_module(f"{__name__}.{module}").__all__)]
