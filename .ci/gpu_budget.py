#!/usr/bin/env python3
"""Measure what each step of the one-call GPU run costs, on a CPU (CONTRIBUTING.md, "GPU runs").

    .venv/bin/python .ci/gpu_budget.py measure [ITEM ...]   # default: start, every topic, notebook
    .venv/bin/python .ci/gpu_budget.py plan                 # each notebook's limit from them
    .venv/bin/python .ci/gpu_budget.py show                 # the stored measurements

An ITEM is a benchmark topic (``elementwise``, ...), a notebook (``notebook:01-hardware``), or
``start``: a one-cell notebook's start (the imports every lab makes), which every notebook's
row holds beside its own work.
Each is run on Numba's CUDA simulator with `.ci/budget_record/` on PYTHONPATH, which records
every kernel it launches (module, name, argument types) and the seconds it spends in simulated
kernels, in ``gpudl.trace.on_simulator`` and in spawned ranks. Then every recorded kernel
defined at module level is compiled for sm_90 with numba's real CUDA target
(``GPUDL_BACKEND=compile``: typing, lowering and NVVM to PTX, what a GPU machine does at a
kernel's first launch before its driver assembles the PTX) and assembled with ``ptxas``, each
timed. The results go into the ``measured`` part of `.ci/gpu-budget.json`; its ``plan`` (the
limits of the GPU run, set by hand from these numbers) is left as it is.

What an item costs on a GPU, from these: its simulated-kernel seconds vanish (a GPU runs at
large sizes in milliseconds), its other seconds (Python, traces on the simulator, CPU ranks)
stay, and it compiles its kernels: all of them in a process that starts cold, only the new
ones where an earlier phase's results are reused.

``plan`` sets each notebook's limit on an H200 from its row (:func:`notebook_limit`) and says
so in its ``basis``; the other steps' limits are set by hand, each with its basis.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = ROOT / ".ci" / "gpu-budget.json"
RECORDER = ROOT / ".ci" / "budget_record"


def _topics() -> list[str]:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("GPUDL_BACKEND", "simulator")
    from gpudl.bench import TOPICS

    return list(TOPICS)


def _notebooks() -> list[str]:
    return [f"notebook:{p.stem}" for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


def _environment(record_dir: str) -> dict[str, str]:
    path = os.pathsep.join([str(RECORDER), str(ROOT)])
    return os.environ | {"GPUDL_BACKEND": "simulator", "GPUDL_BUDGET_DIR": record_dir,
                         "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def _run_item(item: str, record_dir: str) -> float:
    """Run ``item`` on the simulator with the recorder; its wall seconds."""
    env = _environment(record_dir)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpudl-budget-") as tmp:
        if item.startswith("notebook:"):
            name = item.split(":", 1)[1]
            copy = Path(tmp) / f"{name}.ipynb"
            copy.write_bytes((ROOT / "notebooks" / f"{name}.ipynb").read_bytes())
            code = ("import nbformat, os, sys; from nbclient import NotebookClient;"
                    "os.environ.pop('GPUDL_BUDGET_DRIVER');"
                    "nb = nbformat.read(sys.argv[1], as_version=4);"
                    "NotebookClient(nb, timeout=1800, kernel_name='python3', resources="
                    f"{{'metadata': {{'path': {str(ROOT / 'notebooks')!r}}}}}).execute()")
            command = [sys.executable, "-c", code, str(copy)]
            # the recorder must not run in this driver, only in the notebook's kernel
            env = env | {"GPUDL_BUDGET_DRIVER": "1"}
        else:
            command = [sys.executable, "-m", "gpudl", "bench", item, "--results", tmp]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=3600)
    if done.returncode != 0:
        print(f"[budget] {item} FAILED (its row keeps what was measured):\n"
              f"{(done.stdout + done.stderr)[-3000:]}", flush=True)
    return time.perf_counter() - start


def _records(record_dir: str) -> list[dict]:
    out = []
    for path in Path(record_dir).glob("*.pickle"):
        with open(path, "rb") as f:
            out.append(pickle.load(f))
    return out


_COMPILE = r"""
import json, pickle, sys, time, importlib, subprocess, tempfile, os
import gpudl
from gpudl import ptx
ptx.prepare_compiler()
from numba import cuda
from numba.cuda import dispatcher
# no driver here: device functions ask it which device they target (as gpudl.ptx does)
dispatcher.get_current_device = lambda: ptx.CompileTarget((9, 0))
jobs = pickle.load(open(sys.argv[1], "rb"))
ptxas = ptx.find_tool("ptxas")
out = {}
for key, types in jobs:
    module, name, _ = key
    fn = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    fn = getattr(fn, "py_func", fn)
    start = time.perf_counter()
    try:
        code, _ = cuda.compile_ptx(fn, pickle.loads(types), cc=(9, 0))
    except Exception as err:  # report, do not stop the others
        out[repr(key)] = {"error": f"{type(err).__name__}: {err}"[:300]}
        continue
    nvvm = time.perf_counter() - start
    assemble = None
    if ptxas is not None:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "k.ptx")
            open(src, "w").write(code)
            start = time.perf_counter()
            subprocess.run([str(ptxas), "-arch=sm_90", src, "-o", os.path.join(tmp, "k.cubin")],
                           check=True, capture_output=True)
            assemble = time.perf_counter() - start
    out[repr(key)] = {"nvvm_s": nvvm, "ptxas_s": assemble}
json.dump(out, open(sys.argv[2], "w"))
"""


def _compile(keys: set, types_of: dict[tuple, bytes]) -> dict:
    """Seconds to compile each kernel of ``keys`` (module, name, argument types' names),
    given the pickled argument types of each in ``types_of``."""
    module_level = sorted((k, types_of[k]) for k in keys if "<locals>" not in k[1] and k[2])
    with tempfile.TemporaryDirectory(prefix="gpudl-compile-") as tmp:
        jobs, result = Path(tmp) / "jobs.pickle", Path(tmp) / "out.json"
        jobs.write_bytes(pickle.dumps(module_level))
        env = os.environ | {"GPUDL_BACKEND": "compile", "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", _COMPILE, str(jobs), str(result)], cwd=ROOT,
                       env=env, check=True, timeout=3600)
        return json.loads(result.read_text())


def measure(items: list[str], save=lambda measured: None) -> dict:
    measured: dict[str, dict] = {}
    kernels_of: dict[str, set] = {}
    types_of: dict[tuple, bytes] = {}
    for item in items:
        with tempfile.TemporaryDirectory(prefix="gpudl-record-") as record_dir:
            print(f"[budget] {item} on the simulator ...", flush=True)
            wall = _run_item(item, record_dir)
            records = _records(record_dir)
        main = [r for r in records if not r["nested"]]
        keys = {k for r in records for k in r["kernels"]}
        for r in records:
            types_of.update(r["types"])
        kernels_of[item] = keys
        measured[item] = {
            "simulator_s": round(wall, 1),
            "simulated_kernels_s": round(sum(r["kernel_s"] for r in main), 1),
            "on_simulator_s": round(sum(r["on_simulator_s"] for r in main), 1),
            "spawn_s": round(sum(r["spawn_s"] for r in main), 1),
            "kernels": len({k[:2] for k in keys}),
            "signatures": len(keys),
            "factory_kernels": len({k[:2] for k in keys if "<locals>" in k[1]}),
        }
        print(f"[budget] {item}: {measured[item]}", flush=True)
        save(measured)
    print("[budget] compiling the recorded kernels for sm_90 ...", flush=True)
    every = set().union(*kernels_of.values()) if kernels_of else set()
    compiled = _compile(every, types_of)
    seen: set = set()
    for item in items:
        costs = [compiled.get(repr(k)) for k in kernels_of[item]]
        timed = [c for c in costs if c and "nvvm_s" in c]
        new = [compiled.get(repr(k)) for k in kernels_of[item] - seen]
        new = [c for c in new if c and "nvvm_s" in c]
        seen |= kernels_of[item]
        measured[item] |= {
            "compile_s": round(sum(c["nvvm_s"] + (c["ptxas_s"] or 0) for c in timed), 1),
            "compile_new_s": round(sum(c["nvvm_s"] + (c["ptxas_s"] or 0) for c in new), 1),
            "compile_failures": [k for k, c in compiled.items() if "error" in c
                                 and any(repr(x) == k for x in kernels_of[item])],
        }
    return measured


#: A notebook kernel's start on the H200 (ipykernel, then torch, numba and gpudl imported and a
#: CUDA context made): the 4 s `python -m gpudl info` took there on 2026-12-01, plus 2 s.
KERNEL_START_S = 6
#: The GPU machine's 16 cores run spawned CPU ranks at least this much faster than this
#: machine's 2 shared ones (4 ranks on 2 cores wait for each other half the time).
CPU_RANKS_SPEEDUP = 2


def notebook_limit(row: dict, start_here: float = 0.0) -> tuple[int, str]:
    """A notebook's limit on an H200 from what it costs here: its kernel's start there, its
    own kernels' compile (the benchmark cells reuse stored results: no compile, no timing),
    the traces it runs on the simulator in a child (as here), its CPU ranks (faster there),
    and its other Python (its seconds here less the kernel's start here, ``start_here``); a
    quarter more, rounded up to 5 s."""
    other = max(row["simulator_s"] - row["simulated_kernels_s"] - row["on_simulator_s"]
                - row["spawn_s"] - start_here, 0.0)
    need = (KERNEL_START_S + row["compile_s"] + row["on_simulator_s"]
            + row["spawn_s"] / CPU_RANKS_SPEEDUP + other)
    limit = int(5 * math.ceil(1.25 * need / 5))
    basis = (f"{KERNEL_START_S} s start + {row['compile_s']:.0f} s compile + "
             f"{row['on_simulator_s']:.0f} s traces + {row['spawn_s']:.0f}/{CPU_RANKS_SPEEDUP} s "
             f"CPU ranks + {other:.0f} s other Python (less {start_here:.0f} s of a "
             "notebook's start), measured here; x 1.25")
    return limit, basis


#: The notebook that times a kernel's start here: the imports every lab makes, one cell.
START_CELL = "import torch, numba, gpudl\nfrom numba import cuda\ngpudl.backend.name()"


def kernel_start() -> float:
    """Seconds from a notebook's execution start to its one cell's end (:data:`START_CELL`),
    here: what every notebook's row holds beside its own work."""
    code = ("import nbformat, sys, time; from nbclient import NotebookClient;"
            "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(sys.argv[1])]);"
            "t = time.perf_counter();"
            "NotebookClient(nb, timeout=300, kernel_name='python3').execute();"
            "print(time.perf_counter() - t)")
    env = os.environ | {"GPUDL_BACKEND": "simulator", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, START_CELL], capture_output=True,
                          text=True, env=env, cwd=ROOT, check=True, timeout=600)
    return float(done.stdout.split()[-1])


def bench_estimate(measured: dict) -> tuple[float, str]:
    """What `bench all` costs on an H200 without its GPU time, from the topics' rows here:
    the compile of their kernels (at most: a kernel two topics share is counted in each), their
    CPU ranks (faster there) and their other Python (their seconds here less the simulated
    kernels, the traces and the ranks)."""
    rows = [v for k, v in measured.items() if ":" not in k]
    if not rows or any("compile_s" not in r for r in rows):
        raise SystemExit("gpu_budget: the benchmark topics are not measured (run measure)")
    compile_s = sum(r["compile_s"] for r in rows)
    spawn = sum(r["spawn_s"] for r in rows)
    other = sum(max(r["simulator_s"] - r["simulated_kernels_s"] - r["on_simulator_s"]
                    - r["spawn_s"], 0.0) for r in rows)
    need = compile_s + spawn / CPU_RANKS_SPEEDUP + other
    return need, (f"{len(rows)} topics, from here: {compile_s:.0f} s compile (at most) + "
                  f"{spawn:.0f}/{CPU_RANKS_SPEEDUP} s CPU ranks + {other:.0f} s other Python "
                  f"= {need:.0f} s, plus the GPU's own timing (not yet measured)")


def plan(budget: dict) -> None:
    measured = budget.get("measured", {})
    start = budget.get("notebook_start", {}).get("seconds")
    if start is None:
        raise SystemExit("gpu_budget: a notebook's start is not measured (run measure start)")
    for name, entry in budget["plan"]["notebooks"].items():
        row = measured.get(f"notebook:{name}")
        if row is None or "compile_s" not in row:
            raise SystemExit(f"gpu_budget: notebook {name} is not measured (run measure)")
        entry["limit_s"], entry["basis"] = notebook_limit(row, start)
        if entry.get("min_gpus", 1) > 1:
            entry["basis"] += (f"; skipped on fewer than {entry['min_gpus']} GPUs: its timings "
                               "need them, its proofs run on CPU ranks in make test")
    # the benchmarks get what the call leaves: they run first, and store a topic at its end
    steps = budget["plan"]
    gpus = steps["gpus"]["count"]
    others = sum(steps[k]["limit_s"] for k in ("wheels", "info", "tests", "tars"))
    others += sum(e["limit_s"] for e in steps["notebooks"].values()
                  if e.get("min_gpus", 1) <= gpus)
    left = budget["call_limit_s"] - budget["spare_s"] - others
    need, how = bench_estimate(measured)
    steps["bench"]["limit_s"] = int(5 * (left // 5))
    steps["bench"]["basis"] = (f"what the call leaves it ({budget['call_limit_s']} s less "
                               f"{budget['spare_s']} s spare and the other steps); {how}; the "
                               "H200 run of 2026-12-01 stored 4 topics in about 100 s; a topic "
                               "not stored by the limit is named in the summary; context and "
                               "allreduce (its all-to-all rows included) need 2 GPUs: on the "
                               "one lent H200 they store nothing and say why")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("measure", "show", "plan"):
        print(__doc__)
        return 2
    budget = json.loads(BUDGET.read_text())
    if argv[0] == "show":
        print(json.dumps(budget.get("measured", {}), indent=1))
        return 0
    if argv[0] == "plan":
        plan(budget)
        BUDGET.write_text(json.dumps(budget, indent=1) + "\n")
        for name, entry in budget["plan"]["notebooks"].items():
            print(f"{name}: {entry['limit_s']} s ({entry['basis']})")
        return 0
    items = argv[1:] or ["start", *_topics(), *_notebooks()]
    known = {"start", *_topics(), *_notebooks()}
    unknown = [i for i in items if i not in known]
    if unknown:
        print(f"gpu_budget: unknown items {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    def save(found: dict) -> None:
        budget["measured"] = budget.get("measured", {}) | found
        budget["measured_on"] = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                                 "how": "`.venv/bin/python .ci/gpu_budget.py measure`"}
        BUDGET.write_text(json.dumps(budget, indent=1) + "\n")

    if "start" in items:
        items.remove("start")
        seconds = kernel_start()
        print(f"[budget] a notebook's start here: {seconds:.1f} s", flush=True)
        budget["notebook_start"] = {"seconds": round(seconds, 1), "how": "kernel_start()"}
        save({})
    if items:
        save(measure(items, save))
    print(f"[budget] wrote {BUDGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
