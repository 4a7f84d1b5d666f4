"""The contents of the book's "Measured on a GPU" boxes, drawn from stored GPU results.

:func:`box_markdown` turns one stored record (``results/<topic>-cuda.json``, checked by
``gpudl.bench.results.load_record``) into MyST markdown: one view of it (drawn by
``gpudl_views``), the speed goals that view is held to, and where the numbers come from (the GPU,
its driver, the CUDA, torch and numba versions, the date and the commit of the measured code).
With no record it says *not yet measured* and how to measure it. The directive
``{gpudl-measured}`` (``gpudl_directives.MeasuredBox``) calls it.

The topics, their views and the bars of each are imported from the bench modules
(:data:`TOPICS`: each module's ``VIEWS``), not written here.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import gpudl_views as views

from gpudl.bench import (
    allreduce,
    attention,
    dataparallel,
    decode,
    elementwise,
    launch,
    matmul,
    memory,
    optim,
    pipeline,
    precision,
    tensorcores,
)

NOT_MEASURED = views.NOT_MEASURED

#: Topic -> the bench module that measures it, and declares its views (``VIEWS``: view -> the
#: names of the bars, from its ``BARS``, that the view's box is held to).
TOPICS: dict[str, ModuleType] = {m.__name__.rsplit(".", 1)[1]: m for m in (
    elementwise, memory, allreduce, matmul, optim, dataparallel, pipeline, precision, launch,
    attention, tensorcores, decode)}


class _Trail:
    """The field of a record read last (``rows[3]['gbps']``): where a malformed record that
    passed the schema failed while its view was drawn."""

    def __init__(self) -> None:
        self.field = "(the record)"


class _Fields(dict):
    """A record's object that notes each field read in a :class:`_Trail`."""

    def __init__(self, value: dict, path: str, trail: _Trail) -> None:
        super().__init__(value)
        self._path, self._trail = path, trail

    def _wrap(self, key: object, value: object) -> object:
        path = f"{self._path}[{key!r}]"
        self._trail.field = path
        return _tracked(value, path, self._trail)

    def __getitem__(self, key: object) -> object:
        self._trail.field = f"{self._path}[{key!r}]"
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: object, default: object = None) -> object:
        return self._wrap(key, super().get(key, default))


class _Items(list):
    """A record's list that notes each element read in a :class:`_Trail`."""

    def __init__(self, value: list, path: str, trail: _Trail) -> None:
        super().__init__(value)
        self._path, self._trail = path, trail

    def __getitem__(self, index: object) -> object:
        self._trail.field = f"{self._path}[{index!r}]"
        item = super().__getitem__(index)
        return item if isinstance(index, slice) else _tracked(item, self._trail.field,
                                                              self._trail)

    def __iter__(self):
        for i, item in enumerate(super().__iter__()):
            self._trail.field = f"{self._path}[{i}]"
            yield _tracked(item, self._trail.field, self._trail)


def _tracked(value: object, path: str, trail: _Trail) -> object:
    if isinstance(value, dict):
        return _Fields(value, path, trail)
    if isinstance(value, list):
        return _Items(value, path, trail)
    return value


def _held_to(names: tuple[str, ...], bar: str) -> bool:
    """Whether the stored bar ``bar`` is one of ``names`` (a name with ``{placeholders}``
    matches each bar made from it: ``bucketed_vs_ddp_x{ws}`` matches ``bucketed_vs_ddp_x2``)."""
    return any(re.fullmatch(re.sub(r"\\\{\w+\\\}", ".+", re.escape(n)), bar) for n in names)


def _goals(record: dict, names: tuple[str, ...]) -> list[str]:
    lines = []
    for b in record["bars"]:
        if not _held_to(names, b["name"]):
            continue
        verdict = {True: "met", False: "**missed**", None: "not measured"}[b["verdict"]]
        ratio = "n/a" if b["ratio"] is None else f"{b['ratio']:.2f}"
        lines.append(f"- {b['what']}: **{ratio}** (goal {b['compare']} {b['threshold']:g}), "
                     f"{verdict}.")
    return lines


def provenance(record: dict, source: str) -> str:
    """Where the numbers come from: the GPU and its software, the date, the commit."""
    m = record["machine"]
    v = m["versions"]
    return (f"Measured on **{m['gpu']}** (driver {m['driver']}, CUDA {m['cuda_driver']}, "
            f"torch {v.get('torch')}, numba {v.get('numba')}, numba-cuda "
            f"{v.get('numba-cuda')}) on {record['date'][:10]}, code at commit "
            f"`{record['commit'][:12]}` (`{source}`).")


def box_markdown(topic: str | None, view: str | None, record: dict | None,
                 generated: Path, measured_by: str | None = None,
                 language: str = "en") -> list[str]:
    """The measured part of a box: ``view`` of ``topic``'s stored ``record`` (figures into
    ``generated``, as ``<name>.zh_CN.png`` in Chinese where ``language`` is ``"zh_CN"``), or
    *not yet measured* when there is no record. A box with no topic says what would measure
    it (``measured_by``), or that nothing in the book does yet."""
    source = f"results/{topic}-cuda.json"
    if topic is None:
        return [f"{NOT_MEASURED}: {measured_by or 'no benchmark of the book measures it yet'}; "
                "no GPU run of it is stored in `results/`."]
    if topic not in TOPICS or view not in TOPICS[topic].VIEWS:
        raise ValueError(f"no view {view!r} of topic {topic!r}; views: "
                         f"{ {t: list(m.VIEWS) for t, m in TOPICS.items()} }")
    if record is None:
        return [f"{NOT_MEASURED}: no GPU run of this benchmark is stored in `results/` "
                f"(`python -m gpudl bench {topic}` writes `{source}`)."]
    draw, bars = views.DRAW[topic][view], TOPICS[topic].VIEWS[view]
    trail = _Trail()
    tracked = _tracked(record, "", trail)
    try:
        edition = views.LANGUAGE.set(language)
        try:
            lines = draw(tracked, generated / f"measured-{topic}-{view}.png")
        finally:
            views.LANGUAGE.reset(edition)
        goals = _goals(tracked, bars)
        note = provenance(tracked, source)
    except Exception as err:  # any record the view cannot draw: name the file and the field
        raise MalformedRecord(f"{source}: field {trail.field or '(the record)'}: "
                              f"{type(err).__name__}: {err}") from None
    return [*lines, "", *goals, "", note]


class MalformedRecord(ValueError):
    """A stored record that passed the schema but that a view cannot draw."""


