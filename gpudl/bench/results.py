"""Stored results: the checks a result file must pass, and the import of GPU runs made
elsewhere.

Book section: the "Measured on a GPU" boxes, which are drawn from ``results/*-cuda.json``
(README, "Running on a GPU").

:func:`check_record` checks one record against the shape :func:`gpudl.bench.write_results`
gives it. :func:`import_results` takes a GPU run (a tar file or a folder holding
``results/*-cuda.json`` and, optionally, notebooks executed there) and copies into this
checkout every result that passes (schema, backend ``cuda``, commit recorded) and every
notebook that passes nbval here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from numbers import Real
from pathlib import Path

from gpudl.bench import RATES, RESULTS, ROOT, TOPICS

__all__ = ["ROW_KEYS", "BAR_KEYS", "check_record", "load_record", "import_results"]

#: Keys every row has (:func:`gpudl.bench.row`).
ROW_KEYS = ("name", "median_s", "min_s", "max_s", "runs", "method", "meaningful", "bytes",
            "gbps", "flops", "tflops")
#: Keys every bar has (:func:`gpudl.bench.bar`).
BAR_KEYS = ("name", "what", "numerator", "denominator", "rate", "ratio", "compare",
            "threshold", "verdict")
_MACHINE_KEYS = ("backend", "gpu", "driver", "cuda_driver", "torch_cuda", "python", "versions")
_COMMIT = re.compile(r"[0-9a-f]{7,40}(-dirty)?")


def _number(value: object, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, Real) and not isinstance(value, bool)


def _check_row(r: object, where: str) -> None:
    if not isinstance(r, dict):
        raise ValueError(f"{where} must be an object, got {type(r).__name__}")
    missing = [k for k in ROW_KEYS if k not in r]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    if not isinstance(r["name"], str) or not r["name"]:
        raise ValueError(f"{where}: name must be a non-empty string")
    for key in ("median_s", "min_s", "max_s"):
        if not _number(r[key]) or r[key] < 0:
            raise ValueError(f"{where} ({r['name']}): {key} must be a number >= 0")
    if not isinstance(r["runs"], int) or r["runs"] < 1:
        raise ValueError(f"{where} ({r['name']}): runs must be an integer >= 1")
    if r["method"] not in ("cuda-events", "wall-clock"):
        raise ValueError(f"{where} ({r['name']}): method must be cuda-events or wall-clock")
    for key in ("bytes", "gbps", "flops", "tflops"):
        if not _number(r[key], allow_none=True):
            raise ValueError(f"{where} ({r['name']}): {key} must be a number or null")


def _check_bar(b: object, where: str, simulator: bool) -> None:
    if not isinstance(b, dict):
        raise ValueError(f"{where} must be an object, got {type(b).__name__}")
    missing = [k for k in BAR_KEYS if k not in b]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    if b["compare"] not in (">=", "<=") or b["rate"] not in RATES:
        raise ValueError(f"{where} ({b['name']}): compare or rate is not one of the known")
    if not _number(b["threshold"]) or not _number(b["ratio"], allow_none=True):
        raise ValueError(f"{where} ({b['name']}): threshold and ratio must be numbers")
    if b["verdict"] not in (True, False, None) or (b["ratio"] is None) != (b["verdict"] is None):
        raise ValueError(f"{where} ({b['name']}): verdict must be null exactly when ratio is")
    if b["ratio"] is not None:
        holds = b["ratio"] >= b["threshold"] if b["compare"] == ">=" else (
            b["ratio"] <= b["threshold"])
        if holds != b["verdict"]:
            raise ValueError(f"{where} ({b['name']}): verdict {b['verdict']} does not follow "
                             f"from {b['ratio']} {b['compare']} {b['threshold']}")
    if simulator and b["ratio"] is not None:
        raise ValueError(f"{where} ({b['name']}): a simulator run has no ratio")


def check_record(record: object) -> dict:
    """``record`` if it has the shape :func:`gpudl.bench.write_results` gives: a known
    ``topic``, ``backend`` "cuda" or "simulator" (the machine's too), ``machine``,
    ``commit`` (a git sha or null), an ISO ``date``, ``timings_meaningful`` true exactly on
    "cuda", every row and bar complete, and every verdict following from its ratio (all null
    on the simulator). Otherwise ``ValueError`` saying what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"a result must be a JSON object, got {type(record).__name__}")
    missing = [k for k in ("topic", "backend", "machine", "commit", "date",
                           "timings_meaningful", "rows", "bars") if k not in record]
    if missing:
        raise ValueError(f"a result must hold {missing}")
    if record["topic"] not in TOPICS:
        raise ValueError(f"unknown topic {record['topic']!r}; known: {list(TOPICS)}")
    backend = record["backend"]
    if backend not in ("cuda", "simulator"):
        raise ValueError(f"backend must be 'cuda' or 'simulator', got {backend!r}")
    machine = record["machine"]
    if not isinstance(machine, dict) or any(k not in machine for k in _MACHINE_KEYS):
        raise ValueError(f"machine must be an object with {list(_MACHINE_KEYS)}")
    if machine["backend"] != backend:
        raise ValueError(f"machine backend {machine['backend']!r} differs from {backend!r}")
    if backend == "cuda" and not machine["gpu"]:
        raise ValueError("a cuda result must name its GPU (machine.gpu)")
    commit = record["commit"]
    if commit is not None and not (isinstance(commit, str) and _COMMIT.fullmatch(commit)):
        raise ValueError(f"commit must be a git sha or null, got {commit!r}")
    try:
        datetime.fromisoformat(record["date"])
    except (TypeError, ValueError):
        raise ValueError(f"date must be an ISO 8601 date, got {record['date']!r}") from None
    if record["timings_meaningful"] is not (backend == "cuda"):
        raise ValueError("timings_meaningful must be true exactly for backend 'cuda'")
    if not isinstance(record["rows"], list) or not isinstance(record["bars"], list):
        raise ValueError("rows and bars must be lists")
    for i, r in enumerate(record["rows"]):
        _check_row(r, f"rows[{i}]")
    names = [r["name"] for r in record["rows"]]
    if len(set(names)) != len(names):
        raise ValueError(f"row names must be unique, got {sorted(names)}")
    for i, b in enumerate(record["bars"]):
        _check_bar(b, f"bars[{i}]", backend == "simulator")
    return record


def load_record(path: str | Path) -> dict:
    """The record stored at ``path``, checked by :func:`check_record` (``ValueError``
    naming the file otherwise)."""
    path = Path(path)
    try:
        return check_record(json.loads(path.read_text()))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _check_gpu_result(path: Path) -> dict:
    record = load_record(path)
    if record["backend"] != "cuda":
        raise ValueError(f"{path.name}: backend is {record['backend']!r}, not 'cuda'")
    if not record["commit"]:
        raise ValueError(f"{path.name}: no commit recorded (which code measured this?)")
    if path.name != f"{record['topic']}-cuda.json":
        raise ValueError(f"{path.name}: a {record['topic']!r} result must be named "
                         f"{record['topic']}-cuda.json")
    return record


def _passes_nbval(notebook: Path) -> tuple[bool, str]:
    """Run nbval on ``notebook`` here (this checkout's gpudl, the repository's sanitizer)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
         str(ROOT / "notebooks" / "sanitize.cfg"), str(notebook)],
        cwd=notebook.parent, capture_output=True, text=True, timeout=1800,
        env=os.environ | {"PYTHONPATH": path})
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, lines[-1] if lines else ""


def import_results(source: str | Path, results: str | Path = RESULTS,
                   notebooks: str | Path = ROOT / "notebooks") -> dict:
    """Copy the GPU results and notebooks of ``source`` (a tar file, or a folder) that pass
    their checks into ``results`` and ``notebooks``.

    A result (any ``*-cuda.json`` in it) is taken if :func:`check_record` accepts it, its
    backend is ``cuda``, it records a commit and its name matches its topic. A notebook (any
    ``*.ipynb`` named like one in ``notebooks``) is taken if it passes nbval here. Returns
    ``{"results": [...], "notebooks": [...], "rejected": {name: reason}}`` and prints it;
    raises ``SystemExit`` (after taking what passed) if anything was rejected or nothing found.
    """
    source, results, notebooks = Path(source), Path(results), Path(notebooks)
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist (a tar file or a folder expected)")
    with tempfile.TemporaryDirectory(prefix="gpudl-import-") as tmp:
        if source.is_dir():
            root = source
        elif tarfile.is_tarfile(source):
            root = Path(tmp) / "run"
            with tarfile.open(source) as tar:
                tar.extractall(root, filter="data")
        else:
            raise ValueError(f"{source} is neither a folder nor a tar file")
        taken: dict = {"results": [], "notebooks": [], "rejected": {}}
        candidates = sorted(p for p in root.rglob("*-cuda.json") if p.is_file())
        for path in candidates:
            try:
                _check_gpu_result(path)
            except ValueError as err:
                taken["rejected"][path.name] = str(err)
                continue
            results.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, results / path.name)
            taken["results"].append(path.name)
        known = {p.name for p in notebooks.glob("*.ipynb")}
        found = sorted(p for p in root.rglob("*.ipynb") if p.is_file()
                       and ".ipynb_checkpoints" not in p.parts)
        for path in found:
            if path.name not in known:
                taken["rejected"][path.name] = f"not a notebook of {notebooks}"
                continue
            trial = Path(tmp) / "nbval" / path.name
            trial.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, trial)
            ok, summary = _passes_nbval(trial)
            if not ok:
                taken["rejected"][path.name] = f"fails nbval here: {summary}"
                continue
            shutil.copyfile(path, notebooks / path.name)
            taken["notebooks"].append(path.name)
    for kind in ("results", "notebooks"):
        for name in taken[kind]:
            print(f"imported {name} into {results if kind == 'results' else notebooks}")
    for name, reason in taken["rejected"].items():
        print(f"rejected {name}: {reason}")
    if not candidates and not found:
        raise SystemExit(f"{source} holds no *-cuda.json result and no notebook")
    if taken["rejected"]:
        raise SystemExit(f"{len(taken['rejected'])} file(s) rejected (see above); the others "
                         "were imported")
    return taken
