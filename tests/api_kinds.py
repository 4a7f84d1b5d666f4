"""The kinds of parameter the API table (tests/api_table.py) names, each with the bad values
every parameter of that kind must refuse: a ``TypeError`` for each of ``wrong_type``, a
``ValueError`` for each of ``wrong_value``, and hypothesis strategies that draw more of both.

A kind is what a parameter *means* (a count, a learning rate, a float32 matrix, a name from a
list), so one list of bad values serves every parameter that means the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

NAN, INF = math.nan, math.inf


@dataclass(frozen=True)
class Kind:
    """A kind of parameter: ``what`` it is, the values of the wrong type (``TypeError``) and of
    the right type with a wrong value (``ValueError``) that it must refuse, and strategies
    drawing more of each (callables, so that a strategy is built only when a test draws)."""

    what: str
    wrong_type: tuple = ()
    wrong_value: tuple = ()
    drawn_type: Callable[[], st.SearchStrategy] | None = None
    drawn_value: Callable[[], st.SearchStrategy] | None = None

    def more(self, wrong_type: Sequence = (), wrong_value: Sequence = ()) -> Kind:
        """This kind with more bad values (an entry's own: a shape that must match another)."""
        return Kind(self.what, (*self.wrong_type, *wrong_type),
                    (*self.wrong_value, *wrong_value), self.drawn_type, self.drawn_value)

    def without(self, *values: Any) -> Kind:
        """This kind less some bad values (one a callable cannot tell apart, say)."""
        def keep(v: Any) -> bool:
            return not any(v is w or (type(v) is type(w) and v == w) for w in values)
        return Kind(self.what, tuple(filter(keep, self.wrong_type)),
                    tuple(filter(keep, self.wrong_value)),
                    (lambda: self.drawn_type().filter(keep)) if self.drawn_type else None,
                    (lambda: self.drawn_value().filter(keep)) if self.drawn_value else None)

    def hashable(self) -> Kind:
        """This kind's hashable bad values only: for a callable behind ``functools.cache``,
        where an unhashable argument fails in the cache, before the callable's own check."""
        def ok(v: Any) -> bool:
            try:
                hash(v)
            except TypeError:
                return False
            return True
        return Kind(self.what, tuple(filter(ok, self.wrong_type)),
                    tuple(filter(ok, self.wrong_value)),
                    (lambda: self.drawn_type().filter(ok)) if self.drawn_type else None,
                    self.drawn_value)

    def allowing_none(self) -> Kind:
        """This kind where ``None`` is also accepted (a default to be filled in)."""
        return Kind(f"{self.what} or None", tuple(v for v in self.wrong_type if v is not None),
                    self.wrong_value,
                    (lambda: self.drawn_type().filter(lambda v: v is not None))
                    if self.drawn_type else None, self.drawn_value)


def _not_numbers() -> st.SearchStrategy:
    return st.one_of(st.text(max_size=4), st.booleans(), st.none(),
                     st.lists(st.integers(), max_size=2), st.complex_numbers(max_magnitude=9))


def integer(minimum: int | None = 1, maximum: int | None = None) -> Kind:
    """An int from ``minimum`` to ``maximum`` (a count, a size, an index, a seed)."""
    low = () if minimum is None else (minimum - 1, minimum - 100)
    high = () if maximum is None else (maximum + 1,)

    def drawn_value() -> st.SearchStrategy:
        parts = []
        if minimum is not None:
            parts.append(st.integers(max_value=minimum - 1))
        if maximum is not None:
            parts.append(st.integers(min_value=maximum + 1))
        return st.one_of(*parts)

    return Kind(f"int from {minimum} to {maximum}", (1.5, "2", True, None, np.float64(2.0), [2]),
                low + high,
                lambda: st.one_of(_not_numbers(), st.floats(allow_nan=True)),
                drawn_value if (minimum is not None or maximum is not None) else None)


def real(minimum: float | None = None, maximum: float | None = None,
         strict: bool = False) -> Kind:
    """A finite real number from ``minimum`` (excluded with ``strict``) to ``maximum``."""
    low = () if minimum is None else ((minimum - 1.0,) + ((minimum,) if strict else ()))
    high = () if maximum is None else (maximum + 1.0,)

    def drawn_value() -> st.SearchStrategy:
        parts = [st.sampled_from([NAN, INF, -INF])]
        if minimum is not None:
            parts.append(st.floats(max_value=minimum, exclude_max=not strict,
                                   allow_nan=False))
        if maximum is not None:
            parts.append(st.floats(min_value=maximum, exclude_min=True, allow_nan=False))
        return st.one_of(*parts)

    return Kind(f"real from {minimum} to {maximum}", ("0.1", True, None, [0.1], 1j),
                (NAN, INF, -INF) + low + high, _not_numbers, drawn_value)


#: A count: an int >= 1.
COUNT = integer(1)
#: A size, an index from 0 or a seed: an int >= 0.
SIZE = integer(0)
#: A finite real number > 0 (a rate, a time, a learning rate).
POSITIVE = real(0, strict=True)
#: A finite real number >= 0.
NONNEGATIVE = real(0)
#: Any finite real number.
FINITE = real()
#: A fraction from 0 to 1.
FRACTION = real(0, 1)
#: A timeout in seconds.
TIMEOUT = POSITIVE

BOOL = Kind("bool", ("yes", 1, None, 0.0, [True]), (),
            lambda: st.one_of(st.text(max_size=3), st.integers(), st.none(), st.floats()))


def choice(*names: Any) -> Kind:
    """One of ``names`` (a variant, a mode, a schedule...)."""
    first = names[0]
    wrong_value = tuple(v for v in ("bogus", f"{first}x", "") if v not in names) if isinstance(
        first, str) else ()
    wrong_type = (None, [first], 1) if isinstance(first, str) else (None, "x", 1)
    drawn = (lambda: st.text(max_size=8).filter(lambda s: s not in names)) if isinstance(
        first, str) else None
    return Kind(f"one of {names}", wrong_type, wrong_value,
                lambda: st.one_of(st.none(), st.integers(), st.lists(st.text(), max_size=1)),
                drawn)


def instance(cls: type, *, also: tuple = ()) -> Kind:
    """An instance of ``cls`` (a set-up object, a model)."""
    return Kind(f"a {cls.__name__}", (None, "x", 1, {}, *also))


def widths(minimum_count: int = 2) -> Kind:
    """Layer widths: a sequence of at least ``minimum_count`` ints >= 1."""
    short = (tuple(range(1, minimum_count)),) if minimum_count > 1 else ((),)
    good = (8,) * minimum_count
    return Kind("layer widths", ("8,4", 8, None, (*good[:-1], 2.5), (*good[:-1], True)),
                (*short, (*good[:-1], 0), (*good[:-1], -3)))


def ints(minimum: int = 1, minimum_count: int = 1) -> Kind:
    """A sequence of at least ``minimum_count`` ints >= ``minimum``."""
    good = [minimum + 1] * minimum_count
    return Kind("ints", ("1", 1, None, [*good[:-1], 1.5], [*good[:-1], True]),
                ([],) * (minimum_count > 0) + ([*good[:-1], minimum - 1],))


def _float32(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape) / 7 + 1


def float32(ndim: int, shape: tuple[int, ...] | None = None) -> Kind:
    """A float32, C-contiguous NumPy or device array of rank ``ndim`` (of ``shape``)."""
    shape = shape or (4,) * ndim
    base = _float32(shape)
    wider = _float32((*shape[:-1], 2 * shape[-1]))
    return Kind(f"float32 {ndim}-D array", (base.tolist(), base.astype(np.float64),
                                            base.astype(np.int32), None, 1.0),
                (_float32((*shape, 2)), wider[..., ::2]))


def real_array(ndim: int, shape: tuple[int, ...] | None = None) -> Kind:
    """A NumPy array of a real dtype and rank ``ndim`` (a reference's input, any precision)."""
    shape = shape or (4,) * ndim
    base = _float32(shape)
    return Kind(f"real {ndim}-D array", (base.tolist(), None, 1.0, base.astype(np.complex64),
                                         np.full(shape, "a")),
                (_float32((*shape, 2)),))


def tensor(dtype: Any = None, shape: tuple[int, ...] = (4,), contiguous: bool = True,
           *, wrong_dtype: Any = None) -> Kind:
    """A torch tensor (``dtype``, contiguous unless told)."""
    import torch

    dtype = dtype or torch.float32
    wrong_type = [np.ones(shape, np.float32), [1.0] * shape[0], None]
    if wrong_dtype is not None:
        wrong_type.append(torch.ones(shape, dtype=wrong_dtype))
    wrong_value = []
    if contiguous:
        wrong_value.append(torch.ones((*shape[:-1], 2 * shape[-1]), dtype=dtype)[..., ::2])
    return Kind(f"{dtype} tensor", tuple(wrong_type), tuple(wrong_value))


def torch_dtype(*allowed: Any) -> Kind:
    """A torch dtype among ``allowed``."""
    import torch

    refused = tuple(d for d in (torch.int64, torch.complex64, torch.bool) if d not in allowed)
    return Kind(f"torch dtype in {allowed}", ("float32", np.float32, None, 4), refused[:2])


CALLABLE = Kind("a callable", (None, 1, "f"))


@dataclass
class Entry:
    """One public callable: ``valid()`` gives keyword arguments it accepts, ``call(kwargs)``
    calls it, ``params`` maps each checked parameter to its kind; ``reason`` says why a
    callable has no parameter to check."""

    key: str
    valid: Callable[[], dict] | None = None
    call: Callable[[dict], Any] | None = None
    params: dict[str, Kind] = field(default_factory=dict)
    reason: str = ""
    distributed: bool = False
    #: other words by which an error may name a parameter ("the data-parallel degree" for a
    #: world size): the message names what the argument is, if not its spelling
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
