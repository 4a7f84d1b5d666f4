"""Measurement: the benchmarks behind the book's "Measured on a GPU" boxes, one module per
topic, and the results they store.

Book section: every chapter's "Measured on a GPU" boxes, and Chapter 1, "Threads, blocks, grids
and warps" for how a kernel is timed (:mod:`gpudl.bench.timing`).

The kernels (``gpudl.kernels``) and the distributed workers (``gpudl.parallel``)
compute; this package times them, and nothing there imports it. Each topic of :data:`TOPICS`
is a module ``gpudl.bench.<topic>`` with

* ``run(...) -> dict``: every measurement of the topic, each checked before its time is
  reported, as ``{"rows": [...], "bars": [...], ...}``: one :func:`row` per timing and one
  :func:`bar` per speed goal;
* ``BARS``: the topic's speed goals, as data (see :func:`evaluate_bars`).

:func:`write_results` stores what ``run`` returns, with the machine, the git commit of the
measured code and the date, as ``results/<topic>-<backend>.json``. :func:`load_or_run` reads it
back when the same commit has already measured it on the same GPU, so that a notebook's
benchmark cell, ``python -m gpudl bench`` and the GPU-only speed tests share one run per topic.
On the simulator the timings describe Python threads, not a GPU: every rate and every bar's
verdict is ``None`` there.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpudl import backend
from gpudl.bench.environment import ROOT, commit, machine
from gpudl.bench.schema import RATES, TOPICS, check_record
from gpudl.bench.timing import Timing, gbps, gflops
from gpudl.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_positive,
    check_real,
)

__all__ = [
    "RESULTS", "TOPICS", "RATES",
    "row", "bar", "evaluate_bars", "find_bar",
    "write_results", "run_topic", "load_or_run", "results_path",
]

#: The folder where results are stored, ``results/`` beside the package.
RESULTS = ROOT / "results"

_SIMULATOR_NOTE = ("simulator: kernels ran as Python threads on the CPU at tiny sizes; their "
                   "timings are wall clock and say nothing about GPU speed")
_RESERVED = ("topic", "backend", "machine", "commit", "date", "timings_meaningful")


# ------------------------------------------------------------------------------------------
# Rows and bars
# ------------------------------------------------------------------------------------------


def row(name: str, timing: Timing, n_bytes: int | None = None, n_flops: float | None = None,
        **extra: Any) -> dict:
    """One measurement: ``name``, the median, min and max of ``timing`` in seconds, ``runs``,
    ``method``, ``meaningful``, ``bytes`` and ``gbps`` (from ``n_bytes``), ``flops`` and
    ``tflops`` (from ``n_flops``), then the topic's own keys ``extra``. A rate is ``None``
    where the timing means nothing for a GPU (the simulator's). Prints the row as it goes,
    unless its timing means nothing: a simulated kernel's wall clock is kept in the row (and
    the stored run) but not printed, since it describes Python threads, not a GPU."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a non-empty str, got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError("name must be a non-empty str, got ''")
    check_instance("timing", timing, Timing)
    if n_bytes is not None:
        check_int("n_bytes", n_bytes, 0)
    if n_flops is not None:
        check_real("n_flops", n_flops, 0)
    meaningful = timing.meaningful
    out = {
        "name": name, "median_s": timing.median, "min_s": timing.min, "max_s": timing.max,
        "runs": len(timing.samples), "method": timing.method, "meaningful": meaningful,
        "bytes": n_bytes,
        "gbps": gbps(n_bytes, timing.median) if meaningful and n_bytes is not None else None,
        "flops": n_flops,
        "tflops": (gflops(n_flops, timing.median) / 1e3 if meaningful and n_flops is not None
                   else None),
    }
    clash = set(out) & set(extra)
    if clash:
        raise ValueError(f"extra keys must not replace a row's own, got {sorted(clash)}")
    if meaningful:
        rate = "" if n_bytes is None else f", {out['gbps']:.2f} GB/s"
        rate += "" if n_flops is None else f", {out['tflops']:.3f} TFLOP/s"
        print(f"  {name}: {timing}{rate}", flush=True)
    return out | extra


def _check_bar_spec(name: str, what: str, threshold: float, compare: str, rate: str) -> None:
    for label, value in (("name", name), ("what", what)):
        if not isinstance(value, str):
            raise TypeError(f"a bar's {label} must be a str, got {type(value).__name__}")
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"a bar's name must be a short id of a-z, 0-9 and _, got {name!r}")
    if not what:
        raise ValueError(f"a bar's what must be a sentence, got {what!r}")
    check_positive("threshold", threshold)
    check_choice("compare", compare, (">=", "<="))
    check_choice("rate", rate, RATES)


def _bar(name: str, what: str, numerator: str, denominator: str, ratio: float | None,
         threshold: float, compare: str, rate: str) -> dict:
    verdict = None if ratio is None else bool(
        ratio >= threshold if compare == ">=" else ratio <= threshold)
    return {"name": name, "what": what, "numerator": numerator, "denominator": denominator,
            "rate": rate, "ratio": ratio, "compare": compare, "threshold": float(threshold),
            "verdict": verdict}


def bar(name: str, what: str, rows: Sequence[dict], numerator: str, denominator: str,
        threshold: float, compare: str = ">=", rate: str = "gbps") -> dict:
    """A speed goal checked on two rows: ``ratio`` is the numerator row's ``rate`` over the
    denominator row's (a rate ratio for ``"gbps"`` and ``"tflops"``, a time ratio for
    ``"median_s"``, as ``what`` says), and ``verdict`` is ``ratio compare threshold``.

    Both are ``None`` on the simulator and wherever a timing is not meaningful. A row missing
    from ``rows`` is an error (``ValueError``)."""
    _check_bar_spec(name, what, threshold, compare, rate)
    by_name = {r["name"]: r for r in _check_rows(rows)}
    for label, wanted in (("numerator", numerator), ("denominator", denominator)):
        check_choice(f"bar {name}'s {label} (a row's name)", wanted, sorted(by_name))
    num, den = by_name[numerator], by_name[denominator]
    ratio = None
    if (not backend.is_simulator() and num["meaningful"] and den["meaningful"]
            and num[rate] is not None and den[rate]):
        ratio = num[rate] / den[rate]
    return _bar(name, what, numerator, denominator, ratio, threshold, compare, rate)


def _check_rows(rows: object) -> list[dict]:
    """Rows as :func:`row` makes them: a list of dicts, each with a ``name``."""
    if isinstance(rows, str | dict) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a list of rows (from row()), got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or "name" not in r:
            raise TypeError(f"rows[{i}] must be a row (a dict with a name), got {r!r}")
    return list(rows)


def _fastest(names: Sequence[str], by_name: dict[str, dict], rate: str) -> str | None:
    present = [n for n in names if n in by_name]
    if not present:
        return None
    if rate == "median_s":
        return min(present, key=lambda n: by_name[n]["median_s"])
    return max(present, key=lambda n: by_name[n][rate] or 0.0)


def evaluate_bars(specs: Sequence[dict], rows: Sequence[dict], **names: str) -> list[dict]:
    """Every bar of ``specs`` (a topic's ``BARS``) checked on ``rows``.

    A spec is a dict with ``name``, ``what``, ``numerator``, ``denominator`` and
    ``threshold``, and optionally ``compare`` (``">="``) and ``rate`` (``"gbps"``). Bar and
    row names may hold ``{placeholders}`` filled from ``names`` (a size that differs between
    backends, a world size).
    A numerator given as a list names candidates: the fastest of those present is compared
    (the best reduction, the best matmul). A bar whose rows were not measured (a GPU-only row
    on the simulator) is kept, with ``ratio`` and ``verdict`` ``None``."""
    rows = _check_rows(rows)
    if isinstance(specs, str | dict) or not isinstance(specs, Sequence):
        raise TypeError(f"specs must be a list of bar specs (a topic's BARS), got "
                        f"{type(specs).__name__}")
    by_name = {r["name"]: r for r in rows}
    out = []
    for spec in specs:
        name = spec["name"].format(**names)
        compare, rate = spec.get("compare", ">="), spec.get("rate", "gbps")
        numerator = spec["numerator"]
        if isinstance(numerator, str):
            numerator = numerator.format(**names)
        else:
            numerator = _fastest([n.format(**names) for n in numerator], by_name, rate)
        denominator = spec["denominator"].format(**names)
        if numerator in by_name and denominator in by_name:
            out.append(bar(name, spec["what"], rows, numerator, denominator,
                           spec["threshold"], compare, rate))
        else:
            _check_bar_spec(name, spec["what"], spec["threshold"], compare, rate)
            out.append(_bar(name, spec["what"], numerator or "", denominator, None,
                            spec["threshold"], compare, rate))
    return out


def find_bar(record: dict, name: str) -> dict:
    """The bar called ``name`` in a stored record (``KeyError`` if it has none)."""
    check_instance("record", record, dict)
    for b in record.get("bars", []):
        if b["name"] == name:
            return b
    raise KeyError(f"{record.get('topic')!r} has no bar {name!r}; it has "
                   f"{[b['name'] for b in record.get('bars', [])]}")


# ------------------------------------------------------------------------------------------
# Results on disk
# ------------------------------------------------------------------------------------------


def _to_json(value: object) -> object:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__} {topic!r}")
    if not re.fullmatch(r"[a-z0-9_]+", topic):
        raise ValueError(f"topic must be a name of a-z, 0-9 and _, got {topic!r}")
    return topic


def results_path(topic: str, directory: str | Path = RESULTS,
                 backend_name: str | None = None) -> Path:
    """``directory/<topic>-<backend>.json`` (the current backend unless one is named)."""
    check_choice("backend_name", backend_name, (None, "cuda", "simulator"))
    return Path(directory) / f"{_check_topic(topic)}-{backend_name or backend.name()}.json"


def write_results(topic: str, body: dict, directory: str | Path = RESULTS) -> Path:
    """Store what a topic's ``run`` returned as ``<topic>-<backend>.json`` in ``directory``,
    with ``topic``, ``backend``, ``machine`` (:func:`machine`), ``commit`` (:func:`commit`),
    ``date`` (UTC, ISO 8601) and ``timings_meaningful`` added, after checking it by the one
    schema of stored results (:func:`gpudl.bench.schema.check_record`: a NaN, an infinite
    rate or ``min_s > max_s`` is refused, and nothing is written). Written whole or not at
    all."""
    _check_topic(topic)
    if not isinstance(body, dict):
        raise TypeError(f"body must be a dict, got {type(body).__name__}")
    for key in ("rows", "bars"):
        if not isinstance(body.get(key), list):
            raise ValueError(f"body must hold a list under {key!r}, got {body.get(key)!r}")
    clash = set(body) & set(_RESERVED)
    if clash:
        raise ValueError(f"body must not set {sorted(clash)}: write_results adds them")
    record = {"topic": topic, "backend": backend.name(), "machine": machine(),
              "commit": commit(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "timings_meaningful": not backend.is_simulator()} | body
    if backend.is_simulator():
        record.setdefault("note", _SIMULATOR_NOTE)
    path = results_path(topic, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = json.dumps(record, indent=1, allow_nan=False, default=_to_json) + "\n"
    except ValueError as err:  # NaN or an infinity: check_record says where
        check_record(json.loads(json.dumps(record, default=_to_json)))
        raise ValueError(f"{topic}: {err}") from None
    check_record(json.loads(text))
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, path)
    return path


def run_topic(topic: str, **kwargs: Any) -> dict:
    """Run topic ``topic``'s benchmark (``gpudl.bench.<topic>.run(**kwargs)``) and return
    what it returned, without storing it."""
    check_choice("topic", topic, TOPICS)
    module = importlib.import_module(f"gpudl.bench.{topic}")
    body = module.run(**kwargs)
    if not isinstance(body, dict) or not isinstance(body.get("rows"), list):
        raise TypeError(f"gpudl.bench.{topic}.run must return a dict with a list of rows")
    return body


def _reusable(record: dict) -> bool:
    from gpudl.hardware import describe

    here = commit()
    return (record.get("backend") == "cuda" and here is not None
            and not here.endswith("-dirty") and record.get("commit") == here
            and record.get("machine", {}).get("gpu") == describe().name)


def load_or_run(topic: str, directory: str | Path = RESULTS, fresh: bool = False) -> dict:
    """Topic ``topic``'s results: read from ``directory`` when the same commit already
    measured it on this GPU (a clean checkout on a GPU only, and not with ``fresh``), else
    run, stored with :func:`write_results` and read back.

    A topic that needs more GPUs than the machine has returns ``{"skipped": reason, ...}``,
    says so, and stores nothing (a result measured elsewhere stays)."""
    check_choice("topic", topic, TOPICS)
    check_bool("fresh", fresh)
    path = results_path(topic, directory)
    if not fresh and not backend.is_simulator() and path.exists():
        record = json.loads(path.read_text())
        if _reusable(record):
            print(f"[{topic}] reusing {path} (commit {record['commit']}, {record['date']})",
                  flush=True)
            return record
    body = run_topic(topic)
    if body.get("skipped"):
        print(f"[{topic}] skipped: {body['skipped']} (nothing stored)", flush=True)
        return {"topic": topic, "backend": backend.name()} | body
    return json.loads(write_results(topic, body, directory).read_text())
