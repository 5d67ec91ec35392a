"""``python -m fl_async.app`` (also ``fl-async run``): ``flwr run`` in a local simulation, with
an exit code.

Every setting is checked before anything starts (``preflight``), and with ``data-download =
true`` a missing dataset is fetched then. Then it starts its own SuperLink (``superlink``),
runs the app with ``flwr run <app> local --stream``, and stops the SuperLink with every process
under it. ``flwr run --stream`` exits 0 even when the ServerApp raises, so the exit code comes
from the ``run-status.json`` the ServerApp writes last into the output folder (``run_status``,
``outcome``), or its absence: 0 done, 1 failed, stopped for want of progress, wrote no status or
a dataset download failed, 2 a bad setting, 130 interrupted.

With ``--ray-address HOST:PORT`` (else Ray's ``RAY_ADDRESS``) the ClientApps run on a Ray
cluster started with ``ray start`` (``cluster``): its head must answer before anything starts,
and the cluster keeps running after the run, without the run's actors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from fl_async.app import cluster, follow, local_ray, superlink
from fl_async.app.launcher_watch import launcher_environment
from fl_async.app.run_status import RUN_STATUS
from fl_async.app.staging import staged_app
from fl_async.app.study_files import ENDED
from fl_async.config import DEFAULTS, TRACKERS
from fl_async.validation import InvalidArgument

if TYPE_CHECKING:
    from fl_async.app.preflight import Plan

DESCRIPTION = (
    "Run the fl-async Flower App in a simulation (flwr run against a SuperLink of its "
    "own) and exit 0 when the run finished, 1 when it failed, could not make progress or could "
    "not download its dataset (data-download=true), 2 for a bad setting (checked before "
    "anything starts), 130 when interrupted."
)
SQLITE = "sqlite:///"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m fl_async.app`` and ``fl-async run``."""
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
        default=None,
        help="ClientApps training at once, one CPU each (default: the number of CPUs; not on a "
        "Ray cluster, where each machine's ray start --num-cpus decides)",
    )
    parser.add_argument(
        "--gpus-per-actor",
        type=float,
        default=None,
        metavar="SHARE",
        help="the share of a GPU each actor reserves (Flower's client-resources-num-gpus): "
        "0.25 lets four actors share one GPU (default: none reserved; device='auto' still "
        "trains on a visible GPU)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        default=None,
        help="run the ClientApps on the Ray cluster whose head is there (ray start --head "
        "prints it; default: $RAY_ADDRESS, else a Ray of its own on this machine)",
    )
    parser.add_argument(
        "--run-config",
        default="",
        help="run-config overrides, as for flwr run: \"key=value key2='text' ...\" "
        "(every key: docs/running.md)",
    )
    parser.add_argument(
        "--federation-config",
        default="",
        help="more simulation options for flwr run (e.g. client-resources-num-gpus=0.25)",
    )
    parser.add_argument("--app", default=".", help="the Flower App directory (default: .)")
    add_study_argument(parser)
    add_tracking_arguments(parser)


def add_study_argument(parser: argparse.ArgumentParser) -> None:
    """``--study DIR``: many runs in one simulation, as ``fl-async bench`` hands them over."""
    parser.add_argument(
        "--study",
        metavar="DIR",
        default=None,
        help="make the runs that fl-async bench hands to the study folder DIR, many in this "
        "one simulation, instead of one run (used by fl-async bench)",
    )


def add_tracking_arguments(parser: argparse.ArgumentParser) -> None:
    """``--track`` and ``--track-uri`` (here and in ``fl-async bench``)."""
    parser.add_argument(
        "--track",
        choices=TRACKERS,
        default=None,
        help="log the run to TensorBoard or MLflow (run config tracking.backend; needs "
        "pip install 'fl-async[tracking]')",
    )
    parser.add_argument(
        "--track-uri",
        metavar="DIR|URI",
        default=None,
        help="TensorBoard: the folder to write into (default: the output-dir's tensorboard/); "
        "MLflow: the tracking URI, e.g. sqlite:///runs/mlflow.db (default: "
        "$MLFLOW_TRACKING_URI, else sqlite:///<output-dir>/mlflow.db)",
    )


def tracking_overrides(track: str | None, uri: str | None) -> dict[str, str]:
    """The run-config keys of ``--track`` and ``--track-uri`` (a path made absolute: the
    ServerApp does not run in this working directory)."""
    if track is None:
        if uri is not None:
            raise InvalidArgument(f"--track-uri {uri!r} needs --track ({' or '.join(TRACKERS)})")
        return {}
    found = {"tracking.backend": track}
    if uri:
        found["tracking.uri"] = absolute_uri(uri)
    return found


def absolute_uri(uri: str) -> str:
    """``uri`` with a relative path made absolute: a plain path, or a ``sqlite:///`` database
    (``sqlite:////abs/db`` is absolute already); other URIs as they are."""
    if uri.startswith(SQLITE) and not uri[len(SQLITE) :].startswith("/"):
        return SQLITE + str(Path(uri[len(SQLITE) :]).expanduser().resolve())
    if "://" in uri:
        return uri
    return str(Path(uri).expanduser().resolve())


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m fl_async.app``."""
    parser = argparse.ArgumentParser(prog="python -m fl_async.app", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fl_async.app``: parse ``argv`` and run the app once; the exit code."""
    return run(build_parser().parse_args(argv))


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` once output is flushed, without Python's teardown of the modules
    (torch, Flower), which took about a second on two cores after every run."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(args: argparse.Namespace) -> int:
    """Check every setting, then run the app once; 0, 1, 2 or 130 (see the module's doc)."""
    # Imported here: torch, Flower and the strategies take seconds, which --help need not wait.
    from fl_async.app import preflight
    from fl_async.data.download import DownloadError

    try:
        tracking = tracking_overrides(args.track, args.track_uri)
        text = " ".join(f"{key}={json.dumps(value)}" for key, value in tracking.items())
        args = argparse.Namespace(**{**vars(args), "run_config": f"{args.run_config} {text}"})
        address = cluster.resolve_address(args.ray_address, os.environ)
        cluster.check_options(address, args.actors, args.federation_config)
        if args.gpus_per_actor is not None:
            cluster.check_gpu_share(args.gpus_per_actor)
        if address is None and args.actors is None:
            args = argparse.Namespace(**{**vars(args), "actors": os.cpu_count() or 1})
        plan = preflight.prepare_study(args) if args.study else preflight.prepare(args)
        if address is not None:
            cluster.check_reachable(address)
    except (ValueError, TypeError, ImportError) as error:
        print("error: " + " ".join(str(error).split()))
        return 2
    except DownloadError as error:  # data-download = true, and the fetch failed
        print("error: " + " ".join(str(error).split()))
        return 1
    return _launch(plan, args, address)


def _launch(plan: Plan, args: argparse.Namespace, address: str | None) -> int:
    from fl_async.app import outcome  # imported here for the same reason as preflight

    done_file = _done_file(plan, study=bool(args.study))
    env = {**superlink.environment(), **launcher_environment()}  # RAY_ADDRESS: once known
    where = f"{args.actors} at a time" if address is None else f"on the Ray cluster {address}"
    print(f"fl-async: {plan.nodes} virtual nodes, {where}; results -> {plan.output}")
    # A job stopped with SIGTERM (a scheduler, a background job) cleans up as after Ctrl-C.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    head, process, done = None, None, False
    failures: list[str] = []  # the head's, set before its SIGTERM, even before `head` is
    try:
        head = _start_ray_head(plan, args, address, env, failures)
        joined = head.address if head is not None else address
        env = {**env, **cluster.ray_environment(joined)}
        if address is None:  # a Ray of the run's own (its head, or Flower's ray.init())
            env.update(local_ray.LOOPBACK)  # listens on loopback only; its driver looks there
        process = superlink.start_superlink(
            env, cwd=plan.app_dir, log_file=plan.output / outcome.SUPERLINK_LOG
        )
        with staged_app(plan.app_dir) as app:
            run_id, done = _flwr_run(plan, app, args, env, joined, done_file)
        # Without the ServerApp's done file, what Flower says of the run tells why; with it,
        # asking `flwr ls` would cost a new process (a second and a half on two cores).
        flower = None if done else _status(run_id, process, env, cwd=plan.app_dir)
    except KeyboardInterrupt:
        if failures:
            print(f"fl-async: the run failed: {failures[0]}; stopping the simulation")
            return 1
        print("fl-async: interrupted; stopping the SuperLink and the simulation")
        return 130
    finally:
        with _signals_held():
            # Once the ServerApp's done file is there the results are written: no grace, as a
            # shutdown of Ray takes seconds on two cores. The simulation (a Ray driver) first.
            grace = 0.0 if done else None
            if process is not None:
                superlink.stop(process, grace=grace)
            if head is not None:
                head.stop(grace=grace, keep_logs=not done)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if head is not None and os.path.isdir(head.temp_dir):
            print(f"fl-async: Ray's logs for this run are in {head.temp_dir}")
    verdict = outcome.study_verdict if args.study else outcome.verdict
    code, line = verdict(plan.output, flower)
    print(line)
    return code


def _done_file(plan: Plan, *, study: bool) -> Path:
    """The file the ServerApp writes last (a study's ``ended.json``, a run's status), with an
    earlier run's removed: the one read at the end is this run's."""
    plan.output.mkdir(parents=True, exist_ok=True)
    done_file = plan.output / (ENDED if study else RUN_STATUS)
    done_file.unlink(missing_ok=True)
    return done_file


def _start_ray_head(
    plan: Plan,
    args: argparse.Namespace,
    address: str | None,
    env: dict[str, str],
    failures: list[str],
) -> local_ray.RayHead | None:
    """A Ray head of the run's own (``local_ray``), when the run has no Ray cluster, the
    launcher runs in the main thread (a failed head stops the run by SIGTERM) and the
    federation config gives Ray no ``init-args-`` (Ray takes those only when it starts)."""
    if address is not None or "init-args-" in args.federation_config:
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    return local_ray.RayHead(
        args.actors,
        env,
        cwd=plan.app_dir,
        log_file=plan.output / local_ray.LOG,
        on_failure=lambda reason: _head_failed(reason, failures),
    )


def _head_failed(reason: str, failures: list[str]) -> None:
    """Record why the head failed, then stop the run as SIGTERM does."""
    failures.append(reason)
    os.kill(os.getpid(), signal.SIGTERM)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM while the SuperLink is stopped: a second Ctrl-C or SIGTERM
    would otherwise abort the clean-up half way and leave the simulation and Ray running. The
    clean-up is bounded (``superlink.STOP_GRACE``), so nothing waits forever."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {sent: signal.signal(sent, signal.SIG_IGN) for sent in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sent, handler in held.items():
            signal.signal(sent, handler)


def _flwr_run(
    plan: Plan,
    app: Path,
    args: argparse.Namespace,
    env: dict[str, str],
    address: str | None,
    done_file: Path,
) -> tuple[int | None, bool]:
    """``flwr run --stream`` of ``app`` (the staged copy of ``plan.app_dir``), its output
    echoed, until it ends or the ServerApp's ``done_file`` exists (then ``flwr run`` is
    stopped); the run id it reported, if any, and whether the done file came."""
    ray = cluster.federation_options(address, args.actors, args.gpus_per_actor)
    federation = f"num-supernodes={plan.nodes} {ray}"
    command = [
        "flwr",
        "run",
        str(app),
        "local",
        "--stream",
        "--federation-config",
        f"{federation} {args.federation_config}".strip(),
        "--run-config",
        args.run_config,
        # A second --run-config: its keys win over the same keys in the user's string.
        "--run-config",
        _launcher_keys(plan, study=bool(args.study)),
    ]
    with subprocess.Popen(
        command,
        env=env,
        cwd=plan.app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        echo = follow.Echo(process.stdout)
        echo.start()
        try:
            done = follow.wait_for(process, done_file)
        except BaseException:
            # Interrupted: Popen's exit would wait a quarter second and leave flwr run behind.
            with _signals_held():
                superlink.end(process)
            raise
        if done:
            superlink.end(process)  # what it would still print is Flower shutting down
        echo.join(timeout=follow.ECHO_GRACE)
    return echo.run_id, done


def _launcher_keys(plan: Plan, *, study: bool) -> str:
    """The run-config keys the launcher sets: the node count and output folder, and for a study
    its folder (which is also its output folder), whose runs the ServerApp then makes."""
    keys = f"num-nodes={plan.nodes} output-dir={json.dumps(str(plan.output))}"
    return keys + (f" study-dir={json.dumps(str(plan.output))}" if study else "")


def _status(run_id: int | None, link: subprocess.Popen, env: dict[str, str], *, cwd: Path) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``finished:completed``)."""
    if run_id is None:
        return "not started"
    if link.poll() is not None:
        # flwr ls finding no SuperLink on our ports would start a detached one there, which
        # nothing would stop.
        return f"unknown (the SuperLink exited with code {link.returncode})"
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
