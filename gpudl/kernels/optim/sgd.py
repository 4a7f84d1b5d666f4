"""SGD's step as kernels: plain, and with momentum, weight decay and Nesterov's look-ahead.

Book section: *Chapter 4, "SGD, momentum and weight decay"*.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
from numba import cuda

from gpudl import registry
from gpudl.checks import check_float32_array
from gpudl.kernels.arrays import Array, launch_in_place
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.optim.hyper import SgdScalars, sgd_scalars
from gpudl.kernels.optim.traffic import THREADS, launch

__all__ = ["launch_sgd", "sgd_kernel", "sgd_momentum_kernel", "sgd_step"]


@cuda.jit(device=True, inline=True)
def _sgd_gradient(g, p, maximize, l2):
    """The gradient SGD follows: negated to maximize, plus the L2 term, in torch's order."""
    if maximize:
        g = -g
    if l2 != 0:
        g = g + l2 * p
    return g


# sgd_kernel: torch.optim.SGD's step without momentum, p -= lr * g, in one pass: 12 bytes per
# parameter (read p, g; write p).
@registry.kernel("sgd", "void(float32[::1], float32[::1], boolean, float32, float32)")
@cuda.jit
def sgd_kernel(p, g, maximize, l2, neg_lr):
    i = cuda.grid(1)
    if i < p.size:
        x = p[i]
        p[i] = x + neg_lr * _sgd_gradient(g[i], x, maximize, l2)


# sgd_momentum_kernel: with momentum, the buffer too: the gradient itself on the first step,
# then momentum * buf + (1 - dampening) * g; Nesterov's look-ahead g + momentum * buf; and
# p -= lr * direction. 20 bytes per parameter (read p, g, buf; write p, buf). Plain SGD has
# a kernel of its own rather than this one with an unused buffer: handing it the parameter
# as a stand-in buffer passed one memory twice, which the simulator copies twice
# (gpudl.aliasing).
@registry.kernel("sgd_momentum",
                 "void(float32[::1], float32[::1], float32[::1], boolean, float32, boolean, "
                 "float32, float32, boolean, float32)")
@cuda.jit
def sgd_momentum_kernel(p, g, buf, maximize, l2, first, momentum, w, nesterov, neg_lr):
    i = cuda.grid(1)
    if i < p.size:
        x = p[i]
        d = _sgd_gradient(g[i], x, maximize, l2)
        b = d if first else buf[i] * momentum + w * d
        buf[i] = b
        d = d + momentum * b if nesterov else b
        p[i] = x + neg_lr * d


def launch_sgd(p: Array, g: Array, buf: Array | None, k: SgdScalars) -> None:
    """One SGD launch: ``sgd_kernel`` without momentum (``buf`` None), else
    ``sgd_momentum_kernel`` on the momentum buffer ``buf``."""
    if k.has_momentum != (buf is not None):
        given = "None" if buf is None else "an array"
        raise ValueError("a momentum buffer is needed exactly when momentum != 0, got "
                         f"momentum={float(k.momentum)} and buf={given}")
    blocks = blocks_to_cover(p.size, THREADS)
    if buf is None:
        launch(sgd_kernel, blocks, p, g, k.maximize, k.l2, k.neg_lr)
    else:
        launch(sgd_momentum_kernel, blocks, p, g, buf, k.maximize, k.l2, k.first,
                k.momentum, k.w, k.nesterov, k.neg_lr)


def sgd_step(p: Array, g: Array, buf: Array | None, *, first: bool, lr: float = 1e-3,
             momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
             nesterov: bool = False, maximize: bool = False) -> None:
    """One ``torch.optim.SGD`` step on float32 1-D arrays, in place. ``buf`` is the momentum
    buffer (``None`` when ``momentum`` is 0); with ``first`` it is written, not read."""
    k = sgd_scalars(first, lr, momentum, dampening, weight_decay, nesterov, maximize)
    arrays = {"p": p, "g": g}
    if k.has_momentum:
        if buf is None:
            raise ValueError("a momentum buffer is needed when momentum != 0, got None")
        arrays["buf"] = buf
    for name, x in arrays.items():
        check_float32_array(name, x, 1)
    launch = launch_sgd if k.has_momentum else (lambda p_, g_, k_: launch_sgd(p_, g_, None, k_))
    launch_in_place(launch, arrays, tuple(name for name in arrays if name != "g"), k)
