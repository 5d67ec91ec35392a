"""Pictures of a split: a label-distribution heatmap and stacked bars, saved as PNG.

matplotlib is imported inside the functions, and figures are built with ``matplotlib.figure``
rather than ``pyplot``, so plotting touches no global state and needs no display.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fl_async.validation import InvalidArgument

from .metrics import count_matrix

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_LEGEND_LIMIT = 20  # more classes than this make a legend taller than the plot


def plot_heatmap(
    counts: Any,
    path: str | Path | None = None,
    *,
    classes: Sequence[Any] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw each partition's label mix (share of its samples per class) as a heatmap.

    Partitions run along x, classes along y. Draws into ``ax`` when given, else a new figure;
    saves the figure as PNG when ``path`` is given. Returns the figure.
    """
    counts = _as_counts(counts)
    ax = ax or _new_figure(counts.shape[0], rows=1).subplots()
    with np.errstate(invalid="ignore"):
        shares = counts / counts.sum(axis=1, keepdims=True)  # empty partitions stay blank (NaN)
    image = ax.imshow(
        shares.T,
        aspect="auto",
        origin="lower",
        interpolation="nearest",
        cmap="viridis",
        vmin=0.0,
        vmax=1.0,
    )
    ax.figure.colorbar(image, ax=ax, label="share of partition", pad=0.01)
    _label_axes(ax, counts.shape[1], classes)
    ax.set_ylabel("class")
    ax.set_title("Label distribution per partition")
    return _finish(ax.figure, path)


def plot_stacked_bars(
    counts: Any,
    path: str | Path | None = None,
    *,
    classes: Sequence[Any] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw one bar per partition, its height the partition's size, stacked by class.

    Draws into ``ax`` when given, else a new figure; saves the figure as PNG when ``path`` is
    given. Returns the figure.
    """
    counts = _as_counts(counts)
    ax = ax or _new_figure(counts.shape[0], rows=1).subplots()
    num_partitions, num_classes = counts.shape
    names = list(classes) if classes is not None else list(range(num_classes))
    colors = _class_colors(num_classes)
    bottom = np.zeros(num_partitions)
    x = np.arange(num_partitions)
    for c in range(num_classes):
        ax.bar(x, counts[:, c], bottom=bottom, width=0.9, color=colors[c], label=str(names[c]))
        bottom += counts[:, c]
    ax.set_xlim(-0.5, num_partitions - 0.5)
    ax.set_xlabel("partition")
    ax.set_ylabel("samples")
    ax.set_title("Partition sizes by class")
    if num_classes <= _LEGEND_LIMIT:
        ax.legend(title="class", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return _finish(ax.figure, path)


def plot_partitions(
    labels: Any, partitions: Sequence[Any], path: str | Path | None = None
) -> Figure:
    """Heatmap above stacked bars for one split, sharing the partition axis; PNG if ``path``."""
    counts = count_matrix(labels, partitions)
    classes = np.unique(np.asarray(labels))
    heat_ax, bar_ax = _new_figure(counts.shape[0], rows=2).subplots(2, 1, sharex=True)
    plot_heatmap(counts, classes=classes, ax=heat_ax)
    heat_ax.set_xlabel("")
    plot_stacked_bars(counts, classes=classes, ax=bar_ax)
    return _finish(heat_ax.figure, path)


def _as_counts(counts: Any) -> np.ndarray:
    array = np.asarray(counts)
    if array.ndim != 2 or array.size == 0:
        raise InvalidArgument(
            f"counts must be a non-empty partitions x classes matrix, got {array.shape}"
        )
    return array


def _new_figure(num_partitions: int, rows: int) -> Figure:
    from matplotlib.figure import Figure

    width = float(np.clip(0.25 * num_partitions + 3, 7, 16))
    return Figure(figsize=(width, 3.4 * rows), layout="constrained")


def _label_axes(ax: Axes, num_classes: int, classes: Sequence[Any] | None) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    names = [str(c) for c in (classes if classes is not None else range(num_classes))]
    ax.set_xlabel("partition")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # Rows are class indices; the formatter prints the label value of each ticked row.
    ax.yaxis.set_major_locator(MaxNLocator(nbins=min(num_classes, _LEGEND_LIMIT), integer=True))
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda y, _: names[int(y)] if 0 <= y < num_classes else "")
    )


def _class_colors(num_classes: int) -> list[Any]:
    from matplotlib import colormaps

    if num_classes <= 10:
        return list(colormaps["tab10"].colors[:num_classes])
    if num_classes <= 20:
        return list(colormaps["tab20"].colors[:num_classes])
    return list(colormaps["turbo"](np.linspace(0, 1, num_classes)))


def _finish(figure: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        if Path(path).suffix.lower() != ".png":
            raise InvalidArgument(f"plot path must end in .png, got {str(path)!r}")
        figure.savefig(path, dpi=110)
    return figure
