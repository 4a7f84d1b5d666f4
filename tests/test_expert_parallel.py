"""Mixture of experts and expert parallelism (gpudl.parallel.experts): the router's top-k, its
capacity and priority and its load-balancing loss by hand; the grouped expert computation
equal to the loop; expert parallelism by two all-to-alls and by the naive all-gather equal to
one process (output, load-balancing loss, every gradient, an SGD step) at world sizes 2 and
4, with routing so uneven that experts get no token and others drop some, and inside data
parallelism; bad input refused before any process starts."""

import math

import pytest
import torch

from gpudl.parallel import experts
from gpudl.parallel.degrees import ParallelDegrees

# --- the router, by hand ------------------------------------------------------------------


def test_top_k_gates_are_the_chosen_probabilities_renormalized():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], dtype=torch.float64))
    routing = experts.route(logits, top_k=2, capacity_factor=3.0)
    assert routing.choices.tolist() == [[1, 2], [0, 2]]
    assert torch.allclose(routing.gates, torch.tensor([[2 / 3, 1 / 3], [5 / 8, 3 / 8]],
                                                      dtype=torch.float64))
    assert routing.dropped == 0 and routing.capacity == 4  # ceil(3 x 2 x 2 / 3)


def test_a_full_expert_drops_second_choices_before_first_ones():
    # every token prefers expert 0, then expert 1; token 3 ranks expert 1 first
    logits = torch.tensor([[3.0, 2, 0], [3, 2, 0], [3, 2, 0], [2, 3, 0]])
    routing = experts.route(logits, top_k=2, capacity_factor=0.75)  # ceil(0.75 x 8 / 3) = 2
    assert routing.capacity == 2
    assert routing.counts.tolist() == [4, 4, 0] and routing.kept_counts.tolist() == [2, 2, 0]
    # expert 0 keeps the first choices of tokens 0 and 1; expert 1 the first choice of
    # token 3 before any second choice, then token 0's second choice
    kept = (routing.slots >= 0).tolist()
    assert kept == [[True, True], [True, False], [False, False], [True, False]]
    assert routing.sources.tolist() == [0, 1, 3, 0]  # rows sorted by expert
    assert routing.dropped == 4
    assert routing.slots[routing.slots >= 0].sort().values.tolist() == [0, 1, 2, 3]


def test_the_load_balancing_loss_is_one_when_even_and_e_when_all_go_to_one():
    even = experts.load_balancing_loss(torch.full((6, 3), 1 / 3), torch.tensor([2, 2, 2]), 1)
    assert even.item() == pytest.approx(1.0)
    one_hot = torch.tensor([[1.0, 0, 0, 0]]).repeat(5, 1)
    assert experts.load_balancing_loss(one_hot, torch.tensor([5, 0, 0, 0]), 1).item() == 4
    # top-2: the fraction of the 2 x tokens choices
    assert experts.load_balancing_loss(torch.full((4, 4), 0.25), torch.tensor([2, 2, 2, 2]),
                                       2).item() == pytest.approx(1.0)


def test_the_grouped_computation_equals_the_loop():
    layer = experts.MoELayer(experts.MOE_CONFIG, torch.float64)
    x, _ = experts.moe_batch(experts.MOE_CONFIG, 32, dtype=torch.float64)
    routing = experts.route(x @ layer.router.T, 2, 1.0)
    rows = x[routing.sources]
    weights = (layer.w1, layer.b1, layer.w2, layer.b2)
    loop = experts.experts_loop(rows, routing.kept_counts, *weights)
    grouped = experts.experts_grouped(rows, routing.kept_counts, routing.capacity, *weights)
    assert (loop - grouped).abs().max().item() < 1e-13


def test_groups_route_apart():
    """The one-process layer on two groups is the layer on each group alone."""
    layer = experts.MoELayer(experts.MOE_CONFIG, torch.float64)
    x, _ = experts.moe_batch(experts.MOE_CONFIG, 32, dtype=torch.float64)
    both = layer(x, groups=2)
    halves = [layer(part) for part in x.split(16)]
    assert torch.equal(both.output, torch.cat([h.output for h in halves]))
    assert both.aux.item() == pytest.approx((halves[0].aux + halves[1].aux).item() / 2)


# --- bad input, before any process starts ---------------------------------------------------

DEGREES_2 = ParallelDegrees(data=2, expert=2)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: experts.MoEConfig(top_k=9), ValueError,
     r"top_k \(9\) must be at most the number of experts \(8\)"),
    (lambda: experts.MoEConfig(capacity_factor=0), ValueError, "capacity_factor must be > 0"),
    (lambda: experts.MoEConfig(capacity_factor=math.nan), ValueError, "capacity_factor"),
    (lambda: experts.ExpertParallelRun(ParallelDegrees(data=3, expert=3)), ValueError,
     r"experts \(8\) must be divisible by the expert-parallel degree \(3\)"),
    (lambda: experts.ExpertParallelRun(ParallelDegrees(data=2, tensor=2)), ValueError,
     "data x expert"),
    (lambda: experts.ExpertParallelRun(DEGREES_2, "broadcast"), ValueError, "dispatcher"),
    (lambda: ParallelDegrees(data=2, expert=4), ValueError,
     r"expert-parallel degree \(4\) must divide data x context \(2 x 1\)"),
    (lambda: experts.run_expert_parallel([experts.ExpertParallelRun(DEGREES_2)], 4),
     ValueError, "data 2 x tensor 1 x pipeline 1 = 2, but the world size is 4"),
    (lambda: experts.run_expert_parallel([], 2), ValueError, "at least one"),
    (lambda: experts.run_expert_parallel([DEGREES_2], 2), TypeError, "ExpertParallelRun"),
])
def test_bad_input_is_refused_before_spawning(make, error, match, monkeypatch):
    monkeypatch.setattr(experts.training, "spawn", None)  # starting processes would fail
    with pytest.raises(error, match=match):
        make()


def test_command_line_refuses_unknown_arguments_before_starting_work(capsys):
    with pytest.raises(SystemExit):
        experts.main(["--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


# --- distributed ------------------------------------------------------------------------------

#: Per world size, the runs of one group of processes: both dispatchers with every rank an
#: expert-parallel rank, and at 4 ranks expert parallelism of degree 2 inside data
#: parallelism of degree 4 (each expert on 2 ranks).
RUNS = {2: [experts.ExpertParallelRun(DEGREES_2, dispatcher)
            for dispatcher in experts.DISPATCHERS],
        4: [experts.ExpertParallelRun(ParallelDegrees(data=4, expert=4), dispatcher)
            for dispatcher in experts.DISPATCHERS]
        + [experts.ExpertParallelRun(ParallelDegrees(data=4, expert=2))]}


def test_the_runs_route_unevenly_at_every_step():
    """What the distributed test proves is only worth it if the routing is uneven: at each
    step of the reference some expert gets no token in any group and every group drops
    choices; at the first step, 4 ranks' last rank (experts 6 and 7) receives nothing."""
    for world_size in RUNS:
        reference = experts.moe_sgd_run(groups=world_size)
        for counts, dropped in zip(reference["counts"], reference["dropped"], strict=True):
            assert any(all(group[e] == 0 for group in counts) for e in range(8))
            assert all(d > 0 for d in dropped)
    assert all(group[6] == group[7] == 0 for group in reference["counts"][0])


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [2, 4])
def test_expert_parallelism_equals_one_process(world_size):
    reference = experts.moe_sgd_run(groups=world_size)
    scale = max(g.abs().max().item() for step in reference["grads"] for g in step.values())
    for run, ranks in zip(RUNS[world_size], experts.run_expert_parallel(
            RUNS[world_size], world_size, timeout=240), strict=True):
        for rank in ranks:
            diff = experts.differences(rank, reference)
            assert diff["routing_equal"], run
            # float64, the same operations in another order: a few units of 2**-52
            assert diff["outputs"] < 1e-13 and diff["aux"] < 1e-13, (run, diff)
            assert diff["losses"] < 1e-13 and diff["grads"] < 1e-13 * scale, (run, diff)
            assert set(rank["grads"][0]) == {"router", "w1", "b1", "w2", "b2", "input"}
        expert_degree = run.degrees.expert
        assert [r["coords"] for r in ranks] == [(r // expert_degree, r % expert_degree)
                                                for r in range(world_size)]


def test_reduce_gradients_sums_and_divides_by_the_ways():
    """An expert's gradient is summed over its group and divided by the data degree, not by
    the group's size (at data 4 x expert 2 the mean over the group would be twice the
    batch's, which the distributed test above would catch). Here, the arithmetic alone."""
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.full((3,), 6.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experts.comms.dist, "all_reduce", lambda t, group=None: None)
        experts.reduce_gradients([param], None, 4)
    assert param.grad.tolist() == [1.5] * 3

