"""Chapter 4's figures: how far each Adam variant's float32 step is from its float64 reference,
the memory traffic of each Adam variant, why mixed precision keeps a float32 master copy of
the weights, and how a float32 rounds to bfloat16 (the data-layout figures of the Adam kernels
are in :mod:`gpudl.plots.ch04_threads`).

Book section: Chapter 4, Optimizers on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_instance, check_int, check_real, check_real_mapping
from gpudl.plots.style import check_rows, finish

__all__ = ["adam_error_ratios", "error_within_bound", "optimizer_traffic",
           "master_weight_updates", "weight_after_updates", "bf16_rounding", "bf16_bits"]

#: The two wrong steps of :func:`adam_error_ratios`, which the bound must catch.
WRONG_STEPS = ("wrong: next step's bias correction", "wrong: L2 term left out")


def _adam_inputs(n: int, seed: int) -> tuple[np.ndarray, ...]:
    """``(p, g, m, v)``: float32 state of ``n`` parameters drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    p, g, m = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    return p, g, np.float32(0.1) * m, (0.01 * rng.random(n)).astype(np.float32)


def adam_error_ratios(n: int = 256, step: int = 3, lr: float = 1e-2,
                      weight_decay: float = 0.01, seed: int = 0) -> dict[str, dict[str, float]]:
    """The largest error of one Adam step over ``n`` parameters, as a fraction of its bound
    (:func:`gpudl.kernels.optim.adam_error_bound`), for the new ``p``, ``m`` and ``v``: for
    each variant of :data:`gpudl.kernels.optim.VARIANTS`, for ``torch.optim.Adam`` given the
    same state, and for the two ``WRONG_STEPS`` (``v2_fused`` with the bias correction
    of step ``step + 1``, and without the L2 term), which must fall outside it. Every step
    starts from the same float32 state; the reference is
    :func:`gpudl.kernels.optim.reference_adam`, in float64."""
    check_int("n", n, 1)
    check_int("step", step, 1)
    check_real("lr", lr, 0)
    check_real("weight_decay", weight_decay, 0)
    check_int("seed", seed, 0)
    import torch

    from gpudl.kernels import optim as optim_kernels

    hp = {"step": step, "lr": lr, "weight_decay": weight_decay}
    state = _adam_inputs(n, seed)
    refs = optim_kernels.reference_adam(*state, **hp)
    bounds = optim_kernels.adam_error_bound(*state, **hp)

    def ratios(p, m, v) -> dict[str, float]:
        return {name: float(np.max(np.abs(np.float64(x) - r) / b))
                for name, x, r, b in zip("pmv", (p, m, v), refs, bounds, strict=True)}

    def kernel_step(variant: str, **changed) -> dict[str, float]:
        p, g, m, v = (x.copy() for x in state)
        optim_kernels.adam_step(p, g, m, v, variant=variant, **(hp | changed))
        return ratios(p, m, v)

    out = {variant: kernel_step(variant) for variant in optim_kernels.VARIANTS}
    p, g, m, v = (torch.tensor(x) for x in state)
    p.requires_grad_()
    opt = torch.optim.Adam([p], lr=lr, weight_decay=weight_decay)
    opt.state[p] = {"step": torch.tensor(float(step - 1)), "exp_avg": m, "exp_avg_sq": v}
    p.grad = g
    opt.step()
    out["torch.optim.Adam"] = ratios(p.detach().numpy(), m.numpy(), v.numpy())
    out[WRONG_STEPS[0]] = kernel_step("v2_fused", step=step + 1)
    out[WRONG_STEPS[1]] = kernel_step("v2_fused", weight_decay=0.0)
    return out


def error_within_bound(ratios: dict[str, dict[str, float]], title: str = "") -> Figure:
    """One row per entry of :func:`adam_error_ratios`: the largest error of ``p``, ``m`` and
    ``v`` as a fraction of its bound (log scale; 1 is the bound), each row labelled with its
    largest."""
    check_instance("ratios", ratios, dict)
    if not ratios:
        raise ValueError("ratios must hold at least one row")
    for name, row in ratios.items():
        check_real_mapping(f"ratios[{name!r}]", row, 0)
    check_instance("title", title, str)
    low, high = 1e-3, 1e6
    fig, ax = plt.subplots(figsize=(7.2, 0.42 * len(ratios) + 1.5))
    names = list(ratios)
    markers = {"p": "o", "m": "s", "v": "^"}
    for y, name in enumerate(names):
        for quantity, value in ratios[name].items():
            ax.plot(min(max(value, low), high), y, markers[quantity], color="#4c72b0",
                    markersize=6, label=quantity if y == 0 else None, gid=f"{name}:{quantity}")
        worst = max(ratios[name].values())
        ax.text(high * 2, y, f"{worst:.2g}", va="center")
    ax.axvline(1, color="#c44e52", lw=1.5, label="the bound")
    ax.axvspan(1, high, color="#c44e52", alpha=0.07, lw=0)
    ax.set(xscale="log", xlim=(low, high), ylim=(len(names) - 0.5, -1.4),
           xlabel="largest error over the bound (the largest of each row at the right)",
           title=title)
    ax.set_yticks(range(len(names)), names)
    ax.legend(loc="upper center", ncol=4, fontsize=10, handletextpad=0.3, columnspacing=1.0,
              handlelength=1.2)
    return finish(fig)


def optimizer_traffic(rows: Sequence[dict]) -> Figure:
    """Bytes per parameter of one Adam step for each variant (rows of
    :func:`gpudl.optim.traffic_table`, counted by the tracer): device memory and shared
    memory side by side, each bar labelled with its kernel launches."""
    check_rows("rows", rows, ())
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    names = [r["variant"] for r in rows]
    x = np.arange(len(rows))
    device = [r["global_bytes_per_param"] for r in rows]
    shared = [r["shared_bytes_per_param"] for r in rows]
    ax.bar(x - 0.2, device, 0.4, label="device memory", color="#4c72b0")
    ax.bar(x + 0.2, shared, 0.4, label="shared memory", color="#dd8452")
    for k, r in enumerate(rows):
        ax.text(k - 0.2, device[k], f"{device[k]:g}", ha="center", va="bottom")
        launches = f"{r['launches']} launch" + ("es" if r["launches"] != 1 else "")
        ax.text(k, max(device[k], shared[k]) + 0.12 * max(device), launches, ha="center")
    ax.axhline(28, color="k", ls=":", lw=1, label="28 B: read p, g, m, v; write p, m, v")
    ax.set(xticks=x, xticklabels=names, ylabel="bytes per parameter",
           ylim=(0, max(device) * 1.75),
           title="One Adam step, counted by the tracer")
    ax.legend(loc="upper right")
    return finish(fig)


def weight_after_updates(steps: int = 100, update: float = -1e-3,
                         start: float = 1.0) -> dict[str, list[float]]:
    """A weight of ``start`` after each of ``steps`` additions of ``update`` (index 0: before
    any), three ways, computed with torch: ``"bfloat16"`` (the weight kept in bfloat16),
    ``"float32"`` (kept in float32) and ``"float32, read as bfloat16"`` (a float32 master copy
    rounded to bfloat16 after each step, as mixed precision writes the parameter)."""
    check_int("steps", steps, 1)
    check_real("update", update)
    check_real("start", start)
    import torch

    bf16, fp32 = torch.tensor([start], dtype=torch.bfloat16), torch.tensor([start])
    out = {"bfloat16": [bf16.item()], "float32": [fp32.item()],
           "float32, read as bfloat16": [fp32.to(torch.bfloat16).item()]}
    for _ in range(steps):
        bf16 += update
        fp32 += update
        out["bfloat16"].append(bf16.item())
        out["float32"].append(fp32.item())
        out["float32, read as bfloat16"].append(fp32.to(torch.bfloat16).item())
    return out


def master_weight_updates(steps: int = 100, update: float = -1e-3) -> Figure:
    """The three weights of ``weight_after_updates`` against the number of updates: in
    bfloat16 every update rounds away, the float32 master copy keeps them."""
    weights = weight_after_updates(steps, update)
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    styles = {"bfloat16": ("#c44e52", "-", 2.5), "float32": ("#4c72b0", "-", 1.5),
              "float32, read as bfloat16": ("#55a868", "--", 1.5)}
    for name, values in weights.items():
        color, ls, lw = styles[name]
        ax.plot(np.arange(steps + 1), values, ls, color=color, lw=lw, label=name, gid=name)
    ax.set(xlabel=f"updates of {update:g}", ylabel="weight",
           title="A weight of 1.0, updated in bfloat16 and in float32")
    ax.legend(loc="lower left")
    return finish(fig)


def bf16_rounding(value: float) -> dict:
    """``value`` as float32 and as the bfloat16 that the mixed-precision step writes
    (``f32_to_bf16`` of :mod:`gpudl.kernels.optim.mixed`, called as the simulator calls a device
    function; through :func:`gpudl.trace.on_simulator` on a GPU): ``{"value", "bits",
    "bf16_bits", "bf16_value"}``, the bits as unsigned ints."""
    check_real("value", value)
    from gpudl.kernels.optim import bf16_to_f32, f32_to_bf16

    x = np.float32(value)
    low = f32_to_bf16(x)
    return {"value": float(x), "bits": int(x.view(np.uint32)),
            "bf16_bits": int(np.int16(low).view(np.uint16)),
            "bf16_value": float(bf16_to_f32(np.int16(low)))}


def bf16_bits(rounding: dict) -> Figure:
    """The 32 bits of a float32 (sign, 8 exponent bits, 23 mantissa bits) above the 16 bits
    of its bfloat16 rounding (:func:`bf16_rounding`), which keeps the upper half: the lower
    half, dropped, says whether the kept half is rounded up."""
    check_instance("rounding", rounding, dict)
    for key in ("value", "bits", "bf16_bits", "bf16_value"):
        if key not in rounding:
            raise ValueError(f"rounding lacks {key!r}")
    fields = ((1, "#e9b3b4"), (8, "#bfe0bf"), (23, "#c5d3ea"))
    fig, ax = plt.subplots(figsize=(7.4, 1.6))
    for y, bits, width, name in ((2.2, rounding["bits"], 32, "float32"),
                                 (0, rounding["bf16_bits"], 16, "bfloat16")):
        field_colors = [c for n, c in fields for _ in range(n)]
        for i in range(width):
            bit = bits >> (width - 1 - i) & 1
            dropped = y > 0 and i >= 16
            ax.add_patch(Rectangle((i, y), 1, 1, facecolor="#eeeeee" if dropped else
                                   field_colors[i], edgecolor="w", gid=f"{name}-{i}"))
            ax.text(i + 0.5, y + 0.5, str(bit), ha="center", va="center",
                    color="#888888" if dropped else "k")
        value = rounding["value"] if width == 32 else rounding["bf16_value"]
        ax.text(-0.4, y + 0.5, name, ha="right", va="center")
        ax.text(width + 0.4, y + 0.5, f"= {value:.9g}", ha="left", va="center")
    for start, (n, _), label in zip((0, 1, 9), fields, ("sign", "exponent", "mantissa"),
                                    strict=True):
        ax.text(start + n / 2, 3.3, label, ha="center", va="bottom")
    low = rounding["bits"] & 0xFFFF
    verdict = ("rounded down" if low < 0x8000 else "rounded up" if low > 0x8000
               else "a tie: rounded to even")
    ax.text(28, 1.9, f"dropped: 0x{low:04X},\n{verdict}", ha="center", va="top")
    ax.set(xlim=(-6, 39), ylim=(-0.2, 4.2), aspect="equal")
    ax.axis("off")
    ax.set_title("float32 to bfloat16: the upper 16 bits, rounded to nearest even")
    return finish(fig)
