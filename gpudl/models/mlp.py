"""A multilayer perceptron whose forward and backward passes run on the book's kernels.

Book section: *Chapter 3, "Backpropagation from the book's kernels"* and *"Training a small
network end to end"*.

:class:`KernelMLP` chains ``gpudl.kernels.nn`` layers (linear, ReLU, ..., linear, softmax
cross-entropy) by hand, with no autograd, and counts the flops of every call as it runs.
:class:`TorchTwin` is the same network in PyTorch, trained with autograd and
``torch.optim.SGD``; both run through :func:`train` on the same batches, so their loss
curves can be compared step by step. :func:`load_digits_split` is the data set
(scikit-learn's 8x8 digits, bundled, no download).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
import torch
from numba import cuda
from torch.profiler import record_function

from gpudl.checks import (
    check_array,
    check_choice,
    check_equal,
    check_instance,
    check_int,
    check_positive,
    check_widths,
    is_device_array,
)
from gpudl.kernels import nn

__all__ = [
    "FlopCounter",
    "KernelMLP",
    "TorchTwin",
    "load_digits_split",
    "batches",
    "accuracy",
    "train",
]


#: The kinds of call and the operations :class:`FlopCounter` counts.
KINDS = ("forward", "loss", "backward", "update")
OPERATIONS = ("matmul", "bias", "relu", "softmax_xent", "sgd")


class FlopCounter:
    """Flops added up by call kind (``"forward"``, ``"loss"``, ``"backward"``, ``"update"``)
    and operation (``"matmul"``, ``"bias"``, ``"relu"``, ``"softmax_xent"``, ``"sgd"``)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, kind: str, op: str, flops: int) -> None:
        """Count ``flops`` (an int >= 0) under ``kind`` and ``op``."""
        check_choice("kind", kind, KINDS)
        check_choice("op", op, OPERATIONS)
        self.counts[kind, op] += check_int("flops", flops, 0)

    def total(self, kind: str | None = None, op: str | None = None) -> int:
        """Flops of one kind and/or one operation (all of them when both are None)."""
        check_choice("kind", kind, (None, *KINDS))
        check_choice("op", op, (None, *OPERATIONS))
        return sum(n for (k, o), n in self.counts.items()
                   if kind in (None, k) and op in (None, o))

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (kind, op), n in self.counts.items():
            out.setdefault(kind, {})[op] = n
        return out

    def reset(self) -> None:
        self.counts.clear()


class KernelMLP:
    """``Linear, ReLU, ..., Linear`` with layer sizes ``sizes``, parameters on the device.

    ``params`` maps ``"w0", "b0", "w1", ...`` to float32 device arrays; ``w{i}`` has shape
    ``(sizes[i], sizes[i + 1])`` (the transpose of ``torch.nn.Linear.weight``). They start as
    ``torch.nn.Linear`` does, uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``, from
    ``numpy.random.default_rng(seed)``.
    """

    def __init__(self, sizes: tuple[int, ...] = (64, 32, 10), seed: int = 0) -> None:
        sizes = check_widths("sizes", sizes)
        check_int("seed", seed, 0)
        self.sizes = sizes
        rng = np.random.default_rng(seed)
        self.params: dict[str, object] = {}
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            bound = 1 / math.sqrt(fan_in)
            for name, shape in ((f"w{i}", (fan_in, fan_out)), (f"b{i}", (fan_out,))):
                value = rng.uniform(-bound, bound, shape).astype(np.float32)
                self.params[name] = cuda.to_device(value)
        self.flops = FlopCounter()
        self._grads: dict[str, object] | None = None

    @property
    def n_layers(self) -> int:
        return len(self.sizes) - 1

    def host_params(self) -> dict[str, np.ndarray]:
        """The parameters copied to host arrays."""
        return {name: p.copy_to_host() for name, p in self.params.items()}

    def count_flops(self) -> dict[str, dict[str, int]]:
        """Flops run so far, ``{kind: {operation: flops}}`` (see :class:`FlopCounter`)."""
        return self.flops.by_kind()

    def _forward(self, x: object) -> tuple[object, list[object], list[object]]:
        """Logits, the input of every linear layer and the pre-activation of every ReLU."""
        inputs, pre_activations = [], []
        h = x
        with record_function("forward"):  # each part of a step, named for a profiler
            for i in range(self.n_layers):
                inputs.append(h)
                h = nn.linear_forward(h, self.params[f"w{i}"], self.params[f"b{i}"])
                batch, fan_in, fan_out = h.shape[0], *self.params[f"w{i}"].shape
                self.flops.add("forward", "matmul",
                               nn.linear_forward_flops(batch, fan_in, fan_out, bias=False))
                self.flops.add("forward", "bias", batch * fan_out)
                if i < self.n_layers - 1:
                    pre_activations.append(h)
                    h = nn.relu_forward(h)
                    self.flops.add("forward", "relu", nn.relu_flops(h.size))
        return h, inputs, pre_activations

    def forward(self, x: np.ndarray | object) -> np.ndarray | object:
        """Logits for a float32 batch ``x`` of shape (batch, sizes[0]); host in, host out."""
        on_device = is_device_array(x)
        logits, _, _ = self._forward(x if on_device else _to_device(x))
        return logits if on_device else logits.copy_to_host()

    def loss_and_grads(self, x: np.ndarray | object,
                       labels: np.ndarray | object) -> tuple[float, dict[str, object]]:
        """Mean cross-entropy of the batch and its gradient for every parameter, by hand:
        softmax cross-entropy, then for each layer from the last ``linear_backward`` and,
        between layers, ``relu_backward``. The gradients (host arrays for a host ``x``) are
        kept for :meth:`sgd_step`.

        The first layer's ``dx`` (the gradient for the input) is computed too, though
        training does not need it, so that every linear layer's backward is exactly two
        products of its forward's size."""
        on_device = is_device_array(x)
        x_d, labels_d = ((x, labels) if on_device
                         else (_to_device(x, "x"), _to_device(labels, "labels")))
        logits, inputs, pre_activations = self._forward(x_d)
        with record_function("loss"):
            loss, grad = nn.softmax_cross_entropy(logits, labels_d)
        self.flops.add("loss", "softmax_xent", nn.softmax_cross_entropy_flops(*logits.shape))
        grads = {}
        with record_function("backward"):
            for i in reversed(range(self.n_layers)):
                w = self.params[f"w{i}"]
                grad, grads[f"w{i}"], grads[f"b{i}"] = nn.linear_backward(inputs[i], w, grad)
                batch, (fan_in, fan_out) = inputs[i].shape[0], w.shape
                self.flops.add("backward", "matmul",
                               nn.linear_backward_flops(batch, fan_in, fan_out, bias=False))
                self.flops.add("backward", "bias", batch * fan_out)
                if i > 0:
                    grad = nn.relu_backward(pre_activations[i - 1], grad)
                    self.flops.add("backward", "relu", nn.relu_flops(grad.size))
        self._grads = {name: grads[name] for name in self.params}
        if on_device:
            return loss, dict(self._grads)
        return loss, {name: g.copy_to_host() for name, g in self._grads.items()}

    def sgd_step(self, lr: float) -> None:
        """``p -= lr * grad`` for every parameter, with the gradients of the last
        :meth:`loss_and_grads`, by the ``nn.sgd_update`` kernel (2 flops per parameter).
        ``lr`` must be a finite number > 0."""
        check_positive("lr", lr)
        if self._grads is None:
            raise RuntimeError("sgd_step needs gradients: call loss_and_grads first")
        with record_function("update"):
            for name, p in self.params.items():
                nn.sgd_update(p, self._grads[name], lr)
                self.flops.add("update", "sgd", 2 * p.size)

    def launches_per_step(self) -> dict[str, int]:
        """The kernels one training step launches (:meth:`loss_and_grads`, then
        :meth:`sgd_step`), by part of the step (``forward``, ``loss``, ``backward``,
        ``update``), counted from the layers and the launches of each layer function
        (``nn.LAUNCHES``), the count a profile of a step shows (Appendix E): every linear
        layer forward and backward, a ReLU between two of them each way, the loss once, one
        update per parameter."""
        n, launches = self.n_layers, nn.LAUNCHES
        return {"forward": n * launches["linear_forward"] + (n - 1) * launches["relu_forward"],
                "loss": launches["softmax_cross_entropy"],
                "backward": (n * launches["linear_backward"]
                             + (n - 1) * launches["relu_backward"]),
                "update": len(self.params) * launches["sgd_update"]}

    def to_torch(self, dtype: torch.dtype = torch.float32) -> torch.nn.Sequential:
        """The same network as ``torch.nn.Sequential(Linear, ReLU, ..., Linear)`` in
        ``dtype``, with copies of the current parameters."""
        check_choice("dtype", dtype, (torch.float32, torch.float64, torch.float16,
                                      torch.bfloat16))
        layers: list[torch.nn.Module] = []
        for i in range(self.n_layers):
            linear = torch.nn.Linear(self.sizes[i], self.sizes[i + 1], dtype=dtype)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(self.params[f"w{i}"].copy_to_host().T))
                linear.bias.copy_(torch.from_numpy(self.params[f"b{i}"].copy_to_host()))
            layers += [linear, torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    @classmethod
    def from_torch(cls, module: torch.nn.Sequential) -> KernelMLP:
        """A KernelMLP with float32 copies of the parameters of ``Linear, ReLU, ..., Linear``."""
        _check_sequential(module)
        linears = list(module)[::2]
        expected = [torch.nn.Linear, torch.nn.ReLU] * len(linears)
        if [type(m) for m in module] != expected[:-1]:
            raise ValueError("module must be a Sequential of Linear, ReLU, ..., Linear, got "
                             f"{[type(m).__name__ for m in module]}")
        sizes = (linears[0].in_features, *(m.out_features for m in linears))
        model = cls(sizes)
        for i, linear in enumerate(linears):
            w = linear.weight.detach().T.numpy().astype(np.float32)
            model.params[f"w{i}"] = _to_device(w)
            model.params[f"b{i}"] = _to_device(linear.bias.detach().numpy().astype(np.float32))
        return model


class TorchTwin:
    """A ``torch.nn.Sequential`` (from :meth:`KernelMLP.to_torch`) behind KernelMLP's
    interface: autograd computes the gradients, ``torch.optim.SGD`` applies them, and the
    gradients come back in KernelMLP's names and layout."""

    def __init__(self, module: torch.nn.Sequential) -> None:
        self.module = _check_sequential(module)
        self.dtype = next(module.parameters()).dtype
        self.optimizer = torch.optim.SGD(module.parameters(), lr=0.0)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Logits for a host batch ``x``, as a host array in the twin's dtype."""
        check_array("x", x, 2)
        with torch.no_grad():
            return self.module(torch.from_numpy(x).to(self.dtype)).numpy()

    def loss_and_grads(self, x: np.ndarray, labels: np.ndarray) -> tuple[float, dict]:
        """Mean cross-entropy and host gradients named and laid out as KernelMLP's."""
        check_array("x", x, 2)
        check_equal("labels.shape", check_array("labels", labels, 1, "iu").shape,
                    "(x.shape[0],)", (x.shape[0],))
        self.optimizer.zero_grad()
        logits = self.module(torch.from_numpy(x).to(self.dtype))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels).long())
        loss.backward()
        return loss.item(), self._layout(lambda p: p.grad)

    def sgd_step(self, lr: float) -> None:
        """One ``torch.optim.SGD`` step with learning rate ``lr`` (a finite number > 0)."""
        check_positive("lr", lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()

    def host_params(self) -> dict[str, np.ndarray]:
        """Copies of the parameters, named and laid out as KernelMLP's."""
        return self._layout(lambda p: p)

    def _layout(self, get: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
        out = {}
        for i, linear in enumerate(list(self.module)[::2]):
            out[f"w{i}"] = get(linear.weight).detach().T.numpy().copy()
            out[f"b{i}"] = get(linear.bias).detach().numpy().copy()
        return out


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: scikit-learn's 1797 8x8 digits, pixels scaled
    from 0..16 to [0, 1] in float32, labels int64, split 80/20 stratified by class."""
    check_int("seed", seed, 0)
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed)
    return x_train, y_train, x_test, y_test


def batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches: a permutation of ``range(n)`` cut into ``batch_size`` pieces
    (the last one shorter if ``batch_size`` does not divide ``n``)."""
    check_int("n", n, 0)
    check_int("batch_size", batch_size, 1)
    check_instance("rng", rng, np.random.Generator)
    order = rng.permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def accuracy(model: KernelMLP | TorchTwin, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of rows of ``x`` whose largest logit is at the label."""
    _check_model(model)
    check_equal("y.shape", check_array("y", y, 1, "iu").shape, "(x.shape[0],)",
                (check_array("x", x, 2).shape[0],))
    return float(np.mean(np.argmax(model.forward(x), axis=1) == y))


def train(model: KernelMLP | TorchTwin, data: tuple[np.ndarray, ...], epochs: int,
          batch_size: int, lr: float, seed: int = 0) -> dict[str, list[float]]:
    """Minibatch SGD on ``data = load_digits_split(...)``, batches drawn by :func:`batches`
    from ``numpy.random.default_rng(seed)``.

    Returns the history: ``step_loss`` (every step), ``loss`` (mean step loss per epoch),
    ``test_accuracy`` (after each epoch) and ``seconds`` (wall time of each epoch)."""
    _check_model(model)
    check_int("epochs", epochs, 1)
    check_int("batch_size", batch_size, 1)
    check_positive("lr", lr)
    check_int("seed", seed, 0)
    if not isinstance(data, tuple | list) or len(data) != 4:
        raise TypeError("data must be (x_train, y_train, x_test, y_test), as "
                        f"load_digits_split returns, got {type(data).__name__}")
    for name, x, ndim, kinds in zip(("data[0] (x_train)", "data[1] (y_train)",
                                     "data[2] (x_test)", "data[3] (y_test)"), data,
                                    (2, 1, 2, 1), ("f", "iu", "f", "iu"), strict=True):
        check_array(name, x, ndim, kinds)
    x_train, y_train, x_test, y_test = data
    rng = np.random.default_rng(seed)
    history: dict[str, list[float]] = {"step_loss": [], "loss": [], "test_accuracy": [],
                                       "seconds": []}
    for _ in range(epochs):
        start = time.perf_counter()
        losses = []
        for idx in batches(len(x_train), batch_size, rng):
            loss, _ = model.loss_and_grads(x_train[idx], y_train[idx])
            model.sgd_step(lr)
            losses.append(loss)
        history["step_loss"] += losses
        history["loss"].append(float(np.mean(losses)))
        history["test_accuracy"].append(accuracy(model, x_test, y_test))
        history["seconds"].append(time.perf_counter() - start)
    return history


def _check_sequential(module: object) -> torch.nn.Sequential:
    return check_instance("module", module, torch.nn.Sequential)


def _check_model(model: object) -> None:
    check_instance("model", model, (KernelMLP, TorchTwin))


def _to_device(x: object, name: str = "x") -> object:
    """A host array on the device (the nn functions check its dtype and shape)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or a numba device array, got "
                        f"{type(x).__name__}")
    return cuda.to_device(np.ascontiguousarray(x))
