"""Read the book's stored profiler timelines: each a Chrome trace, its slices as spans per row.

Book section: *Appendix E, "Reading a profile"*.

``torch.profiler`` writes what it records as a Chrome trace (JSON: a list of events, each with
a process, a thread, a name, a start ``ts`` and a duration ``dur`` in microseconds), which
Perfetto (https://ui.perfetto.dev) and ``chrome://tracing`` open. The book's programs are
recorded by :mod:`gpudl.bench.profiler` and stored, trimmed to the step shown and to the events
its figure and tests read, in ``results/profiles/<name>.json``: one process per rank (or one
for a single process), one row per thread, times in microseconds since the step's start, and
under ``"gpudl"`` what was run, on which machine, with which versions and at which commit.
This module reads such a file back as :class:`Span` objects, one per slice, which the figures
(``gpudl.plots.profiles``) draw and the tests hold to the book's claims.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpudl.checks import check_choice, check_instance
from gpudl.parallel.pipeline.training import ACTION_NAMES

__all__ = ["FOLDER", "STORED", "Span", "action_timelines", "load", "path", "rows", "spans"]

#: The folder of the stored profiles, ``results/profiles/`` beside the package.
FOLDER = Path(__file__).resolve().parents[1] / "results" / "profiles"

#: The profiles stored for the simulator and gloo, by name, and what each records.
STORED = {
    "ddp-gloo": "Chapter 5: one DDP backward pass on 2 gloo ranks, its buckets all-reduced as "
                "they become ready",
    "pipeline-gpipe-gloo": "Chapter 6: one GPipe step of 4 stages and 4 micro-batches on "
                           "gloo ranks, each pass paced to a fixed length",
    "pipeline-1f1b-gloo": "Chapter 6: one 1F1B step of 4 stages and 4 micro-batches on gloo "
                          "ranks, each pass paced to a fixed length",
    "mlp-step-simulator": "Chapter 3: one training step of the kernel MLP on the simulator, "
                          "every launch a host range",
    "streams-simulator": "Chapter 1: saxpy_streamed's copies and kernels on 2 streams, on the "
                         "simulator",
}

_ACTION = re.compile(rf"({'|'.join(ACTION_NAMES.values())}) (\d+)")


@dataclass(frozen=True)
class Span:
    """One slice of a profile: what ran (``name``, its ``category``), where (``process``, a
    rank or ``"process"``; ``thread``, or a stream), from ``start_s`` to ``end_s`` in
    seconds since the step's start, with the recorder's ``args``."""

    process: str
    thread: str
    name: str
    category: str
    start_s: float
    end_s: float
    args: dict = field(default_factory=dict, compare=False)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def overlap_s(self, other: Span) -> float:
        """Seconds during which this span and ``other`` both run (0 if they do not meet)."""
        check_instance("other", other, Span)
        return max(0.0, min(self.end_s, other.end_s) - max(self.start_s, other.start_s))


def path(name: str) -> Path:
    """The file of the stored profile ``name`` (one of :data:`STORED`)."""
    return FOLDER / f"{check_choice('name', name, STORED)}.json"


def _bad(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: {what}")


def load(source: str | Path | dict) -> dict:
    """A stored profile: by name (:data:`STORED`), from a file, or a trace already read.

    Checked before it is used: a JSON object with ``traceEvents`` (each complete event,
    ``"ph": "X"``, with a name, a process, a thread, and a finite ``ts`` and ``dur`` >= 0) and
    ``gpudl`` (what was recorded, the machine and the date). ``ValueError`` names the file and
    the event otherwise."""
    if isinstance(source, dict):
        trace, where = source, "the trace"
    else:
        check_instance("source", source, (str, os.PathLike))
        file = path(source) if isinstance(source, str) and source in STORED else Path(source)
        where = str(file)
        try:
            trace = json.loads(file.read_text())
        except json.JSONDecodeError as err:
            raise _bad(where, f"not JSON ({err})") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise _bad(where, "a profile is a JSON object with a list of traceEvents")
    about = trace.get("gpudl")
    if not isinstance(about, dict) or any(k not in about for k in ("profile", "machine",
                                                                   "date")):
        raise _bad(where, "a stored profile says under 'gpudl' what it is (profile), where "
                          "it was recorded (machine) and when (date)")
    for i, event in enumerate(trace["traceEvents"]):
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        for key in ("ts", "dur"):
            value = event.get(key)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or (key == "dur" and value < 0)):
                raise _bad(where, f"traceEvents[{i}] ({event.get('name')!r}): {key} must be "
                                  f"a finite number{' >= 0' if key == 'dur' else ''}, got "
                                  f"{value!r}")
        if not isinstance(event.get("name"), str) or "pid" not in event or "tid" not in event:
            raise _bad(where, f"traceEvents[{i}] needs a name, a pid and a tid")
    return trace


def _names(trace: dict) -> tuple[dict, dict]:
    """Process names by pid and thread names by (pid, tid), from the metadata events."""
    processes, threads = {}, {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[event["pid"], event["tid"]] = event["args"]["name"]
    return processes, threads


def rows(trace: dict) -> list[tuple[str, str]]:
    """Every ``(process, thread)`` of ``trace`` (a profile :func:`load` read) that holds a
    slice, in the order of their ids."""
    trace = load(check_instance("trace", trace, dict))
    processes, threads = _names(trace)
    ids = sorted({(e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("ph") == "X"})
    return [(processes.get(pid, str(pid)), threads.get((pid, tid), str(tid)))
            for pid, tid in ids]


def spans(trace: dict, names: Sequence[str] | None = None, category: str | None = None,
          process: str | None = None) -> list[Span]:
    """The slices of ``trace`` (a profile :func:`load` read) as :class:`Span` objects, by
    start: all of them, or those named in ``names``, of ``category``, on ``process``."""
    trace = load(check_instance("trace", trace, dict))
    if names is not None and (isinstance(names, str) or not isinstance(names, Sequence)):
        raise TypeError(f"names must be a list of slice names, got {names!r}")
    processes, threads = _names(trace)
    found = []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X" or (names is not None and event["name"] not in names):
            continue
        span = Span(processes.get(event["pid"], str(event["pid"])),
                    threads.get((event["pid"], event["tid"]), str(event["tid"])),
                    event["name"], event.get("cat", ""), event["ts"] / 1e6,
                    (event["ts"] + event["dur"]) / 1e6, dict(event.get("args", {})))
        if category in (None, span.category) and process in (None, span.process):
            found.append(span)
    return sorted(found, key=lambda s: (s.start_s, s.end_s))


def action_timelines(trace: dict) -> list[list[dict]]:
    """A pipeline profile's forward and backward passes per stage (its processes, in order),
    as :func:`gpudl.parallel.pipeline.idle_fraction` takes them: ``{"kind": "F" or "B",
    "microbatch", "start_s", "end_s"}``."""
    kinds = {word: kind for kind, word in ACTION_NAMES.items()}
    stages: dict[str, list[dict]] = {p: [] for p, _ in rows(trace)}
    for span in spans(trace):
        match = _ACTION.fullmatch(span.name)
        if match:
            stages[span.process].append({"kind": kinds[match[1]], "microbatch": int(match[2]),
                                         "start_s": span.start_s, "end_s": span.end_s})
    return [timeline for timeline in stages.values() if timeline]
