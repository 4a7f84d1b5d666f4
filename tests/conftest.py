"""Shared test set-up: decide the backend before anything imports numba, give torch one
thread, and skip the tests marked ``gpu`` unless a real GPU is in use."""

import os
import subprocess
import sys
from pathlib import Path

# One torch (OpenMP) thread in each pytest worker and in what it starts (the labs' kernels,
# torchrun): two workers share two cores, and a second thread per worker only spins. Set
# before torch is imported; a machine that sets it itself keeps its value.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import gpudl  # noqa: F401  (gpudl.backend must run before the first `import numba`)
from gpudl import backend

# isort: split
import numpy as np
import torch

#: float32's machine epsilon, 2**-23: the unit of the tests' error bounds.
EPS32 = float(np.finfo(np.float32).eps)

# One intra-op thread per test process, as every spawned rank has (gpudl.parallel.spawn.spawn):
# `make test` runs two pytest-xdist workers on two cores, and torch's default of a thread per
# core then has each worker's small tensor operations wait for a second thread that the other
# worker keeps busy (test_models' 30 epochs of the torch twin: 3.7 s with 2 threads, 0.7 s
# with 1, on a quiet 2-core machine; the same losses).
torch.set_num_threads(1)


def random_float32(shape: int | tuple[int, ...], seed: int, scale: float | None = None
                   ) -> np.ndarray:
    """float32 standard normals from ``numpy.random.default_rng(seed)``, times ``scale``; with
    no scale, times one power of ten from 1e-3 to 1e3 drawn for the whole array (mixed signs,
    one magnitude per array)."""
    rng = np.random.default_rng(seed)
    if scale is None:
        scale = 10.0 ** rng.integers(-3, 4)
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _runs_a_triton_variant(item) -> bool:
    """A test parametrized with a Triton variant's key (``v5_triton_block``)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(isinstance(v, str) and "_triton_" in v for v in params.values())


def pytest_collection_modifyitems(config, items):
    """The markers of pyproject.toml: ``gpu`` tests skip on the simulator, ``simulator_only``
    tests skip on a GPU, ``compiler`` tests skip where no CUDA compiler is installed,
    ``triton`` tests (and any test parametrized with a Triton variant, which this marks) skip
    where Triton is not installed."""
    from gpudl import registry

    for item in items:
        if _runs_a_triton_variant(item):
            item.add_marker(pytest.mark.triton)
    on_gpu = backend.name() == "cuda"
    skips = {"gpu": (not on_gpu, "needs a real CUDA GPU (running on the simulator)"),
             "simulator_only": (on_gpu, "runs on the simulator only (running on a GPU)"),
             "triton": (not registry.installed("triton"),
                        "needs the package triton (pip install triton==3.9.0, Linux x86_64)")}
    if any("compiler" in item.keywords for item in items):
        from gpudl import ptx
        skips["compiler"] = (not ptx.available(), "no CUDA compiler (libNVVM, libdevice) here")
    for marker, (skip, reason) in skips.items():
        if skip:
            for item in items:
                if marker in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def torchrun():
    """``torchrun(module, *args, nproc=2, timeout=150)`` runs ``python -m torch.distributed.run
    --standalone --nproc_per_node=nproc -m module *args`` with the repository importable, checks
    that it exited with 0 (else fails with the end of its stderr) and returns the process."""

    def run(module: str, *args: str, nproc: int = 2,
            timeout: float = 150) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={nproc}", "-m", module, *args]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run


@pytest.fixture
def fake_cuda_record():
    """``fake_cuda_record(topic="elementwise")``: a small, made-up record of a GPU run in the
    shape ``gpudl.bench.write_results`` stores (for the schema, the import and the book's
    boxes; never a measurement)."""

    def row(name, median_s, n_bytes, **extra):
        return {"name": name, "median_s": median_s, "min_s": median_s, "max_s": median_s,
                "runs": 20, "method": "cuda-events", "meaningful": True, "bytes": n_bytes,
                "gbps": n_bytes and n_bytes / median_s / 1e9, "flops": None,
                "tflops": None} | extra

    def make(topic: str = "elementwise") -> dict:
        from gpudl.bench import elementwise

        what = {spec["name"]: spec["what"] for spec in elementwise.BARS}  # translated too
        n = 1 << 20
        rows = [row("vector_add_v1_naive", 2e-5, 12 * n, group="bandwidth", n=n),
                row("vector_add_v2_grid_stride", 1e-5, 12 * n, group="bandwidth", n=n),
                row("saxpy_v1_naive", 1.1e-5, 12 * n, group="bandwidth", n=n),
                row("torch copy", 8e-6, 8 * n, group="bandwidth", n=n),
                row("saxpy numpy", 1e-3, 12 * n, group="cpu_vs_gpu", n=n),
                row("divergence parity", 2e-3, None, group="divergence", n=n,
                    max_paths_per_warp=2),
                row("divergence warp", 1e-3, None, group="divergence", n=n,
                    max_paths_per_warp=1)]
        ratio = rows[1]["gbps"] / rows[3]["gbps"]
        bars = [{"name": "vector_add_v2_vs_torch_copy", "what": what["vector_add_v2_vs_torch_copy"],
                 "numerator": "vector_add_v2_grid_stride", "denominator": "torch copy",
                 "rate": "gbps",
                 "ratio": ratio, "compare": ">=", "threshold": 0.9, "verdict": ratio >= 0.9},
                {"name": "parity_divergence_over_warp", "what": what["parity_divergence_over_warp"],
                 "numerator": "divergence parity", "denominator": "divergence warp",
                 "rate": "median_s", "ratio": 2.0, "compare": ">=", "threshold": 1.5,
                 "verdict": True}]
        machine = {"backend": "cuda", "gpu": "Fake GPU 9000", "gpu_count": 1,
                   "driver": "999.1.2", "cuda_driver": "13.0", "cuda_runtime": "13.0",
                   "torch_cuda": "13.0", "platform": "Linux", "python": "3.12.3",
                   "cpu": "fake", "cpu_count": 16,
                   "versions": {"numpy": "2.4.6", "numba": "0.68.1", "numba-cuda": "0.30.4",
                                "torch": "2.11.0"}, "device": {}}
        return {"topic": topic, "backend": "cuda", "machine": machine,
                "commit": "0123abcd" * 5, "date": "2026-12-01T00:00:00+00:00",
                "timings_meaningful": True, "n": n, "cpu_threads": 16, "rows": rows,
                "bars": bars}

    return make


# --- the built book ------------------------------------------------------------------------------

#: Where `make book` builds the book: English at the root, Chinese under ``ZH``.
HTML = ROOT / "_build" / "html"
ZH = "zh_CN"


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """Both built editions (English in the folder returned, Chinese in its ``ZH``): `make
    test` builds them (warnings as errors) before the tests; a run without them, such as
    `pytest tests/test_book.py` in a fresh clone, builds a copy as `make book` does (the
    figures once, by the English build; the Chinese build reuses them)."""
    pytest.importorskip("sphinx", reason="building the book needs Sphinx (pip install -e '.[dev]')")
    if (HTML / ZH / "index.html").exists() and (HTML / "index.html").exists():
        return HTML
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "jupyter-book").exists():
        pytest.skip(f"no built book in {HTML} and no jupyter-book command in {bin_dir}")
    out = tmp_path_factory.mktemp("book") / "_build"
    for command in ([str(bin_dir / "jupyter-book"), "build", str(ROOT), "--path-output",
                     str(out.parent)],
                    [str(bin_dir / "sphinx-build"), "-q", "-b", "html", "-t", ZH, "-D",
                     "gpudl_model_figures=0", "-d", str(out / ".doctrees-zh"), str(ROOT),
                     str(out / "html" / ZH)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return out / "html"


def pages(root: Path) -> list[Path]:
    """The pages of the edition built at ``root`` (not its landing page, assets or sources)."""
    skip = ("_static", "_sources", "_images", "jupyter_execute", ZH)
    return [p for p in sorted(root.rglob("*.html"))
            if p.relative_to(root).parts[0] not in skip and p.name != "index.html"]
