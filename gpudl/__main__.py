"""Command-line entry points: ``python -m gpudl <command>``.

Book section: *Preface* and README, "Commands".

* ``python -m gpudl info`` prints the backend and the device's facts.
* ``python -m gpudl bench TOPIC`` runs a chapter's benchmarks and writes
  ``results/TOPIC-<backend>.json`` (``all`` runs every topic).
* ``python -m gpudl notebooks [NAME ...]`` re-executes notebooks in place on the current
  backend, printing progress cell by cell.
* ``python -m gpudl estimate ...`` runs Chapter 7's calculators (training time, MFU, memory
  per GPU, the GPU table).
* ``python -m gpudl ptx KERNEL`` prints a kernel's PTX for sm_90 (or ``--cc``), compiled
  without a GPU where the CUDA compiler pieces are installed (:mod:`gpudl.ptx`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gpudl  # (decides the backend before anything imports numba)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def _bench_elementwise() -> dict:
    from gpudl.bench import bench_elementwise

    return bench_elementwise()


def _bench_memory() -> dict:
    from gpudl.bench import bench_memory

    return bench_memory()


def _bench_matmul() -> dict:
    from gpudl.kernels.matmul import bench_matmul

    return {"matmul": bench_matmul()}


def _bench_allreduce() -> dict:
    from gpudl.parallel.comms import allreduce_bandwidth

    rows = []
    for world_size in (2, 4):
        print(f"all-reduce benchmark, world size {world_size} ...", flush=True)
        rows.extend(allreduce_bandwidth(world_size=world_size))
    return {"allreduce": rows}


def _bench_optim() -> dict:
    from gpudl.kernels.optim import bench_optim

    return bench_optim()


def _bench_dataparallel() -> dict:
    from gpudl.parallel.data_parallel import bench_dataparallel

    return bench_dataparallel()


def _bench_pipeline() -> dict:
    from gpudl.parallel.pipeline_parallel import bench_pipeline

    return bench_pipeline()


def _bench_precision() -> dict:
    from gpudl.hardware import measured_matmul_flops

    n = gpudl.backend.pick(gpu=8192, sim=512)
    return {"n": n, "flops": {d: measured_matmul_flops(n, d) for d in ("float32", "bfloat16")}}


BENCHMARKS: dict[str, Callable[[], dict]] = {
    "elementwise": _bench_elementwise,
    "memory": _bench_memory,
    "matmul": _bench_matmul,
    "allreduce": _bench_allreduce,
    "optim": _bench_optim,
    "dataparallel": _bench_dataparallel,
    "pipeline": _bench_pipeline,
    "precision": _bench_precision,
}


def bench(topic: str, directory: Path) -> list[Path]:
    """Run the benchmarks of ``topic`` (or ``all``) and write their JSON files."""
    from gpudl.bench import write_results

    if topic != "all" and topic not in BENCHMARKS:
        raise SystemExit(f"unknown topic {topic!r}; choose from {['all', *BENCHMARKS]}")
    topics = list(BENCHMARKS) if topic == "all" else [topic]
    written = []
    for name in topics:
        print(f"== benchmark {name} ({gpudl.backend.name()}) ==", flush=True)
        path = write_results(name, BENCHMARKS[name](), directory=directory)
        print(f"wrote {path}", flush=True)
        written.append(path)
    return written


def execute_notebooks(names: list[str], timeout: int = 1800) -> None:
    """Execute notebooks in place with their outputs stored, printing progress. A notebook
    whose cell raises is left as it was (not half-executed); the others still run, and the
    command then exits with an error naming the failures."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if names:
        paths = [p for p in paths if any(p.name.startswith(n) or p.stem == n for n in names)]
        if not paths:
            raise SystemExit(f"no notebook in {NOTEBOOKS} matches {names}")
    failed = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        n_code = sum(c.cell_type == "code" for c in nb.cells)
        done = {"n": 0, "t": time.perf_counter()}
        print(f"== {path.name}: {n_code} code cells on the {gpudl.backend.name()} backend ==")

        def on_cell_executed(cell, cell_index, execute_reply, done=done, n_code=n_code):
            if cell.cell_type != "code":
                return
            done["n"] += 1
            elapsed = time.perf_counter() - done["t"]
            print(f"  cell {done['n']}/{n_code} done ({elapsed:.1f} s so far)", flush=True)

        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            record_timing=False,
            on_cell_executed=on_cell_executed,
        )
        try:
            client.execute()
        except CellExecutionError as error:
            print(f"  FAILED, {path.name} left unchanged: {error}", flush=True)
            failed.append(path.name)
            continue
        nbformat.write(nb, path)
        print(f"  wrote {path} in {time.perf_counter() - done['t']:.1f} s", flush=True)
    if failed:
        raise SystemExit(f"notebooks that raised (left unchanged): {', '.join(failed)}")


def info() -> None:
    """Print the backend and the device's facts."""
    from gpudl.hardware import describe

    print(f"backend: {gpudl.backend.name()}")
    print(describe().summary())


def main(argv: list[str] | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog="python -m gpudl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the backend and the device's facts")
    p_bench = sub.add_parser("bench", help="run benchmarks, write results/TOPIC-BACKEND.json")
    p_bench.add_argument("topic", choices=["all", *BENCHMARKS])
    p_bench.add_argument("--results", type=Path, default=ROOT / "results")
    p_nb = sub.add_parser("notebooks", help="re-execute notebooks in place")
    p_nb.add_argument("names", nargs="*", help="notebook names or prefixes (default: all)")
    p_ptx = sub.add_parser("ptx", help="print a kernel's PTX for sm_90 (--list: the kernels)",
                           add_help=False)
    p_ptx.add_argument("args", nargs=argparse.REMAINDER)
    from gpudl import estimate_cli  # python -m gpudl estimate ... (Chapter 7's calculators)

    estimate_cli.add_parser(sub)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ptx"]:  # its options are its own (gpudl.ptx.main parses them)
        from gpudl import ptx

        return ptx.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "estimate":
        estimate_cli.run(args)
    elif args.command == "info":
        info()
    elif args.command == "bench":
        bench(args.topic, args.results)
    else:
        execute_notebooks(args.names)


if __name__ == "__main__":
    sys.exit(main())
