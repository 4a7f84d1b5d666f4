"""The commands for a lent GPU machine, as far as a CPU can run them: `.ci/gpu-session` (its
arguments, a fake OUT, the early stop when the backend is not cuda, the check of the image's
packages) and `.ci/gpu-wheels` (`make gpu-wheels`: its arguments, its size limit, its pins)."""

import json
import os
import re
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = str(Path(sys.executable).parent)  # python3 there is this test's Python


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPUDL_COMMIT")}
    environ["PATH"] = VENV_BIN + os.pathsep + environ["PATH"]
    return subprocess.run(["bash", str(ROOT / ".ci" / script), *args], capture_output=True,
                          text=True, timeout=240, env=environ | env, cwd=ROOT)


# --- gpu-session -----------------------------------------------------------------------------


def test_session_help_and_bad_arguments():
    done = run("gpu-session", "--help")
    assert done.returncode == 0 and "--rehearse" in done.stdout and "bench" in done.stdout
    done = run("gpu-session", "notebooks", "benchmarks", OUT="/nonexistent")
    assert done.returncode == 2 and "unknown phase or option 'benchmarks'" in done.stderr
    done = run("gpu-session", "tests")  # no OUT
    assert done.returncode == 2 and "OUT must name the folder" in done.stderr
    done = run("gpu-session", "--factor", "2")
    assert done.returncode == 2 and "--factor needs --rehearse" in done.stderr
    done = run("gpu-session", "--rehearse", "--notebooks", "99")
    assert done.returncode == 2 and "no notebook matches" in done.stderr


def _budget() -> dict:
    return json.loads((ROOT / ".ci" / "gpu-budget.json").read_text())


def test_the_planned_gpu_run_fits_one_call_with_a_minute_to_spare():
    budget = _budget()
    assert budget["call_limit_s"] == 600 and budget["spare_s"] >= 60
    plan = budget["plan"]
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert set(plan["notebooks"]) == notebooks  # every notebook has its own limit
    total = sum(plan[k]["limit_s"] for k in ("wheels", "info", "bench", "tests", "tars"))
    # on the planned machine (the lent H200: one GPU) a lab whose GPU cells need more is skipped
    gpus = plan["gpus"]["count"]
    assert gpus == 1 and plan["gpus"]["basis"]
    runs = {n: e for n, e in plan["notebooks"].items() if e.get("min_gpus", 1) <= gpus}
    assert set(plan["notebooks"]) - set(runs) == {"05-data-parallel", "06-model-parallel",
                                                  "11-experts-long-sequences"}
    total += sum(entry["limit_s"] for entry in runs.values())
    assert total <= budget["call_limit_s"] - budget["spare_s"]
    done = run("gpu-session", "--plan")
    assert done.returncode == 0
    assert re.search(rf"total\s+{total} s \(at most 540 s\)", done.stdout), done.stdout
    # each limit says what it is made of, and the measured table is the one CONTRIBUTING shows
    assert all(entry.get("basis") for entry in [plan[k] for k in ("wheels", "info", "bench",
               "tests", "tars")] + list(plan["notebooks"].values()))
    table = run("gpu-session", "--plan", "--markdown").stdout.strip()
    assert table.count("\n") >= len(notebooks) + 6
    assert table in (ROOT / "CONTRIBUTING.md").read_text()


@pytest.mark.timeout(240)
def test_session_stops_at_once_without_a_gpu_and_still_packs(tmp_path):
    done = run("gpu-session", OUT=str(tmp_path), GPUDL_BACKEND="simulator",
               GPUDL_COMMIT="0123abc")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "STOP: the backend is 'simulator', not cuda" in done.stdout
    with tarfile.open(tmp_path / "gpu.tar") as tar:
        names = tar.getnames()
    assert "logs/info.txt" in names and "logs/summary.txt" in names
    assert any(n.startswith("notebooks/") and n.endswith(".ipynb") for n in names)
    assert not (tmp_path / "logs" / "notebook-01-hardware.txt").exists()  # no phase ran
    assert "backend: simulator" in (tmp_path / "logs" / "info.txt").read_text()


def test_session_checks_the_images_packages(tmp_path):
    assert "no wheels needed" in run("gpu-session", "--check-env").stdout
    # an image with numpy 2.5 and without Jupyter, as the lent H200's
    fake = tmp_path / "site"
    for name, version in (("numpy", "2.5.2"), ("numba", "0.68.0")):
        info = fake / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\n")
    done = run("gpu-session", "--check-env", PYTHONPATH=str(fake))
    assert "numpy 2.5.2 (numba-cuda 0.30.4 needs numpy < 2.5)" in done.stdout
    assert "numba 0.68.0 (pinned: 0.68.1)" in done.stdout


def _members(tar_path: Path) -> set[str]:
    with tarfile.open(tar_path) as tar:
        return set(tar.getnames())


@pytest.mark.timeout(600)
def test_a_reduced_rehearsal_runs_every_phase_and_returns_a_tar_after_each(tmp_path):
    out = tmp_path / "out"
    done = run("gpu-session", "--rehearse", "--topics", "precision", "--notebooks", "07",
               "--tests", "tests/test_elementwise.py", OUT=str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "REHEARSAL on the simulator" in done.stdout and "planned budget x" in done.stdout
    summary = (out / "logs" / "summary.txt").read_text().splitlines()
    steps = ["wheels: none needed", "info: backend simulator", "bench precision: ok",
             "tests: ok", "notebook 07-case-study: ok", "total:"]
    assert [next((i for i, line in enumerate(summary) if line.startswith(s)), None)
            for s in steps] == list(range(len(steps))), summary
    assert "stored results/precision-simulator.json" in summary[2]
    assert "stored notebooks/07-case-study.ipynb" in summary[4]
    # one tar after each step: info, bench, tests, the notebook, and the last
    tars = sorted((out / "steps").glob("*.tar"))
    assert len(tars) == 5
    after = [_members(t) for t in tars]
    assert "results/precision-simulator.json" not in after[0]
    assert all("results/precision-simulator.json" in m for m in after[1:])
    assert "logs/tests.txt" not in after[1] and "logs/tests.txt" in after[2]
    assert "logs/notebook-07-case-study.txt" in after[3]
    assert all("logs/summary.txt" in m and "notebooks/07-case-study.ipynb" in m for m in after)
    log = (out / "logs" / "notebook-07-case-study.txt").read_text()
    assert "wrote" in log and "without encryption" not in log and "Traceback" not in log
    assert "DeprecationWarning" not in (out / "logs" / "tests.txt").read_text()


@pytest.mark.timeout(240)
def test_a_notebook_cut_short_gives_one_line_and_keeps_its_outputs(tmp_path):
    out = tmp_path / "out"
    done = run("gpu-session", "--rehearse", "--factor", "0.2", "notebooks", "--notebooks",
               "05,07", OUT=str(out))
    assert done.returncode == 1
    summary = (out / "logs" / "summary.txt").read_text()
    limit = round(0.2 * _budget()["plan"]["notebooks"]["07-case-study"]["limit_s"])
    assert re.search(rf"^notebook 07-case-study: cut short at its limit of {limit} s in \d+ s",
                     summary, re.M), summary
    # lab 5's GPU cells need 2 GPUs: on the planned machine of one it is skipped, and said so
    assert re.search(r"^notebook 05-data-parallel: skipped: its GPU cells need 2 GPUs, this "
                     r"machine has 1; its stored outputs kept$", summary, re.M), summary
    assert not (out / "logs" / "notebook-05-data-parallel.txt").exists()
    # the lab keeps its stored outputs; what its cells stored before the cut (lab 7's
    # benchmark cell stores its simulator run on a quiet machine) is named, never the lab
    assert "Traceback" not in summary and "notebooks/07-case-study.ipynb" not in summary
    with tarfile.open(out / "gpu.tar") as tar:
        back = tar.extractfile("notebooks/07-case-study.ipynb").read()
    assert back == (ROOT / "notebooks" / "07-case-study.ipynb").read_bytes()


# --- gpu-wheels ------------------------------------------------------------------------------


def test_wheels_dry_run_and_bad_arguments():
    done = run("gpu-wheels", "--dry-run")
    assert done.returncode == 0
    command = done.stdout.split()
    assert command[1:4] == ["-m", "pip", "download"]
    assert "--python-version 3.12" in done.stdout and "manylinux_2_28_x86_64" in done.stdout
    assert command[-2:] == ["--requirement", ".ci/gpu-wheels.txt"]
    assert run("gpu-wheels", "--max-mb", "lots").returncode == 2
    assert run("gpu-wheels", "--nonsense").returncode == 2


def test_wheels_size_limit(tmp_path):
    pins = sum("==" in line for line in (ROOT / ".ci" / "gpu-wheels.txt").read_text().splitlines())
    for i in range(pins):
        (tmp_path / f"w{i}-1.0-py3-none-any.whl").write_bytes(b"x" * 100_000)
    small = run("gpu-wheels", "--check", "--dir", str(tmp_path), "--max-mb", "40")
    assert small.returncode == 0, small.stderr
    assert f"{pins} wheels for {pins} pins" in small.stdout
    assert f"{pins * 0.1:.1f} MB (limit 40 MB)" in small.stdout
    big = run("gpu-wheels", "--check", "--dir", str(tmp_path), "--max-mb", "1")
    assert big.returncode == 1 and "over the limit of 1 MB" in big.stderr
    (tmp_path / "w0-1.0-py3-none-any.whl").unlink()
    short = run("gpu-wheels", "--check", "--dir", str(tmp_path))
    assert short.returncode == 1 and "one wheel per pin" in short.stderr


#: The lent machine's Python, for the markers of the requirements.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
          "implementation_name": "cpython", "platform_python_implementation": "CPython",
          "extra": ""}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_wheel_pins_are_what_jupyter_needs_here_less_what_the_image_has():
    text = (ROOT / ".ci" / "gpu-wheels.txt").read_text()
    pins = dict(line.split("==") for line in text.splitlines() if "==" in line)
    image = set(re.search(r"^# image-has: (.*)$", text, re.M).group(1).split())
    assert pins.pop("numpy") < "2.5" and pins.pop("numba") == "0.68.1"
    needed, todo = {}, ["nbval", "nbclient", "ipykernel"]
    while todo:
        name = _norm(todo.pop())
        if name in needed or name in image:
            continue
        dist = metadata.distribution(name)
        needed[name] = dist.version
        for req in map(Requirement, dist.requires or []):
            if req.marker is None or req.marker.evaluate(TARGET):
                todo.append(req.name)
    assert {_norm(k): v for k, v in pins.items()} == needed  # the versions tested here


# --- the GPU machine's image: tests collect without Jupyter or Sphinx ---------------------------

#: What the lent GPU machine's image lacks (TOOLCHAIN of the project's GPU runs): nothing under
#: tests/ may need them to be collected.
IMAGE_LACKS = ("docutils", "sphinx", "myst_nb", "myst_parser", "jupyter_book", "nbformat",
               "nbclient", "ipykernel", "nbval", "sphinxcontrib")

_BLOCKED_COLLECT = """
import sys
blocked = set(sys.argv[1].split(","))

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _collect(*args: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_COLLECT, ",".join(blocked) or "-", "--collect-only",
         "-q", "-rs", "-p", "no:nbval", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, timeout=240, cwd=ROOT)


@pytest.mark.timeout(300)
def test_gpu_tests_collect_where_jupyter_and_sphinx_are_missing():
    done = _collect("-m", "gpu", "tests", blocked=IMAGE_LACKS)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    collected = re.search(r"(\d+)/\d+ tests collected", out)
    assert collected and int(collected.group(1)) >= 43, out[-1000:]
    assert " error" not in out.splitlines()[-1], out[-1000:]
    # the only modules skipped for a missing package are the book's (its pages, the labs' install
    # cell, the wheel it ships) and the Chinese edition's, which have no gpu test
    skipped = re.findall(r"^SKIPPED \[\d+\] (\S+?):", out, re.M)
    assert skipped == ["tests/test_book.py", "tests/test_i18n.py",
                       "tests/test_lab_install_cell.py", "tests/test_wheel.py",
                       "tests/test_zh_pages.py"], out[-2000:]
    assert not any("mark.gpu" in (ROOT / path).read_text() for path in skipped)


def test_the_blocker_really_blocks():
    code = _BLOCKED_COLLECT.replace("import pytest\nsys.exit(pytest.main(sys.argv[2:]))",
                                    "import docutils")
    done = subprocess.run([sys.executable, "-c", code, "docutils"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "blocked" in done.stderr


# --- versions: the ranges gpudl declares, the exact ones CI proves ------------------------------


def _pins(path: Path) -> dict[str, str]:
    return {_norm(name): version for name, version in
            (line.split("==") for line in path.read_text().splitlines()
             if line and not line.startswith("#"))}


def test_ci_runs_with_the_constraints_and_they_fit_the_declared_ranges():
    import tomllib

    from packaging.specifiers import SpecifierSet

    pins = _pins(ROOT / "constraints.txt")
    # what this environment runs is what constraints.txt says CI proves
    for name in ("torch", "numpy", "numba", "numba-cuda", "jupyter-book", "pytest"):
        assert metadata.version(name).split("+")[0] == pins[name], name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        req = Requirement(line)
        assert _norm(req.name) in pins, f"{req.name} is not pinned in constraints.txt"
        assert SpecifierSet(str(req.specifier)).contains(pins[_norm(req.name)]), line
    # torch is a range, not a pin: installing gpudl keeps a GPU machine's own torch
    torch_req = next(Requirement(r) for r in project["dependencies"] if r.startswith("torch"))
    assert not any(s.operator == "==" for s in torch_req.specifier)
    assert SpecifierSet(str(torch_req.specifier)).contains("2.11.0")  # the lent H200's
    makefile = (ROOT / "Makefile").read_text()
    assert makefile.count("-c constraints.txt") == 2
