"""Command-line entry points: ``python -m gpudl <command>``.

Book section: *Preface* and README, "Commands".

* ``python -m gpudl info`` prints the backend and the device's facts.
* ``python -m gpudl bench TOPIC`` runs a chapter's benchmarks and writes
  ``results/TOPIC-<backend>.json`` (``all`` runs every topic); on a GPU a result the same commit
  already stored is reused unless ``--fresh`` is given.
* ``python -m gpudl results import PATH`` checks the GPU results in a tar file or folder and
  copies them into ``results/`` (notebooks executed on a GPU only if they pass nbval here;
  ``--keep RUN/results/TOPIC-cuda.json`` chooses among two results of one topic).
* ``python -m gpudl profiles record [NAME ...]`` records the book's programs with
  ``torch.profiler`` and stores their timelines in ``results/profiles/`` (Appendix E;
  :mod:`gpudl.bench.profiles`).
* ``python -m gpudl notebooks [NAME ...]`` re-executes notebooks in place on the current
  backend, printing progress cell by cell, and records in each notebook's metadata how long it
  took and where (``metadata["gpudl"]``, which the preface's table of lab times reads).
* ``python -m gpudl estimate ...`` runs Chapter 7's calculators (training time, MFU, memory
  per GPU, the GPU table).
* ``python -m gpudl ptx KERNEL`` prints a kernel's PTX for sm_90 (or ``--cc``), compiled
  without a GPU where the CUDA compiler pieces are installed (:mod:`gpudl.ptx`).
* ``python -m gpudl toolchain`` prints the driver, the CUDA compiler pieces numba-cuda uses
  and one line saying whether the driver runs what they make; ``--install`` first installs
  the pieces that suit the driver (:mod:`gpudl.toolchain`; the labs' first cell on Colab).

A bad argument or source makes every command print one line, ``PROG: error: ...``, and exit
with status 2 (:class:`gpudl.checks.OneLineArgumentParser`).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import gpudl  # (decides the backend before anything imports numba)
from gpudl.checks import OneLineArgumentParser, fail

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def bench(topic: str, directory: Path, fresh: bool = False) -> list[Path]:
    """Run (or reuse, see :func:`gpudl.bench.load_or_run`) the benchmarks of ``topic`` (or
    ``all``) and store their JSON files in ``directory``. A topic that raises is reported and
    the others still run; the command then exits with an error naming it."""
    import traceback

    from gpudl.bench import TOPICS, load_or_run, results_path

    if topic != "all" and topic not in TOPICS:
        raise SystemExit(f"unknown topic {topic!r}; choose from {['all', *TOPICS]}")
    written, failed = [], []
    for name in list(TOPICS) if topic == "all" else [topic]:
        print(f"== benchmark {name} ({gpudl.backend.name()}) ==", flush=True)
        try:
            record = load_or_run(name, directory, fresh=fresh)
        except Exception:  # one topic's failure must not stop the others
            traceback.print_exc()
            print(f"== benchmark {name} FAILED (the other topics still run) ==", flush=True)
            failed.append(name)
            continue
        for b in record.get("bars", []):
            verdict = {True: "met", False: "MISSED", None: "not measured"}[b["verdict"]]
            ratio = "n/a" if b["ratio"] is None else f"{b['ratio']:.3f}"
            print(f"  bar {b['name']}: {ratio} {b['compare']} {b['threshold']:g}: {verdict}",
                  flush=True)
        if not record.get("skipped"):
            path = results_path(name, directory)
            print(f"stored {path}", flush=True)
            written.append(path)
    if failed:
        raise SystemExit(f"benchmarks that raised: {', '.join(failed)}")
    return written


def execute_notebooks(names: list[str], timeout: int = 1800) -> None:
    """Execute notebooks in place with their outputs stored, printing progress. A notebook
    whose cell raises is left as it was (not half-executed); the others still run, and the
    command then exits with an error naming the failures."""
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
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

        # the kernel talks to this process over local sockets (IPC) named by an absolute path
        # (the kernel runs in notebooks/), not over unencrypted TCP
        sockets = Path(tempfile.mkdtemp(prefix="gpudl-kernel-")) / "ipc"
        client = NotebookClient(
            nb,
            km=AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(sockets)),
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            record_timing=False,
            on_cell_executed=on_cell_executed,
        )
        client.owns_km = True  # so that it shuts the kernel down when done
        try:
            client.execute()
        except CellExecutionError as error:
            print(f"  FAILED, {path.name} left unchanged: {error}", flush=True)
            failed.append(path.name)
            continue
        finally:
            shutil.rmtree(sockets.parent, ignore_errors=True)
        seconds = time.perf_counter() - done["t"]
        nb.metadata["gpudl"] = {"seconds": round(seconds, 1), "backend": gpudl.backend.name(),
                                "cpu_threads": os.cpu_count(), "machine": platform.machine(),
                                "date": datetime.now(UTC).date().isoformat()}
        partial = path.with_name(f".{path.name}.part")  # whole or not at all, even if killed
        nbformat.write(nb, partial)
        partial.replace(path)
        print(f"  wrote {path} in {seconds:.1f} s", flush=True)
    if failed:
        raise SystemExit(f"notebooks that raised (left unchanged): {', '.join(failed)}")


def info() -> None:
    """Print the backend and the device's facts."""
    from gpudl.hardware import describe

    print(f"backend: {gpudl.backend.name()}")
    print(describe().summary())


def _notebook_names(names: list[str]) -> list[str]:
    """The names (or prefixes) that match no notebook of ``notebooks/``."""
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    return [n for n in names if not any(p.name.startswith(n) or p.stem == n for p in paths)]


def main(argv: list[str] | None = None) -> int | None:
    from gpudl.bench import TOPICS

    parser = OneLineArgumentParser(prog="python -m gpudl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the backend and the device's facts")
    p_bench = sub.add_parser("bench", help="run benchmarks, write results/TOPIC-BACKEND.json")
    p_bench.add_argument("topic", choices=["all", *TOPICS])
    p_bench.add_argument("--results", type=Path, default=ROOT / "results")
    p_bench.add_argument("--fresh", action="store_true",
                         help="measure again even where this commit's results are stored")
    p_results = sub.add_parser("results", help="bring GPU results made elsewhere into results/")
    p_results.add_argument("action", choices=["import"])
    p_results.add_argument("path", type=Path, help="a tar file or a folder of a GPU run")
    p_results.add_argument("--results", type=Path, default=ROOT / "results")
    p_results.add_argument("--keep", action="append", default=[], metavar="PATH",
                           help="of two results of one topic, take this one (its path inside "
                                "the run, as the refusal prints it)")
    p_profiles = sub.add_parser("profiles", help="record the book's profiles into "
                                "results/profiles/ (Appendix E)")
    p_profiles.add_argument("action", choices=["record"])
    p_profiles.add_argument("names", nargs="*", help="profiles to record (default: all)")
    p_nb = sub.add_parser("notebooks", help="re-execute notebooks in place")
    p_nb.add_argument("names", nargs="*", help="notebook names or prefixes (default: all)")
    p_ptx = sub.add_parser("ptx", help="print a kernel's PTX for sm_90 (--list: the kernels)",
                           add_help=False)
    p_ptx.add_argument("args", nargs=argparse.REMAINDER)
    p_toolchain = sub.add_parser("toolchain", add_help=False,
                                 help="the driver and CUDA compiler pieces, checked together")
    p_toolchain.add_argument("args", nargs=argparse.REMAINDER)
    from gpudl.estimate import cli as estimate_cli  # python -m gpudl estimate ... (Chapter 7)

    estimate_cli.add_parser(sub)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ptx"]:  # its options are its own (gpudl.ptx.main parses them)
        from gpudl import ptx

        return ptx.main(argv[1:])
    if argv[:1] == ["toolchain"]:  # its options are its own too
        from gpudl import toolchain

        return toolchain.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "estimate":
        estimate_cli.run(args)
    elif args.command == "info":
        info()
    elif args.command == "bench":
        if args.results.exists() and not args.results.is_dir():
            return fail("python -m gpudl bench", f"--results {args.results} is not a folder")
        bench(args.topic, args.results, args.fresh)
    elif args.command == "profiles":
        from gpudl.profiles import STORED

        unknown = sorted(set(args.names) - set(STORED))
        if unknown:
            return fail("python -m gpudl profiles", f"unknown profiles {unknown}; choose "
                        f"from {list(STORED)}")
        from gpudl.bench.profiles import record_stored

        try:
            record_stored(args.names or tuple(STORED))
        except ValueError as err:
            return fail("python -m gpudl profiles", err)
    elif args.command == "results":
        from gpudl.bench.results import import_results

        try:
            import_results(args.path, args.results, NOTEBOOKS, keep=args.keep)
        except (ValueError, TypeError, OSError) as err:
            return fail("python -m gpudl results import", err)
    else:
        unknown = _notebook_names(args.names)
        if unknown:
            return fail("python -m gpudl notebooks",
                        f"no notebook in {NOTEBOOKS} matches {unknown}")
        execute_notebooks(args.names)


if __name__ == "__main__":
    sys.exit(main())
