"""The launcher's own Ray head (``local_ray``): the simulation joins it, it is stopped after the
run, and a head that exits or never answers fails the run with a line that says so (exit 1)
instead of leaving Ray's ``ray.init()`` to wait for it. Fakes stand in for Ray and Flower; every
launch of the app (the slow tests) runs the real head."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sockets
from flower_processes import descendants, wait_processes_gone, wait_until
from fresh_python import python_stdout
from launch_fakes import (
    FakeHead,
    fake_flwr,
    fake_heads,
    fake_superlinks,
    flwr_processes,
    write_status_script,
)

from fl_async.app import launch, local_ray, preflight, ray_start, superlink

SLEEPER = "import time; time.sleep(60)"
REAL_HEAD = local_ray.RayHead
DRIVER = """import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print("connected", flush=True)
time.sleep(60)"""


def head_with(monkeypatch, tmp_path: Path, script: str, on_failure) -> local_ray.RayHead:
    """A ``RayHead`` whose ``ray`` command is ``script`` (its arguments ignored)."""
    monkeypatch.setattr(local_ray, "RAY_COMMAND", [sys.executable, "-c", script])
    return local_ray.RayHead(
        1, dict(os.environ), cwd=tmp_path, log_file=tmp_path / "ray.log", on_failure=on_failure
    )


def test_a_head_that_exits_is_a_failure_naming_its_code_and_log(monkeypatch, tmp_path):
    failed = threading.Event()
    reasons: list[str] = []

    def record(reason: str) -> None:
        reasons.append(reason)
        failed.set()

    head = head_with(monkeypatch, tmp_path, "print('no Ray here'); raise SystemExit(3)", record)
    assert failed.wait(20)
    assert head.failure == f"the Ray head exited with code 3; see {tmp_path / 'ray.log'}"
    assert reasons == [head.failure]
    assert not head.ready.is_set()
    assert "no Ray here" in (tmp_path / "ray.log").read_text()
    head.stop()
    assert not Path(head.temp_dir).exists()  # nothing in it to keep


def test_a_head_that_never_answers_fails_after_the_timeout_and_is_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(local_ray, "START_TIMEOUT", 1.0)
    failed = threading.Event()
    head = head_with(monkeypatch, tmp_path, SLEEPER, lambda reason: failed.set())
    assert failed.wait(20)
    assert head.failure == "the Ray head did not answer in 1 s"
    (Path(head.temp_dir) / "session").mkdir()  # what a head that got further leaves
    head.stop(grace=0.0)
    assert head.process.poll() is not None  # killed, not left to sleep
    assert Path(head.temp_dir).is_dir()  # kept, for its logs: the head failed
    shutil.rmtree(head.temp_dir)


def fake_world(
    monkeypatch, tmp_path: Path, flwr_body: str
) -> tuple[list[subprocess.Popen], list[FakeHead]]:
    """A ``flwr`` that writes its ``RAY_ADDRESS`` and arguments, then runs ``flwr_body``; a
    SuperLink that sleeps; ``FakeHead`` in place of Ray. The SuperLinks started, the heads made."""
    bin_dir = tmp_path / "bin"
    seen = tmp_path / "seen.txt"
    fake_flwr(
        bin_dir,
        "import os, sys, time\n"
        f"open({str(seen)!r}, 'w').write(os.environ['RAY_ADDRESS'] + '\\n' + ' '.join(sys.argv))\n"
        f"{flwr_body}",
    )
    return fake_superlinks(monkeypatch, bin_dir, SLEEPER), fake_heads(monkeypatch)


def test_flwr_run_joins_the_head_without_ray_cpu_counts_and_the_head_stops_last(
    monkeypatch, tmp_path
):
    body = "print('Successfully started run 7', flush=True)\n"
    body += write_status_script(tmp_path / "out") + "time.sleep(60)"
    started, heads = fake_world(monkeypatch, tmp_path, body)
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "3"])
    assert launch._launch(plan, args, None) == 0  # the run's status says it finished
    address, argv = (tmp_path / "seen.txt").read_text().split("\n")
    (head,) = heads
    assert address == head.address and head.actors == 3
    assert "init-args-num-cpus" not in argv and "client-resources-num-cpus=1" in argv
    assert head.stopped == {"grace": 0.0, "keep_logs": False}
    assert started[0].poll() is not None  # the SuperLink (the simulation's tree) went first


def test_a_failed_head_stops_the_run_and_exits_1(monkeypatch, tmp_path, capsys):
    fake_world(
        monkeypatch, tmp_path, "print('Successfully started run 7', flush=True); time.sleep(60)"
    )
    monkeypatch.setattr(local_ray, "RayHead", REAL_HEAD)  # whose ray exits at once, code 3
    monkeypatch.setattr(local_ray, "RAY_COMMAND", [sys.executable, "-c", "raise SystemExit(3)"])
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path / "out")
    args = launch.build_parser().parse_args(["--actors", "1"])
    flwr = flwr_processes(monkeypatch)
    assert launch._launch(plan, args, None) == 1
    assert [p.returncode for p in flwr] == [-signal.SIGTERM]  # stopped, not its minute out
    out = capsys.readouterr().out
    assert "fl-async: the run failed: the Ray head exited with code 3; see " in out
    assert (tmp_path / "out" / local_ray.LOG).is_file()


def test_no_head_for_a_ray_cluster_for_ray_init_args_or_off_the_main_thread(tmp_path):
    plan = preflight.Plan(app_dir=tmp_path, nodes=2, config=None, output=tmp_path)
    args = launch.build_parser().parse_args(
        ["--actors", "1", "--federation-config", "init-args-num-gpus=1"]
    )
    assert launch._start_ray_head(plan, args, None, {}, []) is None
    args = launch.build_parser().parse_args(["--actors", "1"])
    assert launch._start_ray_head(plan, args, "10.0.0.1:6379", {}, []) is None
    found = []
    thread = threading.Thread(
        target=lambda: found.append(launch._start_ray_head(plan, args, None, {}, []))
    )
    thread.start()
    thread.join()
    assert found == [None]


@pytest.mark.slow(seconds=10)
def test_the_real_head_starts_no_autoscaler_monitor_no_idle_workers_and_listens_on_loopback(
    tmp_path,
):
    """Ray's defaults start an autoscaler monitor, and an idle worker per CPU for the first
    driver: Python processes that a run never uses (Flower's actors get workers of their own).
    Ray's defaults also bind its servers to the machine's network address and start a Ray
    Client server: the head listens on loopback only, and without one."""
    head = local_ray.RayHead(
        2,
        dict(os.environ),
        cwd=tmp_path,
        log_file=tmp_path / "ray.log",
        on_failure=lambda reason: None,
    )
    driver = None
    try:
        assert head.ready.wait(60), head.failure
        # Ray starts its idle workers when the first driver connects, as the simulation does.
        # The launcher gives the simulation LOOPBACK too: a driver looks for its node there.
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, head.address],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **local_ray.LOOPBACK},
        )
        assert _line(driver, 60) == "connected\n"
        time.sleep(3)
        pids = [driver.pid, *superlink.descendants(head.process.pid)]
        tree = [_program(pid) for pid in pids]
        found = sockets.listening(pids)
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        head.stop()
    gcs_port = int(head.address.rsplit(":", 1)[1])
    assert gcs_port in {s.port for s in found}, found  # the reading of /proc finds Ray's own
    assert [s for s in found if not s.loopback] == [], found
    assert not [p for p in tree if "ray.util.client.server" in p], tree
    assert any(program.endswith("/raylet") for program in tree), tree
    # An idle worker names itself "ray::IDLE" (Ray rewrites its command line).
    unused = ("autoscaler/_private/monitor.py", "ray::IDLE")
    assert not [program for program in tree if program.strip().endswith(unused)], tree


def _line(process: subprocess.Popen, timeout: float) -> str:
    """The first line ``process`` writes, or "" if none comes within ``timeout`` seconds."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""


def _program(pid: int) -> str:
    """What process ``pid`` runs: its executable, or the script its Python runs."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:  # ended since it was listed
        return ""
    scripts = [arg for arg in argv[1:3] if arg.endswith(".py")]
    return scripts[0] if "python" in argv[0] and scripts else argv[0]


LAUNCHER = """import subprocess, sys, time
from fl_async.app import supervisor
child = [sys.executable, "-c", *sys.argv[1:3]]
child = supervisor.dying_with_this_process(child, float(sys.argv[3]))
print(subprocess.Popen(child, start_new_session=True).pid, flush=True)
time.sleep(60)"""
CHILD = """import signal, sys, time
def stopped(signum, frame):
    open(sys.argv[1], "a").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
open(sys.argv[1], "w").write("ready ")
time.sleep(60)"""
STUBBORN = """import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: open(sys.argv[1], "a").write("SIGTERM "))
below = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(f"ready {below.pid} ")
while True:
    time.sleep(60)"""
"""Stands in for a ``ray start`` that hangs on SIGTERM, with a service under it."""


def _launch(tmp_path: Path, child: str, grace: float) -> tuple[subprocess.Popen, int, Path]:
    """A launcher that runs ``child`` under the supervisor, with ``grace``; the supervisor's pid
    and the file the child writes, once it says it is ready."""
    said = tmp_path / "child.txt"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, child, str(said), str(grace)],
        stdout=subprocess.PIPE,
        text=True,
    )
    supervisor = int(launcher.stdout.readline())
    wait_until(
        lambda: said.is_file() and "ready" in said.read_text(), 30, "the child ready", interval=0.05
    )
    return launcher, supervisor, said


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_head_gets_sigterm_when_the_launcher_is_killed_outright(tmp_path):
    """SIGKILL gives the launcher no chance to stop its head (``ray start --block``, which
    stops Ray's services on SIGTERM): the kernel sends the head's supervisor SIGTERM, which
    passes it on."""
    launcher, supervisor, said = _launch(tmp_path, CHILD, local_ray.HEAD_GRACE)
    tree = descendants(launcher.pid)  # the supervisor and the head
    try:
        launcher.kill()
        launcher.wait()
        wait_until(
            lambda: "SIGTERM" in said.read_text(),
            30,
            "the child's SIGTERM",
            context=said.read_text,
            interval=0.05,
        )
        assert supervisor in {pid for pid, _ in tree}
        assert not wait_processes_gone(tree, 30), "the supervisor or the head outlived it"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_head_that_hangs_on_sigterm_is_killed_with_all_under_it_after_the_grace(tmp_path):
    """Ray's SIGTERM handler hung for good on a second SIGTERM (it waits on a lock it holds):
    however many SIGTERMs the supervisor gets, the head gets one, and ``grace`` seconds later
    the head and every process in its group are killed."""
    launcher, supervisor, said = _launch(tmp_path, STUBBORN, 1.0)
    below = int(said.read_text().split()[1])
    tree = descendants(launcher.pid)  # the supervisor, the head and the process under it
    try:
        launcher.kill()
        launcher.wait()
        wait_until(
            lambda: "SIGTERM" in said.read_text(),
            30,
            "the head's SIGTERM",
            context=said.read_text,
            interval=0.05,
        )
        with contextlib.suppress(ProcessLookupError):  # a second, as Ray's processes may send
            os.kill(supervisor, signal.SIGTERM)
        assert {supervisor, below} <= {pid for pid, _ in tree}
        assert not wait_processes_gone(tree, 30), "the group outlived the grace"
        assert said.read_text().count("SIGTERM") == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor, signal.SIGKILL)


def test_ray_start_leaves_out_the_command_groups_it_does_not_use():
    """``python -m fl_async.app.ray_start`` has ``start`` and ``stop``, not Serve's, jobs' or
    state's groups, and loads neither pandas nor FastAPI (Ray Serve's)."""
    code = (
        "import sys\n"
        "from fl_async.app import ray_start\n"
        "sys.argv = ['ray', '--help']\n"
        "try:\n"
        "    ray_start.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "from ray.scripts import scripts\n"
        "print(sorted(scripts.cli.commands))\n"
        "print([m for m in ('pandas', 'fastapi') if m in sys.modules])\n"
    )
    commands, heavy = python_stdout(code).strip().splitlines()[-2:]
    assert "'start'" in commands and "'stop'" in commands
    assert not {"'serve'", "'job'", "'list'"} & set(commands.strip("[]").split(", "))
    assert heavy == "[]"


def test_the_head_binds_to_loopback_and_starts_a_ray_client_server_only_when_asked(monkeypatch):
    command = local_ray._command(6379, 2, "/tmp/x")
    assert "--node-ip-address=127.0.0.1" in command
    assert local_ray.RAY_COMMAND[-1] == "fl_async.app.ray_start"
    assert not ray_start.asks_for_client_server(command)
    assert ray_start.asks_for_client_server(["start", "--ray-client-server-port=10001"])
    assert ray_start.asks_for_client_server(["start", "--ray-client-server-port", "10001"])
    from ray.scripts import scripts

    # What `ray start` reads to decide on the server (port 10001 when it finds no error).
    monkeypatch.setattr(
        scripts, "main", lambda: seen.append(scripts.get_ray_client_dependency_error())
    )
    monkeypatch.setattr(scripts, "get_ray_client_dependency_error", lambda: None)
    seen: list = []
    monkeypatch.setattr(sys, "argv", ["ray", *command[3:]])
    ray_start.main()
    monkeypatch.setattr(scripts, "get_ray_client_dependency_error", lambda: None)
    monkeypatch.setattr(sys, "argv", ["ray", "start", "--head", "--ray-client-server-port=10001"])
    ray_start.main()
    assert isinstance(seen[0], ImportError) and seen[1] is None
