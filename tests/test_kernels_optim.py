"""gpudl.kernels.optim: every Adam variant, the mixed-precision step and the SGD kernel
against torch's formulas in float64 within the derived bounds and against torch.optim itself,
NaN and infinite gradients as torch handles them, bfloat16 rounding bit for bit, the launches
and bytes each variant moves (counted by the tracer), bad input, and (on a GPU) the speed."""

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl.kernels import optim

VARIANTS = list(optim.VARIANTS)
few = settings(max_examples=4, deadline=None, database=None)

# The tracer that counts bytes and launches runs kernels on the simulator only.

# Adam hyperparameters as hypothesis draws them: betas across [0, 1), both lerp branches.
hyper = st.fixed_dictionaries({
    "lr": st.sampled_from([0.0, 1e-4, 1e-3, 0.1]),
    "betas": st.tuples(st.sampled_from([0.0, 0.3, 0.9, 0.99]),
                       st.sampled_from([0.0, 0.5, 0.999])),
    "eps": st.sampled_from([0.0, 1e-8, 1e-3]),
    "weight_decay": st.sampled_from([0.0, 0.01, 0.5]),
    "decoupled": st.booleans(),
    "maximize": st.booleans(),
})


def adam_state(n: int, seed: int, scale: float = 1.0) -> tuple[np.ndarray, ...]:
    """Float32 p, g, m, v of a run in progress: mixed signs, v > 0."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n, dtype=np.float32)
    g = (scale * rng.standard_normal(n)).astype(np.float32)
    m = (0.1 * scale * rng.standard_normal(n)).astype(np.float32)
    v = (0.01 * scale**2 * rng.random(n) + 1e-12).astype(np.float32)
    return p, g, m, v


def torch_adam_step(p, g, m, v, step, hp):
    """torch.optim.Adam/AdamW (single-tensor path) from the same state; its new p, m, v."""
    tp = torch.tensor(p, requires_grad=True)
    opt = torch.optim.Adam([tp], lr=hp["lr"], betas=hp["betas"], eps=hp["eps"],
                           weight_decay=hp["weight_decay"], maximize=hp["maximize"],
                           decoupled_weight_decay=hp["decoupled"], foreach=False)
    opt.state[tp] = {"step": torch.tensor(float(step - 1)), "exp_avg": torch.tensor(m),
                     "exp_avg_sq": torch.tensor(v)}
    tp.grad = torch.tensor(g)
    opt.step()
    state = opt.state[tp]
    return tp.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy()


def assert_within(got, ref, bound, what):
    """|got - ref| <= bound where ref is finite; the same NaN and infinities elsewhere."""
    got = np.asarray(got, dtype=np.float64)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{what}: NaN pattern")
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)], err_msg=what)
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(got - ref) <= bound)
    assert not bad.any(), f"{what}: {bad.sum()} outside the bound, e.g. {np.argwhere(bad)[0]}"


# ------------------------------------------------------------------------------------------
# Adam, every variant
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@few
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), step=st.integers(1, 1000),
       hp=hyper)
@example(n=1, seed=0, step=1, hp={"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                  "weight_decay": 0.0, "decoupled": False, "maximize": False})
@example(n=129, seed=1, step=7, hp={"lr": 0.1, "betas": (0.3, 0.5), "eps": 1e-3,
                                    "weight_decay": 0.5, "decoupled": True, "maximize": True})
def test_adam_variant_matches_torch_and_the_float64_reference(variant, n, seed, step, hp):
    p, g, m, v = adam_state(n, seed)
    kw = {"step": step, **hp}
    refs = optim.reference_adam(p, g, m, v, **kw)
    bounds = optim.adam_error_bound(p, g, m, v, **kw)
    theirs = torch_adam_step(p, g, m, v, step, hp)
    optim.adam_step(p, g, m, v, variant=variant, **kw)
    for name, ours, torch_value, ref, bound in zip("pmv", (p, m, v), theirs, refs, bounds,
                                                   strict=True):
        assert_within(ours, ref, bound, f"{variant} {name}")
        assert_within(torch_value, ref, bound, f"torch {name}")  # the bound holds for torch too


def test_the_bound_is_not_vacuous():
    # A step with the bias correction of the next step, or without the L2 term, must fall
    # outside the bound almost everywhere, or the bound would prove nothing.
    p, g, m, v = adam_state(64, 2)
    kw = {"lr": 1e-2, "weight_decay": 0.1}
    bound_p, bound_m, _ = optim.adam_error_bound(p, g, m, v, step=3, **kw)
    right_p, right_m, _ = optim.reference_adam(p, g, m, v, step=3, **kw)
    next_p, _, _ = optim.reference_adam(p, g, m, v, step=4, **kw)
    _, no_l2_m, _ = optim.reference_adam(p, g, m, v, step=3, lr=1e-2)
    assert (np.abs(next_p - right_p) > bound_p).mean() > 0.9
    assert (np.abs(no_l2_m - right_m) > bound_m).mean() > 0.9


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("beta1", [0.9, 0.3])  # the two branches of torch's lerp
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # simulated inf - inf
def test_nan_and_inf_gradients_as_torch(variant, beta1):
    p, g, m, v = adam_state(40, 3)
    g[[1, 5, 9]] = [np.nan, np.inf, -np.inf]
    hp = {"lr": 1e-2, "betas": (beta1, 0.999), "eps": 1e-8, "weight_decay": 0.1,
          "decoupled": False, "maximize": False}
    refs = optim.reference_adam(p, g, m, v, step=2, **hp)
    bounds = optim.adam_error_bound(p, g, m, v, step=2, **hp)
    theirs = torch_adam_step(p, g, m, v, 2, hp)
    optim.adam_step(p, g, m, v, variant=variant, step=2, **hp)
    for name, ours, torch_value, ref, bound in zip("pmv", (p, m, v), theirs, refs, bounds,
                                                   strict=True):
        assert_within(ours, ref, bound, name)  # NaN and infinities exactly where torch's
        assert_within(torch_value, ref, bound, f"torch {name}")
        assert not np.isfinite(ref[[1, 5, 9]]).any()
    assert np.isnan(p[[1, 5, 9]]).all()  # a non-finite gradient poisons its parameter


@pytest.mark.parametrize("variant", VARIANTS)
def test_device_arrays_are_updated_in_place_like_host_arrays(variant):
    host = adam_state(70, 4)
    dev = [cuda.to_device(x) for x in host]
    optim.adam_step(*host, step=5, lr=1e-2, weight_decay=0.01, variant=variant)
    optim.adam_step(*dev, step=5, lr=1e-2, weight_decay=0.01, variant=variant)
    for name, h, d in zip("pgmv", host, dev, strict=True):
        np.testing.assert_array_equal(d.copy_to_host(), h, err_msg=name)


def test_the_variants_agree_with_each_other_bit_for_bit_on_the_simulator():
    # Same operations in the same order: only a GPU's fused multiply-adds could differ.
    if not backend.is_simulator():
        pytest.skip("on a GPU the compiler may contract multiplies and adds differently")
    results = []
    for variant in VARIANTS:
        arrays = adam_state(50, 5)
        optim.adam_step(*arrays, step=2, lr=1e-2, variant=variant)
        results.append(arrays)
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_empty_arrays_need_no_launch():
    empty = [np.zeros(0, np.float32) for _ in range(4)]
    optim.adam_step(*empty, step=1)
    if not backend.is_simulator():
        return
    with optim.traffic() as t:
        optim.adam_step(*[np.zeros(0, np.float32) for _ in range(4)], step=1, variant="v2_fused")
    assert t.launches == 0


# ------------------------------------------------------------------------------------------
# Mixed precision
# ------------------------------------------------------------------------------------------


@cuda.jit
def _bf16_round_trip(x, bits, back):
    i = cuda.grid(1)
    if i < x.size:
        bits[i] = optim.f32_to_bf16(x[i])
        back[i] = optim.bf16_to_f32(bits[i])


SPECIAL = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 3.3895314e38, 3.4e38,
                    1e-40, -1e-45, 1.00390625, 1.01171875, 1.0 + 2**-8 + 2**-20],
                   dtype=np.float32)


@settings(max_examples=3, deadline=None, database=None)
@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40))
@example(bits=SPECIAL.view(np.uint32).tolist())
def test_bfloat16_rounding_is_torchs_round_to_nearest_even(bits):
    x = np.array(bits, dtype=np.uint32).view(np.float32)
    out_bits = np.zeros(x.size, np.int16)
    back = np.full(x.size, np.nan, np.float32)
    _bf16_round_trip[1, 64](x, out_bits, back)
    expected = torch.from_numpy(x.copy()).to(torch.bfloat16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(out_bits[~nan], expected.view(torch.int16).numpy()[~nan])
    assert np.isnan(back[nan]).all()
    # bfloat16 to float32 is exact: the round trip is torch's conversion back
    np.testing.assert_array_equal(back[~nan], expected.float().numpy()[~nan])


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
@pytest.mark.parametrize("decoupled", [False, True])
def test_mixed_precision_step(low, decoupled):
    p32, g32, m, v = adam_state(77, 6)
    dtype = getattr(torch, low)
    p_low_t = torch.from_numpy(p32).to(dtype)
    g_low_t = torch.from_numpy(g32).to(dtype)
    master = p_low_t.float().numpy()  # the master copy starts as the parameter
    g = g_low_t.float().numpy()  # what the kernel reads, exactly
    view = (lambda t: t.view(torch.int16).numpy()) if low == "bfloat16" else (lambda t: t.numpy())
    p_low, g_low = view(p_low_t.clone()), view(g_low_t)
    kw = {"step": 4, "lr": 1e-2, "weight_decay": 0.1, "decoupled": decoupled}
    refs = optim.reference_adam(master, g, m, v, **kw)
    bounds = optim.adam_error_bound(master, g, m, v, **kw)
    optim.adam_step_mixed(p_low, g_low, master, m, v, **kw)
    for name, ours, ref, bound in zip(("master", "m", "v"), (master, m, v), refs, bounds,
                                      strict=True):
        assert_within(ours, ref, bound, name)
    # the parameter is the new master weight rounded to nearest even, bit for bit
    np.testing.assert_array_equal(p_low, view(torch.from_numpy(master).to(dtype)))


def test_mixed_precision_rejects_wrong_dtypes():
    p32, g32, m, v = adam_state(5, 7)
    half = p32.astype(np.float16)
    with pytest.raises(TypeError, match=r"p_low must have dtype float16 or bfloat16 \(int16"):
        optim.adam_step_mixed(p32, g32, p32.copy(), m, v, step=1)
    with pytest.raises(TypeError, match="same dtype"):
        optim.adam_step_mixed(half, half.view(np.int16).copy(), p32, m, v, step=1)
    with pytest.raises(TypeError, match="float32"):
        optim.adam_step_mixed(half, half.copy(), p32.astype(np.float64), m, v, step=1)


# ------------------------------------------------------------------------------------------
# SGD
# ------------------------------------------------------------------------------------------


sgd_hyper = st.fixed_dictionaries({
    "lr": st.sampled_from([0.0, 1e-3, 0.5]),
    "momentum": st.sampled_from([0.0, 0.5, 0.9]),
    "dampening": st.sampled_from([0.0, 0.1]),
    "weight_decay": st.sampled_from([0.0, 0.01]),
    "nesterov": st.booleans(),
    "maximize": st.booleans(),
})


def torch_sgd_step(p, g, buf, hp):
    tp = torch.tensor(p, requires_grad=True)
    opt = torch.optim.SGD([tp], foreach=False, **hp)
    if buf is not None:
        opt.state[tp] = {"momentum_buffer": torch.tensor(buf)}
    tp.grad = torch.tensor(g)
    opt.step()
    new_buf = opt.state[tp].get("momentum_buffer")
    return tp.detach().numpy(), None if new_buf is None else new_buf.numpy()


@settings(max_examples=8, deadline=None, database=None)
@given(n=st.integers(1, 100), seed=st.integers(0, 2**32 - 1), first=st.booleans(),
       hp=sgd_hyper)
@example(n=33, seed=0, first=False, hp={"lr": 0.5, "momentum": 0.9, "dampening": 0.0,
                                        "weight_decay": 0.01, "nesterov": True,
                                        "maximize": True})
def test_sgd_matches_torch_and_the_float64_reference(n, seed, first, hp):
    if hp["nesterov"] and (hp["momentum"] == 0 or hp["dampening"] != 0):
        hp = hp | {"nesterov": False}
    p, g, buf, _ = adam_state(n, seed)
    start = None if first or hp["momentum"] == 0 else buf.copy()
    ref_p, ref_buf = optim.reference_sgd(p, g, start, **hp)
    bound_p, bound_buf = optim.sgd_error_bound(p, g, start, **{k: v for k, v in hp.items()
                                                            if k != "maximize"})
    torch_p, torch_buf = torch_sgd_step(p, g, start, hp)
    kernel_buf = None if hp["momentum"] == 0 else (
        np.full(n, np.nan, np.float32) if start is None else start.copy())  # poisoned
    optim.sgd_step(p, g, kernel_buf, first=start is None, **hp)
    assert_within(p, ref_p, bound_p, "p")
    assert_within(torch_p, ref_p, bound_p, "torch p")
    if hp["momentum"] == 0:
        assert ref_buf is None and torch_buf is None
    else:
        assert_within(kernel_buf, ref_buf, bound_buf, "buf")
        assert_within(torch_buf, ref_buf, bound_buf, "torch buf")


# ------------------------------------------------------------------------------------------
# Launches and bytes, counted by the tracer
# ------------------------------------------------------------------------------------------

N_TRAFFIC = 40


def counted(fn, *args, **kwargs) -> optim.Traffic:
    with optim.traffic() as t:
        fn(*args, **kwargs)
    return t


@pytest.mark.simulator_only
@pytest.mark.parametrize(("variant", "hp", "launches", "device_bytes", "shared_bytes"), [
    # lerp m (12), v *= b2 (8), v += w g g (12), sqrt (8), / bc2 (8), + eps (8), addcdiv (16)
    ("v1_unfused", {}, 7, 72, 0),
    ("v1_unfused", {"weight_decay": 0.1}, 8, 84, 0),  # + g_eff = g + wd p (12)
    ("v1_unfused", {"weight_decay": 0.1, "maximize": True}, 9, 92, 0),  # + g_eff = -g (8)
    ("v1_unfused", {"weight_decay": 0.1, "decoupled": True}, 8, 80, 0),  # + p *= decay (8)
    ("v2_fused", {"weight_decay": 0.1}, 1, 28, 0),  # read p, g, m, v; write p, m, v
    ("v3_shared", {}, 1, 28, 56),  # + 4 stores, 4 loads, 3 stores, 3 loads of shared words
    ("v4_multi_tensor", {"maximize": True}, 1, 28, 0),
])
def test_launches_and_bytes_per_parameter(variant, hp, launches, device_bytes, shared_bytes):
    arrays = adam_state(N_TRAFFIC, 8)
    t = counted(optim.adam_step, *arrays, step=2, variant=variant, **hp)
    assert t.launches == launches
    assert t.total("global") == device_bytes * N_TRAFFIC
    assert t.total("shared") == shared_bytes * N_TRAFFIC


@pytest.mark.simulator_only
def test_mixed_precision_moves_as_many_bytes_as_fp32():
    p32, g32, m, v = adam_state(N_TRAFFIC, 9)
    half = p32.astype(np.float16)
    t = counted(optim.adam_step_mixed, half, g32.astype(np.float16), p32, m, v, step=1)
    # read g (2), master, m, v (12); write master, m, v (12), p (2)
    assert (t.launches, t.total("global")) == (1, 28 * N_TRAFFIC)


@pytest.mark.simulator_only
@pytest.mark.parametrize(("momentum", "first", "per_param"), [
    (0.0, True, 12),  # read p, g; write p
    (0.9, True, 16),  # the buffer is written, not read
    (0.9, False, 20),
])
def test_sgd_bytes_per_parameter(momentum, first, per_param):
    p, g, buf, _ = adam_state(N_TRAFFIC, 10)
    t = counted(optim.sgd_step, p, g, buf if momentum else None, first=first, lr=0.1,
                momentum=momentum)
    assert (t.launches, t.total("global")) == (1, per_param * N_TRAFFIC)


@pytest.mark.simulator_only
def test_traffic_cannot_nest_and_is_off_afterwards():
    with optim.traffic(), pytest.raises(RuntimeError, match="already"):
        with optim.traffic():
            pass
    with optim.traffic() as t:  # off afterwards: it starts again, from zero
        assert t.launches == 0


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"lr": -1.0}, ValueError, "Invalid learning rate"),
    ({"eps": -1e-8}, ValueError, "Invalid epsilon value"),
    ({"betas": (1.0, 0.999)}, ValueError, "Invalid beta parameter at index 0"),
    ({"betas": (0.9, -0.1)}, ValueError, "Invalid beta parameter at index 1"),
    ({"weight_decay": -0.1}, ValueError, "Invalid weight_decay value"),
    ({"lr": float("nan")}, ValueError, "Invalid learning rate"),
])
def test_bad_hyperparameters_give_torchs_errors(kwargs, error, match):
    arrays = adam_state(3, 11)
    with pytest.raises(error, match=match):
        optim.adam_step(*arrays, step=1, **kwargs)
    with pytest.raises(error, match=match):  # torch says the same
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], **kwargs)


def test_bad_arrays_and_arguments():
    p, g, m, v = adam_state(6, 12)
    with pytest.raises(TypeError, match="float32"):
        optim.adam_step(p.astype(np.float64), g, m, v, step=1)
    with pytest.raises(ValueError, match="same size"):
        optim.adam_step(p, g[:5].copy(), m, v, step=1)
    with pytest.raises(ValueError, match="1-D"):
        optim.adam_step(p.reshape(2, 3), g, m, v, step=1)
    with pytest.raises(ValueError, match="contiguous"):
        optim.adam_step(np.zeros(12, np.float32)[::2], g, m, v, step=1)
    with pytest.raises(TypeError, match="NumPy array"):
        optim.adam_step(list(p), g, m, v, step=1)
    with pytest.raises(TypeError, match="mix"):
        optim.adam_step(cuda.to_device(p), g, m, v, step=1)
    with pytest.raises(ValueError, match="step must be >= 1"):
        optim.adam_step(p, g, m, v, step=0)
    with pytest.raises(ValueError, match="variant must be one of"):
        optim.adam_step(p, g, m, v, step=1, variant="fastest")
    with pytest.raises(TypeError, match="pair"):
        optim.adam_step(p, g, m, v, step=1, betas=0.9)
    with pytest.raises(TypeError, match="real number"):
        optim.adam_step(p, g, m, v, step=1, lr="0.1")
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.sgd_step(p, g, None, first=True, momentum=0.0, nesterov=True)
    with pytest.raises(ValueError, match="momentum buffer"):
        optim.sgd_step(p, g, None, first=True, momentum=0.9)
    with pytest.raises(ValueError, match="Invalid momentum"):
        optim.sgd_step(p, g, None, first=True, momentum=-0.9)


# ------------------------------------------------------------------------------------------
# On a GPU (the benchmark and its speed goals: tests/test_bench_optim.py)
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_large_odd_size_on_the_gpu():
    for variant in VARIANTS:
        arrays = [cuda.to_device(x) for x in adam_state((1 << 22) + 7, 13)]
        host = [a.copy_to_host() for a in arrays]
        refs = optim.reference_adam(*host, step=3, lr=1e-3)
        bounds = optim.adam_error_bound(*host, step=3, lr=1e-3)
        optim.adam_step(*arrays, step=3, lr=1e-3, variant=variant)
        for name, a, ref, bound in zip("pmv", (arrays[0], arrays[2], arrays[3]), refs, bounds,
                                       strict=True):
            assert_within(a.copy_to_host(), ref, bound, f"{variant} {name}")
