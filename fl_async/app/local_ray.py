"""A Ray head of the run's own, started by the launcher beside its SuperLink.

Flower's Ray backend would start a Ray of its own with ``ray.init()`` in the simulation process,
after that process has started and loaded the apps, while the ServerApp is already waiting for
its nodes: about 4 s of every run on two cores. Started by the launcher instead, Ray comes up
while the SuperLink, ``flwr run`` and the simulation process start, and the simulation joins it
through ``RAY_ADDRESS`` (as it joins a cluster given with ``--ray-address``).

The head has one CPU per actor and a temporary directory of its own, so that no other
``ray.init()`` on the machine finds and joins it. It listens on loopback only (``LOOPBACK``):
Ray asks nobody for credentials, and on the machine's network address whoever reached its ports
could run code in it. For the same reason it starts no Ray Client server. It is stopped with
every process under it when the run ends, and its directory (Ray's session logs) is removed
unless the run failed. A head that exits, or does not answer within ``START_TIMEOUT`` seconds,
fails the run (``RayHead.failure``, then ``on_failure``): Ray's ``ray.init()`` would wait for it
for minutes.
On Linux the head also dies with the launcher when nothing could stop it (the launcher killed
with SIGKILL): ``ray start --block`` runs under the supervisor of ``fl_async.app.supervisor``,
which the kernel sends SIGTERM when the launcher dies. It passes one SIGTERM on, on which ``ray
start`` stops Ray's services, and kills its whole process group (every Ray process)
``HEAD_GRACE`` seconds later.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fl_async.app import cluster, ports, superlink, supervisor

START_TIMEOUT = 120.0
"""Seconds the head gets to answer before the run is stopped."""
RAY_COMMAND = [sys.executable, "-m", "fl_async.app.ray_start"]
"""Ray's command line (``ray``), run by this Python whatever ``PATH`` holds, without the Ray
Client server that ``ray start --head`` would start (``fl_async.app.ray_start``)."""
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Ray's switch for a single-machine Ray (its default on Windows and macOS): the node's address
is 127.0.0.1, which Ray's servers then bind to. Without it, Ray turns a ``--node-ip-address``
of 127.0.0.1 into the machine's network address, and its servers listen on every interface. The
simulation's driver needs it too, to find its node at 127.0.0.1."""
LEAN = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
"""No idle workers started ahead: Flower's actors carry a runtime environment, so Ray starts
workers of their own for them, and the prestarted ones only cost a Python start-up each."""
LOG = "ray.log"
"""The head's output (``ray start``), in the run's output directory."""
HEAD_GRACE = 10.0
"""Seconds ``ray start`` gets to stop Ray's services after its SIGTERM, before the supervisor
kills them all."""


class RayHead:
    """``ray start --head --block`` on free ports; ``address`` is its GCS address, and
    ``on_failure`` is called (from another thread) with the reason if the head fails before it
    answers: the reason, not the head, since the head may fail before its constructor returns.
    A driver that joins it needs ``LOOPBACK`` in its environment before it imports Ray."""

    def __init__(
        self,
        actors: int,
        env: dict[str, str],
        *,
        cwd: Path,
        log_file: Path,
        on_failure: Callable[[str], None],
    ) -> None:
        port = ports.free_port()
        self.address = f"127.0.0.1:{port}"
        # Short: Ray's sockets live under it, and a Unix socket path has at most 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="fl-async-ray-", dir=_SHORT_TMP)
        self.failure: str | None = None
        """Why the head failed before it answered; None while it is starting or ready."""
        self.ready = threading.Event()
        """Set once the head's GCS answers."""
        with log_file.open("w") as log:
            self.process = subprocess.Popen(
                supervisor.dying_with_this_process(
                    _command(port, actors, self.temp_dir), HEAD_GRACE
                ),
                env={**env, **LEAN, **LOOPBACK},
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Ctrl-C reaches the launcher, which stops the head after the simulation.
                start_new_session=True,
            )
        self._log_file = log_file
        self._on_failure = on_failure
        self._stopped = threading.Event()
        self._watch = threading.Thread(target=self._wait_ready, daemon=True)
        self._watch.start()

    def _wait_ready(self) -> None:
        """Until the head's GCS answers: on an exit or a timeout first, record why and call
        ``on_failure``."""
        deadline = time.monotonic() + START_TIMEOUT
        while not self._stopped.is_set():
            code = self.process.poll()
            if code is not None:
                self.failure = f"the Ray head exited with code {code}; see {self._log_file}"
            elif time.monotonic() > deadline:
                self.failure = f"the Ray head did not answer in {START_TIMEOUT:.0f} s"
            elif _answers(self.address):
                self.ready.set()
                return
            if self.failure is not None:
                self._on_failure(self.failure)
                return
            self._stopped.wait(0.2)

    def stop(self, *, grace: float | None = None, keep_logs: bool = False) -> None:
        """Stop the head and every process under it (Ray's services and workers), then remove
        its directory, kept (when not empty) if ``keep_logs`` or the head failed."""
        self._stopped.set()
        # `ray start` (through its supervisor, on Linux) gets one SIGTERM: a second could hang it.
        superlink.stop(self.process, grace=grace, term_all=False)
        self._watch.join()
        kept = Path(self.temp_dir)
        if not (keep_logs or self.failure is not None) or not any(kept.iterdir()):
            shutil.rmtree(kept, ignore_errors=True)


_SHORT_TMP = "/tmp" if os.path.isdir("/tmp") else None


def _command(port: int, actors: int, temp_dir: str) -> list[str]:
    """``ray start`` for a head on ``port`` with ``actors`` CPUs, its files under ``temp_dir``."""
    return [
        *RAY_COMMAND,
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        "--include-dashboard=false",
        f"--temp-dir={temp_dir}",
        f"--port={port}",
        # With LOOPBACK in its environment: every server of Ray (GCS, raylet, object manager,
        # agents, workers) binds to 127.0.0.1 only.
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={actors}",
        # Fixed by default (8265, 52365, workers from 10002 up): two runs at once on one
        # machine would collide. 0: workers and drivers take ports the system gives.
        f"--dashboard-port={ports.free_port()}",
        f"--dashboard-agent-listen-port={ports.free_port()}",
        "--min-worker-port=0",
        "--max-worker-port=0",
        # The autoscaler's monitor: a Python process with nothing to scale on a fixed head.
        "--no-monitor",
    ]


def _answers(address: str) -> bool:
    try:
        cluster.check_reachable(address, timeout=1.0)
    except ValueError:
        return False
    return True
