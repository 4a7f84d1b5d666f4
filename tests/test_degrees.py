"""gpudl.parallel.degrees: the degrees (data, tensor, pipeline, context) multiply to the world
size, the sharding degree divides the data degree and the expert degree data x context, each
degree divides what it splits, with one kind of error, and the expert dimensions of a mesh
stand apart from data and context."""

import pytest

from gpudl.parallel.degrees import ParallelDegrees


def test_degrees_multiply_to_the_world_size():
    assert ParallelDegrees(2, 2).world_size == 4
    assert ParallelDegrees(data=2, tensor=2, pipeline=3, sharding=2).world_size == 12
    ParallelDegrees(2, 2).check_world_size(4)
    with pytest.raises(ValueError, match=r"data 2 x tensor 2 x pipeline 1 = 4, but the world "
                                         "size is 8"):
        ParallelDegrees(2, 2).check_world_size(8)


@pytest.mark.parametrize("args, error", [((0, 2), ValueError), ((2.0, 2), TypeError),
                                         ((True, 2), TypeError), ((2, -1), ValueError),
                                         ((2, 1, 0), ValueError), ((2, 1, 1, 0), ValueError)])
def test_degrees_must_be_positive_ints(args, error):
    with pytest.raises(error):
        ParallelDegrees(*args)


def test_the_sharding_degree_divides_the_data_degree():
    assert ParallelDegrees(data=4, sharding=2).sharding == 2
    with pytest.raises(ValueError, match=r"sharding degree \(3\) must divide the data-parallel "
                                         r"degree \(4\)"):
        ParallelDegrees(data=4, sharding=3)


def test_each_degree_must_divide_what_it_splits():
    degrees = ParallelDegrees(data=2, tensor=4, pipeline=3)
    assert degrees.check_divides("data", "the batch", 8) == 4
    assert degrees.check_divides("tensor", "heads", 12) == 3
    assert degrees.check_divides("pipeline", "the encoder's layers", 12) == 4
    with pytest.raises(ValueError, match=r"heads \(6\) must be divisible by the tensor-parallel "
                                         r"degree \(4\), so that every rank holds an equal share"):
        degrees.check_divides("tensor", "heads", 6)
    with pytest.raises(ValueError, match=r"the batch \(7\) .* data-parallel degree \(2\)"):
        degrees.check_divides("data", "the batch", 7)


@pytest.mark.parametrize(("dims", "error", "match"), [
    ((), TypeError, "non-empty tuple"), (["data"], TypeError, "tuple"),
    (("model",), ValueError, "dims\\[0\\]"), (("data", "data"), ValueError, "each degree once"),
    (("data",), RuntimeError, "inside a rank"),
    (("expert_data", "expert"), RuntimeError, "inside a rank")])  # (no process group here)
def test_device_mesh_checks_its_dims_and_needs_a_process_group(dims, error, match):
    with pytest.raises(error, match=match):
        ParallelDegrees(data=2).device_mesh("cpu", dims)


def test_context_multiplies_the_world_size_and_expert_splits_data_x_context():
    degrees = ParallelDegrees(data=8, tensor=8, pipeline=16, context=16)  # Llama 3 405B at 128K
    assert degrees.world_size == 16384
    with pytest.raises(ValueError, match=r"data 8 x tensor 8 x pipeline 16 x context 16 = "
                                         r"16384, but the world size is 8192"):
        degrees.check_world_size(8192)
    experts = ParallelDegrees(data=4, context=2, expert=8)  # the experts over all 8 ranks
    assert experts.world_size == 8 and experts.expert_data == 1
    assert ParallelDegrees(data=4, expert=2).expert_data == 2  # each expert on 2 ranks
    with pytest.raises(ValueError, match=r"expert-parallel degree \(3\) must divide data x "
                                         r"context \(4 x 1\)"):
        ParallelDegrees(data=4, expert=3)


def test_context_and_expert_degrees_divide_what_they_split():
    degrees = ParallelDegrees(data=4, context=2, expert=4)
    assert degrees.check_divides("context", "the sequence", 131072) == 65536
    assert degrees.check_divides("expert", "experts", 8) == 2
    with pytest.raises(ValueError, match=r"experts \(6\) must be divisible by the "
                                         r"expert-parallel degree \(4\)"):
        degrees.check_divides("expert", "experts", 6)
    with pytest.raises(ValueError, match=r"the sequence \(9\) .* context-parallel degree"):
        degrees.check_divides("context", "the sequence", 9)


@pytest.mark.parametrize("dims", [("data", "expert"), ("expert_data", "context")])
def test_the_expert_dimensions_stand_apart_from_data_and_context(dims):
    with pytest.raises(ValueError, match="cannot stand beside 'data' or 'context'"):
        ParallelDegrees(data=2, expert=2).device_mesh("cpu", dims)
