"""A default simulation listens on loopback only: ``python -m fl_async.app`` with its SuperLink,
Flower's simulation, and the run's Ray (head, raylet, agents, the actors' workers), read from
``/proc`` while it trains; and no Ray Client server runs (docs/running.md, The Ray head of a run).
"""

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import sockets
from flower_processes import TAG_VAR, spawn, wait_until

ROOT = Path(__file__).resolve().parents[1]
ACTOR = "ray::ClientAppActor"
"""What Ray names the process of a Flower actor (its command line)."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
@pytest.mark.slow(seconds=40)
def test_a_default_simulation_listens_on_loopback_only_and_runs_no_ray_client_server(tmp_path):
    env = {**os.environ, TAG_VAR: f"loopback-{os.getpid()}"}
    # A budget far beyond the test's wait: the run is still training when its sockets are read.
    budget = f"num-rounds=1000 local-steps=1 eval-every=1000 output-dir='{tmp_path / 'out'}'"
    command = [sys.executable, "-m", "fl_async.app", "--app", str(ROOT), "--nodes", "2",
               "--actors", "1", "--run-config", budget]  # fmt: skip
    launcher = spawn("launcher", command, env, tmp_path)
    try:
        wait_until(lambda: _actor_trains(launcher), 150, "a Flower actor training",
                   alive=launcher, context=launcher.log)  # fmt: skip
        pids = [launcher.pid, *(pid for pid, _ in launcher.members())]
        programs = [sockets.program(pid) for pid in pids]
        found = sockets.listening(pids)
    finally:
        launcher.stop()
        # Stopped mid-run, the launcher keeps its Ray head's logs, and says where.
        kept = re.search(r"Ray's logs for this run are in (\S+)", launcher.log())
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)
    assert launcher.leftovers() == []
    # The reading finds what must listen: the SuperLink (HTTP), Ray's GCS and raylet.
    listeners = {s.program.split()[0].rsplit("/", 1)[-1] for s in found}
    assert {"gcs_server", "raylet"} <= listeners, found
    assert any("flower-superlink" in s.program for s in found), found
    assert [s for s in found if not s.loopback] == [], found
    assert not [p for p in programs if "ray.util.client.server" in p], programs


def _actor_trains(launcher) -> bool:
    """Whether a Flower actor runs, and the strategy has started (the ServerApp's log says so)."""
    actors = [p for p, _ in launcher.members() if sockets.program(p).startswith(ACTOR)]
    return bool(actors) and "(asynchronous) with" in launcher.log()
