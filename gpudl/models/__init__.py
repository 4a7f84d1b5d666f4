"""The book's models: Chapter 3's MLP on the book's kernels (:mod:`.mlp`), Chapter 6's
encoder (:mod:`.encoder`), and Chapter 9's tiny decoder (:mod:`.decoder`), on the book's
kernels (:mod:`.kernel_decoder`) and with its CUDA graphs (:mod:`.graphs`).

Book section: *Chapter 3, "Backpropagation from the book's kernels"*, *Chapter 6, "A
12-layer encoder"* and *Chapter 9, "A tiny decoder, token for token"*. Every public name is
importable from :mod:`gpudl.models` itself.
"""

from importlib import import_module

from gpudl.models.decoder import *
from gpudl.models.encoder import *
from gpudl.models.graphs import *
from gpudl.models.kernel_decoder import *
from gpudl.models.mlp import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("decoder", "encoder", "graphs", "kernel_decoder", "mlp")
#: Public names of the modules that stay in their module: not re-exported.
_KEPT_IN_MODULE = {"DTYPES"}
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__
           if name not in _KEPT_IN_MODULE]
