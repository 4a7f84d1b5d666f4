"""gpudl.optim's host work per step, counted on the simulator: after its first step, an Adam
step over 1,000 parameters of one dtype is one kernel launch and no tensor-to-array
conversion, with no Python run per parameter; per-tensor variants convert nothing after their
first step either; each parameter's ``state["step"]`` stays a tensor of its own (torch's
layout) while one operation advances them all; anything unusual still takes the general
path and gives torch's answer."""

import contextlib
import copy
import weakref

import numpy as np
import pytest
import torch

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator)

# isort: split
from gpudl import interop, optim
from gpudl.interop import tensor_device
from gpudl.kernels import optim as optim_kernels
from gpudl.optim import adam_steps

DEVICE = tensor_device()


class Counts:
    """Counts kernel launches (``gpudl.kernels.optim.recorded_launches``) and tensor-to-array
    conversions (``gpudl.interop.as_kernel_array``) from :meth:`start` to the test's end."""

    def __init__(self, monkeypatch, stack: contextlib.ExitStack) -> None:
        self.monkeypatch, self.stack = monkeypatch, stack
        self.launched: list = []
        self.conversions = 0

    @property
    def launches(self) -> int:
        return len(self.launched)

    def start(self) -> "Counts":
        convert = interop.as_kernel_array

        def counting_convert(*args, **kwargs):
            self.conversions += 1
            return convert(*args, **kwargs)

        self.monkeypatch.setattr(interop, "as_kernel_array", counting_convert)
        self.launched = self.stack.enter_context(optim_kernels.recorded_launches())
        return self


@pytest.fixture
def counts(monkeypatch):
    with contextlib.ExitStack() as stack:
        yield Counts(monkeypatch, stack)


def many_parameters(n: int, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(2, generator=gen).to(DEVICE)) for _ in range(n)]


def backward(params: list[torch.nn.Parameter], step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    weights = torch.randn(len(params), 2, generator=gen).to(DEVICE)
    (torch.stack(list(params)) * weights).square().sum().backward()


def test_an_adam_step_over_1000_parameters_is_one_launch_and_no_conversion(counts, monkeypatch):
    ours, theirs = many_parameters(1000), many_parameters(1000)
    opt = optim.Adam(ours, lr=0.01)
    ref = torch.optim.Adam(theirs, lr=0.01, foreach=False)
    for step in range(3):
        if step == 1:  # from the second step on: count, and forbid the per-parameter path
            counts.start()

            def per_parameter(*args):
                raise AssertionError("the general (per-parameter) path ran")

            monkeypatch.setattr(adam_steps, "step_flat_general", per_parameter)
            monkeypatch.setattr(adam_steps, "adopt", per_parameter)
        for params, o in ((ours, opt), (theirs, ref)):
            o.zero_grad()
            backward(params, step)
            o.step()
    assert counts.launches == 2 and counts.conversions == 0
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=2e-6, atol=1e-7)
    assert all(int(opt.state[p]["step"].item()) == 3 for p in ours)


def test_the_step_counts_are_torch_s_layout_advanced_by_one_operation():
    params = many_parameters(5)
    opt = optim.Adam(params, lr=0.01)
    for step in range(3):
        opt.zero_grad()
        backward(params, step)
        opt.step()
    steps = [opt.state[p]["step"] for p in params]
    assert len({id(s) for s in steps}) == 5  # five tensors, as torch has
    assert all(s.shape == () and s.dtype == torch.float32 and s.item() == 3 for s in steps)
    assert len({s.untyped_storage().data_ptr() for s in steps}) == 1  # views of one counter
    saved = opt.state_dict()["state"]
    assert sorted(saved) == list(range(5)) and all(saved[i]["step"].item() == 3 for i in saved)


def test_a_new_gradient_tensor_leaves_the_fast_path_and_is_adopted(counts, monkeypatch):
    ours, theirs = many_parameters(6, seed=1), many_parameters(6, seed=1)
    opt = optim.Adam(ours, lr=0.05)
    ref = torch.optim.Adam(theirs, lr=0.05, foreach=False)
    for step in range(2):
        for params, o in ((ours, opt), (theirs, ref)):
            o.zero_grad()
            backward(params, step)
            o.step()
    counts.start()
    gen = torch.Generator().manual_seed(7)
    for a, b in zip(ours, theirs, strict=True):  # gradients set by hand: new tensors
        a.grad = torch.randn(2, generator=gen).to(DEVICE)
        b.grad = a.grad.clone()
    opt.step()
    ref.step()
    assert counts.launches == 1 and counts.conversions == 0  # copied into the flat buffer
    slots = opt.flat_groups[(0, torch.float32)].slots["grad"]
    for a, b, slot in zip(ours, theirs, slots, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=2e-6, atol=1e-7)
        assert a.grad is slot


def test_a_parameter_without_a_gradient_splits_the_launch_and_keeps_its_count():
    params = many_parameters(4, seed=2)
    opt = optim.Adam(params, lr=0.01)
    for step in range(2):
        opt.zero_grad()
        backward(params, step)
        opt.step()
    opt.zero_grad()
    (params[0].sum() + params[3].sum()).backward()  # parameters 1 and 2 get none
    with optim_kernels.traffic() as t:
        opt.step()
    assert t.launches == 2  # parameter 0, then parameter 3
    assert [int(opt.state[p]["step"].item()) for p in params] == [3, 2, 2, 3]
    opt.zero_grad()
    backward(params, 5)
    with optim_kernels.traffic() as t:
        opt.step()  # steps 4, 3, 3, 4: two runs of one count each side
    assert t.launches == 3
    assert [int(opt.state[p]["step"].item()) for p in params] == [4, 3, 3, 4]


def test_a_loaded_state_is_adopted_then_stepped_in_one_launch(counts, monkeypatch):
    params = many_parameters(8, seed=3)
    opt = optim.Adam(params, lr=0.01)
    for step in range(2):
        opt.zero_grad()
        backward(params, step)
        opt.step()
    saved = copy.deepcopy(opt.state_dict())  # (a state_dict holds the live tensors)
    twin = many_parameters(8, seed=3)
    with torch.no_grad():
        for a, b in zip(twin, params, strict=True):
            a.copy_(b)
    other = optim.Adam(twin, lr=0.01)
    other.load_state_dict(saved)
    for o, ps in ((opt, params), (other, twin)):
        o.zero_grad()
        backward(ps, 2)
        o.step()  # the loaded state is adopted here
    counts.start()
    for o, ps in ((opt, params), (other, twin)):
        o.zero_grad()
        backward(ps, 3)
        o.step()
    assert counts.launches == 2 and counts.conversions == 0
    for a, b in zip(params, twin, strict=True):
        assert torch.equal(a.detach(), b.detach())
    assert all(int(other.state[p]["step"].item()) == 4 for p in twin)


@pytest.mark.parametrize("variant", ["v2_fused", "v1_unfused", "v3_shared"])
def test_per_tensor_variants_convert_nothing_after_their_first_step(variant, counts):
    params = many_parameters(3, seed=4)
    opt = optim.Adam(params, lr=0.01, variant=variant)
    backward(params, 0)
    opt.step()
    counts.start()
    for step in range(1, 3):
        opt.zero_grad(set_to_none=False)  # gradients stay where they are
        backward(params, step)
        opt.step()
    per_tensor = {"v2_fused": 1, "v3_shared": 1, "v1_unfused": 7}[variant]
    assert counts.launches == 2 * 3 * per_tensor and counts.conversions == 0


def test_sgd_converts_nothing_after_its_first_step(counts, monkeypatch):
    params = many_parameters(3, seed=5)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    backward(params, 0)
    opt.step()
    counts.start()
    opt.zero_grad(set_to_none=False)
    backward(params, 1)
    opt.step()
    assert counts.launches == 3 and counts.conversions == 0


# ------------------------------------------------------------------------------------------
# gpudl.interop.KernelArrays
# ------------------------------------------------------------------------------------------


def test_kernel_arrays_are_made_once_per_memory_shape_and_dtype():
    arrays = interop.KernelArrays()
    t = torch.arange(12, dtype=torch.float32, device=DEVICE)
    first = arrays.get(t, "t")
    assert arrays.get(t, "t") is first and arrays.get(t.view(12), "t") is first
    assert arrays.get(t.view(3, 4), "t") is not first  # another shape
    assert arrays.get(t.view(torch.int32), "t") is not first  # another dtype
    assert arrays.get(t[4:], "t") is not first  # another address
    assert arrays.conversions == 4
    with pytest.raises(ValueError, match="t must be contiguous"):
        arrays.get(t.view(3, 4).T, "t")
    with pytest.raises(TypeError, match="t must be a torch.Tensor"):
        arrays.get(np.zeros(3, np.float32), "t")


def test_kernel_arrays_see_the_tensor_and_do_not_keep_it_alive():
    arrays = interop.KernelArrays()
    t = torch.zeros(40, device=DEVICE)
    array = arrays.get(t)
    optim_kernels.sgd_kernel[2, 32](array, interop.as_kernel_array(torch.ones(40, device=DEVICE)),
                         False, np.float32(0), np.float32(-0.5))
    assert torch.equal(t.cpu(), torch.full((40,), -0.5))  # the kernel wrote the tensor
    alive = weakref.ref(t)
    del t
    assert alive() is None


def test_kernel_arrays_forget_the_least_recently_used_past_their_capacity():
    arrays = interop.KernelArrays(capacity=2)
    a, b, c = (torch.zeros(4, device=DEVICE) for _ in range(3))
    for t in (a, b, a, c):  # b is the least recently used when c arrives
        arrays.get(t)
    assert arrays.conversions == 3
    arrays.get(a)
    assert arrays.conversions == 3
    arrays.get(b)
    assert arrays.conversions == 4
