"""Figure helpers shared by a run's plots (``fl_async.app.results``) and a suite's (``report``).

matplotlib is imported inside the functions, so importing this module (as the server side does
through ``fl_async.app.results``) loads no plotting stack until a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 110


def new_figure(size: tuple[float, float]) -> Figure:
    """An empty figure of ``size`` inches (constrained layout) on the Agg canvas."""
    # The Agg canvas directly, not pyplot: no GUI backend, no global figure registry.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def accuracy_axes(axes: Axes, time_label: str) -> None:
    """Label ``axes`` for test accuracy (0 to 1) against ``time_label``, with a light grid."""
    axes.set_xlabel(time_label)
    axes.set_ylabel("test accuracy")
    axes.set_ylim(0, 1)
    axes.grid(alpha=0.3)


def staleness_histogram(axes: Axes, staleness: Sequence[int], fontsize: str = "medium") -> str:
    """One bar per staleness value and a dashed line at the mean, on integer axes; returns
    ``"mean m, max k"`` (``"no updates"`` when empty) for the caller's title."""
    from matplotlib.ticker import MaxNLocator

    values = np.asarray(staleness, dtype=np.int64)
    summary = "no updates"
    if values.size:
        bins = np.arange(values.max() + 2) - 0.5
        axes.hist(values, bins=bins, rwidth=0.85, color="C0")
        axes.axvline(values.mean(), color="black", linestyle="--", linewidth=1)
        axes.set_xlim(-0.5, max(int(values.max()), 1) + 0.5)
        summary = f"mean {values.mean():.2f}, max {values.max()}"
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("staleness (server steps)", fontsize=fontsize)
    axes.set_ylabel("updates", fontsize=fontsize)
    return summary


def save_figure(figure: Figure, path: Path) -> None:
    """Write ``figure`` to ``path`` (PNG by its suffix) at the plots' shared resolution."""
    figure.savefig(path, dpi=DPI)
