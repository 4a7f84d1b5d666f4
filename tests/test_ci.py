"""The commands for a lent GPU machine, as far as a CPU can run them: `.ci/gpu-session` (its
arguments, a fake OUT, the early stop when the backend is not cuda, the check of the image's
packages) and `.ci/gpu-wheels` (`make gpu-wheels`: its arguments, its size limit, its pins)."""

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
    assert done.returncode == 0 and "NB_LIMIT 280" in done.stdout
    done = run("gpu-session", "notebooks", "benchmarks", OUT="/nonexistent")
    assert done.returncode == 2 and "unknown phase 'benchmarks'" in done.stderr
    done = run("gpu-session", "tests")  # no OUT
    assert done.returncode != 0 and "OUT must name the folder" in done.stderr


def test_session_phase_limits_fit_in_eight_minutes():
    text = (ROOT / ".ci" / "gpu-session").read_text()
    limits = {name: int(value) for name, value in
              re.findall(r"\$\{(\w+_LIMIT):-(\d+)\}", text)}
    assert set(limits) == {"INFO_LIMIT", "NB_LIMIT", "TESTS_LIMIT", "BENCH_LIMIT"}
    # each with 10 s to be killed, and 20 s to install the wheels and write the tars
    assert sum(limits.values()) + 10 * len(limits) + 20 <= 8 * 60
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert sum("timeout -k 10" in line for line in code) == 2  # the info check, every phase


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
    assert not (tmp_path / "logs" / "notebooks.txt").exists()  # no phase ran
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
