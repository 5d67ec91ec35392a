"""The launcher without starting anything: ``python -m fl_async.app`` and ``fl-async run``
refuse every bad setting with one line and exit code 2, and the verdict on a finished run
(exit 1 when it could not make progress)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from launch_fakes import STUBBORN, fake_flwr, fake_superlinks, flwr_processes, stop_graces

from fl_async import cli
from fl_async.app import launch, outcome, preflight, superlink
from fl_async.app.results import HISTORY
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


def write_history(output: Path, status="finished:completed", age=0.0, **record):
    output.mkdir(parents=True, exist_ok=True)
    (output / HISTORY).write_text(json.dumps(record))
    started = time.time() + age
    return outcome.verdict(status, output, started)


def test_the_verdict_reads_the_history(tmp_path):
    assert write_history(tmp_path / "a", age=-5, **{"stopped-by": "budget"})[0] == 0
    code, line = write_history(
        tmp_path / "b",
        age=-5,
        **{"stopped-by": "no-active-nodes", "stop-detail": "every node left:\n0 raised"},
    )
    assert code == 1 and "\n" not in line
    assert "could not make progress (no-active-nodes: every node left: 0 raised)" in line
    assert write_history(tmp_path / "c", "finished:failed", age=-5)[0] == 1
    # A history older than the run is an earlier run's.
    assert write_history(tmp_path / "d", age=+5, **{"stopped-by": "budget"})[0] == 1
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / HISTORY).write_text("{not json")
    assert outcome.verdict("finished:completed", tmp_path / "e", time.time() - 5)[0] == 1


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


@pytest.mark.parametrize("last_line", [True, False])
def test_the_serverapps_last_line_tells_the_run_completed(tmp_path, last_line):
    """Once the ServerApp's last line came, no `flwr ls` is needed to know it completed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lines = ["Successfully started run 42"]
    if last_line:
        lines.append("INFO :      fl-async: final accuracy 91.0% after 8 updates (budget), "
                     "virtual time 3.0 s, wall time 1.0 s; wrote /x/history.json")  # fmt: skip
    (bin_dir / "flwr").write_text(f"#!{sys.executable}\nprint({chr(10).join(lines)!r})\n")
    (bin_dir / "flwr").chmod(0o755)
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "1"])
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert launch._flwr_run(plan, tmp_path, args, env, None) == (42, last_line)


def test_after_the_last_line_flwr_run_and_the_superlink_are_stopped_at_once(tmp_path, monkeypatch):
    """The results are written once the ServerApp's last line came: the launcher does not wait
    for Flower and Ray to shut down (seconds), nor give the SuperLink's tree a grace period."""
    bin_dir = tmp_path / "bin"
    last = "fl-async: final accuracy 91.0% after 8 updates (budget), wrote /x/history.json"
    fake_flwr(  # prints the last line, then would run for a minute
        bin_dir,
        f"import time\nprint('Successfully started run 7')\nprint({last!r}, flush=True)\n"
        "time.sleep(60)",
    )
    # settle: its SIGTERM handler is in place
    started = fake_superlinks(monkeypatch, bin_dir, STUBBORN, settle=0.5)
    monkeypatch.setattr(superlink, "STOP_GRACE", 30.0)
    monkeypatch.setattr(launch, "_start_ray_head", lambda *args: None)
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "1"])
    flwr, graces = flwr_processes(monkeypatch), stop_graces(monkeypatch)
    launch._launch(plan, args, None)  # 1: no history.json was written here
    assert [p.returncode for p in flwr] == [-signal.SIGTERM]  # stopped, not its minute out
    assert graces == [0.0]  # not the 30-s grace
    assert started[0].poll() == -signal.SIGKILL
