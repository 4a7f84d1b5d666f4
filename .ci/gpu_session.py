#!/usr/bin/env python3
"""The one call on a lent GPU machine (CONTRIBUTING.md, "GPU runs"). There, in the repository
root:
    GPUDL_COMMIT=<this checkout's commit> OUT=<folder that comes back> \\
        bash .ci/gpu-session [PHASE ...]
PHASE: bench, tests, notebooks (default: all three, in that order)
  bench      python -m gpudl bench all: every results/<topic>-cuda.json, stored first
  tests      the gpu-marked tests (the speed tests read the stored results)
  notebooks  each notebook re-executed in place under its own limit (it reuses the stored
             results; one cut short or failing keeps its old outputs and is named in the summary;
             one whose GPU cells need more GPUs than the machine has is skipped, and said so)
First the wheels of .whl/ (`make gpu-wheels`) go onto PYTHONPATH when the image's numpy, numba
or Jupyter differ from what gpudl needs; then `python -m gpudl info` must report the cuda
backend, or the session stops at once (exit 3). Each step runs under its limit from
.ci/gpu-budget.json, cut to what is left of the whole run's budget; after each, $OUT/gpu.tar
is rewritten with notebooks/, results/ and the logs ($OUT/logs/, summary.txt first).
Options:
  --rehearse           every phase on Numba's CUDA simulator, in a copy of this checkout (no
                       GPU needed, no backend check), each limit multiplied by the rehearsal
                       factor it prints (--factor F: by F); the tar after each step is kept
                       in $OUT/steps/
  --topics A,B         bench only these topics      --notebooks 01,07  only these notebooks
  --tests PATH         the tests phase collects PATH (default: tests)
  --check-env          print what the image lacks (nothing installed), exit 0
  --plan [--markdown]  print the planned budget (--markdown: the table of CONTRIBUTING.md)
Exit status: 0 all steps passed, 1 a step failed or was cut short, 2 bad arguments,
3 no GPU, 4 the environment could not be prepared.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_FILE = ROOT / ".ci" / "gpu-budget.json"
PHASES = ("bench", "tests", "notebooks")
#: Seconds a step has to stop after SIGTERM before the whole process group is killed.
KILL_GRACE_S = 5


def usage() -> str:
    return __doc__.split("\n", 1)[1]


# ------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------


def load_budget() -> dict:
    return json.loads(BUDGET_FILE.read_text())


def notebook_names() -> list[str]:
    return [p.stem for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


def measured_topics(budget: dict) -> list[str]:
    """The benchmark topics of the measured table, in the order `bench all` runs them."""
    return [k for k in budget.get("measured", {}) if ":" not in k]


def planned_gpus(budget: dict) -> int:
    """The GPUs of the machine the plan is for (the lent H200 machine has one)."""
    return int(budget["plan"]["gpus"]["count"])


def needs_more_gpus(budget: dict, name: str, gpus: int) -> int:
    """How many GPUs notebook ``name``'s GPU cells need, if more than ``gpus`` (else 0). On
    fewer, its cells are the CPU proofs that `make test` already runs: the run skips it and
    its stored outputs stay."""
    need = int(budget["plan"]["notebooks"][name].get("min_gpus", 1))
    return need if need > gpus else 0


def plan_steps(budget: dict, phases: list[str], notebooks: list[str],
               gpus: int | None = None) -> list[tuple[str, float]]:
    """The steps of a run on a machine of ``gpus`` GPUs (default: the planned machine's), in
    order, with their planned limits in seconds (a GPU's); a notebook that needs more GPUs
    is a step of 0 s, named as skipped."""
    plan = budget["plan"]
    gpus = planned_gpus(budget) if gpus is None else gpus
    steps = [("wheels", plan["wheels"]["limit_s"]), ("info", plan["info"]["limit_s"])]
    for phase in phases:
        if phase == "notebooks":
            for n in notebooks:
                need = needs_more_gpus(budget, n, gpus)
                steps.append((f"notebook {n}", plan["notebooks"][n]["limit_s"]) if not need
                             else (f"notebook {n} (skipped: needs {need} GPUs)", 0))
        else:
            steps.append((phase, plan[phase]["limit_s"]))
    steps.append(("tars", plan["tars"]["limit_s"]))
    return steps


def rehearsal_factor(budget: dict) -> int:
    """The factor that makes every step's GPU limit hold its time measured on the simulator
    here (with a quarter to spare): the simulator runs every kernel as Python threads."""
    measured, plan = budget.get("measured", {}), budget["plan"]
    ratios = []
    for name, entry in plan["notebooks"].items():
        found = measured.get(f"notebook:{name}")
        if found and not needs_more_gpus(budget, name, planned_gpus(budget)):
            ratios.append(1.25 * found["simulator_s"] / entry["limit_s"])
    bench = sum(v["simulator_s"] for k, v in measured.items() if not k.startswith("notebook:"))
    if bench:
        ratios.append(1.25 * bench / plan["bench"]["limit_s"])
    return max(2, math.ceil(max(ratios, default=2)))


def print_plan(budget: dict, phases: list[str], notebooks: list[str], factor: int = 1) -> float:
    steps = plan_steps(budget, phases, notebooks)
    total = sum(limit for _, limit in steps)
    scale = f" x {factor} (rehearsal)" if factor != 1 else ""
    print(f"gpu-session: planned budget{scale} for {planned_gpus(budget)} GPU(s), "
          f"{budget['call_limit_s']} s call, {budget['spare_s']} s kept spare:")
    for name, limit in steps:
        print(f"  {name:<48} {limit:>5.0f} s" + (f"  -> {limit * factor:.0f} s" if scale else ""))
    most = budget["call_limit_s"] - budget["spare_s"]
    print(f"  {'total':<48} {total:>5.0f} s (at most {most} s)"
          + (f"  -> {total * factor:.0f} s" if scale else ""))
    return total


def markdown_table(budget: dict) -> str:
    """CONTRIBUTING.md's table: each step's limit on an H200 and what it is made from."""
    plan, measured = budget["plan"], budget.get("measured", {})
    lines = ["| Step | Limit on an H200 (s) | Simulator here (s) | of which simulated kernels (s) "
             "| Kernels (signatures) | Compile here, sm_90 (s) | Basis of the limit |",
             "|---|---|---|---|---|---|---|"]

    def row(label: str, entry: dict, found: dict | None) -> str:
        if found:
            sim = (f"{found['simulator_s']:.0f} | {found['simulated_kernels_s']:.0f} | "
                   f"{found['kernels']} ({found['signatures']}) | {found['compile_s']:.1f}")
        else:
            sim = "- | - | - | -"
        return f"| {label} | {entry['limit_s']:.0f} | {sim} | {entry['basis']} |"

    lines.append(row("wheels", plan["wheels"], None))
    lines.append(row("info", plan["info"], None))
    topics = {k: v for k, v in measured.items() if not k.startswith("notebook:")}
    if topics:
        total = {key: sum(v[key] for v in topics.values()) for key in
                 ("simulator_s", "simulated_kernels_s", "kernels", "signatures", "compile_s")}
        lines.append(row(f"bench ({len(topics)} topics)", plan["bench"], total))
    else:
        lines.append(row("bench", plan["bench"], None))
    lines.append(row("tests", plan["tests"], None))
    for name, entry in plan["notebooks"].items():
        need = needs_more_gpus(budget, name, planned_gpus(budget))
        label = f"notebook {name}" + (f" (skipped with fewer than {need} GPUs)" if need else "")
        lines.append(row(label, entry, measured.get(f"notebook:{name}")))
    lines.append(row("tars", plan["tars"], None))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# The environment
# ------------------------------------------------------------------------------------------


def incompatible(python: str, env: dict | None = None) -> str:
    """What the image lacks or has in a version gpudl cannot use ("" if nothing), as
    ``python`` sees it (with the environment ``env``)."""
    code = r"""
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
found = []
numpy = version("numpy")
if numpy is None or tuple(int(p) for p in numpy.split(".")[:2]) >= (2, 5):
    found.append(f"numpy {numpy} (numba-cuda 0.30.4 needs numpy < 2.5)")
if version("numba") != "0.68.1":
    found.append(f"numba {version('numba')} (pinned: 0.68.1)")
found += [f"no {name}" for name in ("nbformat", "nbclient", "ipykernel", "nbval")
          if version(name) is None]
print("; ".join(found))
"""
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                          env=env)
    if done.returncode != 0:
        return f"no working {python} ({done.stderr.strip()[-200:]})"
    return done.stdout.strip()


def count_gpus() -> int | None:
    """The GPUs ``nvidia-smi -L`` lists (None where it cannot be run)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return None
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


class Session:
    def __init__(self, root: Path, out: Path, budget: dict, factor: int, python: str) -> None:
        self.root, self.out, self.budget, self.factor = root, out, budget, factor
        self.python = python
        self.keep_steps = factor != 1
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.summary = self.logs / "summary.txt"
        self.summary.write_text("")
        self.start = time.monotonic()
        self.deadline = self.start + factor * (budget["call_limit_s"] - budget["spare_s"])
        self.env = dict(os.environ)
        self.failed: list[str] = []

    def say(self, line: str) -> None:
        print(line, flush=True)
        with self.summary.open("a") as f:
            f.write(line + "\n")

    def pack(self) -> None:
        """One tar, rewritten whole: a call killed later still returns this one."""
        part = self.out / "gpu.tar.part"
        with tarfile.open(part, "w") as tar:
            for path in sorted((self.root / "notebooks").glob("*.ipynb")):
                tar.add(path, arcname=f"notebooks/{path.name}")
            results = self.root / "results"
            if results.is_dir():
                tar.add(results, arcname="results")
            tar.add(self.logs, arcname="logs")
        os.replace(part, self.out / "gpu.tar")
        if self.keep_steps:  # a rehearsal keeps what each step would have returned
            steps = self.out / "steps"
            steps.mkdir(exist_ok=True)
            n = len(list(steps.glob("*.tar")))
            shutil.copyfile(self.out / "gpu.tar", steps / f"{n:02d}.tar")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, command: list[str], limit: float, log: Path) -> tuple[str, float]:
        """Run ``command`` in its own process group under ``limit`` seconds (cut to what is
        left of the budget); its output, each line stamped with the seconds since the step
        began, into ``log``. Returns ("ok" | "failed (rc N)" | "cut short", seconds)."""
        limit = min(limit * self.factor, self.left() - KILL_GRACE_S)
        if limit <= 1:
            return "skipped (no time left)", 0.0
        start = time.monotonic()
        with log.open("w") as sink:
            proc = subprocess.Popen(command, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                    bufsize=1)
            timer_fired = {"cut": False}

            def stop(signum=None, frame=None):
                timer_fired["cut"] = True
                _kill_group(proc)

            signal.signal(signal.SIGALRM, stop)
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                for line in proc.stdout:
                    sink.write(f"[{time.monotonic() - start:6.1f}] {line}")
                proc.wait()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                _kill_group(proc, grace=0)  # nothing it started outlives it
        seconds = time.monotonic() - start
        if timer_fired["cut"]:
            return f"cut short at its limit of {limit:.0f} s", seconds
        return ("ok" if proc.returncode == 0 else f"failed (rc {proc.returncode})"), seconds

    def stored(self) -> dict[str, float]:
        """The result files and notebooks, with their modification times."""
        paths = [*(self.root / "results").glob("*.json"),
                 *(self.root / "notebooks").glob("*.ipynb")]
        return {str(p.relative_to(self.root)): p.stat().st_mtime for p in paths}

    def step(self, name: str, command: list[str], limit: float, log_name: str) -> bool:
        before = self.stored()
        outcome, seconds = self.run(name, command, limit, self.logs / log_name)
        stored = sorted(k for k, v in self.stored().items() if before.get(k) != v)
        what = f"; stored {', '.join(stored)}" if stored else ""
        self.say(f"{name}: {outcome} in {seconds:.0f} s (limit {limit * self.factor:.0f} s, "
                 f"{max(self.left(), 0):.0f} s left){what}")
        if outcome != "ok":
            self.failed.append(name)
        self.pack()
        return outcome == "ok"


def _kill_group(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> dict:
    opts = {"phases": [], "rehearse": False, "topics": None, "notebooks": None,
            "tests": "tests", "check_env": False, "plan": False, "markdown": False,
            "factor": None}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in PHASES:
            opts["phases"].append(arg)
        elif arg in ("--rehearse", "--check-env", "--plan", "--markdown"):
            opts[arg[2:].replace("-", "_")] = True
        elif arg in ("--topics", "--notebooks", "--tests", "--factor"):
            if not args:
                raise SystemExit(f"gpu-session: {arg} needs a value")
            opts[arg[2:]] = args.pop(0)
        elif arg in ("-h", "--help"):
            print(usage())
            raise SystemExit(0)
        else:
            print(f"gpu-session: unknown phase or option '{arg}'", file=sys.stderr)
            print(usage(), file=sys.stderr)
            raise SystemExit(2)
    opts["phases"] = opts["phases"] or list(PHASES)
    if opts["factor"] is not None:
        try:
            opts["factor"] = float(opts["factor"])
        except ValueError:
            raise SystemExit(
                f"gpu-session: --factor must be a number, got {opts['factor']!r}") from None
        if not (opts["rehearse"] and 0 < opts["factor"] < math.inf):
            raise SystemExit("gpu-session: --factor needs --rehearse and a number > 0")
    return opts


def rehearsal_copy() -> tuple[Path, str]:
    """A copy of this checkout's files (tracked, and untracked but not ignored, as the device
    tool carries them, plus .whl/) in a new temporary folder, and the checkout's commit."""
    import tempfile

    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, text=True, check=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    top = Path(tempfile.mkdtemp(prefix="gpudl-rehearsal-"))
    copy = top / "repo"
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    if (ROOT / ".whl").is_dir():
        shutil.copytree(ROOT / ".whl", copy / ".whl")
    return copy, commit


def main(argv: list[str]) -> int:
    try:
        opts = parse(argv)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 2
        return stop.code or 0
    budget = load_budget()
    python = os.environ.get("PYTHON", "python3")
    names = notebook_names()
    if opts["notebooks"]:
        wanted = opts["notebooks"].split(",")
        chosen = [n for n in names if any(n.startswith(w) or n == w for w in wanted)]
        if not chosen:
            print(f"gpu-session: no notebook matches {wanted}", file=sys.stderr)
            return 2
        names = chosen
    missing = [n for n in names if n not in budget["plan"]["notebooks"]]
    if missing:
        print(f"gpu-session: .ci/gpu-budget.json plans no limit for {missing}", file=sys.stderr)
        return 2
    if opts["check_env"]:
        found = incompatible(python)
        print("image: " + (found or "numpy, numba and Jupyter as gpudl needs them: "
                                    "no wheels needed"))
        return 0
    factor = (opts["factor"] or rehearsal_factor(budget)) if opts["rehearse"] else 1
    if opts["plan"]:
        if opts["markdown"]:
            print(markdown_table(budget))
        else:
            print_plan(budget, opts["phases"], names, factor)
        return 0
    out = os.environ.get("OUT")
    root = ROOT
    if opts["rehearse"]:
        # a copy of the checkout, as the GPU machine gets one: the rehearsal leaves this
        # checkout's notebooks and results as they are
        root, commit = rehearsal_copy()
        os.environ.setdefault("GPUDL_COMMIT", commit)
        out = out or str(root.parent / "out")
        print(f"gpu-session: REHEARSAL on the simulator in a copy of the checkout ({root}), "
              f"every limit x {factor} (the simulator's time over a GPU's, from "
              ".ci/gpu-budget.json)")
    if not out:
        print("gpu-session: OUT must name the folder whose files come back", file=sys.stderr)
        return 2
    if not os.environ.get("GPUDL_COMMIT") and not (root / ".git").exists():
        print("gpu-session: no .git here: set GPUDL_COMMIT to the commit of this checkout",
              file=sys.stderr)
        return 2
    print_plan(budget, opts["phases"], names, factor)
    session = Session(root, Path(out), budget, factor, python)
    env = session.env
    env |= {"PYTHONUNBUFFERED": "1", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
            "NUMBA_CUDA_WARN_ON_IMPLICIT_COPY": "0"}
    if opts["rehearse"]:
        env["GPUDL_BACKEND"] = "simulator"

    # wheels
    start = time.monotonic()
    found = incompatible(python)
    path = [str(root)]
    if found:
        wheels = sorted((root / ".whl").glob("*.whl"))
        if not wheels:
            session.say(f"STOP: the image has {found}, and .whl/ holds no wheels "
                        "(run make gpu-wheels, carry .whl)")
            session.pack()
            return 4
        session.say(f"image: {found}: installing .whl/ onto PYTHONPATH")
        site = Path("/tmp/gpudl-site")
        done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                               "--no-compile", "--no-cache-dir", "--upgrade", "--target",
                               str(site), *map(str, wheels)], capture_output=True, text=True)
        (session.logs / "env.txt").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            session.say("STOP: pip failed (logs/env.txt)")
            session.pack()
            return 4
        path.insert(0, str(site))
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                 else []))
    if found:
        still = incompatible(python, env)
        if still:
            session.say(f"STOP: still {still} after installing .whl/")
            session.pack()
            return 4
    session.say(f"wheels: {'installed' if found else 'none needed'} in "
                f"{time.monotonic() - start:.0f} s")

    # info: the backend must be cuda (not checked in a rehearsal)
    info = session.logs / "info.txt"
    outcome, seconds = session.run("info", [python, "-m", "gpudl", "info"],
                                   budget["plan"]["info"]["limit_s"], info)
    text = info.read_text()
    backend = re.search(r"^\[\s*[\d.]+\] backend: (\S+)", text, re.M)
    backend = backend.group(1) if backend else "unknown"
    if not opts["rehearse"] and backend != "cuda":
        session.say(f"STOP: the backend is '{backend}', not cuda: no GPU to measure "
                    "(see logs/info.txt)")
        session.pack()
        return 3
    gpus = count_gpus() if not opts["rehearse"] else None
    gpus = planned_gpus(budget) if gpus is None else gpus
    session.say(f"info: backend {backend}, {gpus} GPU(s) in {seconds:.0f} s")
    session.pack()

    plan = budget["plan"]
    for phase in opts["phases"]:
        if phase == "bench":
            topics = opts["topics"].split(",") if opts["topics"] else ["all"]
            began = time.time()
            for topic in topics:
                session.step(f"bench {topic}" if topic != "all" else "bench",
                             [python, "-m", "gpudl", "bench", topic],
                             plan["bench"]["limit_s"] / len(topics),
                             f"bench-{topic}.txt" if topic != "all" else "bench.txt")
            wanted = measured_topics(budget) if topics == ["all"] else topics
            backend_name = "simulator" if opts["rehearse"] else "cuda"
            stored = {t: root / "results" / f"{t}-{backend_name}.json" for t in wanted}
            missing = [t for t, path in stored.items()
                       if not path.exists() or path.stat().st_mtime < began]
            if missing:
                session.say(f"bench: not stored: {', '.join(missing)} (the next call: "
                            f"--topics {','.join(missing)})")
        elif phase == "tests":
            session.step("tests", [python, "-m", "pytest", "-q", "-rfE", "-m", "gpu", "-p",
                                   "no:cacheprovider", "-p", "no:nbval", "--timeout=60",
                                   *opts["tests"].split()],
                         plan["tests"]["limit_s"], "tests.txt")
        else:
            for name in names:
                need = needs_more_gpus(budget, name, gpus)
                if need:
                    session.say(f"notebook {name}: skipped: its GPU cells need {need} GPUs, "
                                f"this machine has {gpus}; its stored outputs kept")
                    continue
                session.step(f"notebook {name}", [python, "-m", "gpudl", "notebooks", name],
                             plan["notebooks"][name]["limit_s"], f"notebook-{name}.txt")
    total = time.monotonic() - session.start
    verdict = "all steps ok" if not session.failed else "not ok: " + ", ".join(session.failed)
    session.say(f"total: {total:.0f} s of "
                f"{factor * (budget['call_limit_s'] - budget['spare_s']):.0f} s; {verdict}")
    session.pack()
    if opts["rehearse"]:
        with tarfile.open(session.out / "gpu.tar") as tar:
            members = [m for m in tar.getnames() if "/" in m or m in ("results", "logs")]
        print(f"gpu-session: {session.out / 'gpu.tar'} holds {len(members)} entries:")
        for name in members:
            print(f"  {name}")
        if not session.out.is_relative_to(root.parent):
            shutil.rmtree(root.parent, ignore_errors=True)  # the copy; what came back stays
    return 1 if session.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
