"""The launcher without starting anything: ``python -m fl_async.app`` and ``fl-async run``
refuse every bad setting with one line and exit code 2, and it cleans up after signals (its
verdict on a finished run: ``test_launch_status.py``)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from launch_fakes import STUBBORN, fake_flwr, fake_superlinks, flwr_processes

from fl_async import cli
from fl_async.app import launch, preflight, superlink
from fl_async.extras import require

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_superlink(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a bad setting must be refused before a SuperLink starts")

    monkeypatch.setattr(superlink, "start_superlink", refuse)


def refused(capsys, *argv, main=launch.main):
    """The one line a refused command printed (it must exit 2)."""
    assert main([*argv, "--app", str(ROOT)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run-config", "partition.alpha=-1"], "'partition.alpha' must be a finite number > 0"),
        (["--run-config", "num-nodes=0"], "run config 'num-nodes' must be an integer >= 1, got 0"),
        (["--nodes", "0"], "--nodes must be an integer >= 1, got 0"),
        (["--actors", "0"], "--actors must be an integer >= 1, got 0"),
        (
            ["--nodes", "10000"],
            "cannot split 'mnist' (4000 training examples) into num-nodes = 10000 partitions",
        ),
        (
            ["--run-config", "partition.scheme='label_skew' partition.classes-per-partition=11"],
            "partition.scheme = 'label_skew'",
        ),
        (["--run-config", "num_rounds=3"], "unknown run config key 'num_rounds': did you mean"),
        (["--run-config", "asgd.momentum=0.5"], "'asgd.momentum': allowed: asgd.lr, asgd.stale"),
        (["--run-config", "strategy='fedprox'"], "'strategy' must be one of 'gsgm', 'asgd'"),
        (["--run-config", "gsgm.slack=-1"], "strategy 'gsgm'"),
        (["--run-config", "clock.speed='trace'"], "clock.speed = 'trace'"),
        (["--run-config", "device='tpu'"], "run config 'device' = 'tpu': unknown device"),
        (["--run-config", "strategy=gsgm"], "invalid format"),  # a string without quotes
        (["--run-config", "eval-grid=40"], "'eval-grid' = 40 needs a virtual clock and max-vir"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_code_2(capsys, argv, message):
    assert message in refused(capsys, *argv)


def test_a_missing_dataset_is_named_with_how_to_fetch_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FL_ASYNC_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    line = refused(capsys, "--run-config", "dataset='cifar10'")
    assert "run config 'dataset' = 'cifar10'" in line
    assert str(tmp_path / "cifar-10-batches-py") in line
    # The root comes from $FL_ASYNC_DATA, where the command looks too: no --root needed.
    assert "fetch it with: fl-async data download cifar10, or add data-download=true" in line
    assert "or add data-download=true to --run-config" in line
    assert "'emnist'" in refused(capsys, "--run-config", "dataset='emnist'")


def test_an_app_directory_is_needed(tmp_path, capsys):
    assert launch.main(["--app", str(tmp_path)]) == 2
    assert "no pyproject.toml" in capsys.readouterr().out


def test_checkpoints_pass_the_checks_with_the_output_directory(tmp_path):
    text = f"checkpoint-every=10 output-dir='{tmp_path / 'run'}'"
    args = launch.build_parser().parse_args(["--app", str(ROOT), "--run-config", text])
    plan = preflight.prepare(args)
    assert plan.config.checkpoint_every == 10 and plan.output == (tmp_path / "run").resolve()
    assert not plan.output.exists()  # nothing is created before the run starts
    default = preflight.prepare(launch.build_parser().parse_args(["--app", str(ROOT)]))
    assert default.output.parent == ROOT / "outputs" and default.nodes == 20


def test_fl_async_run_is_the_same_command(capsys):
    line = refused(capsys, "run", "--run-config", "num-nodes=0", main=cli.main)
    assert "run config 'num-nodes' must be an integer >= 1, got 0" in line
    for argv, shown in ((["run", "--help"], "--run-config"), (["--help"], "run  ")):
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        text = capsys.readouterr().out
        assert done.value.code == 0 and shown in text
        assert "``" not in text  # plain text, not reStructuredText
    assert cli.main([]) == 2 and "run  " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launch.main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_a_missing_optional_package_names_the_extra():
    with pytest.raises(ModuleNotFoundError, match=r"no_such_module_here .*fl-async\[simulation\]"):
        require("this tool", "json", "no_such_module_here")


def test_the_superlink_tree_and_the_run_config_parser():
    assert os.getpid() in superlink.descendants(os.getppid())
    assert preflight.parse_overrides("num-rounds=3 strategy='asgd' partition.alpha=0.5") == {
        "num-rounds": 3,
        "strategy": "asgd",
        "partition.alpha": 0.5,
    }


def test_no_flwr_ls_once_the_superlink_is_gone(tmp_path):
    """flwr ls would start a detached SuperLink of its own on our ports, which nothing stops."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = {"PATH": str(tmp_path)}  # no flwr here: calling it would fail the test
    status = launch._status(7, gone, env, cwd=tmp_path)
    assert status == "unknown (the SuperLink exited with code 0)"
    assert launch._status(None, gone, env, cwd=tmp_path) == "not started"


def test_sigterm_twice_stops_flwr_run_and_the_superlink_and_returns_130(tmp_path, monkeypatch):
    """A second SIGTERM (or Ctrl-C) during the clean-up must not abort it half way."""
    bin_dir = tmp_path / "bin"  # flwr prints a line, then runs until it is stopped
    fake_flwr(bin_dir, "import time\nprint('started', flush=True)\ntime.sleep(60)")
    started = fake_superlinks(monkeypatch, bin_dir, STUBBORN)
    monkeypatch.setattr(superlink, "STOP_GRACE", 2.0)
    monkeypatch.setattr(launch, "_start_ray_head", lambda *args: None)

    def sigterm_twice(process: subprocess.Popen) -> None:
        # SIGTERM once the run has started, and again while the launcher cleans up.
        for delay in (1.0, 1.5):
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()

    flwr_runs = flwr_processes(monkeypatch, sigterm_twice)
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "1"])
    before = signal.getsignal(signal.SIGTERM)
    assert launch._launch(plan, args, None) == 130
    assert signal.getsignal(signal.SIGTERM) is before
    assert started[0].poll() is not None  # the SuperLink was killed after its grace period
    assert len(flwr_runs) == 1 and not _alive(flwr_runs[0].pid)


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_gpus_per_actor_reaches_flowers_backend_config():
    """``--gpus-per-actor`` becomes the simulation's client resources as Flower reads them."""
    from flwr.common.config import parse_config_args
    from flwr.supercore.utils import simulation_config_from_json

    from fl_async.app import cluster

    options = cluster.federation_options(None, 4, 0.25)
    # As flwr run reads --federation-config: its keys with "_" for "-", into Flower's config.
    given = parse_config_args([f"num-supernodes=20 {options}"])
    parsed = simulation_config_from_json({k.replace("-", "_"): v for k, v in given.items()})
    assert parsed.client_resources_num_gpus == 0.25
    assert parsed.client_resources_num_cpus == 1
    assert parsed.init_args_num_cpus == 4
    assert "num-gpus" not in cluster.federation_options(None, 4)
    args = launch.build_parser().parse_args(["--gpus-per-actor", "0.5"])
    assert args.gpus_per_actor == 0.5


@pytest.mark.parametrize("share", [0.0, -1.0, 1.5])
def test_gpus_per_actor_refuses_what_ray_cannot_reserve(share):
    from fl_async.app import cluster
    from fl_async.validation import InvalidArgument

    with pytest.raises(InvalidArgument, match="gpus-per-actor"):
        cluster.federation_options(None, 2, share)
