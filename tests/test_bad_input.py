"""The classes of bad input that once got wrong answers, each refused (or answered rightly) at
its root: NaN never passes "equal", loaded optimizer state is checked against its parameter,
non-contiguous parameters are optimized as torch optimizes them, compiled references and
kernels that index with data stay in bounds, every launch is held to CUDA's limits, kernels
propagate NaN as their torch twins do, processes are never started for arguments that cannot
work, and stopping workers that ignore SIGTERM takes one grace period, not one per worker."""

import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from workers import hello

from gpudl import launches, registry
from gpudl.kernels import bias_gelu, hierarchy, matmul, nn
from gpudl.optim import SGD, Adam
from gpudl.parallel import data as data_parallel
from gpudl.parallel import spawn as processes
from gpudl.parallel.zero import max_difference

NAN = float("nan")
ROOT = Path(__file__).resolve().parent.parent
ADAM_VARIANTS = tuple(registry.variants("adam"))


# --- NaN never passes "equal" -------------------------------------------------------------


def _record(losses, params):
    return {"rank": 0, "losses": list(losses), "params": [np.asarray(p, np.float32)
                                                          for p in params]}


@pytest.mark.parametrize("where", ["loss", "params", "reference"])
def test_compare_calls_nothing_with_a_nan_equal(where):
    ones = [np.ones(3)] * 3
    reference = _record([1.0, 1.0, 1.0], ones)
    bad = {"loss": _record([1.0, NAN, 1.0], ones),
           "params": _record([1.0] * 3, [np.ones(3), np.array([1, NAN, 1]), np.ones(3)]),
           "reference": _record([1.0] * 3, ones)}[where]
    if where == "reference":
        reference = _record([NAN, 1.0, 1.0], ones)
    diff = data_parallel.compare([bad], reference)
    assert diff["equal"] is False
    assert math.isnan(diff["loss"] if where != "params" else diff["params"])
    assert data_parallel.compare([reference], reference)["equal"] is (where != "reference")


def test_max_difference_is_nan_when_a_step_is():
    reference = {"params": [torch.ones(3), torch.ones(3)]}
    run = {"params": [torch.ones(3), torch.tensor([1.0, NAN, 1.0])]}
    assert math.isnan(max_difference(run, reference))
    assert max_difference(reference, reference) == 0.0


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_check_replicas_refuses_a_nan_weight_on_one_rank():
    with pytest.raises(processes.WorkerError, match="NaN element"):
        processes.spawn(_replicas_with_a_nan, 2, timeout=60)


def _replicas_with_a_nan(rank, world_size):
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(0.0)
        if rank == 1:
            layer.weight[0, 0] = NAN
    data_parallel.check_replicas(layer)


# --- loaded optimizer state ---------------------------------------------------------------


def _state_dict(**state):
    return {"state": {0: state}, "param_groups": [{"params": [0], "lr": 0.1}]}


@pytest.mark.parametrize("variant", ADAM_VARIANTS)
def test_adam_refuses_moments_of_the_wrong_shape_like_torch(variant):
    p = torch.nn.Parameter(torch.ones(5))
    opt = Adam([p], variant=variant)
    group = opt.state_dict()["param_groups"]
    bad = {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.ones(1),
                         "exp_avg_sq": torch.ones(1)}}, "param_groups": group}
    with pytest.raises(ValueError, match=r"'exp_avg'\] has shape \(1,\), but parameter 0 has "
                                         r"shape \(5,\)"):
        opt.load_state_dict(bad)
    assert not opt.state  # nothing was loaded
    torch_opt = torch.optim.Adam([torch.nn.Parameter(torch.ones(5))])
    torch_opt.load_state_dict(bad)
    torch_opt.param_groups[0]["params"][0].grad = torch.ones(5)
    with pytest.raises(RuntimeError):  # torch finds it at the step, as a shape error
        torch_opt.step()


def test_loaded_state_must_be_floating_point_and_steps_whole():
    p = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(TypeError, match="floating-point"):
        Adam([p]).load_state_dict(_state_dict(step=1, exp_avg=torch.ones(3, dtype=torch.int64),
                                              exp_avg_sq=torch.ones(3)))
    with pytest.raises(ValueError, match="whole number"):
        Adam([p]).load_state_dict(_state_dict(step=torch.tensor(-1.0), exp_avg=torch.ones(3),
                                              exp_avg_sq=torch.ones(3)))
    with pytest.raises(ValueError, match="momentum_buffer'\\] has shape"):
        SGD([p], lr=0.1, momentum=0.9).load_state_dict(
            _state_dict(momentum_buffer=torch.ones(2)))


# --- non-contiguous parameters --------------------------------------------------------------


def _train(make, steps=3):
    torch.manual_seed(0)
    transposed = torch.nn.Parameter(torch.randn(4, 3).t())  # not contiguous, dense
    strided = torch.nn.Parameter(torch.randn(6, 5)[:, ::2])  # not contiguous, not dense
    opt = make([transposed, strided])
    weights = torch.arange(12.0).view(3, 4)
    for _ in range(steps):
        opt.zero_grad()
        ((transposed * weights).sum() + (strided ** 2).sum()).backward()
        opt.step()
    return transposed.detach(), strided.detach()


@pytest.mark.parametrize("name", ["SGD", *ADAM_VARIANTS])
def test_non_contiguous_parameters_are_optimized_as_torch_optimizes_them(name):
    if name == "SGD":
        kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
        ours, theirs = (_train(lambda ps, c=cls: c(ps, **kw)) for cls in (SGD, torch.optim.SGD))
    else:
        kw = dict(lr=0.01, weight_decay=0.1)
        ours = _train(lambda ps: Adam(ps, variant=name, **kw))
        theirs = _train(lambda ps: torch.optim.Adam(ps, **kw))
    for got, want in zip(ours, theirs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


# --- references and kernels that index with data ------------------------------------------


@pytest.mark.parametrize("chain", [np.array([1, 100_000], np.int32), np.array([1, -1], np.int32),
                                   np.array([2, 0, -1], np.int32)])
def test_a_chain_that_leads_outside_itself_is_refused_before_a_launch(chain, monkeypatch):
    with pytest.raises(ValueError, match="chain: hop"):
        hierarchy.reference_chase(chain, 3)
    monkeypatch.setattr(hierarchy, "launch_chase", lambda *a: pytest.fail("launched"))
    with pytest.raises(ValueError, match="chain: hop"):
        hierarchy.pointer_chase(chain, 3)


# --- every launch held to CUDA's limits -------------------------------------------------------


def test_a_matmul_grid_beyond_cudas_limit_is_refused_naming_kernel_and_limit():
    with pytest.raises(ValueError, match=r"gpudl.kernels.matmul.v5_register_2d: griddim "
                                         r"\(1, 65536, 1\) has 65,536 blocks along y, outside "
                                         r"CUDA's limit of 1 to 65,535"):
        matmul.launch_config("v5_register_2d", 8388608, 8)
    assert matmul.launch_config("v5_register_2d", 8388480, 8)[0][1] == 65_535


@pytest.mark.parametrize(("shared", "ok"), [(48 * 1024, True), (48 * 1024 + 4, False)])
def test_dynamic_shared_memory_beyond_the_default_limit_is_refused(shared, ok):
    if ok:
        launches.check_launch("k", 1, 32, shared)
    else:
        with pytest.raises(ValueError, match="k: shared_bytes"):
            launches.check_launch("k", 1, 32, shared)


@pytest.mark.timeout(300)
def test_the_real_cuda_dispatcher_checks_launches_too():
    # the compile backend is numba's real CUDA target without a GPU: configuring a launch
    # needs no driver, so the guard on CUDADispatcher can be seen here
    code = ("import gpudl\nfrom gpudl.kernels import matmul\n"
            "k = matmul.v1_naive\nk[(1, 65535), 32]\n"
            "try:\n    k[(1, 65536), 32]\nexcept ValueError as e:\n    print(e)\n")
    env = os.environ | {"GPUDL_BACKEND": "compile", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gpudl.kernels.matmul.v1_naive: griddim (1, 65536, 1)" in done.stdout


# --- NaN through the activations, as through their torch twins -----------------------------


def _with_nan(shape=(2, 3)):
    x = np.array([[NAN, -1.0, 0.0], [2.0, -0.0, 3.0]], np.float32)
    return x.reshape(shape)


def test_relu_keeps_nan_and_its_gradient_passes_there_as_torchs():
    x = _with_nan()
    got = nn.relu_forward(x)
    t = torch.tensor(x, requires_grad=True)
    want = torch.relu(t)
    np.testing.assert_array_equal(got, want.detach().numpy())  # NaN where torch has NaN
    dy = np.full_like(x, 0.5)
    want.backward(torch.tensor(dy))
    np.testing.assert_array_equal(nn.relu_backward(x, dy), t.grad.numpy())


def test_bias_gelu_and_softmax_cross_entropy_propagate_nan_as_torch():
    x, b = _with_nan(), np.zeros(3, np.float32)
    twin = torch.nn.functional.gelu(torch.tensor(x))
    assert (np.isnan(bias_gelu.bias_gelu(x, b)) == torch.isnan(twin).numpy()).all()
    dx = bias_gelu.bias_gelu_backward(np.ones_like(x), x, b)
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(t).sum().backward()
    assert (np.isnan(dx) == torch.isnan(t.grad).numpy()).all()
    labels = np.array([1, 2])
    loss, dlogits = nn.softmax_cross_entropy(x, labels)
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.cross_entropy(t, torch.tensor(labels)).backward()
    assert math.isnan(loss)
    assert (np.isnan(dlogits) == torch.isnan(t.grad).numpy()).all()


# --- nothing starts for arguments that cannot work ---------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"num_threads": 0}, ValueError, "num_threads"), ({"backend": "bogus"}, ValueError, "backend"),
    ({"timeout": "5"}, TypeError, "timeout"), ({"backend": ["gloo"]}, TypeError, "backend")])
def test_spawn_refuses_bad_arguments_before_any_process_starts(kwargs, error, name, monkeypatch):
    monkeypatch.setattr(processes.mp, "get_context", lambda *a: pytest.fail("a process started"))
    with pytest.raises(error, match=name):
        processes.spawn(hello, 2, **kwargs)


def _ignore_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(120)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_workers_that_ignore_sigterm_are_all_stopped_in_one_grace_period():
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_ignore_sigterm) for _ in range(3)]
    for proc in procs:
        proc.start()
    time.sleep(3)  # let them install the handler
    start = time.monotonic()
    processes._stop(procs, grace=0.0)
    elapsed = time.monotonic() - start
    assert not any(p.is_alive() for p in procs)
    assert elapsed < 2 * processes._TERMINATE_GRACE_S  # one period for all, not one each
