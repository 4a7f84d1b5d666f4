"""The GPU itself: the current device's facts, a table of real GPUs, comparing them, and the
occupancy rules.

Book section: *Chapter 1, GPU hardware and SIMT* (one module per topic: :mod:`.device`,
:mod:`.specs`, :mod:`.sm_limits`) and *Chapter 7, "Choosing a GPU"* (:mod:`.choosing`). Every
public name is importable from :mod:`gpudl.hardware` itself.
"""

from importlib import import_module

from gpudl.hardware.choosing import *
from gpudl.hardware.device import *
from gpudl.hardware.sm_limits import *
from gpudl.hardware.specs import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("choosing", "device", "sm_limits", "specs")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
