"""Input checks shared by the package's modules (BOOK.md rule 6: bad input gets a clear error).

Book section: none; every public function that takes a count uses it.
"""

from __future__ import annotations

from numbers import Integral

__all__ = ["check_int"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int if it is an integer (not a bool) ``>= minimum``; else a
    ``TypeError`` (not an integer) or ``ValueError`` (too small) naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
