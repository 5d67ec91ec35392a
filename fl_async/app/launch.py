"""``python -m fl_async.app``: ``flwr run`` in a local simulation, robustly, with an exit code.

It starts its own SuperLink (simulation mode, on free ports, so it never reuses a SuperLink
someone else left running), runs the app with ``flwr run <app> local --stream``, checks that the
run finished and wrote ``history.json`` (``flwr run --stream`` exits 0 even when the ServerApp
raises), and stops the SuperLink it started with every process under it. Flower's commands are
looked up beside this Python, so an unactivated virtual environment works.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fl_async.app.config import DEFAULTS, parse_run_config
from fl_async.app.results import HISTORY
from fl_async.app.server_app import build_strategy

QUIET_ENVIRONMENT: dict[str, str] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    # The environment is installed already: without this, the SuperLink runs `uv sync` into a
    # fresh environment for every run (slow, and blind to pip's constraints).
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
}
"""Set unless the caller's environment already sets them."""

SUPERLINK_START_TIMEOUT = 60.0
STOP_GRACE = 15.0
_STARTED_RUN = re.compile(r"Successfully started run (\d+)")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m fl_async.app``."""
    parser = argparse.ArgumentParser(
        prog="python -m fl_async.app",
        description="Run the fl-async Flower App in a local simulation (flwr run) and report "
        "failure with a non-zero exit code.",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="virtual nodes: Flower's num-supernodes and the run config's num-nodes "
        f"(default: num-nodes of --run-config, else {DEFAULTS['num-nodes']})",
    )
    parser.add_argument(
        "--actors",
        type=int,
        default=os.cpu_count() or 1,
        help="ClientApps training at once, one CPU each (default: the number of CPUs)",
    )
    parser.add_argument(
        "--run-config",
        default="",
        help="run-config overrides, as for flwr run: \"key=value key2='text' ...\"",
    )
    parser.add_argument(
        "--federation-config",
        default="",
        help="more simulation options for flwr run (e.g. client-resources-num-gpus=0.25)",
    )
    parser.add_argument("--app", default=".", help="the Flower App directory (default: .)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the app once; 0 when it finished and wrote its history, 1 otherwise."""
    args = build_parser().parse_args(argv)
    app_dir = Path(args.app).expanduser().resolve()
    if not (app_dir / "pyproject.toml").is_file():
        print(f"error: no pyproject.toml in {app_dir}; pass --app <Flower App directory>")
        return 2
    try:  # bad values fail here, before anything starts
        overrides = _run_config(args.run_config)
        nodes = args.nodes if args.nodes is not None else int(overrides.get("num-nodes", 0) or 0)
        nodes = nodes or int(DEFAULTS["num-nodes"])
        overrides["num-nodes"] = nodes
        config = parse_run_config(overrides)
        build_strategy(config, clock=None)
    except ValueError as error:
        print(f"error: {error}")
        return 2
    output = Path(config.output_dir or _default_output(app_dir, config.strategy, config.seed))
    output = output.expanduser().resolve()
    output.mkdir(parents=True, exist_ok=True)
    env = _environment()
    print(f"fl-async: {nodes} virtual nodes, {args.actors} at a time; results -> {output}")
    started = time.time()
    # A job stopped with SIGTERM (a scheduler, a background job) cleans up as after Ctrl-C.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    superlink = start_superlink(env, cwd=app_dir, log_file=output / "superlink.log")
    try:
        run_id = _flwr_run(args, app_dir, env, nodes=nodes, output=output)
        status = _status(run_id, env, cwd=app_dir) if run_id is not None else "not started"
    except KeyboardInterrupt:
        print("fl-async: interrupted; stopping the SuperLink and the simulation")
        return 130
    finally:
        stop(superlink)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    history = output / HISTORY
    # A history left by an earlier run in the same directory does not count.
    written = history.is_file() and history.stat().st_mtime >= started
    if status == "finished:completed" and written:
        print(f"fl-async: done; results in {output}")
        return 0
    print(
        f"fl-async: the run failed (status {status!r}, {HISTORY} "
        f"{'written' if written else 'not written'}); see the log above and "
        f"{output / 'superlink.log'}"
    )
    return 1


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def start_superlink(env: dict[str, str], *, cwd: Path, log_file: Path) -> subprocess.Popen:
    """A simulation SuperLink on the ports in ``env``, ready to accept runs.

    The same command ``flwr run`` uses for its local SuperLink, started here so that its
    process id is known and the ServerApp's working directory is ``cwd``.
    """
    http_port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
    command = [
        "flower-superlink",
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        f"127.0.0.1:{env['FLWR_LOCAL_CONTROL_API_PORT']}",
        "--host",
        "127.0.0.1",
        "--port",
        http_port,
        "--log-file",
        str(log_file),
    ]
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own session: Ctrl-C in a terminal reaches this script and flwr run, not the
        # SuperLink, which `stop` then ends together with everything under it.
        start_new_session=True,
    )
    deadline = time.monotonic() + SUPERLINK_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with code {process.returncode}; see {log_file}"
            )
        if _healthy(http_port):
            return process
        time.sleep(0.2)
    stop(process)
    raise RuntimeError(f"flower-superlink did not start in {SUPERLINK_START_TIMEOUT:.0f} s")


def stop(process: subprocess.Popen) -> None:
    """Stop the SuperLink and every process under it (SuperExec, ServerApp, simulation, Ray).

    SIGTERM to all of them, SIGKILL to any still there after a grace period. The SuperExec
    starts its own session, and after an interrupted run the simulation and Ray would outlive
    the SuperLink: the tree is read before anything is signalled.
    """
    tree = [process.pid, *_descendants(process.pid)]
    _signal(tree, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
        process.poll()  # reap the SuperLink, our child, so that it does not count as alive
        time.sleep(0.2)
    _signal([pid for pid in tree if _alive(pid)], signal.SIGKILL)
    process.wait()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from ``ps`` (Linux and macOS)."""
    try:
        table = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:  # a minimal container without ps: only the SuperLink is stopped
        return []
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        child, parent = (int(word) for word in line.split())
        children.setdefault(parent, []).append(child)
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _signal(pids: Sequence[int], sent: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sent)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run_config(text: str) -> dict[str, Any]:
    """``--run-config`` parsed as ``flwr run`` parses it; ValueError if it cannot be."""
    import click
    from flwr.common.config import parse_config_args

    try:
        return parse_config_args([text]) if text.strip() else {}
    except click.ClickException as error:
        raise ValueError(f"--run-config {text!r}: {error.message}") from error


def _default_output(app_dir: Path, strategy: str, seed: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return app_dir / "outputs" / f"{strategy}-seed{seed}-{stamp}"


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    for key, value in QUIET_ENVIRONMENT.items():
        env.setdefault(key, value)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(_free_port())
    env["FLWR_LOCAL_CONTROL_API_PORT"] = str(_free_port())
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _flwr_run(
    args: argparse.Namespace, app_dir: Path, env: dict[str, str], *, nodes: int, output: Path
) -> int | None:
    """``flwr run --stream``, its output echoed; the run id it reported, if any."""
    federation = (
        f"num-supernodes={nodes} client-resources-num-cpus=1 init-args-num-cpus={args.actors}"
    )
    command = [
        "flwr",
        "run",
        str(app_dir),
        "local",
        "--stream",
        "--federation-config",
        f"{federation} {args.federation_config}".strip(),
        "--run-config",
        args.run_config,
        # A second --run-config: its keys win over the same keys in the user's string.
        "--run-config",
        f"num-nodes={nodes} output-dir={json.dumps(str(output))}",
    ]
    run_id = None
    with subprocess.Popen(
        command, env=env, cwd=app_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            found = _STARTED_RUN.search(line)
            if found:
                run_id = int(found.group(1))
    return run_id


def _status(run_id: int, env: dict[str, str], *, cwd: Path) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``finished:completed``)."""
    listed = subprocess.run(
        ["flwr", "ls", "local", "--run-id", str(run_id), "--format", "json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        runs = json.loads(listed.stdout)["runs"]
        return str(runs[0]["status"])
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return f"unknown ({listed.stdout.strip() or listed.stderr.strip()})"
