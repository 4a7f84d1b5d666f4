"""gpudl.kernels.tiles: Triton's kernels run where Numba's do (its interpreter on the
simulator, on CPU tensors that share the simulated arrays' memory), every launch is held to
CUDA's limits, Adam's Triton variant updates a whole parameter group in one launch as torch's
Adam does, and without Triton the package imports, the Triton variants are absent and asking
for one names the package to install."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpudl import backend, registry, triton_ptx
from gpudl.interop import as_tensor

# isort: split
from numba import cuda

from gpudl.kernels import elementwise

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.simulator_only
@pytest.mark.triton
def test_on_the_simulator_triton_s_interpreter_runs_the_kernels():
    from triton.runtime.interpreter import InterpretedFunction

    from gpudl.kernels.tiles import elementwise as tiled

    assert os.environ["TRITON_INTERPRET"] == "1"
    assert isinstance(tiled.v5_triton_block, InterpretedFunction)


def test_a_device_array_is_a_tensor_of_the_same_memory():
    x = cuda.to_device(np.arange(5, dtype=np.float32))
    t = as_tensor(x, "x")
    assert t.device.type == ("cpu" if backend.is_simulator() else "cuda")
    t[2] = 42.0
    assert x.copy_to_host()[2] == 42.0
    with pytest.raises(TypeError, match="x must be a numba device array, got ndarray"):
        as_tensor(np.zeros(3, np.float32), "x")


@pytest.mark.triton
def test_a_triton_launch_writes_the_device_arrays_it_is_given():
    a, b = (np.linspace(0, 1, 3001, dtype=np.float32) for _ in range(2))
    a_d, b_d = cuda.to_device(a), cuda.to_device(b)
    out = cuda.to_device(np.full(3001, np.nan, np.float32))
    elementwise.VARIANTS["v5_triton_block"](a_d, b_d, out, 256)
    np.testing.assert_array_equal(out.copy_to_host(), a + b)


@pytest.mark.triton
def test_a_launch_beyond_cuda_s_limits_is_refused_before_it_starts():
    from gpudl.kernels.tiles import runtime
    from gpudl.kernels.tiles.elementwise import v5_triton_block

    with pytest.raises(ValueError, match=r"v5_triton_block \(Triton\).*65,535|65535"):
        runtime.launch(v5_triton_block, (1, 70_000), None, None, None, 1, BLOCK=1024)
    with pytest.raises(ValueError, match="grid"):
        runtime.launch(v5_triton_block, (0,), None, None, None, 1, BLOCK=1024)


@pytest.mark.triton
def test_adam_s_triton_variant_steps_a_whole_group_in_one_launch_as_torch(monkeypatch):
    from gpudl import optim
    from gpudl.kernels.tiles import adam as tiled_adam

    launches = []
    real = tiled_adam.launch
    monkeypatch.setattr(tiled_adam, "launch", lambda *a, **k: (launches.append(a[0]),
                                                                  real(*a, **k)))
    gen = torch.Generator().manual_seed(0)
    ours = [torch.randn(s, generator=gen).requires_grad_() for s in (37, 3, 20)]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    o_opt = optim.AdamW(ours, lr=0.05, weight_decay=0.1, variant="v5_triton_multi_tensor")
    t_opt = torch.optim.AdamW(theirs, lr=0.05, weight_decay=0.1)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=gen) for p in ours]
        for ps, opt in ((ours, o_opt), (theirs, t_opt)):
            opt.zero_grad()
            for p, g in zip(ps, grads, strict=True):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert len(launches) == 3 and o_opt.flat_groups  # one launch per step, over flat buffers


@pytest.mark.triton
def test_triton_signatures_are_parsed_and_checked():
    assert triton_ptx.parse_signature("(*fp32:16, i32, fp32)") == [
        ("*fp32", True), ("i32", False), ("fp32", False)]
    with pytest.raises(ValueError, match="signature must read"):
        triton_ptx.parse_signature("void(float32[::1])")


_WITHOUT_TRITON = """
import importlib.abc, importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a, **k: (
    None if name.split(".")[0] == "triton" else real(name, *a, **k))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "triton":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
import numpy as np
import gpudl
from gpudl import registry
from gpudl.kernels import attention, decode, elementwise, matmul, optim, reduction, softmax
registry.load_all()
assert "triton" not in sys.modules
for family, key in [("vector_add", "v5_triton_block"), ("reduce", "v8_triton_block"),
                    ("softmax", "v2_triton_online"), ("matmul", "v6_triton_tiles"),
                    ("adam", "v5_triton_multi_tensor"), ("attention", "v3_triton_flash"),
                    ("decode", "v3_triton_split_kv")]:
    assert key not in registry.VARIANTS[family]
    assert registry.ABSENT[family][key].requires == "triton"
a = np.ones(5, np.float32)
try:
    elementwise.vector_add(a, a, variant="v5_triton_block")
except ModuleNotFoundError as error:
    print("refused:", error)
print("numba:", elementwise.vector_add(a, a, variant="v1_naive").tolist())
"""


def test_without_triton_the_package_imports_and_its_variants_are_absent_and_refused():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                     os.environ.get(
                                                                         "PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TRITON], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("refused: variant vector_add_v5_triton_block needs the package 'triton', which "
            "is not installed here (pip install triton==3.9.0") in done.stdout
    assert "numba: [2.0, 2.0, 2.0, 2.0, 2.0]" in done.stdout


def test_a_triton_kernel_is_in_the_registry_whether_or_not_triton_is_installed():
    kernels = registry.load_all()
    tiled = {name for name, entry in kernels.items() if entry.kind == "triton"}
    assert {"vector_add_v5_triton_block", "reduce_v8_triton_block", "softmax_v2_triton_online",
            "matmul_v6_triton_tiles", "matmul_v7_triton_float16", "adam_v5_triton_multi_tensor",
            "attention_v3_triton_flash", "attention_v4_triton_flash_float16",
            "attention_v3_triton_flash_dq", "attention_v3_triton_flash_dkdv",
            "attention_v3_triton_flash_delta", "decode_v3_triton_split_kv",
            "decode_v3_triton_combine_splits", "ch10_bias_gelu", "ch10_layer_norm"} == tiled
    assert all(kernels[name].module.startswith(("gpudl.kernels.tiles.", "gpudl.solutions."))
               for name in tiled)
