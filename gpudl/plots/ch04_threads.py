"""Chapter 4's data-layout figures: which elements one thread of the fused and shared-memory
Adam steps reads and writes, and how one multi-tensor launch walks a parameter group's flat
buffers, each traced on the simulator (:mod:`gpudl.trace`).

Book section: Chapter 4, "Fused: one pass", "Multi-tensor: one launch for the whole model" and
"Does shared memory help Adam?".
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_choice, check_instance, check_int, check_ints
from gpudl.plots.style import check_rows, finish
from gpudl.plots.traced import element_indices

__all__ = ["adam_thread_footprint", "adam_thread_work", "grid_stride_layout",
           "multi_tensor_layout"]

#: The variants whose threads each update one element (:func:`adam_thread_footprint`).
ONE_ELEMENT_VARIANTS = ("v2_fused", "v3_shared")


def _inputs(n: int) -> list[np.ndarray]:
    """Four float32 arrays of ``n`` positive values: ``p``, ``g``, ``m`` and ``v`` (what they
    hold does not change which elements a thread touches)."""
    return [np.random.default_rng(k).random(n, dtype=np.float32) + 0.5 for k in range(4)]


def adam_thread_footprint(variant: str, n: int = 64, element: int = 37) -> dict:
    """What the thread that updates ``element`` of one step of ``variant`` (``v2_fused`` or
    ``v3_shared``, whose threads each update one element) reads and writes, traced on the
    simulator (through :func:`gpudl.trace.on_simulator` on a GPU) for ``n`` parameters,
    launched as the variant's launcher does (``THREADS`` threads per block).

    Returns ``{"variant", "n", "threads_per_block", "element", "block", "thread",
    "accesses": [(kind, array, op, index)] in the order of the kernel's source, "barriers"}``,
    ``barriers`` being the ``cuda.syncthreads()`` calls in the kernel."""
    check_choice("variant", variant, ONE_ELEMENT_VARIANTS)
    check_int("n", n, 1)
    check_int("element", element, 0, n - 1)
    import inspect

    from gpudl.kernels import optim as optim_kernels
    from gpudl.kernels.grid import blocks_to_cover
    from gpudl.kernels.optim.traffic import THREADS
    from gpudl.trace import trace

    kernel = getattr(optim_kernels, variant)
    parameters = tuple(inspect.signature(kernel.py_func).parameters)
    t = trace(kernel, blocks_to_cover(n, THREADS), THREADS, *_inputs(n),
              *optim_kernels.adam_scalars(3, 1e-2, weight_decay=0.01))
    block, thread = divmod(element, THREADS)
    mine = [a for a in t.accesses if a.block == (block, 0, 0) and a.thread == thread]
    order = {name: i for i, name in enumerate(parameters)}
    mine.sort(key=lambda a: (a.line, a.op == "store", order.get(a.array, len(order)), a.array))
    return {"variant": variant, "n": n, "threads_per_block": THREADS, "element": element,
            "block": block, "thread": thread,
            "accesses": [(a.kind, a.array, a.op, element_indices(t, a.array, [a.address])[0])
                         for a in mine],
            "barriers": inspect.getsource(kernel.py_func).count("cuda.syncthreads()")}


_LOADED, _STORED = "#4c72b0", "#c44e52"


def _counts(accesses: Sequence[tuple], kind: str) -> int:
    return sum(1 for a in accesses if a[0] == kind)


def adam_thread_work(footprints: Sequence[dict]) -> Figure:
    """One panel per :func:`adam_thread_footprint`: the device arrays ``p``, ``g``, ``m``,
    ``v`` (one cell per element, the blocks shaded in turn) and the shared arrays each block
    stages them in, with the cells the thread reads (blue) or reads and writes (red)."""
    check_rows("footprints", footprints, ("variant", "n", "threads_per_block", "accesses",
                                          "barriers", "element", "block"))
    heights = [len({a[1] for a in f["accesses"]}) for f in footprints]
    fig, axes = plt.subplots(len(footprints), 1, squeeze=False, height_ratios=heights,
                             figsize=(7.4, 1.3 + 0.32 * sum(h + 2 for h in heights)))
    for ax, f in zip(axes[:, 0], footprints, strict=True):
        n, threads = f["n"], f["threads_per_block"]
        arrays = list(dict.fromkeys(a[1] for a in f["accesses"] if a[0] == "global"))
        shared = list(dict.fromkeys(a[1] for a in f["accesses"] if a[0] == "shared"))
        rows = arrays + shared
        for y, name in enumerate(rows):
            is_shared = name in shared
            for block in range(-(-n // threads)):
                first = block * threads
                width = min(threads, n - first)
                color = ("#e4d4f0" if is_shared else "#dfe9f5") if block % 2 == 0 else (
                    "#efe6f6" if is_shared else "#edf3fa")
                ax.add_patch(Rectangle((first, y - 0.4), width, 0.8, facecolor=color,
                                       edgecolor="#777777", lw=0.6))
            ax.vlines(range(1, n), y - 0.4, y + 0.4, color="#bbbbbb", lw=0.3)
            ops = {a[2] for a in f["accesses"] if a[1] == name}
            index = next(a[3] for a in f["accesses"] if a[1] == name)
            x = index + (f["block"] * threads if is_shared else 0)
            ax.add_patch(Rectangle((x, y - 0.4), 1, 0.8, edgecolor="k", lw=0.6,
                                   facecolor=_STORED if "store" in ops else _LOADED,
                                   gid=f"{name}:{'+'.join(sorted(ops))}"))
        ax.set_yticks(range(len(rows)), rows)
        ax.set(xlim=(0, n), ylim=(len(rows) - 0.5, -0.5))
        ax.set_xticks(range(0, n + 1, threads))
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        device = _counts(f["accesses"], "global")
        head = f"{f['variant']}, thread {f['element']}: {device} device-memory accesses"
        if shared:
            head += (f"\nand {_counts(f['accesses'], 'shared')} shared-memory accesses, "
                     f"{f['barriers']} barriers")
        ax.set_title(head, loc="left", fontsize=11)
    axes[-1, 0].set_xlabel(f"element (blocks of {footprints[0]['threads_per_block']} threads, "
                           "one thread per element); blue: read, red: read and written")
    return finish(fig)


def grid_stride_layout(shapes: Sequence[tuple[int, ...]]) -> dict:
    """One ``v4_multi_tensor`` launch over the flat buffers of parameters of ``shapes``
    (laid out by :func:`gpudl.optim.flat_buffers.flatten`), traced on the simulator (through
    :func:`gpudl.trace.on_simulator` on a GPU), launched as its launcher does: for each
    element, the pass of the grid-stride loop that updates it and the thread (index in the
    grid) that does.

    Returns ``{"offsets", "sizes", "blocks", "threads_per_block", "pass", "thread"}``
    (``pass`` and ``thread``: one int per element of the buffer)."""
    check_instance("shapes", shapes, Sequence)
    if not shapes:
        raise ValueError("shapes must hold at least one tensor shape")
    for i, shape in enumerate(shapes):
        check_ints(f"shapes[{i}]", shape, 1)
    import torch

    from gpudl.interop import KernelArrays
    from gpudl.kernels import optim as optim_kernels
    from gpudl.kernels.grid import grid_stride_blocks
    from gpudl.kernels.optim.traffic import THREADS
    from gpudl.optim.flat_buffers import flatten
    from gpudl.trace import trace

    params = [torch.zeros(tuple(shape)) for shape in shapes]
    flat = flatten(params, KernelArrays())
    n = flat.buffers["param"].numel()
    blocks = grid_stride_blocks(n, THREADS)
    t = trace(optim_kernels.v4_multi_tensor, blocks, THREADS, *_inputs(n),
              *optim_kernels.adam_scalars(3, 1e-2))
    passes, threads = [-1] * n, [-1] * n
    loads = [a for a in t.accesses if (a.kind, a.array, a.op) == ("global", "p", "load")]
    for a, index in zip(loads, element_indices(t, "p", [a.address for a in loads]),
                        strict=True):
        passes[index] = a.occurrence
        threads[index] = a.block[0] * THREADS + a.thread
    return {"offsets": list(flat.offsets), "sizes": [p.numel() for p in params],
            "blocks": blocks, "threads_per_block": THREADS, "pass": passes,
            "thread": threads}


def multi_tensor_layout(layout: dict, names: Sequence[str], title: str = "") -> Figure:
    """The flat buffer of :func:`grid_stride_layout` cut into the passes of the grid-stride
    loop, one row per pass, one column per thread of the grid: each cell coloured by the
    tensor it belongs to (``names``, one per tensor), the blocks' edges as lines, thread 0's
    elements marked."""
    check_instance("layout", layout, dict)
    for key in ("offsets", "sizes", "blocks", "threads_per_block", "pass", "thread"):
        if key not in layout:
            raise ValueError(f"layout lacks {key!r}")
    check_instance("names", names, Sequence)
    check_instance("title", title, str)
    if len(names) != len(layout["sizes"]):
        raise ValueError(f"names must name each of the {len(layout['sizes'])} tensors, got "
                         f"{len(names)}")
    width = layout["blocks"] * layout["threads_per_block"]
    rows = max(layout["pass"]) + 1
    owner = np.full((rows, width), -1)
    for index, (row, col) in enumerate(zip(layout["pass"], layout["thread"], strict=True)):
        owner[row, col] = int(np.searchsorted(layout["offsets"], index, side="right")) - 1
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#ffffff"] + colors[:len(names)])
    fig, ax = plt.subplots(figsize=(7.4, 0.16 * rows + 2.2))
    ax.imshow(owner + 1, cmap=cmap, vmin=0, vmax=len(names), aspect="auto",
              interpolation="nearest", extent=(0, width, rows, 0))
    for x in range(0, width + 1, layout["threads_per_block"]):
        ax.axvline(x, color="k", lw=0.8)
    thread0 = [r for r in range(rows) if owner[r, 0] >= 0]
    ax.plot([0.5] * len(thread0), [r + 0.5 for r in thread0], "k.", markersize=4,
            gid="thread-0")
    for i, (name, size) in enumerate(zip(names, layout["sizes"], strict=True)):
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colors[i], label=f"{name}: {size:,}"))
    ax.set(xlabel=f"thread of the grid ({layout['blocks']} blocks of "
                  f"{layout['threads_per_block']}; thread 0's elements dotted)",
           ylabel="pass of the loop", title=title)
    ax.set_yticks([r + 0.5 for r in range(0, rows, 2)], [str(r + 1) for r in range(0, rows, 2)])
    ax.set_xticks(range(0, width + 1, layout["threads_per_block"]))
    finish(fig)
    fig.legend(loc="lower center", ncol=len(names), fontsize=10, frameon=False,
               handlelength=1.2)
    fig.subplots_adjust(bottom=1.3 / fig.get_size_inches()[1])
    return fig
