"""What every figure of the book shares: readable text and a width that fits the page.

Book section: every chapter's figures. A figure is saved at 110 dpi and shown at most about
790 px wide at a window of 1280 px, so a width of :data:`MAX_WIDTH_IN` inches is shown at
nearly full size and :data:`MIN_FONT_PT` points stay at least 14 px tall on screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.text import Text

__all__ = ["LABEL_PT", "MAX_WIDTH_IN", "MIN_FONT_PT", "TICK_PT", "TITLE_PT", "check_rows",
           "finish", "font_sizes"]

#: The smallest text any figure holds, in points.
MIN_FONT_PT = 10.0
#: The widest figure, in inches (shown at nearly full size at a window of 1280 px).
MAX_WIDTH_IN = 7.5
#: The house sizes of tick labels, axis labels and titles, in points.
TICK_PT, LABEL_PT, TITLE_PT = 10.5, 11.0, 12.0


def finish(fig: Figure) -> Figure:
    """Raise every text of ``fig`` to at least :data:`MIN_FONT_PT` (ticks, labels and titles
    to their house sizes), then lay it out tightly."""
    for ax in fig.axes:
        ax.tick_params(labelsize=TICK_PT)
        ax.xaxis.label.set_size(max(ax.xaxis.label.get_size(), LABEL_PT))
        ax.yaxis.label.set_size(max(ax.yaxis.label.get_size(), LABEL_PT))
        ax.title.set_size(max(ax.title.get_size(), TITLE_PT))
    for text in fig.findobj(Text):
        if text.get_size() < MIN_FONT_PT:
            text.set_size(MIN_FONT_PT)
    fig.tight_layout()
    return fig


def font_sizes(fig: Figure) -> list[float]:
    """The size in points of every visible text of ``fig``, tick labels included (for tests)."""
    fig.canvas.draw()
    return [t.get_size() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def check_rows(name: str, rows: object, keys: tuple[str, ...]) -> list[dict]:
    """Rows to draw: a non-empty list of dicts, each with ``keys`` (``TypeError`` or
    ``ValueError`` naming ``name`` otherwise)."""
    if isinstance(rows, str | dict) or not isinstance(rows, Sequence):
        raise TypeError(f"{name} must be a list of rows (dicts), got {type(rows).__name__}")
    if not rows:
        raise ValueError(f"{name} must hold at least one row")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"{name}[{i}] must be a dict, got {type(row).__name__}")
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"{name}[{i}] lacks {missing}")
    return list(rows)
