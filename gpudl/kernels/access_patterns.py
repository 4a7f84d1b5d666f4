"""One warp's requests of Chapter 2's kernels, traced on the simulator: the global loads of
the strided and offset copies, and the shared-memory reads of the transpose tile.

Book section: Chapter 2, "Seeing memory transactions without a GPU" and "Shared memory and
bank conflicts".

:func:`copy_requests` traces :mod:`gpudl.kernels.memory`'s copies and returns the first warp's
load request of each pattern; :func:`tile_load_requests` traces :mod:`gpudl.kernels.transpose`'s
``v2_shared`` and ``v3_padded`` and returns the words the first warp's column read asks for.
:func:`gpudl.plots.warp_sectors` and :func:`gpudl.plots.bank_conflicts` draw them. Tracing
needs the simulator: on a GPU, run them through :func:`gpudl.trace.on_simulator`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np

from gpudl.checks import check_choice, check_int
from gpudl.kernels.memory import copy_offset_kernel, copy_strided_kernel
from gpudl.kernels.transpose import transpose_grid, v2_shared, v3_padded
from gpudl.trace import BANK_BYTES, trace

__all__ = ["copy_requests", "tile_load_requests"]


def _check_patterns(patterns: object) -> None:
    if isinstance(patterns, str) or not isinstance(patterns, Sequence):
        raise TypeError(f"patterns must be a list of (kind, amount) pairs, got {patterns!r}")
    for i, pattern in enumerate(patterns):
        if not isinstance(pattern, tuple | list) or len(pattern) != 2:
            raise TypeError(f"patterns[{i}] must be a (kind, amount) pair, got {pattern!r}")
        check_choice(f"patterns[{i}][0]", pattern[0], ("stride", "offset"))
        check_int(f"patterns[{i}][1]", pattern[1], 1 if pattern[0] == "stride" else 0, 64)


def copy_requests(patterns: Sequence[tuple[str, int]] = (("stride", 1), ("stride", 2),
                                                          ("offset", 1), ("stride", 32)),
                  ) -> list[dict]:
    """The first warp's load request of :mod:`gpudl.kernels.memory`'s strided and offset
    copies, traced on the simulator (run it through :func:`gpudl.trace.on_simulator` on a
    GPU): one dict per ``(kind, amount)`` with ``pattern``, the lanes' byte ``addresses``
    relative to the array's start, and the ``sectors`` the tracer counted."""
    _check_patterns(patterns)
    rows = []
    for kind, amount in patterns:
        out = np.full(32, np.nan, dtype=np.float32)
        if kind == "stride":
            x = np.arange(32 * amount, dtype=np.float32)
            t = trace(copy_strided_kernel, 1, 32, x, out, amount)
        elif kind == "offset":
            x = np.arange(32 + amount, dtype=np.float32)
            t = trace(copy_offset_kernel, 1, 32, x, out, amount)
        else:
            raise ValueError(f"a pattern is ('stride', s) or ('offset', k), got {kind!r}")
        request = t.requests("global", "load", "x")[0]
        base = 1 << 32  # the tracer's address of argument 0
        rows.append({"pattern": f"{kind} {amount}",
                     "addresses": [a - base for a in request.addresses],
                     "sectors": request.sectors})
    return rows


def tile_load_requests() -> dict[str, list[int]]:
    """The shared-memory words that the first warp's column read of the transpose tile
    asks for, in ``v2_shared`` (32 x 32 tile) and ``v3_padded`` (32 x 33), traced on the
    simulator on one 32 x 32 block: name -> the 32 lanes' word indices."""
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    words = {}
    for name, kernel in (("shared", v2_shared), ("padded", v3_padded)):
        out = np.full((32, 32), np.nan, dtype=np.float32)
        t = trace(kernel, *transpose_grid(x.shape), x, out)
        request = t.requests("shared", "load", "tile")[0]
        words[name] = [a // BANK_BYTES for a in request.addresses]
    return words
