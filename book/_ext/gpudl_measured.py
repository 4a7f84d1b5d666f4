"""The contents of the book's "Measured on a GPU" boxes, drawn from stored GPU results.

:func:`box_markdown` turns one stored record (``results/<topic>-cuda.json``, checked by
``gpudl.bench.results.load_record``) into MyST markdown: one view of it (drawn by
``gpudl_views``), the speed goals that view is held to, and where the numbers come from (the GPU,
its driver, the CUDA, torch and numba versions, the date and the commit of the measured code).
With no record it says *not yet measured* and how to measure it. The directive
``{gpudl-measured}`` (``gpudl_directives.MeasuredBox``) calls it.

Its words are written for the edition the box is drawn for (``gpudl_extension_text``: the
Chinese ones from ``locales/zh_CN/extensions.po``); what the stored run names (its rows, its
GPU and software) stays as stored (:func:`record_texts`), and so do the numbers.

The topics, their views and the bars of each are imported from the bench modules
(:data:`TOPICS`: each module's ``VIEWS``), not written here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import gpudl_predicted as predicted
import gpudl_views as views
from gpudl_extension_text import Untranslated, Words, edition, message, tr, translated

from gpudl.bench import (
    allreduce,
    attention,
    context,
    dataparallel,
    decode,
    elementwise,
    launch,
    matmul,
    memory,
    optim,
    pipeline,
    precision,
    profiles,
    tensorcores,
)

NOT_MEASURED = views.NOT_MEASURED
#: A goal's verdict, by the stored bar's ``verdict``.
VERDICTS = {True: message("met"), False: message("**missed**"), None: message("not measured")}

#: Topic -> the bench module that measures it, and declares its views (``VIEWS``: view -> the
#: names of the bars, from its ``BARS``, that the view's box is held to).
TOPICS: dict[str, ModuleType] = {m.__name__.rsplit(".", 1)[1]: m for m in (
    elementwise, memory, allreduce, matmul, optim, dataparallel, pipeline, precision, launch,
    attention, tensorcores, decode, context, profiles)}


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
        ratio = tr("n/a") if b["ratio"] is None else f"{b['ratio']:.2f}"
        lines.append("- " + tr("{what}: **{ratio}** (goal {compare} {threshold}), {verdict}.",
                               what=translated(b["what"]), ratio=ratio, compare=b["compare"],
                               threshold=f"{b['threshold']:g}",
                               verdict=translated(VERDICTS[b["verdict"]])))
    return lines


def provenance(record: dict, source: str) -> str:
    """Where the numbers come from: the GPU and its software, the date, the commit."""
    m = record["machine"]
    v = m["versions"]
    return tr("Measured on **{gpu}** (driver {driver}, CUDA {cuda}, torch {torch}, numba "
              "{numba}, numba-cuda {numba_cuda}) on {date}, code at commit `{commit}` "
              "(`{source}`).", gpu=m["gpu"], driver=m["driver"], cuda=m["cuda_driver"],
              torch=v.get("torch"), numba=v.get("numba"), numba_cuda=v.get("numba-cuda"),
              date=record["date"][:10], commit=record["commit"][:12], source=source)


def record_texts(record: dict) -> set[str]:
    """The texts of a stored ``record`` that a box shows as stored: the names of its rows,
    kernels, GPU and software, and the notes of its run (each bar's description, ``what``,
    is translated instead)."""
    found: set[str] = set()

    def walk(value: object, key: object = None) -> None:
        if isinstance(value, str) and key != "what":
            found.add(value)
        elif isinstance(value, dict):
            for k, item in value.items():
                walk(item, k)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(record)
    return found


def box_markdown(topic: str | None, view: str | None, record: dict | None,
                 generated: Path, measured_by: str | None = None,
                 language: str = "en",
                 on_missing: Callable[[str], None] | None = None,
                 predict: str | None = None) -> list[str]:
    """The measured part of a box: ``view`` of ``topic``'s stored ``record`` (figures into
    ``generated``, as ``<name>.zh_CN.png`` in Chinese where ``language`` is ``"zh_CN"``), then
    the measured values beside the book's predictions for that GPU (``gpudl_predicted``); with
    no record, the predictions for the reference GPUs, the published measurements of the same
    quantities, and *not yet measured* with how to measure it. A box with no topic shows the
    predictions of the box ``predict`` names (``gpudl.estimate.predictions.BOXES``), if it
    names one, and says what would measure it (``measured_by``), or that nothing in the book
    does yet. Its words are in ``language``; ``on_missing`` is called with each text the
    Chinese catalogue lacks (by default, ``gpudl_extension_text.Untranslated`` is raised)."""
    words = Words(language) if on_missing is None else Words(language, on_missing)
    with edition(words):
        return _box(topic, view, record, generated, measured_by, predict)


def _box(topic: str | None, view: str | None, record: dict | None, generated: Path,
         measured_by: str | None, predict: str | None) -> list[str]:
    source = f"results/{topic}-cuda.json"
    if topic is None:
        reason = (translated(measured_by) if measured_by
                  else tr("no benchmark of the book measures it yet"))
        told = [tr("{not_measured}: {reason}; no GPU run of it is stored in `results/`.",
                   not_measured=views.not_measured(), reason=reason)]
        if predict is None:
            return told
        return [*predicted.prediction_table(predict, None), "",
                *_then(predicted.published_list(predict, None)), *told]
    if topic not in TOPICS or view not in TOPICS[topic].VIEWS:
        raise ValueError(f"no view {view!r} of topic {topic!r}; views: "
                         f"{ {t: list(m.VIEWS) for t, m in TOPICS.items()} }")
    if predict is not None:
        raise ValueError(f"a box of a benchmark ({topic} {view}) predicts what its view "
                         f"measures: it takes no :predict: (got {predict!r})")
    if record is None:
        return [*predicted.prediction_table(topic, view), "",
                *_then(predicted.published_list(topic, view)),
                tr("{not_measured} on a GPU by this book: `python -m gpudl bench {topic}` "
                   "writes `{source}`, and this box then shows the measured values beside the "
                   "predicted ones.", not_measured=views.not_measured(), topic=topic,
                   source=source)]
    draw, bars = views.DRAW[topic][view], TOPICS[topic].VIEWS[view]
    trail = _Trail()
    tracked = _tracked(record, "", trail)
    try:
        lines = draw(tracked, generated / f"measured-{topic}-{view}.png")
        goals = _goals(tracked, bars)
        note = provenance(tracked, source)
    except Exception as err:  # any record the view cannot draw: name the file and the field
        if isinstance(err, Untranslated):
            raise
        raise MalformedRecord(f"{source}: field {trail.field or '(the record)'}: "
                              f"{type(err).__name__}: {err}") from None
    return [*lines, "", *goals, "", note, "",
            *predicted.measured_against_predicted(topic, view, record), "",
            *_then(predicted.published_list(topic, view))]


def _then(lines: list[str]) -> list[str]:
    """``lines`` and a blank line after them, or nothing."""
    return [*lines, ""] if lines else []


class MalformedRecord(ValueError):
    """A stored record that passed the schema but that a view cannot draw."""


