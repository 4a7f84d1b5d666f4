"""Tensor parallelism (gpudl.parallel.tensor): hand-written Megatron layers and
DTensor's plan equal to one process at world sizes 2 and 4, their all-reduces counted, plan
keys checked, and bad sizes rejected."""

import math
import re

import pytest
import torch
from torch.distributed.tensor.parallel import ColwiseParallel

from gpudl.models import EncoderBlock, EncoderConfig
from gpudl.parallel import tensor
from gpudl.parallel.encoder_plan import DTENSOR_PLAN, check_dtensor_plan
from gpudl.parallel.one_process import encoder_sgd_run, gradient_difference

# --- plans and sizes -------------------------------------------------------------------------


@pytest.mark.parametrize("plan", [DTENSOR_PLAN, {"attn.*": ColwiseParallel()},
                                  {"*.q": ColwiseParallel()}, {"attn": ColwiseParallel()}])
def test_plan_keys_that_name_modules_pass(plan):
    check_dtensor_plan(EncoderBlock(EncoderConfig()), plan)  # exact names and fnmatch wildcards


@pytest.mark.parametrize("key", ["attn.query", "mlp.fc3", "fc1", "*.query", "attn.q.x"])
def test_a_plan_key_that_matches_no_module_is_an_error(key):
    with pytest.raises(ValueError, match=re.escape(f"plan key '{key}' matches no submodule")):
        check_dtensor_plan(EncoderBlock(EncoderConfig()), {key: ColwiseParallel()})


@pytest.mark.parametrize("config, world_size, what", [
    (EncoderConfig(layers=2, hidden=36, heads=6, ffn=64), 4, "heads"),
    (EncoderConfig(layers=2, hidden=32, heads=4, ffn=66), 4, "ffn"),
    (EncoderConfig(layers=2, hidden=30, heads=3, ffn=64), 2, "heads"),
])
def test_sizes_the_degree_does_not_divide_are_rejected_before_spawning(config, world_size,
                                                                       what):
    with pytest.raises(ValueError, match=f"{what} .* divisible by the tensor-parallel degree"):
        tensor.run_tensor_parallel([tensor.TensorParallelRun(config=config)], world_size)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(engine="megatron"), ValueError, "engine"),
    (dict(engine="dtensor", fused=True), ValueError, "fused"),
    (dict(dtype=torch.float64), ValueError, "float32"),
    (dict(batch=0), ValueError, "batch"),
])
def test_bad_runs_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        tensor.TensorParallelRun(**kwargs)


def test_runs_must_be_run_objects():
    with pytest.raises(TypeError, match="TensorParallelRun"):
        tensor.run_tensor_parallel(["hand"], 2)


# --- distributed ------------------------------------------------------------------------------

RUNS = [tensor.TensorParallelRun("hand", fused=False, dtype=torch.float64),
        tensor.TensorParallelRun("hand"),  # float32 with the fused bias + GeLU kernel
        tensor.TensorParallelRun("dtensor", dtype=torch.float64)]


def relative_errors(ranks, reference):
    """Per step, the largest gradient difference over the largest reference gradient."""
    errors = []
    for step, grads in enumerate(reference["grads"]):
        scale = max(g.abs().max().item() for g in grads.values())
        for r in ranks:
            assert set(r["grads"][step]) == set(grads)  # every parameter, named as whole
        errors.append(max((r["grads"][step][k] - g).abs().max().item()
                          for r in ranks for k, g in grads.items()) / scale)
    return errors


def test_gradient_difference_is_the_largest_over_steps_and_parameters():
    reference = {"grads": [{"w": torch.zeros(2)}, {"w": torch.zeros(2), "b": torch.zeros(1)}]}
    run = {"grads": [{"w": torch.tensor([0.0, -0.5])},
                     {"w": torch.zeros(2), "b": torch.tensor([0.25])}]}
    assert gradient_difference(run, reference) == 0.5
    run["grads"][1]["b"] = torch.tensor([math.nan])
    assert math.isnan(gradient_difference(run, reference))


@pytest.mark.distributed
@pytest.mark.parametrize("world_size", [2, 4])
def test_tensor_parallel_equals_one_process_and_counts_its_all_reduces(world_size):
    results = tensor.run_tensor_parallel(RUNS, world_size, timeout=300)
    layers = tensor.TENSOR_CONFIG.layers
    for run, ranks in zip(RUNS, results, strict=True):
        reference = encoder_sgd_run(run.config, run.batch, run.steps, run.lr, run.dtype)
        for r in ranks:
            assert r["losses"] == pytest.approx(reference["losses"],
                                                rel=1e-12 if run.dtype == torch.float64
                                                else 1e-6)
        # float64: only the order of additions differs. float32 with the fused kernel: that,
        # and erf's rounding, through two blocks and two steps: a few hundred float32 ulps.
        bound = 1e-12 if run.dtype == torch.float64 else 1e-5
        assert max(relative_errors(ranks, reference)) <= bound, run
        for r in ranks:
            for counts in r["all_reduces"]:
                # Megatron: g after attention and after the MLP forward, f before each
                # backward. DTensor's plan splits q, k and v as three layers, each of whose
                # input gradients it all-reduces: four per block backward.
                backward = 2 * layers if run.engine == "hand" else 4 * layers
                assert (counts["forward"], counts["backward"]) == (2 * layers, backward)
                if run.engine == "hand":  # each all-reduce moves a whole activation
                    element = 8 if run.dtype == torch.float64 else 4
                    activation = run.batch * run.config.seq * run.config.hidden * element
                    assert counts["bytes"] == 4 * layers * activation


def test_command_line_refuses_unknown_arguments_before_starting_work(capsys):
    with pytest.raises(SystemExit):
        tensor.main(["--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
