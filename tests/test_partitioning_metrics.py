"""Heterogeneity metrics against hand-computed values, and the PNG plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from fl_async.partitioning import (
    count_matrix,
    dirichlet,
    heterogeneity,
    label_skew,
    plot_heatmap,
    plot_partitions,
    plot_stacked_bars,
)
from fl_async.validation import InvalidArgument

# Labels 7 (x2) and 9 (x2): the global distribution is (1/2, 1/2).
LABELS = np.array([7, 9, 7, 9])


def test_count_matrix_counts_classes_per_partition_in_sorted_label_order() -> None:
    counts = count_matrix(LABELS, [np.array([0, 2, 1]), np.array([3]), np.array([], dtype=int)])
    np.testing.assert_array_equal(counts, [[2, 1], [0, 1], [0, 0]])


def test_distances_match_hand_computed_values() -> None:
    report = heterogeneity(LABELS, [np.array([0, 1]), np.array([2])])
    # Partition 0 is (1/2, 1/2): at distance 0. Partition 1 is (1, 0) against (1/2, 1/2).
    hellinger = math.sqrt(1 - math.sqrt(0.5))
    # Jensen-Shannon with the midpoint M = (3/4, 1/4), in bits.
    kl_p = math.log2(1 / 0.75)
    kl_q = 0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)
    js = math.sqrt((kl_p + kl_q) / 2)
    np.testing.assert_allclose(report.hellinger, [0.0, hellinger], atol=1e-12)
    np.testing.assert_allclose(report.jensen_shannon, [0.0, js], atol=1e-7)
    np.testing.assert_allclose(report.emd, [0.0, 1.0], atol=1e-12)
    assert report.mean("hellinger") == pytest.approx(hellinger / 2)
    np.testing.assert_array_equal(report.classes, [7, 9])
    assert report.num_samples == 4


def test_distances_near_their_upper_bounds_for_a_class_the_whole_barely_has() -> None:
    # Partition (0, 1) against the global (0.999, 0.001): Hellinger, JS -> 1 and EMD -> 2.
    report = heterogeneity(np.array([0] * 999 + [1]), [np.array([999])])
    assert report.hellinger[0] == pytest.approx(1.0, abs=0.02)
    assert report.jensen_shannon[0] == pytest.approx(1.0, abs=0.04)
    assert report.emd[0] == pytest.approx(2.0, abs=0.01)


def test_empty_partitions_have_no_distance_and_do_not_count_in_means() -> None:
    report = heterogeneity(LABELS, [np.array([0, 1, 2, 3]), np.array([], dtype=np.int64)])
    assert np.isnan(report.hellinger[1]) and np.isnan(report.jensen_shannon[1])
    assert report.mean("emd") == 0.0
    assert "empty 1" in report.to_table()


def test_size_summary_and_gini() -> None:
    labels = np.zeros(10, dtype=int)
    equal = heterogeneity(labels, [np.arange(5), np.arange(5, 10)])
    assert equal.gini == 0.0
    one_holds_all = heterogeneity(labels, [np.arange(10)] + [np.array([], dtype=int)] * 3)
    assert one_holds_all.gini == pytest.approx(0.75)  # (n - 1) / n for n = 4
    table = str(one_holds_all)
    assert "sizes: min 0, median 0, max 10, gini 0.750" in table


def test_table_lists_every_metric_and_optionally_every_partition() -> None:
    labels = np.repeat(np.arange(10), 50)
    report = heterogeneity(labels, label_skew(labels, 8, 2, 0))
    table = report.to_table(per_partition=True)
    for name in ("hellinger", "jensen-shannon", "earth mover's", "gini", "median"):
        assert name in table
    rows = table.splitlines()
    assert rows[0] == "partitions 8, classes 10, samples 500 of 500"
    assert len(rows) == 6 + 1 + 8  # summary, header, one row per partition
    assert rows[-1].split()[:3] == ["7", str(report.sizes[7]), "2"]


def test_metrics_refuse_indices_outside_the_labels() -> None:
    with pytest.raises(InvalidArgument, match="between 0 and 3 .* got 4"):
        heterogeneity(LABELS, [np.array([0, 4])])
    with pytest.raises(
        InvalidArgument, match="partition 0 must hold integer indices, got dtype float"
    ):
        count_matrix(LABELS, [np.array([0.0, 1.0])])
    with pytest.raises(InvalidArgument, match="at least one index array"):
        count_matrix(LABELS, [])
    with pytest.raises(
        InvalidArgument,
        match="metric must be one of 'hellinger', 'jensen_shannon', 'emd', got 'kl'",
    ):
        heterogeneity(LABELS, [np.arange(4)]).mean("kl")


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_plots_write_png_files(tmp_path: Path) -> None:
    labels = np.repeat(np.arange(10), 100)
    parts = dirichlet(labels, 30, 0.1, 0)
    counts = count_matrix(labels, parts)
    figures = {
        "heatmap.png": plot_heatmap(counts, tmp_path / "heatmap.png", classes=np.arange(10)),
        "bars.png": plot_stacked_bars(counts, tmp_path / "bars.png"),
        "both.png": plot_partitions(labels, parts, tmp_path / "both.png"),
    }
    for name, figure in figures.items():
        assert isinstance(figure, Figure)
        width, height = png_size(tmp_path / name)
        assert width > 500 and height > 200
    heat_ax, bar_ax = figures["both.png"].axes[:2]
    image = heat_ax.get_images()[0].get_array()
    assert image.shape == (10, 30)  # classes x partitions
    shares = counts / counts.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(image, shares.T)
    assert len(bar_ax.patches) == 30 * 10  # one bar segment per partition and class


def test_plots_draw_into_given_axes_and_refuse_other_formats(tmp_path: Path) -> None:
    figure = Figure()
    ax = figure.subplots()
    assert plot_stacked_bars(np.ones((3, 2)), ax=ax) is figure
    with pytest.raises(InvalidArgument, match="plot path must end in .png, got '.*out.jpg'"):
        plot_heatmap(np.ones((3, 2)), tmp_path / "out.jpg")
    with pytest.raises(InvalidArgument, match=r"counts must be a non-empty .* got \(3,\)"):
        plot_heatmap(np.ones(3))
