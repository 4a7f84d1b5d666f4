"""One memory passed twice to a kernel (gpudl.aliasing): which parameters a kernel writes, the
simulator's refusal of a launch that passes one memory twice where the kernel writes it, and
the book's in-place kernels on torch tensors giving the same results whether their arrays are
passed as a GPU passes them (one memory) or as the simulator passes NumPy arrays (copied in and
out)."""

import sys

import numpy as np
import pytest
import torch

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl import interop, optim
from gpudl.aliasing import AliasedArgumentsError, check_launch, written_parameters
from gpudl.kernels import bias_gelu
from gpudl.kernels import buckets as bucket_kernels
from gpudl.kernels import memory as memory_kernels
from gpudl.kernels import optim as optim_kernels

# ------------------------------------------------------------------------------------------
# Which parameters a kernel writes, read from its source
# ------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _store_first(x, y, value):
    x[0] = value


@cuda.jit
def _writes_through_a_device_function(a, b):
    _store_first(b, a, a[0])


@cuda.jit
def _writes_in_many_ways(a, b, c, d, e, f, n):
    i = cuda.grid(1)
    row = e[i]
    if i < n:
        a[i], b[i] = 1.0, 2.0
        c[i] += a[i]
        cuda.atomic.add(d, 0, f[i])
        row[0] = 0.0


@cuda.jit
def _reads_only(a, b, out):
    i = cuda.grid(1)
    if i < len(a) and i < min(a.size, b.size):
        out[i] = abs(a[i]) + b[i]


def test_written_parameters_are_read_from_the_source():
    assert written_parameters(_writes_in_many_ways.py_func if hasattr(
        _writes_in_many_ways, "py_func") else _writes_in_many_ways.fn) == {"a", "b", "c", "d",
                                                                            "e"}
    fn = getattr(_reads_only, "py_func", None) or _reads_only.fn
    assert written_parameters(fn) == {"out"}
    fn = getattr(_writes_through_a_device_function, "py_func", None) or\
        _writes_through_a_device_function.fn
    assert written_parameters(fn) == {"b"}  # _store_first writes its first parameter only


def _fn(kernel):
    return getattr(kernel, "py_func", None) or kernel.fn


def test_the_book_kernels_write_what_their_names_say():
    assert written_parameters(_fn(memory_kernels.copy_v1_naive)) == {"out"}
    assert written_parameters(_fn(optim_kernels.sgd_momentum_kernel)) == {"p", "buf"}
    assert written_parameters(_fn(optim_kernels.v2_fused)) == {"p", "m", "v"}
    assert written_parameters(_fn(bucket_kernels._unpack_multi)) == {"grads"}


# ------------------------------------------------------------------------------------------
# The launch guard
# ------------------------------------------------------------------------------------------


@pytest.mark.simulator_only
@pytest.mark.parametrize(("first", "second"), [
    (slice(None), slice(None)),  # the same array twice
    (slice(0, 40), slice(10, 50)),  # overlapping views
])
def test_a_writing_kernel_given_one_memory_twice_is_refused(first, second):
    x = np.arange(64, dtype=np.float32)
    before = x.copy()
    with pytest.raises(AliasedArgumentsError, match=r"'copy_v1_naive'.*'x' \(argument 0\) and "
                                                    r"'out' \(argument 1\).*writes \['out'\]"):
        memory_kernels.copy_v1_naive[2, 32](x[first], x[second])
    np.testing.assert_array_equal(x, before)  # refused before it ran


@pytest.mark.simulator_only
def test_the_old_sgd_launch_is_refused():
    # gpudl.optim.SGD without momentum used to pass p as an unused momentum buffer too
    p, g = np.ones(8, np.float32), np.ones(8, np.float32)
    k = optim_kernels.sgd_scalars(True, lr=0.1, momentum=0.9)
    with pytest.raises(AliasedArgumentsError, match="'sgd_momentum_kernel'.*'p'.*'buf'"):
        optim_kernels.sgd_momentum_kernel[1, 32](p, g, p, *[k[i] for i in (0, 1, 3, 4, 5, 6, 7)])


@pytest.mark.simulator_only
def test_an_array_inside_a_tuple_is_guarded_too():
    bucket = np.zeros(8, np.float32)
    with pytest.raises(AliasedArgumentsError, match="'_unpack_multi'.*'bucket'.*'grads'"):
        bucket_kernels._unpack_multi[1, 32](bucket, np.array([0], np.int64), (bucket[:8],))


@pytest.mark.simulator_only
def test_reading_one_memory_twice_is_allowed():
    a = np.arange(40, dtype=np.float32)
    out = np.full(40, np.nan, np.float32)
    _reads_only[2, 32](a, a, out)
    np.testing.assert_array_equal(out, 2 * a)


@pytest.mark.simulator_only
def test_device_arrays_are_one_memory_as_on_a_gpu():
    # Simulated device arrays are passed as they are (not copied): aliasing them behaves as
    # on a GPU, so it is not refused.
    d = cuda.to_device(np.arange(8, dtype=np.float32))
    check_launch(_fn(memory_kernels.copy_v1_naive), (d, d))


def test_kernel_arrays_of_a_tensor_are_one_memory_on_both_backends():
    # as_kernel_array hands a kernel the tensor's memory, as a GPU pointer is handed: an
    # in-place kernel given the same tensor as input and output sees its own writes.
    t = torch.arange(40, dtype=torch.float32, device=interop.tensor_device())
    array = interop.as_kernel_array(t)
    check_launch(_fn(memory_kernels.copy_v1_naive), (array, array))
    memory_kernels.copy_v1_naive[2, 32](array, array)
    torch.testing.assert_close(t.cpu(), torch.arange(40, dtype=torch.float32))


# ------------------------------------------------------------------------------------------
# In-place kernels on torch tensors: the same results with copied or shared arguments
# ------------------------------------------------------------------------------------------


def results_both_ways(run, monkeypatch):
    """``run()``'s tensors with kernel arrays of tensors passed as a GPU passes them (the
    package's way), and, on the simulator, again with NumPy arrays, which the simulator copies
    in and out (where an aliased launch is refused, and a lost write would show): they must be
    equal bit for bit. Returns the first results."""
    shared = run()
    if backend.is_simulator():
        original = interop.as_kernel_array
        with monkeypatch.context() as patch:
            def as_numpy(tensor, name="tensor", **kwargs):
                return np.asarray(original(tensor, name, **kwargs))

            for module in list(sys.modules.values()):
                if getattr(module, "as_kernel_array", None) is original:
                    patch.setattr(module, "as_kernel_array", as_numpy)
            copied = run()
        assert len(copied) == len(shared)
        for i, (a, b) in enumerate(zip(shared, copied, strict=True)):
            assert torch.equal(a, b), i
    return shared


def _train_steps(make_optimizer, dtype=torch.float32, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    model = model.to(device=interop.tensor_device(), dtype=dtype)
    opt = make_optimizer(model.parameters())
    for step in range(steps):
        gen = torch.Generator().manual_seed(step)
        x = torch.randn(8, 4, generator=gen).to(interop.tensor_device(), dtype)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return [p.detach().cpu().float() for p in model.parameters()] + [
        t.detach().cpu().float() for t in state]


OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "sgd-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    **{f"adam-{v}": (lambda ps, v=v: optim.Adam(ps, lr=0.01, variant=v))
       for v in optim_kernels.VARIANTS},
    "adamw-bf16-v4_multi_tensor": lambda ps: optim.AdamW(ps, lr=0.01),
    "adam-fp16-v2_fused": lambda ps: optim.Adam(ps, lr=0.01, variant="v2_fused"),
}
DTYPES = {"adamw-bf16-v4_multi_tensor": torch.bfloat16, "adam-fp16-v2_fused": torch.float16}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_do_not_depend_on_argument_passing(name, monkeypatch):
    values = results_both_ways(
        lambda: _train_steps(OPTIMIZERS[name], DTYPES.get(name, torch.float32)), monkeypatch)
    assert all(torch.isfinite(v).all() for v in values)


def test_bucket_pack_and_unpack_do_not_depend_on_argument_passing(monkeypatch):
    device = interop.tensor_device()
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(5, 3, generator=gen).to(device), torch.randn(7, generator=gen).to(device)]

    def run():
        values = []
        for variant in bucket_kernels.VARIANTS:
            bucket = torch.full((22,), float("nan"), device=device)
            bucket_kernels.pack([interop.as_kernel_array(g.view(-1)) for g in grads],
                                interop.as_kernel_array(bucket), 0.5, variant)
            out = [torch.full_like(g, float("nan")) for g in grads]
            bucket_kernels.unpack(interop.as_kernel_array(bucket),
                                  [interop.as_kernel_array(o.view(-1)) for o in out], variant)
            values += [bucket.cpu(), *(o.cpu() for o in out)]
        return values

    values = results_both_ways(run, monkeypatch)
    torch.testing.assert_close(values[0], torch.cat([g.view(-1) for g in grads]).cpu() * 0.5,
                               rtol=0, atol=0)


def test_bias_gelu_forward_and_backward_do_not_depend_on_argument_passing(monkeypatch):
    device = interop.tensor_device()

    def run():
        gen = torch.Generator().manual_seed(4)
        x = torch.randn(5, 7, generator=gen).to(device).requires_grad_()
        b = torch.randn(7, generator=gen).to(device).requires_grad_()
        y = bias_gelu.bias_gelu_tensor(x, b)
        y.backward(torch.randn(5, 7, generator=gen).to(device))
        return [y.detach().cpu(), x.grad.cpu(), b.grad.cpu()]

    values = results_both_ways(run, monkeypatch)
    assert all(torch.isfinite(v).all() for v in values)
