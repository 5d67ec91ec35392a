"""A SuperLink that crashes mid-run, twice, restarted, and the run resumed from the strategy's
checkpoint each time.

The procedure of docs/strategies.md ("Surviving a SuperLink restart") on 127.0.0.1:
``flower-superlink --database <file>``, two SuperNodes, ``tests/deploy_app`` (ASGD) with
``checkpoint-dir`` and ``checkpoint-every``. Once a checkpoint is written the SuperLink process is
SIGKILLed alone: its SuperExec and ServerApp must notice by themselves. The SuperLink is started
again with the same command (same database, same port); the SuperNodes reconnect on their own;
the same ``flwr run`` (same ``checkpoint-dir``) resumes. That resumed run crashes the same way
once it has written a checkpoint of its own, and the run resumed again ends with the full budget,
each update applied once. Every process is stopped by PID afterwards, also on failure.

Flower's ServerApp stops when it sees its parent (the SuperExec) gone, by ``kill(pid, 0)``, which
a zombie passes: where an orphaned SuperExec is not reaped at once (a container whose first
process reaps slowly or never), the crashed ServerApp trains on once the SuperLink is back. Even
with its parent reaped it may not stop soon: Flower's monitor raises SIGINT in its own thread, and
Python runs the handler only when the main thread runs again, which here waits on the lock of
Flower's HTTP retries while the log uploader and the heartbeat back off under it (seen: 30 s and
150 s later still running, while the SuperLink was down). The test makes itself the orphans'
reaper (Linux ``PR_SET_CHILD_SUBREAPER``): at the first crash it reaps the SuperExec at once
(``reaped``), at the second it leaves it a zombie (``zombie``). Each time the directory is claimed
before the restart, as the resumed run claims it as it starts, so the order is certain: a crashed
ServerApp still alive and reconnected is stopped by the lease at its first reply, before it
applies anything. Both crashes in one deployment: every Flower process costs a second or two of
CPU to start, most of this test's cost.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flower_deployment import FlowerDeployment
from flower_processes import FlowerProcess, read_json, wait_until

from fl_async.strategies.checkpoint import Checkpointer

PR_SET_CHILD_SUBREAPER = 36

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "tests" / "deploy_app"
NUM_NODES = 2
NUM_UPDATES = 8
CHECKPOINT_EVERY = 2
TIMEOUT = 60.0
"""A task's timeout (its message's TTL). Every task starts a ClientApp process that imports flwr
(the app itself needs only numpy): a second or two on an idle machine, over 20 s on a loaded one,
where a 20-s TTL expired a reply that was on its way (seen in a CI run beside three benchmark
suites)."""
RECONNECTED = ("Connection successful after", "`RUNNING` status")
"""What a SuperNode logs when the SuperLink answers after failed tries: a call succeeds, or the
SuperLink refuses it with 403 because the run is no longer running (``flwr.supercore.retry``
gives up on that answer without logging a success; seen after a restart, which fails the run
whose reply the node was pushing)."""
PUSHED = re.compile(r"\[Fleet\.PushMessages\] Push replies from node_id=(\d+)")
"""What a SuperLink logs (INFO) as a SuperNode pushes a reply; the node's ID."""


def command(pid: int) -> str:
    """The command line of a running process ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def reap(pids: set[int]) -> None:
    """Collect the exit status of those of ``pids`` that are this process's children and gone."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


@pytest.fixture
def orphan_reaper():
    """This process adopts its descendants' orphans while the test runs (Linux only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@dataclass
class Crash:
    """What the SuperLink's crash left: its children, the crashed ServerApp, the last
    checkpoint before it and the crashed run's last step."""

    server_apps: set[tuple[int, int]]
    crashed_step: int | None
    saved: Any
    in_flight: list[tuple[int, int]]
    killed_at: float
    superexec: str
    """How the SuperLink's orphaned SuperExec was left: ``reaped`` or ``zombie``."""


def checkpointed_past(checkpointer: Checkpointer, step: int) -> bool:
    """Whether the checkpoint holds more than ``step`` updates."""
    if not checkpointer.path.exists():
        return False
    saved = checkpointer.load()
    return saved is not None and saved.num_updates > step


def start_until_checkpoint(
    deployment: FlowerDeployment,
    run_config: dict[str, Any],
    tmp_path: Path,
    superexec: str,
    past: int,
) -> FlowerProcess:
    """Start the run (its files named for ``superexec``) and wait until it has written a
    checkpoint past server step ``past`` (a resumed run: after it said so)."""
    checkpointer = Checkpointer(Path(run_config["checkpoint-dir"]), None)
    run = deployment.start_run(
        APP,
        {
            **run_config,
            "result-path": str(tmp_path / f"crashed-{superexec}.json"),
            "progress-path": str(tmp_path / f"crashed-{superexec}-progress.json"),
        },
    )
    wait_until(
        lambda: checkpointed_past(checkpointer, past),
        timeout=90,
        what=f"a checkpoint past step {past} at {checkpointer.path}",
        alive=run,
        context=deployment.logs,
        interval=0.2,
    )
    assert past == 0 or "Resumed from" in run.log(), run.log()
    return run


def crash_superlink(
    deployment: FlowerDeployment,
    run_config: dict[str, Any],
    tmp_path: Path,
    superexec: str,
    children: set[tuple[int, int]],
    after: Crash | None = None,
) -> Crash:
    """Start the run (resumed from ``after``'s checkpoint when given), SIGKILL the SuperLink
    alone once a checkpoint past it is written, wait for the run to fail; ``children`` receives
    the SuperLink's children (for the clean-up)."""
    checkpointer = Checkpointer(Path(run_config["checkpoint-dir"]), None)
    past = 0 if after is None else after.saved.num_updates
    crashed = start_until_checkpoint(deployment, run_config, tmp_path, superexec, past)

    # The crash: the SuperLink alone gets SIGKILL. Its SuperExec watches its PID and exits;
    # the ServerApp watches the SuperExec's and is told to stop, maybe not soon (the module's
    # docstring); `flwr run --stream` loses its connection.
    killed_at = time.monotonic()
    children.update(deployment.kill_superlink())
    server_apps = {p for p in children if "flwr-serverapp" in command(p[0])}
    assert server_apps, f"no ServerApp among {[command(p) for p, _ in children]}"
    others = {pid for pid, _ in children - server_apps}
    assert deployment.wait_gone(children - server_apps, timeout=15) == [], deployment.logs()
    if superexec == "reaped":
        reap(others)  # the ServerApp's parent is gone for good: it stops, maybe not soon
    assert deployment.wait_run(crashed, timeout=30) != 0, crashed.log()
    progress = tmp_path / f"crashed-{superexec}-progress.json"
    crashed_step = (read_json(progress) or {}).get("server-step")

    # The last checkpoint before the crash: what the resumed run starts from.
    saved = checkpointer.load()
    assert saved is not None
    in_flight = [(t.stable_id, t.iteration) for t in saved.in_flight]
    assert past < saved.num_updates < NUM_UPDATES, (past, saved.num_updates)
    assert in_flight, "a checkpoint of an asynchronous run holds the tasks in flight"
    return Crash(server_apps, crashed_step, saved, in_flight, killed_at, superexec)


def reconnections(deployment: FlowerDeployment) -> dict[int, int]:
    """Per SuperNode (by partition id), how often its log says the SuperLink answered it after
    failed tries (any of ``RECONNECTED``)."""
    logs = {p: proc.log() for p, proc in deployment.supernodes.items()}
    return {p: sum(log.count(marker) for marker in RECONNECTED) for p, log in logs.items()}


def node_id(deployment: FlowerDeployment, partition: int) -> str | None:
    """The node ID a SuperNode logged as it started (None before that)."""
    found = re.search(r"SuperNode ID: (\d+)", deployment.supernodes[partition].log())
    return found[1] if found else None


def wait_reconnected(deployment: FlowerDeployment, before: Mapping[int, int]) -> None:
    """Wait until every SuperNode is back since ``before`` (``reconnections``): its log says it
    reconnected, or the SuperLink now running logged a push from it.

    After a restart with ``database`` the SuperLink lists its SuperNodes online from its database
    at once, while each may still be backing off (seen: 14 s), so ``wait_for_nodes`` cannot tell
    that they are back. A node busy training all the while the SuperLink was down fails no call,
    so it logs no reconnection (seen in CI): its first push to the new SuperLink is the sign.
    """

    ids = {p: node_id(deployment, p) for p in deployment.supernodes}  # logged as they started

    def back() -> bool:
        assert deployment.superlink is not None
        pushed = set(PUSHED.findall(deployment.superlink.log()))
        return all(
            n > before.get(p, 0) or ids[p] in pushed for p, n in reconnections(deployment).items()
        )

    wait_until(
        back,
        timeout=deployment.startup_timeout,
        what=f"every SuperNode reconnected (before: {dict(before)})",
        context=deployment.logs,
        interval=0.5,
    )


def restart_superlink(deployment: FlowerDeployment) -> float:
    """Start the SuperLink again with the same command and wait until every SuperNode (known
    from its database) has reconnected; when it was started (``time.monotonic``)."""
    # The resumed run starts once both are back: one still backing off would join it late (its
    # identify query not waited for), and the budget could be spent without it.
    before = reconnections(deployment)
    deployment.start_superlink(restart=True)
    restarted_at = time.monotonic()
    wait_reconnected(deployment, before)
    deployment.wait_for_nodes(NUM_NODES)
    return restarted_at


def resume(
    deployment: FlowerDeployment, run_config: dict[str, Any], tmp_path: Path
) -> tuple[dict[str, Any], str]:
    """The same run started again after the restart, to its end: its result and the context
    to show if a check fails."""
    result_path = tmp_path / "resumed.json"
    resumed = deployment.start_run(
        APP,
        {
            **run_config,
            "result-path": str(result_path),
            "progress-path": str(tmp_path / "resumed-progress.json"),
        },
    )
    status = deployment.wait_run(resumed, timeout=240)
    result = read_json(result_path)
    context = f"\nresult: {json.dumps(result, indent=1)}\n{deployment.logs()}"
    assert status == 0, context
    assert result is not None and "error" not in result, context
    assert "Resumed from" in resumed.log(), context
    assert result["stopped-by"] == "budget", context
    assert result["num-updates"] == result["server-steps"] == NUM_UPDATES, context
    assert result["finite"] and np.all(np.isfinite(result["model"])), context
    assert result["final-loss"] < result["initial-loss"], context
    return result, context


def check_each_update_once(updates: list[dict[str, Any]], crash: Crash, context: str) -> None:
    """Server steps 1..N without a gap or a repeat (ASGD steps once per accepted update), each
    (node, task) and (node, base version) once; the checkpoint's history kept as it was, its
    tasks in flight sent again and applied once each; both SuperNodes took part after."""
    # First the updates in brief: a failure's summary line shows the start of its message.
    brief = [(u["index"], u["stable-id"], u["iteration"]) for u in updates]
    context = f"updates (index, stable id, iteration) {brief}, in flight {crash.in_flight}{context}"
    assert [u["index"] for u in updates] == list(range(1, NUM_UPDATES + 1)), context
    assert [u["server-step"] for u in updates] == list(range(1, NUM_UPDATES + 1)), context
    assert all(u["accepted"] for u in updates), context
    tasks = Counter((u["stable-id"], u["iteration"]) for u in updates)
    bases = Counter((u["stable-id"], u["server-step"] - u["staleness"]) for u in updates)
    assert max(tasks.values()) == 1 and max(bases.values()) == 1, context
    resumed_from = crash.saved.num_updates
    kept = [{"index": i, **record} for i, record in sorted(crash.saved.train_metrics.items())]
    assert updates[:resumed_from] == kept, context
    after = [(u["stable-id"], u["iteration"]) for u in updates[resumed_from:]]
    assert all(after.count(task) == 1 for task in crash.in_flight), context
    assert {stable for stable, _ in after} == set(range(NUM_NODES)), context


def check_crashed_run_stayed_down(
    deployment: FlowerDeployment, crash: Crash, tmp_path: Path
) -> dict[str, Any]:
    """The crashed run's ServerApp never trained again: it reported its run failed and left
    (alive at the restart: stopped by the lease). Its result."""
    assert deployment.wait_gone(crash.server_apps, timeout=60) == [], deployment.logs()
    progress = tmp_path / f"crashed-{crash.superexec}-progress.json"
    after_crash = (read_json(progress) or {}).get("server-step")
    assert after_crash == crash.crashed_step, (crash.crashed_step, after_crash)
    crashed_result = read_json(tmp_path / f"crashed-{crash.superexec}.json") or {}
    if crash.superexec == "zombie":
        assert "RunSuperseded" in crashed_result.get("error", ""), crashed_result
    return crashed_result


def wait_for_the_runs_ended(deployment: FlowerDeployment) -> None:
    """Until the SuperLink lists the two crashed runs as failed and the last one as completed.
    A crashed run is marked failed once the SuperLink sees it gone: on a loaded machine that
    can come after the last run ended (seen with three pytest workers on 2 cores)."""
    ended = ["finished:completed", "finished:failed", "finished:failed"]
    wait_until(
        lambda: sorted(r["status"] for r in deployment.runs_status()) == ended,
        timeout=120,
        what=f"the three runs {ended}",
        context=lambda: f"{deployment.runs_status()}\n{deployment.logs()}",
        interval=2.0,
    )


def report(crash: Crash, crashed: dict[str, Any], started: float, restarted_at: float) -> str:
    """The line the test prints of a crash: when it came, what the crashed run reported, how
    long the restart took."""
    return (
        f"\ncrash at {crash.killed_at - started:.1f} s (checkpoint at step "
        f"{crash.saved.num_updates}, crashed run at step {crash.crashed_step}, "
        f"{len(crash.in_flight)} task(s) in flight; SuperExec {crash.superexec}: "
        f"{crashed.get('error', 'no error reported')[:60]}); restarted in "
        f"{restarted_at - crash.killed_at:.1f} s"
    )


def crash_and_restart(
    deployment: FlowerDeployment,
    run_config: dict[str, Any],
    tmp_path: Path,
    children: set[tuple[int, int]],
    after: Crash | None,
) -> tuple[Crash, float]:
    """The SuperLink crashes while a run trains (the first run, reaped SuperExec; or the run
    resumed after ``after``, zombie SuperExec) and is started again; when it was."""
    crash = crash_superlink(
        deployment, run_config, tmp_path, "reaped" if after is None else "zombie", children, after
    )
    # The ServerApp may still be alive (a zombie parent, or its main thread not yet back from
    # Flower's retries). The resumed run claims the directory as it starts; claiming it first
    # makes the order certain: the crashed run must stop at its first reply from the
    # restarted SuperLink, applying nothing.
    Checkpointer(Path(run_config["checkpoint-dir"]), None).claim()
    return crash, restart_superlink(deployment)


@pytest.mark.slow(seconds=100, waits=True)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER")
def test_a_run_resumes_after_two_superlink_crashes(tmp_path: Path, orphan_reaper: None) -> None:
    """Two crashes in one deployment (each Flower process costs CPU to start): the first with
    its orphaned SuperExec reaped at once, the second, of the resumed run, with it left a
    zombie; the run resumed again goes on to its budget, each update applied once."""
    checkpoint_dir = tmp_path / "checkpoint"
    deployment = FlowerDeployment(tmp_path / "flower", database=tmp_path / "superlink.db")
    run_config = {
        "strategy": "asgd",
        "min-nodes": NUM_NODES,
        "num-updates": NUM_UPDATES,
        "timeout": TIMEOUT,
        "max-wall-time": 200.0,
        "checkpoint-dir": str(checkpoint_dir),
        "checkpoint-every": CHECKPOINT_EVERY,
    }
    started = time.monotonic()
    children: set[tuple[int, int]] = set()
    try:
        deployment.start_superlink()
        for partition in range(NUM_NODES):
            deployment.start_supernode(partition, NUM_NODES)
        deployment.wait_for_nodes(NUM_NODES)
        first, first_restart = crash_and_restart(deployment, run_config, tmp_path, children, None)
        second, restarted_at = crash_and_restart(deployment, run_config, tmp_path, children, first)
        result, context = resume(deployment, run_config, tmp_path)
        for crash, restart in ((first, first_restart), (second, restarted_at)):
            check_each_update_once(result["updates"], crash, context)
            crashed = check_crashed_run_stayed_down(deployment, crash, tmp_path)
            print(report(crash, crashed, started, restart))
        final = Checkpointer(checkpoint_dir, None).load()
        assert final is not None and final.num_updates == NUM_UPDATES
        records = [{"index": i, **r} for i, r in sorted(final.train_metrics.items())]
        assert records == result["updates"]
        wait_for_the_runs_ended(deployment)
        assert all(proc.running() for proc in deployment.supernodes.values())
        print(f"resumed run finished {time.monotonic() - restarted_at:.1f} s after the restart")
    finally:
        stopping = time.monotonic()
        deployment.stop_all()
        reap({pid for pid, _ in children})
        print(
            f"stopped every process in {time.monotonic() - stopping:.1f} s; "
            f"total {time.monotonic() - started:.1f} s"
        )
    assert deployment.leftovers() == [], "processes left running"
