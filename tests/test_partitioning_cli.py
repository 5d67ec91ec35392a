"""``fl-async partition`` end to end, and the benchmark script on a small input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fl_async.cli import main
from fl_async.partitioning import heterogeneity, partition

ROOT = Path(__file__).resolve().parents[1]
LABELS = np.repeat(np.arange(10), 40)


@pytest.fixture
def labels_file(tmp_path: Path) -> Path:
    path = tmp_path / "labels.npy"
    np.save(path, np.random.default_rng(0).permutation(LABELS))
    return path


def test_partition_prints_metrics_and_writes_plot_and_indices(
    labels_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot, out = tmp_path / "split.png", tmp_path / "split.npz"
    argv = ["partition", "--labels", str(labels_file), "--scheme", "dirichlet", "--alpha", "0.1"]
    argv += ["--num-partitions", "12", "--seed", "3", "--plot", str(plot), "--out", str(out)]
    assert main(argv) == 0
    labels = np.load(labels_file)
    expected = partition(labels, "dirichlet", 12, 3, alpha=0.1)
    printed = capsys.readouterr().out
    assert printed.startswith(f"dirichlet(alpha=0.1) of {labels_file}: 12 partitions, seed 3")
    assert heterogeneity(labels, expected).to_table() in printed
    assert f"wrote plot: {plot}" in printed and f"wrote indices: {out}" in printed
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(out) as saved:
        for i, part in enumerate(expected):
            np.testing.assert_array_equal(saved[f"partition_{i}"], part)
        assert str(saved["scheme"]) == "dirichlet" and float(saved["alpha"]) == 0.1
        assert int(saved["seed"]) == 3 and int(saved["num_partitions"]) == 12


def test_partition_reads_labels_from_npz_and_prints_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "labels.npz"
    np.savez(path, labels=LABELS, other=np.zeros(3))
    argv = ["partition", "--labels", str(path), "--scheme", "label-skew"]
    argv += ["--classes-per-partition", "2", "--num-partitions", "5", "--per-partition"]
    assert main(argv) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("label_skew(classes_per_partition=2)")
    assert [row.split()[2] for row in rows[-5:]] == ["2"] * 5  # classes held per partition


def test_partition_of_the_default_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["partition", "--dataset", "mnist", "--num-partitions", "4"]) == 0
    printed = capsys.readouterr().out
    assert "iid() of mnist (" in printed and "partitions 4, classes 10" in printed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--scheme", "shards", "--alpha", "0.1"], "--alpha does not apply to --scheme shards"),
        (["--scheme", "dirichlet"], "--scheme dirichlet needs --alpha"),
        (["--scheme", "dirichlet", "--alpha", "-1"], "alpha must be a finite number > 0, got -1.0"),
        (["--scheme", "dirichlet", "--alpha", "0"], "alpha must be a finite number > 0, got 0.0"),
        (["--scheme", "shards", "--min-partition-size", "0"], "--min-partition-size does not"),
        (["--scheme", "random"], "unknown scheme 'random'; allowed: iid, dirichlet"),
        (["--data-root", "/data"], "--data-root applies to --dataset, not to --labels"),
        (
            ["--num-partitions", "401"],
            "num_partitions must be an integer in [1, 400], got 401; 400 is the number of samples",
        ),
        (
            ["--scheme", "label_skew", "--classes-per-partition", "11"],
            "classes_per_partition must be an integer in [1, 10], got 11",
        ),
        (["--out", "split.txt"], "--out must end in .npz, got 'split.txt'"),
        (["--plot", "split.jpg"], "--plot must end in .png, got 'split.jpg'"),
        (["--owners", "owners.npy"], "--owners applies to --scheme natural, not to iid"),
        (["--scheme", "natural"], "--scheme natural with --labels needs --owners FILE"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(
    labels_file: Path, options: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["partition", "--labels", str(labels_file), *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing computed or printed before the error
    assert captured.err.startswith("fl-async partition: error: ")
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.err.count("\n") == 1


def test_natural_reads_owners_from_a_file(
    labels_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = np.load(labels_file)
    owners = np.array([f"writer-{i % 23}" for i in range(labels.size)])
    np.savez(tmp_path / "both.npz", labels=labels, owners=owners)
    out = tmp_path / "split.npz"
    argv = ["partition", "--labels", str(tmp_path / "both.npz"), "--owners"]
    argv += [str(tmp_path / "both.npz"), "--scheme", "natural", "--num-partitions", "5"]
    assert main([*argv, "--out", str(out)]) == 0
    expected = partition(labels, "natural", 5, 0, owners=owners)
    printed = capsys.readouterr().out
    assert printed.startswith(f"natural() of {tmp_path / 'both.npz'}, 23 owners: 5 partitions")
    assert heterogeneity(labels, expected).to_table() in printed
    with np.load(out) as saved:
        for i, part in enumerate(expected):
            np.testing.assert_array_equal(saved[f"partition_{i}"], part)
        assert str(saved["scheme"]) == "natural"
    argv = ["partition", "--labels", str(labels_file), "--scheme", "natural"]
    assert main([*argv, "--owners", str(tmp_path / "both.npz"), "--num-partitions", "24"]) == 2
    assert "24; 23 is the number of distinct owners" in capsys.readouterr().err
    assert main([*argv, "--owners", str(labels_file), "--owner-column", "user"]) == 2
    assert "--owner-column applies to --dataset, not to --owners" in capsys.readouterr().err


def test_natural_reads_a_datasets_owners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from femnist_files import write_femnist

    write_femnist(tmp_path, writers=10)  # 10 writers, 8 hsf_id values
    argv = ["partition", "--dataset", "femnist", "--data-root", str(tmp_path), "--scheme"]
    assert main([*argv, "natural", "--num-partitions", "4", "--per-partition"]) == 0
    printed = capsys.readouterr().out
    assert "natural() of femnist (" in printed and "training labels), 10 owners" in printed
    assert main([*argv, "natural", "--owner-column", "hsf_id", "--num-partitions", "8"]) == 0
    assert "training labels), 8 owners: 8 partitions" in capsys.readouterr().out
    assert main(["partition", "--dataset", "mnist", "--scheme", "natural"]) == 2
    assert "dataset 'mnist' has no natural owners" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "write", "message"),
    [
        ("missing.npy", None, "No such file or directory"),
        ("labels.txt", lambda p: p.write_text("1 2 3"), "--labels must be a .npy or .npz file"),
        ("floats.npy", lambda p: np.save(p, np.ones(5)), "labels must be integers, got dtype"),
        (
            "two.npz",
            lambda p: np.savez(p, a=LABELS, b=LABELS),
            "an .npz must hold a 'labels' array or exactly one array, found ['a', 'b']",
        ),
    ],
)
def test_bad_labels_file_exits_2(
    tmp_path: Path, name: str, write, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    if write is not None:
        write(path)
    assert main(["partition", "--labels", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_benchmark_script_times_every_scheme(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = ["--num-labels", "20000", "--num-partitions", "50", "--repeats", "1"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "partitioning.py"), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    schemes = {"iid", "dirichlet", "label_skew", "shards", "quantity_skew", "natural"}
    assert set(report["seconds"]) == schemes
    # a time per scheme; how fast is the benchmark's to report, not the test's to bound
    assert all(0 < seconds < math.inf for seconds in report["seconds"].values())
    assert "dirichlet" in result.stdout and str(out) in result.stdout
