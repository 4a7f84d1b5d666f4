"""gpudl.models: KernelMLP's gradients against autograd on its float64 torch twin, the flop
counter (backward = 2 x forward), SGD, the digits split, and training to 95% test accuracy.

Training the kernel model for the 30 epochs it needs takes well over an hour on the
simulator (one epoch of 45 steps of 32 digits: about 190 s on 2 busy cores), so the
training test trains the torch twin through the same :func:`gpudl.models.train` and checks
that the kernel model follows the twin step by step over the first steps of that run (5 on the
simulator, about 12 s). On a GPU, a test marked ``gpu`` trains the kernel model itself."""

import numpy as np
import pytest
import torch
from conftest import EPS32

from gpudl import backend  # first: chooses GPU or simulator before numba

# isort: split
from numba import cuda

from gpudl.models import (
    FlopCounter,
    KernelMLP,
    TorchTwin,
    batches,
    load_digits_split,
    train,
)

# Training configuration: reaches >= 96% test accuracy from seeds 0 to 4 (checked once).
SIZES, EPOCHS, BATCH, LR = (64, 32, 10), 30, 32, 0.2
STEPS_COMPARED = backend.pick(gpu=45, sim=5)  # the kernel model costs ~2.5 s a step simulated


@pytest.fixture(scope="module")
def data():
    return load_digits_split(seed=0)


def gradient_bound(model, x, labels):
    """A first-order bound on |kernel gradient - exact gradient|, elementwise.

    In float32, a computation made of sums of products is within n eps32 of the exact
    result times the same computation run on absolute values, where n counts the roundings
    along the longest path (Higham 2002, section 3). So run the forward and the backward
    in float64 on |x|, |w|, |b| (the ReLU masks from the real forward), with |softmax| +
    onehot (plus twice the logits' own error scale, which softmax passes on) for dlogits,
    and count n: each linear layer's K + 1 forward roundings, its fan-out and the batch
    backward, and the classes and a few more in softmax cross-entropy."""
    params = {k: v.astype(np.float64) for k, v in model.host_params().items()}
    a, a_abs, masks = x.astype(np.float64), np.abs(x.astype(np.float64)), []
    inputs_abs = []
    for i in range(model.n_layers):
        w, b = params[f"w{i}"], params[f"b{i}"]
        inputs_abs.append(a_abs)
        z, z_abs = a @ w + b, a_abs @ np.abs(w) + np.abs(b)
        if i < model.n_layers - 1:
            masks.append(z > 0)
            a, a_abs = np.maximum(z, 0), z_abs * masks[-1]
    batch, classes = z.shape
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = np.eye(classes)[labels]
    delta = (p + onehot + 2 * z_abs.max(axis=1, keepdims=True)) / batch
    n = sum(model.sizes[:-1]) + model.n_layers + sum(model.sizes[1:]) + model.n_layers * batch
    n += classes + 8
    bounds = {}
    for i in reversed(range(model.n_layers)):
        bounds[f"w{i}"] = n * EPS32 * (inputs_abs[i].T @ delta)
        bounds[f"b{i}"] = n * EPS32 * delta.sum(axis=0)
        if i > 0:
            delta = (delta @ np.abs(params[f"w{i}"]).T) * masks[i - 1]
    return bounds


@pytest.mark.parametrize(("sizes", "batch"), [((11, 7, 5, 3), 9), (SIZES, 17)])
def test_kernel_gradients_match_autograd_on_the_float64_twin(data, sizes, batch):
    rng = np.random.default_rng(batch)
    if sizes == SIZES:
        x, labels = data[0][:batch], data[1][:batch]
    else:
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        labels = rng.integers(0, sizes[-1], batch)
    model = KernelMLP(sizes, seed=batch)
    loss, grads = model.loss_and_grads(x, labels)
    twin_loss, twin_grads = TorchTwin(model.to_torch(torch.float64)).loss_and_grads(x, labels)
    assert abs(loss - twin_loss) <= 1e-5 * abs(twin_loss)
    bounds = gradient_bound(model, x, labels)
    assert sorted(grads) == sorted(twin_grads) == sorted(model.params)
    for name, g in grads.items():
        assert isinstance(g, np.ndarray) and g.dtype == np.float32
        err = np.abs(g - twin_grads[name])
        assert (err <= bounds[name]).all(), f"{name}: {np.max(err / bounds[name])} x bound"


def test_flop_counter_backward_matmuls_are_twice_the_forward_and_total_6nd(data):
    model = KernelMLP(SIZES)
    batch = 21
    model.loss_and_grads(data[0][:batch], data[1][:batch])
    flops = model.count_flops()
    assert flops["backward"]["matmul"] == 2 * flops["forward"]["matmul"]
    n_weights = sum(a * b for a, b in zip(SIZES[:-1], SIZES[1:], strict=False))
    assert flops["forward"]["matmul"] + flops["backward"]["matmul"] == 6 * n_weights * batch
    assert flops["forward"]["bias"] == flops["backward"]["bias"] == batch * sum(SIZES[1:])
    assert flops["forward"]["relu"] == batch * SIZES[1]
    assert flops["loss"] == {"softmax_xent": batch * (6 * SIZES[-1] + 5)}
    model.forward(data[2][:5])
    assert model.count_flops()["forward"]["matmul"] == 2 * n_weights * (batch + 5)
    model.sgd_step(0.1)
    assert model.count_flops()["update"] == {"sgd": 2 * sum(p.size for p in model.params.values())}


def test_flop_counter_totals():
    counter = FlopCounter()
    counter.add("forward", "matmul", 10)
    counter.add("forward", "bias", 2)
    counter.add("backward", "matmul", 20)
    assert counter.total() == 32 and counter.total("forward") == 12
    assert counter.total(op="matmul") == 30
    assert counter.by_kind() == {"forward": {"matmul": 10, "bias": 2}, "backward": {"matmul": 20}}
    counter.reset()
    assert counter.total() == 0


def test_sgd_step_moves_every_parameter_by_minus_lr_times_its_gradient(data):
    model = KernelMLP((64, 5, 10), seed=3)
    with pytest.raises(RuntimeError, match="call loss_and_grads first"):
        model.sgd_step(0.1)
    before = model.host_params()
    _, grads = model.loss_and_grads(data[0][:6], data[1][:6])
    model.sgd_step(0.5)
    for name, p in model.host_params().items():
        expected = before[name].astype(np.float64) - 0.5 * grads[name]
        bound = 2 * EPS32 * (np.abs(before[name]) + np.abs(0.5 * grads[name]))
        assert (np.abs(p - expected) <= bound).all()
        assert not np.array_equal(p, before[name])


def test_torch_twin_round_trip_and_device_arrays(data):
    model = KernelMLP((64, 6, 10), seed=4)
    twin = model.to_torch()
    assert [type(m) for m in twin] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]
    np.testing.assert_array_equal(twin[0].weight.detach().numpy(), model.host_params()["w0"].T)
    back = KernelMLP.from_torch(twin)
    assert back.sizes == model.sizes
    for name, p in model.host_params().items():
        np.testing.assert_array_equal(back.host_params()[name], p)
    x = data[2][:7]
    logits = model.forward(x)
    assert isinstance(logits, np.ndarray) and logits.shape == (7, 10)
    np.testing.assert_allclose(logits, TorchTwin(twin).forward(x), rtol=1e-5, atol=1e-5)
    on_device = model.forward(cuda.to_device(x))
    assert not isinstance(on_device, np.ndarray)
    np.testing.assert_array_equal(on_device.copy_to_host(), logits)
    with pytest.raises(ValueError, match="Sequential of Linear, ReLU, ..., Linear"):
        KernelMLP.from_torch(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()))


def test_bad_model_inputs_raise_clear_errors(data):
    with pytest.raises(ValueError, match="sizes must list at least 2 layer widths"):
        KernelMLP((64,))
    with pytest.raises(ValueError, match=r"sizes\[1\] must be >= 1"):
        KernelMLP((64, 0, 10))
    with pytest.raises(TypeError, match=r"sizes\[1\] must be an int"):
        KernelMLP((64, 3.5, 10))
    model = KernelMLP((64, 3, 10))
    with pytest.raises(ValueError, match=r"x.shape\[1\] must equal w.shape\[0\]: got 63 and 64"):
        model.forward(data[0][:4, :63])
    with pytest.raises(TypeError, match="x must have dtype float32, got float64"):
        model.forward(data[0][:4].astype(np.float64))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 10\)"):
        model.loss_and_grads(data[0][:2], np.array([3, 10]))
    with pytest.raises(TypeError, match="labels must have an integer dtype"):
        model.loss_and_grads(data[0][:2], np.array([3.0, 1.0]))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        train(model, data, epochs=1, batch_size=0, lr=0.1)


def test_digits_split_is_scaled_stratified_and_deterministic():
    x_train, y_train, x_test, y_test = load_digits_split(seed=0)
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    assert x_train.dtype == x_test.dtype == np.float32 and y_train.dtype == np.int64
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    train_share = np.bincount(y_train) / np.bincount(np.concatenate([y_train, y_test]))
    assert np.all(np.abs(train_share - 0.8) < 0.01)
    np.testing.assert_array_equal(load_digits_split(seed=0)[3], y_test)
    assert not np.array_equal(load_digits_split(seed=1)[3], y_test)


def test_batches_cover_every_sample_once_per_epoch():
    parts = batches(10, 4, np.random.default_rng(0))
    assert [len(p) for p in parts] == [4, 4, 2]
    assert sorted(np.concatenate(parts)) == list(range(10))


def test_training_reaches_95_percent_and_the_kernel_model_follows_the_twin(data):
    twin = TorchTwin(KernelMLP(SIZES, seed=0).to_torch())
    history = train(twin, data, epochs=EPOCHS, batch_size=BATCH, lr=LR, seed=0)
    assert history["test_accuracy"][-1] >= 0.95
    assert len(history["loss"]) == EPOCHS and history["loss"][-1] < history["loss"][0] / 10
    assert len(history["step_loss"]) == EPOCHS * int(np.ceil(len(data[0]) / BATCH))

    # The first steps of that run again, the kernel model next to a fresh float32 twin, on
    # the batches train drew (its first epoch, the same generator and seed).
    kernel = KernelMLP(SIZES, seed=0)
    twin = TorchTwin(kernel.to_torch())
    x_train, y_train = data[0], data[1]
    for step, idx in enumerate(batches(len(x_train), BATCH, np.random.default_rng(0))):
        if step == STEPS_COMPARED:
            break
        loss, _ = kernel.loss_and_grads(x_train[idx], y_train[idx])
        twin_loss, _ = twin.loss_and_grads(x_train[idx], y_train[idx])
        assert twin_loss == history["step_loss"][step]  # same batches as train
        # Stated tolerance: the two float32 computations round differently (summation
        # order, exp), by about 1e-7 per step; 1e-5 leaves a margin of about 20 steps' drift.
        assert abs(loss - twin_loss) <= 1e-5
        kernel.sgd_step(LR)
        twin.sgd_step(LR)
        twin_params = twin.host_params()
        for name, p in kernel.host_params().items():
            np.testing.assert_allclose(p, twin_params[name], rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_kernel_model_trains_to_95_percent_like_its_twin(data):
    kernel = KernelMLP(SIZES, seed=0)
    twin = TorchTwin(kernel.to_torch())
    ours = train(kernel, data, epochs=EPOCHS, batch_size=BATCH, lr=LR, seed=0)
    theirs = train(twin, data, epochs=EPOCHS, batch_size=BATCH, lr=LR, seed=0)
    assert ours["test_accuracy"][-1] >= 0.95
    # float32 on both sides, different summation orders: the curves agree to rounding drift
    np.testing.assert_allclose(ours["loss"], theirs["loss"], rtol=1e-3, atol=1e-4)
