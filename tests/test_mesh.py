"""Sharding and combining (gpudl.parallel.zero.fsdp's encoder, gpudl.parallel.mesh): FSDP2 on
the encoder and the 2 x 2 data x tensor mesh equal to one process, the bytes each rank keeps,
and the sizes checked before spawning."""

import pytest
import torch

from gpudl.models import EncoderConfig, make_encoder
from gpudl.parallel import mesh
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.one_process import MESH_CONFIG, encoder_sgd_run
from gpudl.parallel.spawn import spawn
from gpudl.parallel.zero import fsdp


def assert_equal_to_one_process(ranks, batch=8, steps=2, lr=0.05):
    reference = encoder_sgd_run(MESH_CONFIG, batch, steps, lr, torch.float64)
    for r in ranks:
        assert r["losses"] == pytest.approx(reference["losses"], rel=1e-12)
    for step, grads in enumerate(reference["grads"]):
        scale = max(g.abs().max().item() for g in grads.values())
        for r in ranks:
            assert set(r["grads"][step]) == set(grads)
            for name, g in grads.items():
                assert (r["grads"][step][name] - g).abs().max().item() <= 1e-12 * scale, name


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda: mesh.run_mesh_2d(config=EncoderConfig(layers=2, hidden=36, heads=3)), "heads"),
    (lambda: mesh.run_mesh_2d(config=EncoderConfig(layers=2, ffn=65)), "ffn"),
    (lambda: mesh.run_mesh_2d(batch=7), "batch"),
    (lambda: fsdp.run_fsdp(world_size=3, batch=8), "batch"),
])
def test_bad_sizes_are_rejected_before_spawning(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_degrees_must_be_a_parallel_degrees():
    with pytest.raises(TypeError, match="ParallelDegrees"):
        mesh.run_mesh_2d((2, 2))


@pytest.mark.parametrize("degrees", [ParallelDegrees(data=2, tensor=2),
                                     ParallelDegrees(data=2, tensor=1, pipeline=2, sharding=2)])
def test_the_mesh_is_data_by_tensor_with_the_state_sharded_over_data(degrees):
    with pytest.raises(ValueError, match="sharding = data"):
        mesh.run_mesh_2d(degrees)


# --- distributed ------------------------------------------------------------------------------


def four_ranks_worker(rank, world_size):
    """FSDP2 over the four ranks, then the 2 x 2 mesh, in one group of processes (starting
    the processes costs far more than the steps), with run_fsdp's and run_mesh_2d's sizes."""
    return {"fsdp2": fsdp.fsdp_worker(rank, world_size, MESH_CONFIG, 8, 2, 0.05,
                                      torch.float64),
            "2x2": mesh.mesh_2d_worker(rank, world_size, mesh.MESH_2X2, MESH_CONFIG, 8, 2,
                                       0.05, torch.float64)}


@pytest.fixture(scope="module")
def four_ranks():
    per_rank = spawn(four_ranks_worker, 4, timeout=300)
    return {name: [r[name] for r in per_rank] for name in per_rank[0]}


@pytest.mark.distributed
@pytest.mark.timeout(400)
@pytest.mark.parametrize("world_size", [2, 4])
def test_fsdp2_equals_one_process_and_keeps_a_shard_per_rank(world_size, request):
    if world_size == 2:
        ranks = fsdp.run_fsdp(world_size, dtype=torch.float64, timeout=300)
    else:
        ranks = request.getfixturevalue("four_ranks")["fsdp2"]
    assert_equal_to_one_process(ranks)
    shapes = [p.shape for p in make_encoder(MESH_CONFIG).parameters()]
    for rank, r in enumerate(ranks):
        assert r["param_bytes"] == 8 * sum(fsdp.shard_numel(s, world_size, rank) for s in shapes)
        assert r["full_param_bytes"] == 8 * sum(s.numel() for s in shapes)
    assert sum(r["param_bytes"] for r in ranks) == ranks[0]["full_param_bytes"]


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_data_by_tensor_mesh_equals_one_process(four_ranks):
    ranks = four_ranks["2x2"]
    assert_equal_to_one_process(ranks)
    assert [r["coords"] for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_command_line_refuses_unknown_arguments_before_starting_work(capsys):
    with pytest.raises(SystemExit):
        mesh.main(["--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
