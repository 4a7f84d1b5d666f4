"""What the data-layout figures share: the elements of an array that a traced launch touched.

Book section: Chapters 3 and 4, the figures that show which elements one thread or one warp of
a kernel reads and writes. They are drawn from the accesses :mod:`gpudl.trace` records on the
simulator, not by hand: an access's byte address, less the start of its array, over the
element size, is the element's index (row-major).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudl.checks import check_instance, check_int, check_ints
from gpudl.trace import SECTOR_BYTES, Trace

__all__ = ["base_address", "element_indices", "sector_elements"]


def base_address(t: Trace, array: str) -> int:
    """The byte address of element 0 of ``array`` in the trace ``t``: a kernel argument at
    position k starts at ``(k + 1) * 2**32`` (:mod:`gpudl.trace`); a shared array at the
    lowest address any access to it used (every tile the book's kernels stage is written
    whole, element 0 included)."""
    check_instance("t", t, Trace)
    check_instance("array", array, str)
    if array in t.parameters:
        return (t.parameters.index(array) + 1) << 32
    addresses = [a.address for a in t.accesses if a.kind == "shared" and a.array == array]
    if not addresses:
        raise ValueError(f"array must be a parameter of {t.kernel} or a shared array it "
                         f"accessed, got {array!r}")
    return min(addresses)


def element_indices(t: Trace, array: str, addresses: Sequence[int],
                    itemsize: int = 4) -> list[int]:
    """The row-major index of the element at each of ``addresses`` of ``array``."""
    check_ints("addresses", addresses, 0, minimum_count=0)
    check_int("itemsize", itemsize, 1)
    base = base_address(t, array)
    return [(address - base) // itemsize for address in addresses]


def sector_elements(t: Trace, array: str, addresses: Sequence[int], size: int,
                    itemsize: int = 4) -> list[int]:
    """Every element of ``array`` (of ``size`` elements) that lies in a 32-byte sector which
    one of ``addresses`` touches: what the memory system moves to serve those words."""
    check_int("size", size, 1)
    indices = element_indices(t, array, addresses, itemsize)
    base = base_address(t, array)
    out: set[int] = set()
    for address in (base + i * itemsize for i in indices):
        first = address // SECTOR_BYTES * SECTOR_BYTES
        out.update(i for i in range((first - base) // itemsize,
                                    (first + SECTOR_BYTES - base) // itemsize)
                   if 0 <= i < size)
    return sorted(out)
