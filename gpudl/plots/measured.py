"""The figures of the "Measured on a GPU" boxes: rates of the book's kernels beside their
reference (a torch copy, cuBLAS), drawn from stored results by the book's build.

Book section: every chapter's "Measured on a GPU" boxes (``book/_ext/gpudl_measured.py``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from gpudl.checks import check_instance, check_real_mapping
from gpudl.plots.style import finish

__all__ = ["rate_bars"]


def rate_bars(groups: dict[str, dict[str, float]], references: dict[str, float], unit: str,
              title: str, reference_label: str) -> Figure:
    """One bar per kernel in each group (a size, a layout), its rate in ``unit`` (higher is
    faster), and each group's reference rate (a torch copy, cuBLAS) as a dashed line across
    the group's bars, labelled ``reference_label``. One group: the kernels name the bars."""
    check_real_mapping("groups", groups, 0, strict=True)
    check_real_mapping("references", references, 0, strict=True)
    for name, value in (("unit", unit), ("title", title), ("reference_label", reference_label)):
        check_instance(name, value, str)
    names = list(dict.fromkeys(name for group in groups.values() for name in group))
    single = len(groups) == 1
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.5 * len(names) * len(groups)), 3.6))
    for j, name in enumerate(names):
        xs = [i + j * width for i, group in enumerate(groups.values()) if name in group]
        ax.bar(xs, [group[name] for group in groups.values() if name in group], width * 0.9,
               label=None if single else name, color=f"C{j % 10}")
    for i, group in enumerate(groups):
        if group in references:
            ax.hlines(references[group], i - width / 2, i + 0.8 - width / 2, colors="k",
                      linestyles="dashed", label=reference_label if i == 0 else None)
    if single:
        ax.set_xticks([j * width for j in range(len(names))], names, rotation=30, ha="right")
    else:
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))], list(groups))
    ax.set(ylabel=unit, title=title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return finish(fig)
