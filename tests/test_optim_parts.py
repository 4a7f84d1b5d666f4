"""The parts of gpudl.optim's Adam, each on its own: the flat buffers (gpudl.optim.flat_buffers),
the gradient hooks (gpudl.optim.gradient_hooks) and the step paths (gpudl.optim.adam_steps).
The optimizer as a whole is tested against torch in tests/test_optim*.py."""

import collections

import pytest
import torch

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator)

# isort: split
from gpudl.interop import KernelArrays, tensor_device
from gpudl.kernels import optim as optim_kernels
from gpudl.optim import adam_steps
from gpudl.optim.flat_buffers import FlatGroup, adopt, flatten
from gpudl.optim.gradient_hooks import WrittenGradients

DEVICE = tensor_device()


def params(*sizes: int, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(sum(sizes))
    return [torch.nn.Parameter(torch.randn(n, generator=gen).to(DEVICE, dtype)) for n in sizes]


def group(**hyper) -> dict:
    return {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
            "decoupled_weight_decay": False, "maximize": False, **hyper}


# --- the flat buffers -------------------------------------------------------------------------


def test_flatten_puts_the_parameters_back_to_back_and_makes_each_a_view_of_its_slot():
    ps = params(3, 5, 2)
    values = [p.detach().clone() for p in ps]
    flat = flatten(ps, KernelArrays())
    assert flat.offsets == [0, 3, 8]
    assert sorted(flat.buffers) == ["exp_avg", "exp_avg_sq", "grad", "param"]
    torch.testing.assert_close(flat.buffers["param"], torch.cat(values), rtol=0, atol=0)
    for p, value, slot in zip(ps, values, flat.slots["param"], strict=True):
        assert p.data_ptr() == slot.data_ptr()
        torch.testing.assert_close(p.detach(), value, rtol=0, atol=0)
    assert flat.buffers["exp_avg"].dtype == torch.float32
    assert not flat.buffers["grad"].any() and not flat.ready
    assert flat.ids == frozenset(map(id, ps)) and flat.steps.tolist() == [0.0, 0.0, 0.0]


def test_flatten_keeps_one_contiguous_parameter_where_it_is():
    (p,) = params(4)
    ptr = p.data_ptr()
    flat = flatten([p], KernelArrays())
    assert p.data_ptr() == ptr == flat.buffers["param"].data_ptr()


def test_flatten_keeps_float32_master_weights_of_half_parameters():
    ps = params(3, 2, dtype=torch.float16)
    flat = flatten(ps, KernelArrays())
    assert flat.buffers["master"].dtype == torch.float32
    assert flat.buffers["param"].dtype == flat.buffers["grad"].dtype == torch.float16
    torch.testing.assert_close(flat.buffers["master"], flat.buffers["param"].float(), rtol=0,
                               atol=0)


def test_flatten_refuses_no_parameters_and_two_dtypes():
    with pytest.raises(ValueError, match="params must hold at least one"):
        flatten([], KernelArrays())
    with pytest.raises(ValueError, match="params must share one dtype"):
        flatten([*params(2), *params(2, dtype=torch.float16)], KernelArrays())
    with pytest.raises(TypeError, match=r"params\[1\]"):
        flatten([*params(2), 1.0], KernelArrays())
    with pytest.raises(TypeError, match="kernel_arrays"):
        flatten(params(2), {})


def test_adopt_copies_what_is_not_the_slot_and_leaves_the_slot_itself():
    slot = torch.zeros(3)
    assert adopt(slot, slot) is False
    assert adopt(torch.arange(3.0), slot) is True
    assert slot.tolist() == [0.0, 1.0, 2.0]
    assert adopt(slot.half(), slot) is True  # another dtype is another tensor
    with pytest.raises(ValueError, match="tensor.shape"):
        adopt(torch.ones(4), slot)


def flat_with_gradients(*sizes: int) -> FlatGroup:
    ps = params(*sizes)
    flat = flatten(ps, KernelArrays())
    for p, slot in zip(ps, flat.slots["grad"], strict=True):
        p.grad = slot
    return flat


def test_in_place_sees_a_new_gradient_tensor_and_replaced_data():
    flat = flat_with_gradients(2, 3)
    assert flat.in_place()
    flat.params[1].grad = torch.ones(3, device=DEVICE)
    assert not flat.in_place()
    flat = flat_with_gradients(2, 3)
    flat.params[0].data = torch.ones(2, device=DEVICE)
    assert not flat.in_place()


def test_arrays_for_gives_the_whole_buffers_or_slices_of_a_run():
    flat = flat_with_gradients(2, 3, 4)
    assert flat.arrays_for(0, 3) is flat.arrays
    part = flat.arrays_for(1, 3)
    assert sorted(part) == sorted(flat.arrays) and all(len(a) == 7 for a in part.values())
    assert len(flat.arrays_for(1, 2)["param"]) == 3
    with pytest.raises(ValueError, match="end"):
        flat.arrays_for(1, 1)
    with pytest.raises(ValueError, match="first"):
        flat.arrays_for(3, 3)


# --- the gradient hooks -----------------------------------------------------------------------


def test_backward_marks_the_watched_parameters_it_writes_and_clear_forgets_them():
    used, unused = params(2, 3)
    written = WrittenGradients()
    written.watch([used, unused])
    assert used not in written and not written.all_of(frozenset({id(used)}))
    used.sum().backward()
    assert used in written and unused not in written
    assert written.all_of(frozenset({id(used)}))
    assert not written.all_of(frozenset({id(used), id(unused)}))
    written.clear()
    assert used not in written


def test_mark_counts_a_gradient_as_written():
    (p,) = params(2)
    written = WrittenGradients()
    written.mark(p)
    assert p in written and written.all_of(frozenset({id(p)}))


def test_the_hooks_refuse_what_is_not_a_tensor_naming_the_argument():
    written = WrittenGradients()
    with pytest.raises(TypeError, match="param"):
        written.mark(1.0)
    with pytest.raises(TypeError, match=r"params\[0\]"):
        written.watch([1.0])
    with pytest.raises(TypeError, match="ids"):
        written.all_of({1})


# --- the step paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(("updated", "steps", "runs"), [
    ([], [1.0], []),
    ([0, 1, 2], [4.0, 4.0, 4.0], [(0, 3, 4)]),
    ([0, 2], [4.0, 1.0, 4.0], [(0, 1, 4), (2, 3, 4)]),  # a parameter without a gradient
    ([0, 1, 2], [4.0, 1.0, 1.0], [(0, 1, 4), (1, 3, 1)]),  # two step counts
])
def test_step_runs_splits_at_gaps_and_at_step_counts(updated, steps, runs):
    assert adam_steps.step_runs(updated, steps) == runs


def test_step_runs_refuses_indices_out_of_order_or_of_range():
    with pytest.raises(ValueError, match="updated must be increasing"):
        adam_steps.step_runs([1, 0], [1.0, 1.0])
    with pytest.raises(ValueError, match="updated must index steps"):
        adam_steps.step_runs([0, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="steps"):
        adam_steps.step_runs([0], [float("nan")])


def test_adam_state_is_torch_s_layout_and_is_made_once():
    (p,) = params(3, dtype=torch.bfloat16)
    states = collections.defaultdict(dict)
    state = adam_steps.adam_state(states, p)
    assert sorted(state) == ["exp_avg", "exp_avg_sq", "master", "step"]
    assert state["step"].shape == () and state["step"].item() == 0
    assert state["exp_avg"].dtype == state["master"].dtype == torch.float32
    state["step"] += 2
    assert adam_steps.adam_state(states, p)["step"].item() == 2


def test_group_scalars_are_the_kernel_scalars_of_the_group_s_hyperparameters():
    k = adam_steps.group_scalars(group(lr=0.1, weight_decay=0.01), 3)
    assert k == optim_kernels.adam_scalars(3, 0.1, (0.9, 0.999), 1e-8, 0.01, False, False)


def test_adopt_parameter_takes_back_a_new_gradient_and_skips_an_unwritten_one():
    flat = flat_with_gradients(2, 3)
    states, written = collections.defaultdict(dict), WrittenGradients()
    first, second = flat.params
    assert not adam_steps.adopt_parameter(flat, 0, states, written, "Adam")  # not written
    second.grad = torch.full((3,), 2.0, device=DEVICE)  # a new gradient tensor
    assert adam_steps.adopt_parameter(flat, 1, states, written, "Adam")
    assert second.grad is flat.slots["grad"][1] and second in written
    assert flat.buffers["grad"][2:].tolist() == [2.0, 2.0, 2.0]
    state = states[second]
    assert state["step"] is flat.step_views[1] and state["exp_avg"] is flat.slots["exp_avg"][1]
    first.grad = None
    assert not adam_steps.adopt_parameter(flat, 0, states, written, "Adam")
    with pytest.raises(ValueError, match="i must"):
        adam_steps.adopt_parameter(flat, 2, states, written, "Adam")


def torch_adam_step(values: list[torch.Tensor], grads: list[torch.Tensor]) -> list:
    theirs = [torch.nn.Parameter(v.clone()) for v in values]
    for p, g in zip(theirs, grads, strict=True):
        p.grad = g.clone()
    torch.optim.Adam(theirs, lr=0.01, foreach=False).step()
    return [p.detach() for p in theirs]


def test_the_general_path_launches_around_a_parameter_without_a_gradient():
    flat = flat_with_gradients(2, 3, 4)
    values = [p.detach().clone() for p in flat.params]
    states, written = collections.defaultdict(dict), WrittenGradients()
    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(p.shape, generator=gen).to(DEVICE) for p in flat.params]
    for i in (0, 2):
        flat.params[i].grad = grads[i]
    flat.params[1].grad = None
    with optim_kernels.recorded_launches() as launched:
        adam_steps.step_flat_general(flat, group(), states, written, "Adam")
    assert len(launched) == 2 and flat.steps.tolist() == [1.0, 0.0, 1.0] and not flat.ready
    expected = torch_adam_step([values[0], values[2]], [grads[0], grads[2]])
    for p, want in zip((flat.params[0], flat.params[2]), expected, strict=True):
        torch.testing.assert_close(p.detach(), want, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(flat.params[1].detach(), values[1], rtol=0, atol=0)


def test_step_flat_takes_the_fast_path_once_the_group_is_ready():
    flat = flat_with_gradients(2, 3)
    states, written = collections.defaultdict(dict), WrittenGradients()
    for p in flat.params:
        written.mark(p)
    adam_steps.step_flat(flat, group(), states, written, "Adam")  # general: adopts the state
    assert flat.ready

    def general(*args):
        raise AssertionError("the general path ran")

    with pytest.MonkeyPatch.context() as patch, optim_kernels.recorded_launches() as launched:
        patch.setattr(adam_steps, "step_flat_general", general)
        adam_steps.step_flat(flat, group(), states, written, "Adam")
    assert len(launched) == 1 and flat.steps.tolist() == [2.0, 2.0]
    assert [states[p]["step"].item() for p in flat.params] == [2.0, 2.0]
    written.clear()  # zero_grad(): no gradient written, so the general path, which skips
    with optim_kernels.recorded_launches() as launched:
        adam_steps.step_flat(flat, group(), states, written, "Adam")
    assert launched == [] and flat.steps.tolist() == [2.0, 2.0]
