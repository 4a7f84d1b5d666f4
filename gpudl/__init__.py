"""gpudl: the code of the book *How deep learning runs on GPUs*.

Importing :mod:`gpudl` first decides the backend (:mod:`gpudl.backend`): a real CUDA GPU, or
Numba's CUDA simulator on the CPU, to which it adds what the simulator lacks
(:mod:`gpudl.simulator`). On both it holds every launch to CUDA's limits
(:func:`gpudl.launches.guard_launches`). Import it before anything imports numba.
"""

from gpudl import backend

if backend.is_simulator():
    from gpudl import simulator

    simulator.install()

from gpudl import launches as _launches  # noqa: E402  (after the backend is decided)

_launches.guard_launches()

__all__ = ["backend"]
__version__ = "0.1.0"
