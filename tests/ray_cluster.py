"""A Ray cluster of two nodes on this machine, started the way a user starts one on two machines
(``ray start --head``, then ``ray start --address``), and stopped by process id.

Each node has one CPU and its own ``--temp-dir``: its logs stay apart from the other node's, and
Ray's note of the latest cluster (``ray_current_cluster``) is written there, so a plain
``ray.init()`` elsewhere on this machine never joins this cluster. ``ray start --block`` keeps
each node's processes below the one process started here, and every process carries the
environment tag of ``flower_processes`` (Ray's workers inherit it from their raylet), so what
left the tree is found too. ``ray stop`` is never used: it stops every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from flower_processes import (
    GRACE,
    TAG_VAR,
    FlowerProcess,
    FlowerProcessError,
    free_port,
    signal_processes,
    spawn,
    tagged,
    wait_processes_gone,
)

RAY = Path(sys.executable).parent / "ray"

# What the ClientApp logs once per Ray worker (fl_async.clients.client_app).
ANNOUNCEMENT = re.compile(
    r"fl-async: ClientApp in Ray worker \d+ on Ray node ([0-9a-f]+) \(.*?\), (\d+) torch thread"
)

# Run as a driver of its own: waits (bounded) until `want` nodes are alive and every CPU is
# free, then prints the nodes and the CPU counts as one JSON line.
_STATE = """
import json, logging, sys, time
import ray
address, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, include_dashboard=False, log_to_driver=False,
         logging_level=logging.ERROR)
deadline = time.monotonic() + timeout
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    cpus = ray.cluster_resources().get("CPU", 0.0)
    free = ray.available_resources().get("CPU", 0.0)
    if (len(nodes) >= want and free == cpus) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
heads = {n["NodeID"]: "node:__internal_head__" in n["Resources"] for n in nodes}
print(json.dumps({"nodes": heads, "cpus": cpus, "free-cpus": free}))
ray.shutdown()
"""


class TwoNodeRay:
    """Two Ray nodes (``head``, ``worker``) with one CPU each; a context manager that stops
    them. ``address`` is the head's GCS address, ``nodes`` maps each node id to its role."""

    def __init__(self, workdir: Path, *, timeout: float = 120.0) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Short paths: Ray's Unix sockets live below the temp dir (at most 107 characters).
        self.temp_dirs = {
            role: Path(tempfile.mkdtemp(prefix=f"flray-{role[0]}-")) for role in ("head", "worker")
        }
        self.nodes: dict[str, str] = {}
        self.processes: dict[str, FlowerProcess] = {}
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.env[TAG_VAR] = f"{os.getpid()}-ray-{uuid.uuid4().hex[:12]}"

    def __enter__(self) -> TwoNodeRay:
        try:
            client_port = str(free_port())  # not Ray Client's 10001, which may be taken
            head = ["--head", "--port", str(self.port), "--ray-client-server-port", client_port]
            self._start("head", [*head, "--include-dashboard", "false"])
            self._wait_for_head()
            self._start("worker", ["--address", self.address])
            state = self.state(want=2)
            heads = state["nodes"]
            if len(heads) != 2 or sorted(heads.values()) != [False, True]:
                raise FlowerProcessError(f"expected a head and a worker node, got {heads}")
            self.nodes = {node: "head" if head else "worker" for node, head in heads.items()}
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, role: str, options: list[str]) -> None:
        common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
        command = [
            str(RAY),
            "start",
            *options,
            *common,
            "--temp-dir",
            str(self.temp_dirs[role]),
            "--block",
        ]
        self.processes[role] = spawn(f"ray-{role}", command, self.env, self.workdir)

    def _wait_for_head(self) -> None:
        head = self.processes["head"]
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if not head.running():
                raise FlowerProcessError(f"ray start --head exited:\n{head.log()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.5)
        raise FlowerProcessError(f"the Ray head did not listen in {self.timeout:.0f} s")

    def state(self, *, want: int) -> dict:
        """The alive nodes (id -> is head) and the CPUs, once ``want`` nodes are alive and
        every CPU is free (or after ``timeout``): read by a short-lived driver of its own."""
        done = subprocess.run(
            [sys.executable, "-c", _STATE, self.address, str(want), str(self.timeout)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.timeout + 60,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise FlowerProcessError(f"cannot read the cluster's state:\n{done.stderr[-3000:]}")
        return json.loads(lines[-1])

    def clientapp_nodes(self) -> dict[str, set[tuple[str, int]]]:
        """Per role, the ``(Ray node id, torch threads)`` that ClientApps logged in the Ray
        worker logs kept under that node's temp dir."""
        found: dict[str, set[tuple[str, int]]] = {}
        for role, temp_dir in self.temp_dirs.items():
            lines = set()
            for log in temp_dir.glob("session_*/logs/worker-*"):
                text = log.read_text(errors="replace")
                lines |= {(m[1], int(m[2])) for m in ANNOUNCEMENT.finditer(text)}
            found[role] = lines
        return found

    def stop(self) -> None:
        """Stop the worker node, then the head: SIGTERM to ``ray start`` (which stops its
        node), then to whatever is left, SIGKILL after a grace period; by process id."""
        for role in ("worker", "head"):
            if role in self.processes:
                self.processes[role].stop()
        left = tagged(self.env[TAG_VAR])
        signal_processes(left, signal.SIGKILL)
        wait_processes_gone(left, GRACE)
        for temp_dir in self.temp_dirs.values():
            shutil.rmtree(temp_dir, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """PIDs still running among everything started here (empty after ``stop``)."""
        found = {pid for proc in self.processes.values() for pid in proc.leftovers()}
        return sorted(found | {pid for pid, _ in tagged(self.env[TAG_VAR])})
