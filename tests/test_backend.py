"""gpudl.backend: the backend decision (GPU, simulator or compile-only), made once."""

import os
import subprocess
import sys

import pytest

from gpudl import backend


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUDL_", "NUMBA_"))}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_name_and_pick_agree():
    assert backend.name() in ("cuda", "simulator")
    assert backend.is_simulator() == (backend.name() == "simulator")
    expected = "big" if backend.name() == "cuda" else "small"
    assert backend.pick(gpu="big", sim="small") == expected


def test_override_to_simulator_sets_numba_flag():
    out = run_python(
        "import gpudl, numba; print(gpudl.backend.name(), numba.config.ENABLE_CUDASIM)",
        GPUDL_BACKEND="simulator",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["simulator", "1"]


def test_bad_override_is_a_clear_error():
    out = run_python("import gpudl", GPUDL_BACKEND="tpu")
    assert out.returncode != 0
    assert "GPUDL_BACKEND (when set) must be one of" in out.stderr


def test_numba_imported_first_with_the_other_target_is_an_error():
    # numba imported without the simulator, then gpudl asked for the simulator
    out = run_python("import numba; import gpudl", GPUDL_BACKEND="simulator")
    assert out.returncode != 0
    assert "numba was imported before gpudl" in out.stderr
    assert "'cuda' CUDA target" in out.stderr


def test_numba_imported_first_with_the_same_target_is_fine():
    out = run_python(
        "import numba; import gpudl; print(gpudl.backend.name())",
        GPUDL_BACKEND="simulator",
        NUMBA_ENABLE_CUDASIM="1",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "simulator"


def test_the_compile_backend_is_the_cuda_target_with_the_gpu_settings():
    out = run_python(
        "import gpudl, numba; from gpudl import backend; "
        "print(backend.name(), numba.config.ENABLE_CUDASIM, backend.is_simulator(), "
        "backend.pick(gpu='big', sim='small'))",
        GPUDL_BACKEND="compile",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compile", "0", "False", "big"]
    # numba imported first with the simulator cannot compile for a GPU
    out = run_python("import numba; import gpudl", GPUDL_BACKEND="compile",
                     NUMBA_ENABLE_CUDASIM="1")
    assert out.returncode != 0 and "needs the 'compile' backend" in out.stderr


@pytest.mark.simulator_only
def test_forcing_cuda_without_a_gpu_is_an_error():
    out = run_python("import gpudl", GPUDL_BACKEND="cuda")
    assert out.returncode != 0
    assert "no GPU" in out.stderr
