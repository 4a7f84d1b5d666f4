"""The book's figures, one module per chapter, each drawn from data the package computes
(and that a notebook prints or a test checks, since nbval never compares images).

Book section: every chapter. ``gpudl.plots.<name>`` reaches every figure function, as the
labs use it; the book's build draws the deterministic ones into ``book/_generated/``
(``book/_ext/gpudl_sphinx.py``). ``gpudl.plots.style`` keeps their text readable;
``gpudl.plots.traced`` turns traced accesses into the elements the data-layout figures draw.
"""

from importlib import import_module

from gpudl.plots.buffers import *
from gpudl.plots.ch01 import *
from gpudl.plots.ch02 import *
from gpudl.plots.ch03 import *
from gpudl.plots.ch04 import *
from gpudl.plots.ch04_threads import *
from gpudl.plots.ch05 import *
from gpudl.plots.ch06 import *
from gpudl.plots.ch07 import *
from gpudl.plots.ch08 import *
from gpudl.plots.ch08_layouts import *
from gpudl.plots.ch09 import *
from gpudl.plots.ch11 import *
from gpudl.plots.ch11_context import *
from gpudl.plots.measured import *
from gpudl.plots.profiles import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("buffers", "ch01", "ch02", "ch03", "ch04", "ch04_threads", "ch05", "ch06", "ch07",
            "ch08", "ch08_layouts", "ch09", "ch11", "ch11_context", "measured",
            "profiles")
#: Public names of the modules that stay in their module: not re-exported.
_KEPT_IN_MODULE = {"weight_after_updates", "ZERO_PARTS", "EXPERT_COLORS", "MESH_DIMS"}
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__
           if name not in _KEPT_IN_MODULE]
