"""The one schema of stored results: what every ``results/<topic>-<backend>.json`` holds.

Book section: the "Measured on a GPU" boxes, which are drawn from ``results/*-cuda.json``
(README, "Running on a GPU").

:func:`check_record` is applied by :func:`gpudl.bench.write_results` before a record is
written, by :func:`gpudl.bench.results.import_results` before one is taken, and by the book's
``{gpudl-measured}`` boxes before one is drawn, so what one refuses, all refuse.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

__all__ = ["BAR_KEYS", "COMMIT_PATTERN", "METHODS", "RATES", "ROW_KEYS", "TOPICS",
           "check_record"]

#: Topic -> what it measures; the topic's module is ``gpudl.bench.<topic>``.
TOPICS: dict[str, str] = {
    "elementwise": "Chapter 1: vector add and SAXPY against a copy, CPU against GPU, divergence",
    "memory": "Chapter 2: copies, transposes and reductions; the memory hierarchy",
    "matmul": "Chapter 3: the matmul variants against cuBLAS; an MLP's backward over forward",
    "optim": "Chapter 4: one Adam step of each variant against a copy and torch's Adams",
    "launch": "Chapter 4: what a kernel launch costs the host, by number and kind of argument",
    "allreduce": "Chapter 5: all-reduce and send/recv bandwidth between GPUs",
    "dataparallel": "Chapter 5: step times of manual, bucketed and DDP data parallelism",
    "pipeline": "Chapter 6: the pipeline bubble, measured against the formula",
    "precision": "Chapter 7: torch.matmul in FP32 and BF16; the kernel MLP's MFU",
    "attention": "Chapter 8: the two attention variants against torch's SDPA",
    "tensorcores": "Chapter 8: torch.matmul per precision; the tensor-core matmul against FP32",
    "decode": "Chapter 9: decode attention against a copy, the int8 GEMV against torch's bf16, "
              "CUDA graphs against eager launches",
    "context": "Chapter 11: a ring-attention step against its computation alone and against "
               "the ring that waits for each transfer",
    "profiles": "Appendix E: profiles of the MLP step, the streams and the decode step, their "
                "launches counted and their kernels beside the bandwidth model",
}

#: The row keys a bar may compare, two rates (higher is faster) or the median time.
RATES = ("gbps", "tflops", "median_s")

#: How a row's times were taken. CUDA events around the work, the host's clock, or the
#: durations of a profile's slices (its GPU activity, :mod:`gpudl.bench.profiles`).
METHODS = ("cuda-events", "wall-clock", "profiler")
#: Keys every row has (:func:`gpudl.bench.row`).
ROW_KEYS = ("name", "median_s", "min_s", "max_s", "runs", "method", "meaningful", "bytes",
            "gbps", "flops", "tflops")
#: Keys every bar has (:func:`gpudl.bench.bar`).
BAR_KEYS = ("name", "what", "numerator", "denominator", "rate", "ratio", "compare",
            "threshold", "verdict")
_MACHINE_KEYS = ("backend", "gpu", "driver", "cuda_driver", "torch_cuda", "python", "versions")
#: The git commit a result records, a hexadecimal sha (``-dirty`` appended when the
#: checkout had uncommitted changes).
COMMIT_PATTERN = re.compile(r"[0-9a-f]{7,40}(-dirty)?")


def _finite(value: object, where: str, key: str, *, positive: bool = False,
            allow_none: bool = False, integer: bool = False) -> None:
    """``value`` is a finite number (an int where ``integer``), > 0 where ``positive``
    (else >= 0), or None where ``allow_none``; else ``ValueError`` naming the field."""
    if value is None and allow_none:
        return
    kind = "an integer" if integer else "a number"
    wanted = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted) or not math.isfinite(value) or (
            value <= 0 if positive else value < 0):
        raise ValueError(f"{where}: {key} must be {kind} {'> 0' if positive else '>= 0'}"
                         f"{' or null' if allow_none else ''}, got {value!r}")


def _check_row(r: object, where: str) -> None:
    if not isinstance(r, dict):
        raise ValueError(f"{where} must be an object, got {type(r).__name__}")
    missing = [k for k in ROW_KEYS if k not in r]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    if not isinstance(r["name"], str) or not r["name"]:
        raise ValueError(f"{where}: name must be a non-empty string")
    where = f"{where} ({r['name']})"
    for key in ("median_s", "min_s", "max_s"):
        _finite(r[key], where, key, positive=True)
    if not r["min_s"] <= r["median_s"] <= r["max_s"]:
        raise ValueError(f"{where}: min_s <= median_s <= max_s must hold, got {r['min_s']}, "
                         f"{r['median_s']}, {r['max_s']}")
    _finite(r["runs"], where, "runs", positive=True, integer=True)
    if r["method"] not in METHODS:
        raise ValueError(f"{where}: method must be one of {', '.join(METHODS)}")
    if not isinstance(r["meaningful"], bool):
        raise ValueError(f"{where}: meaningful must be true or false, got {r['meaningful']!r}")
    _finite(r["bytes"], where, "bytes", allow_none=True, integer=True)
    _finite(r["flops"], where, "flops", allow_none=True)
    for key in ("gbps", "tflops"):
        _finite(r[key], where, key, positive=True, allow_none=True)
        if r[key] is not None and not r["meaningful"]:
            raise ValueError(f"{where}: {key} must be null where the timing is not meaningful")


def _check_bar(b: object, where: str, simulator: bool) -> None:
    if not isinstance(b, dict):
        raise ValueError(f"{where} must be an object, got {type(b).__name__}")
    missing = [k for k in BAR_KEYS if k not in b]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    where = f"{where} ({b['name']})"
    if b["compare"] not in (">=", "<="):
        raise ValueError(f"{where}: compare must be '>=' or '<=', got {b['compare']!r}")
    if b["rate"] not in RATES:
        raise ValueError(f"{where}: rate must be one of {RATES}, got {b['rate']!r}")
    _finite(b["threshold"], where, "threshold", positive=True)
    _finite(b["ratio"], where, "ratio", positive=True, allow_none=True)
    if b["verdict"] not in (True, False, None) or (b["ratio"] is None) != (b["verdict"] is None):
        raise ValueError(f"{where}: verdict must be null exactly when ratio is")
    if b["ratio"] is not None:
        holds = b["ratio"] >= b["threshold"] if b["compare"] == ">=" else (
            b["ratio"] <= b["threshold"])
        if holds != b["verdict"]:
            raise ValueError(f"{where}: verdict {b['verdict']} does not follow "
                             f"from {b['ratio']} {b['compare']} {b['threshold']}")
    if simulator and b["ratio"] is not None:
        raise ValueError(f"{where}: a simulator run has no ratio")


def check_record(record: object, backend: str | None = None) -> dict:
    """``record`` if it has the shape :func:`gpudl.bench.write_results` gives (the one schema
    of stored results, which ``write_results``, ``import_results`` and the book's boxes
    all apply): a known ``topic``, ``backend`` "cuda" or "simulator" (the machine's too, and
    ``backend`` where one is required), ``machine``, ``commit`` (a git sha; null only on the
    simulator), an ISO ``date``, ``timings_meaningful`` true exactly on "cuda", and rows and
    bars complete: finite times > 0 with ``min_s <= median_s <= max_s``, an integer ``runs``
    >= 1 and ``bytes``, finite rates > 0 (null where not meaningful), every verdict following
    from its ratio (all null on the simulator). Otherwise ``ValueError`` naming the field."""
    if not isinstance(record, dict):
        raise ValueError(f"record: a result must be a JSON object, got {type(record).__name__}")
    missing = [k for k in ("topic", "backend", "machine", "commit", "date",
                           "timings_meaningful", "rows", "bars") if k not in record]
    if missing:
        raise ValueError(f"a result must hold {missing}")
    if record["topic"] not in TOPICS:
        raise ValueError(f"unknown topic {record['topic']!r}; known: {list(TOPICS)}")
    backend_name = record["backend"]
    if backend_name not in ("cuda", "simulator"):
        raise ValueError(f"backend must be 'cuda' or 'simulator', got {backend_name!r}")
    if backend is not None and backend_name != backend:
        raise ValueError(f"backend must be {backend!r} here, got {backend_name!r}")
    machine = record["machine"]
    if not isinstance(machine, dict) or any(k not in machine for k in _MACHINE_KEYS):
        raise ValueError(f"machine must be an object with {list(_MACHINE_KEYS)}")
    if machine["backend"] != backend_name:
        raise ValueError(f"machine backend {machine['backend']!r} differs from {backend_name!r}")
    if backend_name == "cuda" and not machine["gpu"]:
        raise ValueError("a cuda result must name its GPU (machine.gpu)")
    commit = record["commit"]
    if commit is not None and not (isinstance(commit, str) and COMMIT_PATTERN.fullmatch(commit)):
        raise ValueError(f"commit must be a git sha or null, got {commit!r}")
    if commit is None and backend_name == "cuda":
        raise ValueError("commit: a cuda result must record the commit that measured it "
                         "(which code measured this?)")
    try:
        datetime.fromisoformat(record["date"])
    except (TypeError, ValueError):
        raise ValueError(f"date must be an ISO 8601 date, got {record['date']!r}") from None
    if record["timings_meaningful"] is not (backend_name == "cuda"):
        raise ValueError("timings_meaningful must be true exactly for backend 'cuda'")
    if not isinstance(record["rows"], list) or not isinstance(record["bars"], list):
        raise ValueError("rows and bars must be lists")
    for i, r in enumerate(record["rows"]):
        _check_row(r, f"rows[{i}]")
    names = [r["name"] for r in record["rows"]]
    if len(set(names)) != len(names):
        raise ValueError(f"row names must be unique, got {sorted(names)}")
    for i, b in enumerate(record["bars"]):
        _check_bar(b, f"bars[{i}]", backend_name == "simulator")
    return record


