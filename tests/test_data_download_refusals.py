"""What is refused, or named, without the network: the fetch command in messages, bad
``fl-async data download`` input, missing data before a run, and the launcher and the bench."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from data_download import (
    ROOT,
    _no_waiting,  # noqa: F401  (autouse: no wait between download attempts)
    launch_with,
)

from fl_async import cli
from fl_async.app import superlink
from fl_async.data.sources import fetch_command


def test_fetch_command_names_the_root_only_where_needed(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_ASYNC_DATA", str(tmp_path / "default"))
    assert fetch_command("cifar10", None) == "fl-async data download cifar10"
    assert fetch_command("cifar10", tmp_path / "default") == "fl-async data download cifar10"
    assert fetch_command("cifar10", tmp_path / "my data") == (
        f"fl-async data download cifar10 --root '{tmp_path / 'my data'}'"
    )
    assert fetch_command("flwrlabs/femnist", tmp_path) == (
        f"fl-async data download femnist --root {tmp_path}"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["imagenet"], "unknown dataset 'imagenet' to download; allowed: fashion-mnist, cifar10"),
        (["mnist"], "'mnist' is embedded (always present, nothing to download)"),
        (["cifar10", "--attempts", "0"], "--attempts must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_name_or_option_is_one_line_and_exit_code_2(argv, message, capsys):
    assert cli.main(["data", "download", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fl-async data: error: ") and message in err[0]


def test_without_data_download_the_checks_never_touch_the_network(monkeypatch, tmp_path, capsys):
    connections = []

    def refuse(self, address, *args):
        connections.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(superlink, "start_superlink", pytest.fail)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for dataset in ("cifar100", "femnist"):
        assert launch_with(f"dataset='{dataset}' data-root='{tmp_path}'") == 2
        line = capsys.readouterr().out.strip()
        assert f"fetch it with: fl-async data download {dataset} --root {tmp_path}" in line
        assert line.endswith("or add data-download=true to --run-config (docs/data.md)")
    assert connections == []


# ---- the launcher and the bench in a subprocess: refused before anything starts -------------


def run_command(argv, tmp_path):
    """``argv`` in a fresh interpreter with the data root and the Hub cache in ``tmp_path``."""
    env = {**os.environ, "FL_ASYNC_DATA": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize(
    ("run_config", "nodes", "message"),
    [
        (
            "dataset='cifar10' data-root='{root}'",
            2,
            "fetch it with: fl-async data download cifar10 --root {root}, "
            "or add data-download=true to --run-config",
        ),
        (
            "",
            5000,
            "cannot split 'mnist' (4000 training examples) into num-nodes = 5000 partitions",
        ),
    ],
    ids=["missing-dataset", "too-many-nodes"],
)
def test_the_launcher_refuses_in_one_line_before_a_superlink(run_config, nodes, message, tmp_path):
    root = tmp_path / "elsewhere"
    output = tmp_path / "run"
    text = f"{run_config.format(root=root)} output-dir='{output}'"
    argv = ["-m", "fl_async.app", "--app", str(ROOT), "--nodes", str(nodes), "--run-config", text]
    done, seconds = run_command(argv, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert message.format(root=root) in lines[0]
    # The launcher creates the output folder and the SuperLink's log only once it starts one.
    assert not output.exists()
    print(f"refused in {seconds:.1f} s")


def test_the_bench_refuses_a_missing_dataset_before_any_run(tmp_path):
    suite = tmp_path / "suite"
    argv = ["-m", "fl_async.cli", "bench", "--dataset", "cifar100", "--out", str(suite)]
    done, seconds = run_command(argv, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fl-async bench: error: --dataset 'cifar100'")
    assert lines[0].endswith(
        "fetch it with: fl-async data download cifar100, or add data-download=true to --run-config"
    )
    assert not suite.exists()
    print(f"refused in {seconds:.1f} s")
