"""Chapter 11's figures of mixture of experts: how a router loads its experts against their
capacity, and the two all-to-alls that carry a layer's tokens to their experts' ranks and back.

Book section: *Chapter 11, "The router"* and *"Two all-to-alls"* (and the chapter's lab). Both
draw what :func:`gpudl.parallel.experts.route` decides for the layer's seeded weights and batch,
so the figures show the routing the equivalence runs use.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_instance, check_int, check_ints
from gpudl.parallel.experts import MoEConfig, MoELayer, Routing, by_local_expert, moe_batch, route
from gpudl.plots.style import finish

__all__ = ["EXPERT_COLORS", "expert_loads", "moe_all_to_alls", "rank_routings",
           "router_counts"]

#: One colour per expert (the figures have at most eight).
EXPERT_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
                 "#8c8c8c")


def rank_routings(config: MoEConfig, tokens_per_rank: int, ranks: int) -> list[Routing]:
    """The routing of each of ``ranks`` groups of ``tokens_per_rank`` tokens of
    :func:`gpudl.parallel.experts.moe_batch` by the layer of ``config``: what each rank of
    expert parallelism (and the one-process layer, group by group) decides."""
    check_instance("config", config, MoEConfig)
    check_int("tokens_per_rank", tokens_per_rank, 1)
    check_int("ranks", ranks, 1)
    layer = MoELayer(config)
    x, _ = moe_batch(config, ranks * tokens_per_rank)
    with torch.no_grad():
        return [route(part @ layer.router.T, config.top_k, config.capacity_factor)
                for part in x.split(tokens_per_rank)]


def router_counts(config: MoEConfig, tokens: int) -> tuple[list[int], int]:
    """How many of one group of ``tokens`` tokens' choices the router of ``config`` sends to
    each expert (before any is dropped), and the capacity of each expert."""
    (routing,) = rank_routings(config, tokens, 1)
    return routing.counts.tolist(), routing.capacity


def expert_loads(counts_by_router: dict[str, Sequence[int]], capacity: int,
                 title: str = "") -> Figure:
    """One panel per router: each expert's choices, the ``capacity`` it keeps (solid, gid
    ``"kept:<router>"``) and the rest, dropped (hatched, gid ``"dropped:<router>"``), with
    the capacity as a line."""
    check_instance("counts_by_router", counts_by_router, dict)
    if not counts_by_router:
        raise ValueError("counts_by_router must hold at least one router's counts")
    check_int("capacity", capacity, 1)
    counts = {name: check_ints(f"counts_by_router[{name!r}]", c, 0)
              for name, c in counts_by_router.items()}
    fig, axes = plt.subplots(1, len(counts), figsize=(7.4, 3.0), sharey=True, squeeze=False)
    top = max(max(c) for c in counts.values())
    for ax, (name, c) in zip(axes[0], counts.items(), strict=True):
        experts = range(len(c))
        kept = [min(n, capacity) for n in c]
        dropped = [n - k for n, k in zip(c, kept, strict=True)]
        ax.bar(experts, kept, color="#4c72b0", gid=f"kept:{name}", label="kept")
        ax.bar(experts, dropped, bottom=kept, color="white", edgecolor="#c44e52",
               hatch="///", gid=f"dropped:{name}", label="dropped")
        ax.axhline(capacity, color="black", linestyle="--", linewidth=1)
        ax.text(len(c) - 0.5, capacity, f"capacity {capacity}", ha="right", va="bottom")
        ax.set(xticks=list(experts), xlabel="expert",
               title=f"{name}: {sum(dropped)} of {sum(c)} dropped", ylim=(0, 1.15 * top))
    axes[0, 0].set_ylabel("choices")
    axes[0, 0].legend(loc="upper right", bbox_to_anchor=(1.0, 0.88))
    if title:
        fig.suptitle(title)
    return finish(fig)


def _box(ax: plt.Axes, x: float, y: float, label: str, color: str | None, gid: str) -> None:
    face = "#eeeeee" if color is None else color
    ax.add_patch(Rectangle((x - 0.42, y - 0.4), 0.84, 0.8, facecolor=face, edgecolor="black",
                           linewidth=0.6, alpha=0.9 if color else 1.0, gid=gid))
    ax.text(x, y, label, ha="center", va="center", color="white" if color else "black")


def moe_all_to_alls(config: MoEConfig, tokens_per_rank: int = 4, ranks: int = 2) -> Figure:
    """The rows of one mixture-of-experts layer on ``ranks`` ranks, from the routing of
    :func:`rank_routings`: each rank's tokens, its rows sorted by expert (one per kept
    choice, coloured by expert), the rows on the rank that holds their expert after the
    dispatch all-to-all (grouped by expert, rank by rank as
    :func:`gpudl.parallel.experts.by_local_expert` orders them), and the rows back on their
    rank after the combine all-to-all, added into each token's output. A line joins each
    row's places (gid ``"dispatch"`` between ranks, ``"local"`` within one)."""
    routings = rank_routings(config, tokens_per_rank, ranks)
    local = config.experts // ranks
    if local * ranks != config.experts or config.experts > len(EXPERT_COLORS):
        raise ValueError(f"ranks ({ranks}) must divide the experts ({config.experts}), at "
                         f"most {len(EXPERT_COLORS)} of them")
    received = [sum(int(r.kept_counts[q * local:(q + 1) * local].sum()) for r in routings)
                for q in range(ranks)]
    rows_per_rank = max(tokens_per_rank, *(len(r.sources) for r in routings), *received)
    step = rows_per_rank + 1.5  # vertical room per rank
    columns = {"tokens": 0.0, "sent": 2.0, "experts": 4.8, "back": 7.6, "out": 9.6}
    fig, ax = plt.subplots(figsize=(7.4, 0.4 + 0.3 * step * ranks))
    expert_of, place = {}, {}
    for r, routing in enumerate(routings):
        expert_of[r] = torch.repeat_interleave(torch.arange(config.experts),
                                               routing.kept_counts).tolist()
        base = -r * step
        ax.axhspan(base + 0.7, base - rows_per_rank + 0.3, color="#f4f4f4", zorder=-2)
        ax.text(-0.7, base - (rows_per_rank - 1) / 2, f"rank {r}", rotation=90, ha="center",
                va="center")
        for t in range(tokens_per_rank):
            _box(ax, columns["tokens"], base - t, f"t{t}", None, f"token:{r}:{t}")
            _box(ax, columns["out"], base - t, f"y{t}", None, f"out:{r}:{t}")
        for i, (src, e) in enumerate(zip(routing.sources.tolist(), expert_of[r], strict=True)):
            for column in ("sent", "back"):
                _box(ax, columns[column], base - i, f"t{src}", EXPERT_COLORS[e],
                     f"{column}:{r}:{i}")
            ax.plot([columns["tokens"] + 0.42, columns["sent"] - 0.42], [base - src, base - i],
                    color="#999999", linewidth=0.6, gid="local")
            ax.plot([columns["back"] + 0.42, columns["out"] - 0.42], [base - i, base - src],
                    color="#999999", linewidth=0.6, gid="local")
            place[r, i] = (e // local, e)
    for q in range(ranks):  # the rows rank q receives, in the order it computes them
        experts = range(q * local, (q + 1) * local)
        received = torch.tensor([[expert_of[r].count(e) for e in experts] for r in range(ranks)])
        arrived = [(r, i) for r in range(ranks) for i in range(len(expert_of[r]))
                   if place[r, i][0] == q]  # rank by rank, each in the order it sent them
        for j, index in enumerate(by_local_expert(received).tolist()):
            r, i = arrived[index]
            y = -q * step - j
            _box(ax, columns["experts"], y, f"r{r} t{routings[r].sources[i]}",
                 EXPERT_COLORS[place[r, i][1]], f"experts:{q}:{j}")
            for a, b in ((columns["sent"] + 0.42, columns["experts"] - 0.42),
                         (columns["experts"] + 0.42, columns["back"] - 0.42)):
                ys = (-r * step - i, y) if a < columns["experts"] else (y, -r * step - i)
                ax.plot([a, b], ys, color="black" if r != q else "#999999", linewidth=0.8,
                        gid="dispatch" if r != q else "local")
    heads = {"tokens": "tokens", "sent": "rows by expert",
             "experts": "at the expert's rank", "back": "rows back", "out": "y = Σ gate · row"}
    for column, text in heads.items():
        ax.text(columns[column], 1.5, text, ha="center", va="bottom")
    for x, text in ((3.4, "dispatch all-to-all"), (6.2, "combine all-to-all")):
        ax.text(x, 0.75, text, ha="center", va="center", style="italic")
    for e in range(config.experts):
        ax.add_patch(Rectangle((0.9 * e - 0.2, -ranks * step - 0.6), 0.35, 0.5,
                               facecolor=EXPERT_COLORS[e]))
        ax.text(0.9 * e + 0.2, -ranks * step - 0.35, f"e{e}", va="center")
    ax.set(xlim=(-1.1, 10.2), ylim=(-ranks * step - 0.9, 2.4))
    ax.axis("off")
    return finish(fig)
