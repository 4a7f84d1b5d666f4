"""gpudl.optim against torch.optim on a covering design of the hyperparameters each accepts.

SGD's hyperparameters are the learning rate (a number or a tensor), momentum (0, 0.9),
dampening (0, 0.3), Nesterov, weight decay (0, 0.01) and maximize; Adam's, for Adam, Adam with
decoupled weight decay and AdamW, the learning rate (a number or a tensor), two pairs of betas,
two epsilons, weight decay (0, 0.1) and maximize. Training every combination (40 for SGD, 96
for Adam) would repeat what a covering design already checks, so the suite trains these:

* SGD, 20 runs: each of the five momentum settings (momentum, dampening, Nesterov) that torch
  accepts meets half of the cube of (learning rate's kind, weight decay, maximize), every pair
  of their values, and the two halves make the whole cube. Every combination torch refuses
  (Nesterov without momentum, or with dampening) is checked to be refused by gpudl too.
* Adam, 18 runs: each kind (Adam, decoupled, AdamW) meets every pair of values of any two of
  the five other hyperparameters in six runs, and the eighteen hold every triple of values of
  any three of those five.

Both are covering designs of strength 3: every triple of values of any three hyperparameters
that torch accepts together is trained in some run (``test_the_designs_cover_what_they_claim``
checks it).

Each run trains a small model for 15 steps beside torch's optimizer, with two parameter groups
(the second at half the learning rate) and a parameter that never gets a gradient. Each step
starts both from torch's parameters and state (teacher forcing), so the check is the derived
float32 bound of one step (``gpudl.kernels.optim.*_error_bound``) against the float64
reference, at every step, for both optimizers: ours must be within it, and so must torch's (or
the reference would be wrong). What gpudl does not implement (``amsgrad``, torch's choices of
implementation and its behaviour flags) is refused at construction with a clear error. The four
Adam variants each run a covering subset.
"""

import itertools

import numpy as np
import pytest
import torch

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator)

# isort: split
from gpudl import optim
from gpudl.interop import tensor_device
from gpudl.kernels import optim as optim_kernels

DEVICE = tensor_device()
STEPS = 15


class Toy(torch.nn.Module):
    """Two linear layers (3x4 + 3, 2x3 + 2) and a parameter the loss never uses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
        self.unused = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


def groups(model: Toy, lr: float | torch.Tensor) -> list[dict]:
    half = lr / 2 if not isinstance(lr, torch.Tensor) else lr.clone() / 2
    return [{"params": list(model.first.parameters())},
            {"params": [*model.second.parameters(), model.unused], "lr": half}]


def number(x: float | torch.Tensor) -> float:
    return float(x) if isinstance(x, torch.Tensor) else x


def run_beside_torch(ours_cls, theirs_cls, hp: dict, state_keys: tuple[str, ...], check):
    """15 teacher-forced steps of ``ours_cls`` beside ``theirs_cls`` on two Toy models;
    ``check(before, group_hp, step, ours_new, theirs_new)`` judges every parameter that had a
    gradient, ``before`` being ``[p, g, *state]`` as float64-ready float32 arrays (a state
    not yet created is None) and ``*_new`` ``[p, *state]`` after the step."""
    ours_model, theirs_model = Toy().to(DEVICE), Toy().to(DEVICE)
    lr = hp.pop("lr")
    ours = ours_cls(groups(ours_model, lr), lr=lr, **hp)
    theirs = theirs_cls(groups(theirs_model, lr), lr=lr, foreach=False, **hp)
    # (ours, theirs, the group's hyperparameters) per parameter, in group order
    pairs = [(a, b, group_theirs)
             for group_ours, group_theirs in zip(ours.param_groups, theirs.param_groups,
                                                 strict=True)
             for a, b in zip(group_ours["params"], group_theirs["params"], strict=True)]
    unused_before = ours_model.unused.detach().clone()

    def arrays(tensors):
        return [t.detach().cpu().numpy().ravel().copy() if t is not None else None
                for t in tensors]

    for step in range(1, STEPS + 1):
        with torch.no_grad():  # teacher forcing: start from torch's parameters and state
            for a, b, _ in pairs:
                a.copy_(b)
                for key in state_keys:
                    if theirs.state[b].get(key) is not None:
                        ours.state[a][key].copy_(theirs.state[b][key])
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 4, generator=gen).to(DEVICE), torch.randn(8, 2, generator=gen)
        for model, opt in ((ours_model, ours), (theirs_model, theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y.to(DEVICE)).backward()
        before = {}
        for a, b, _ in pairs:
            if b.grad is not None:
                assert torch.equal(a.grad, b.grad)  # same model and parameters: same gradient
                before[a] = arrays([b, b.grad, *(theirs.state[b].get(k) for k in state_keys)])
        ours.step()
        theirs.step()
        for a, b, group in pairs:
            if a not in before:
                continue
            group_hp = {k: v for k, v in hp.items()} | {"lr": number(group["lr"])}
            new = [arrays([param, *(opt.state[param][k] for k in state_keys
                                    if k in opt.state[param])])
                   for opt, param in ((ours, a), (theirs, b))]
            check(before[a], group_hp, step, *new)
    # the parameter without a gradient is untouched, and has no state, in both
    assert torch.equal(ours_model.unused.detach(), unused_before)
    assert torch.equal(theirs_model.unused.detach(), unused_before)
    assert not set(ours.state[ours_model.unused]) & set(state_keys)


def assert_within(name: str, got: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> None:
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound).all(), (name, float(np.max(err - bound)))  # NaN fails too


# ------------------------------------------------------------------------------------------
# SGD
# ------------------------------------------------------------------------------------------

SGD_VALUES = {"lr_kind": ["number", "tensor"], "momentum": [0.0, 0.9], "dampening": [0.0, 0.3],
              "nesterov": [False, True], "weight_decay": [0.0, 1e-2], "maximize": [False, True]}


def sgd_refused(config: tuple) -> bool:
    """Whether torch refuses the configuration: Nesterov needs momentum and no dampening."""
    _, momentum, dampening, nesterov, _, _ = config
    return nesterov and (momentum == 0 or dampening != 0)


# The momentum settings torch accepts, (momentum, dampening, nesterov), each with one of the two
# halves of the cube of (learning rate's kind, weight decay, maximize): each half holds every
# pair of values of those three, the two together every triple.
SGD_MOMENTUM = [(0.0, 0.0, False), (0.0, 0.3, False), (0.9, 0.0, False), (0.9, 0.3, False),
                (0.9, 0.0, True)]
CUBE_HALVES = (["000", "011", "101", "110"], ["111", "100", "010", "001"])
SGD_DESIGN = [(SGD_VALUES["lr_kind"][int(a)], *momentum, SGD_VALUES["weight_decay"][int(b)],
               SGD_VALUES["maximize"][int(c)])
              for i, momentum in enumerate(SGD_MOMENTUM) for a, b, c in CUBE_HALVES[i % 2]]
SGD_GRID = [c for c in itertools.product(*SGD_VALUES.values()) if sgd_refused(c)] + SGD_DESIGN


def sgd_check(before, hp, step, ours, theirs):
    p, g, buf = before
    kw = {k: hp[k] for k in ("lr", "momentum", "dampening", "weight_decay", "nesterov")}
    ref_p, ref_buf = optim_kernels.reference_sgd(p, g, buf, maximize=hp["maximize"], **kw)
    bound_p, bound_buf = optim_kernels.sgd_error_bound(p, g, buf, **kw)
    for who, new in (("gpudl", ours), ("torch", theirs)):
        assert_within(f"{who} p at step {step}", new[0], ref_p, bound_p)
        if hp["momentum"]:
            assert_within(f"{who} momentum_buffer at step {step}", new[1], ref_buf, bound_buf)
        else:
            assert len(new) == 1  # no buffer without momentum


@pytest.mark.parametrize(("lr_kind", "momentum", "dampening", "nesterov", "weight_decay",
                          "maximize"), SGD_GRID)
def test_sgd_tracks_torch_in_the_covering_design(lr_kind, momentum, dampening, nesterov,
                                                 weight_decay, maximize):
    lr = torch.tensor(0.05) if lr_kind == "tensor" else 0.05
    hp = {"lr": lr, "momentum": momentum, "dampening": dampening, "nesterov": nesterov,
          "weight_decay": weight_decay, "maximize": maximize}
    if nesterov and (momentum == 0 or dampening != 0):  # torch refuses it: so must we
        for cls in (torch.optim.SGD, optim.SGD):
            with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and "
                                                 "zero dampening"):
                cls([torch.nn.Parameter(torch.zeros(2, device=DEVICE))], **hp)
        return
    run_beside_torch(optim.SGD, torch.optim.SGD, dict(hp), ("momentum_buffer",),
                     lambda before, group_hp, step, ours, theirs: sgd_check(
                         before, group_hp, step, ours, theirs))


def test_plain_sgd_moves_the_parameters():
    # The report that started this suite: SGD without momentum left p unchanged on the
    # simulator (the kernel got p twice, as p and as an unused buffer).
    torch.manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(5, device=DEVICE))
    p2 = torch.nn.Parameter(p1.detach().clone())
    o1, o2 = optim.SGD([p1], lr=0.1), torch.optim.SGD([p2], lr=0.1)
    g = torch.randn(5, device=DEVICE)
    p1.grad, p2.grad = g.clone(), g.clone()
    before = p1.detach().clone()
    o1.step()
    o2.step()
    assert not torch.equal(p1.detach(), before)
    torch.testing.assert_close(p1.detach(), p2.detach(), rtol=0, atol=2e-7)


# ------------------------------------------------------------------------------------------
# Adam, Adam(decoupled_weight_decay=True), AdamW
# ------------------------------------------------------------------------------------------

ADAM_KINDS = {
    "Adam": (lambda variant: lambda ps, **kw: optim.Adam(ps, variant=variant, **kw),
             torch.optim.Adam, False),
    "Adam-decoupled": (lambda variant: lambda ps, **kw: optim.Adam(
        ps, variant=variant, decoupled_weight_decay=True, **kw),
        lambda ps, **kw: torch.optim.Adam(ps, decoupled_weight_decay=True, **kw), True),
    "AdamW": (lambda variant: lambda ps, **kw: optim.AdamW(ps, variant=variant, **kw),
              torch.optim.AdamW, True),
}
ADAM_VALUES = {"lr_kind": ["number", "tensor"], "betas": [(0.9, 0.999), (0.5, 0.9)],
               "eps": [1e-8, 1e-3], "weight_decay": [0.0, 0.1], "maximize": [False, True]}
# Per kind, six runs; digit i of a run says which value of the i-th hyperparameter of
# ADAM_VALUES it takes. Each kind's six form a covering array of strength 2 (every pair of
# values of any two hyperparameters), and the eighteen one of strength 3.
ADAM_RUNS = {"Adam": ["00010", "11111", "00101", "10001", "01110", "11000"],
             "Adam-decoupled": ["01001", "01110", "00011", "10010", "10100", "11101"],
             "AdamW": ["01001", "10111", "11100", "00111", "11010", "00000"]}
ADAM_GRID = [(kind, *(values[int(digit)] for values, digit in zip(ADAM_VALUES.values(), run,
                                                                   strict=True)))
             for kind, runs in ADAM_RUNS.items() for run in runs]


def adam_check(decoupled):
    def check(before, hp, step, ours, theirs):
        p, g, m, v = (x if x is not None else np.zeros_like(before[0]) for x in before)
        kw = {"step": step, "decoupled": decoupled, **hp}
        refs = optim_kernels.reference_adam(p, g, m, v, **kw)
        bounds = optim_kernels.adam_error_bound(p, g, m, v, **kw)
        for who, new in (("gpudl", ours), ("torch", theirs)):
            for name, got, ref, bound in zip(("p", "exp_avg", "exp_avg_sq"), new, refs,
                                             bounds, strict=True):
                assert_within(f"{who} {name} at step {step}", got, ref, bound)
    return check


def run_adam(kind, variant, lr, betas, eps, weight_decay, maximize):
    make, theirs_cls, decoupled = ADAM_KINDS[kind]
    hp = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
          "maximize": maximize}
    run_beside_torch(make(variant), theirs_cls, hp, ("exp_avg", "exp_avg_sq"),
                     adam_check(decoupled))


@pytest.mark.parametrize(("kind", "lr_kind", "betas", "eps", "weight_decay", "maximize"),
                         ADAM_GRID)
def test_adam_tracks_torch_in_the_covering_design(kind, lr_kind, betas, eps, weight_decay,
                                                  maximize):
    lr = torch.tensor(0.01) if lr_kind == "tensor" else 0.01
    run_adam(kind, optim_kernels.DEFAULT_VARIANT, lr, betas, eps, weight_decay, maximize)


# Every variant meets every hyperparameter value at least once (the default variant above
# runs the covering design).
@pytest.mark.parametrize(
    "variant", [v for v in optim_kernels.VARIANTS if v != optim_kernels.DEFAULT_VARIANT]
)
@pytest.mark.parametrize(("kind", "lr", "betas", "eps", "weight_decay", "maximize"), [
    ("Adam", 0.01, (0.9, 0.999), 1e-8, 0.1, True),
    ("AdamW", torch.tensor(0.01), (0.5, 0.9), 1e-3, 0.1, False),
    ("Adam-decoupled", 0.01, (0.5, 0.9), 1e-8, 0.0, True),
])
def test_every_adam_variant_tracks_torch(variant, kind, lr, betas, eps, weight_decay,
                                         maximize):
    run_adam(kind, variant, lr, betas, eps, weight_decay, maximize)


def values_seen(rows: list[tuple], columns: tuple[int, ...]) -> set[tuple]:
    return {tuple(row[c] for c in columns) for row in rows}


def test_the_designs_cover_what_they_claim():
    """Every triple of values of any three hyperparameters that torch accepts together is
    trained (strength 3), and every combination torch refuses is tried."""
    every_sgd = list(itertools.product(*SGD_VALUES.values()))
    accepted = [c for c in every_sgd if not sgd_refused(c)]
    assert len(SGD_DESIGN) == 20 and not any(sgd_refused(c) for c in SGD_DESIGN)
    assert sorted(c for c in SGD_GRID if sgd_refused(c)) == sorted(
        c for c in every_sgd if sgd_refused(c))
    every_adam = list(itertools.product(ADAM_KINDS, *ADAM_VALUES.values()))
    assert len(ADAM_GRID) == 18
    for design, full in ((SGD_DESIGN, accepted), (ADAM_GRID, every_adam)):
        for columns in itertools.combinations(range(6), 3):
            assert values_seen(design, columns) == values_seen(full, columns), columns
    for kind in ADAM_KINDS:  # and each kind alone meets every pair of the others' values
        runs = [c for c in ADAM_GRID if c[0] == kind]
        for columns in itertools.combinations(range(1, 6), 2):
            assert len(values_seen(runs, columns)) == 4, (kind, columns)


# ------------------------------------------------------------------------------------------
# What gpudl.optim does not implement is refused at construction
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "kwargs", "match"), [
    (optim.Adam, {"amsgrad": True}, "amsgrad=True is not implemented"),
    (optim.AdamW, {"amsgrad": True}, "amsgrad=True is not implemented"),
    (optim.Adam, {"fused": True},
     r"does not support fused=True: it chooses torch's fused implementation.*variant="),
    (optim.AdamW, {"foreach": True}, "does not support foreach=True"),
    (optim.Adam, {"capturable": True},
     "does not support capturable=True: it asks for a step that a CUDA graph can capture"),
    (optim.AdamW, {"differentiable": True},
     "does not support differentiable=True: it asks for a step that autograd differentiates"),
    (optim.SGD, {"foreach": True}, "does not support foreach=True"),
    (optim.SGD, {"fused": True}, "does not support fused=True"),
    (optim.SGD, {"differentiable": True}, "does not support differentiable=True"),
    (optim.SGD, {"lr": torch.tensor([0.1, 0.2])}, "a tensor lr must hold one"),
    (optim.Adam, {"betas": (torch.tensor(0.9), torch.tensor([0.9, 0.99]))},
     r"a tensor betas\[1\] must hold one"),
])
def test_what_is_not_implemented_is_refused_clearly(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls([torch.nn.Parameter(torch.zeros(2, device=DEVICE))], **kwargs)


@pytest.mark.parametrize("flag", ["capturable", "differentiable"])
def test_a_behaviour_flag_is_not_sent_to_a_variant(flag):
    # capturable and differentiable ask for a behaviour, which no variant has
    with pytest.raises(ValueError, match=f"{flag}=True") as refused:
        optim.Adam([torch.nn.Parameter(torch.zeros(2, device=DEVICE))], **{flag: True})
    assert "variant=" not in str(refused.value)


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.AdamW])
def test_torch_switches_set_off_are_accepted(cls):
    p = torch.nn.Parameter(torch.ones(3, device=DEVICE))
    opt = cls([p], lr=0.1, foreach=False, fused=None, differentiable=False)
    p.grad = torch.ones(3, device=DEVICE)
    opt.step()
    assert (p.detach() < 1).all()


def test_a_tensor_learning_rate_follows_a_scheduler():
    p = torch.nn.Parameter(torch.zeros(4, device=DEVICE))
    q = torch.nn.Parameter(torch.zeros(4, device=DEVICE))
    ours = optim.Adam([p], lr=torch.tensor(0.1))
    theirs = torch.optim.Adam([q], lr=torch.tensor(0.1), foreach=False)
    sched = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (ours, theirs)]
    for _ in range(3):
        p.grad = torch.ones(4, device=DEVICE)
        q.grad = torch.ones(4, device=DEVICE)
        ours.step()
        theirs.step()
        for s in sched:
            s.step()
    assert float(ours.param_groups[0]["lr"]) == pytest.approx(0.0125)
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=0)
