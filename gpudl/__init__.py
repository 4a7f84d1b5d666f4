"""gpudl: the code of the book *How deep learning runs on GPUs*.

Importing :mod:`gpudl` first decides the backend (:mod:`gpudl.backend`): a real CUDA GPU, or
Numba's CUDA simulator on the CPU. Import it before anything imports numba.
"""

from gpudl import backend

__all__ = ["backend"]
__version__ = "0.1.0"
