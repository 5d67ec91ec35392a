"""Start and stop Flower's deployment engine (``flower-superlink``, ``flower-supernode``) locally.

Everything listens on 127.0.0.1, on ports that were free a moment before, and every process
(and every process it started: SuperExec, ServerApp, ClientApp) is stopped by PID:
SIGTERM, then SIGKILL after a grace period. Waits are bounded. Flower 1.41's layout:

- ``flower-superlink`` serves the Fleet, Control and Runtime (ServerAppIo) APIs over HTTP(S) on
  one port (``--host``/``--port``, default 127.0.0.1:8000). The legacy gRPC Fleet (9092) and
  Control (9093) servers start only with ``FLWR_INTERNAL_GRPC_FLEET_API=1`` /
  ``FLWR_INTERNAL_GRPC_CONTROL_API=1`` in the environment (removed from the children's
  environment here), the gRPC health server only with ``--health-server-address``. It starts
  ``flower-superexec`` (a client of that port) which starts one ``flwr-serverapp`` per run.
- ``flower-supernode`` connects to the SuperLink (``--superlink host:port``) and serves its own
  Runtime (ClientAppIo) API over HTTP on ``--port`` (default 9094: one per SuperNode). Its
  ``flower-superexec`` starts one ``flwr-clientapp`` process per message.
- ``flwr run APP CONNECTION`` reads the connection from ``$FLWR_HOME/config.toml``.

With ``tls=`` (files from ``examples/edge-deployment/generate_certs.sh``) the SuperLink serves
HTTPS (``--ssl-certfile/--ssl-keyfile/--ssl-ca-certfile``), SuperNodes verify it with
``--root-certificates`` and the connection carries ``root-certificates``. With ``auth=True``
the SuperLink adds ``--enable-supernode-auth``: each SuperNode's public key is registered with
``flwr supernode register`` before the SuperNode starts with ``--auth-supernode-private-key``.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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

BIN = Path(sys.executable).parent  # flower-superlink, flower-supernode, flwr live here
CONNECTION = "deploy"  # the connection name written to $FLWR_HOME/config.toml
NODE_ID = "SuperNode ID:"
"""What a SuperNode logs once the SuperLink has registered and activated it."""


@dataclass(frozen=True)
class TLSFiles:
    """What ``generate_certs.sh`` writes: a CA, and the SuperLink's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    @classmethod
    def in_dir(cls, directory: Path) -> TLSFiles:
        return cls(directory / "ca.crt", directory / "server.pem", directory / "server.key")


class FlowerDeployment:
    """A SuperLink and SuperNodes on 127.0.0.1; a context manager that stops them all.

    ``workdir`` holds ``FLWR_HOME`` (``flwr/``, with ``config.toml``) and the logs;
    ``database`` keeps the SuperLink's state in a file (in memory by default).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        tls: TLSFiles | None = None,
        auth: bool = False,
        database: Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        if auth and tls is None:
            raise ValueError("SuperNode authentication needs TLS (Flower refuses it otherwise)")
        self.workdir = Path(workdir)
        self.tls = tls
        self.auth = auth
        self.database = database
        self.startup_timeout = startup_timeout
        self.ports: set[int] = set()
        self.superlink: FlowerProcess | None = None
        self.superlinks: list[FlowerProcess] = []
        self.started: list[FlowerProcess] = []  # everything, restarts included
        self.supernodes: dict[int, FlowerProcess] = {}
        self.runs: list[FlowerProcess] = []
        self.flwr_home = self.workdir / "flwr"
        self.log_dir = self.workdir / "logs"
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = self._environment()
        self.port = 0

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLWR_INTERNAL_GRPC_")}
        env.update(
            FLWR_HOME=str(self.flwr_home),
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # flower-superexec, flwr-serverapp
            PYTHONUNBUFFERED="1",
        )
        env[TAG_VAR] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        return env

    def _spawn(self, name: str, cmd: list[str]) -> FlowerProcess:
        """Start ``cmd``; its log is ``<name>.log`` (``<name>.<k>.log`` for a restart)."""
        count = sum(p.name == name or p.name.startswith(f"{name}.") for p in self.started)
        proc = spawn(f"{name}.{count}" if count else name, cmd, self.env, self.log_dir)
        self.started.append(proc)
        return proc

    # ------------------------------------------------------------------------- context
    def __enter__(self) -> FlowerDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    @property
    def processes(self) -> list[FlowerProcess]:
        """Everything started here, in stop order: runs, SuperNodes, SuperLinks."""
        rank = {"flwr-run": 0, "supernode": 1, "superlink": 2}
        return sorted(self.started, key=lambda p: rank[p.name.rsplit("-", 1)[0].split(".")[0]])

    def stop_all(self) -> None:
        """Stop runs and SuperNodes (in parallel), then the SuperLink: SIGTERM, then SIGKILL.

        Everything is addressed by PID; what is still tagged as ours at the end gets SIGKILL.
        """
        procs = self.processes
        for proc in procs:
            proc.members()  # note what each started while the tree is intact
        clients = [p for p in procs if not p.name.startswith("superlink")]
        with ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
            list(pool.map(lambda p: p.stop(), clients))
        for proc in procs:
            if proc.name.startswith("superlink"):
                proc.stop()
        left = tagged(self.env[TAG_VAR])  # anything else started here: SIGKILL
        signal_processes(left, signal.SIGKILL)
        wait_processes_gone(left, GRACE)

    def leftovers(self) -> list[int]:
        """PIDs still running among everything started here (empty after ``stop_all``)."""
        found = {pid for proc in self.processes for pid in proc.leftovers()}
        return sorted(found | {pid for pid, _ in tagged(self.env[TAG_VAR])})

    # ------------------------------------------------------------------------- SuperLink
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_superlink(self, *, restart: bool = False) -> FlowerProcess:
        """Start the SuperLink on a free port, write the connection, wait for ``/health``.

        ``restart=True`` starts it again on the port of the last one (which must be gone), so
        that SuperNodes and the connection find it where it was; with ``database`` it keeps its
        state (registered SuperNodes, runs, messages).
        """
        if not restart:
            self.port = free_port(self.ports)
        elif self.superlink is None or self.superlink.running():
            raise FlowerProcessError("restart needs a SuperLink that was started and is gone")
        cmd = [
            str(BIN / "flower-superlink"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        ]
        if self.tls is None:
            cmd.append("--insecure")
        else:
            cmd += [
                "--ssl-ca-certfile",
                str(self.tls.ca_cert),
                "--ssl-certfile",
                str(self.tls.server_cert),
                "--ssl-keyfile",
                str(self.tls.server_key),
            ]
        if self.auth:
            cmd.append("--enable-supernode-auth")
        if self.database is not None:  # registered SuperNodes outlive a restart
            cmd += ["--database", str(self.database)]
        self._write_connection()
        self.superlink = self._spawn("superlink", cmd)
        self.superlinks.append(self.superlink)
        self._wait_healthy()
        return self.superlink

    def kill_superlink(self) -> set[tuple[int, int]]:
        """A crash: SIGKILL the SuperLink process alone; ``(pid, start time)`` of what it had
        started (SuperExec, ServerApp), left to notice by themselves that it is gone."""
        assert self.superlink is not None
        members = self.superlink.members()
        self.superlink.popen.kill()
        self.superlink.popen.wait(timeout=GRACE)
        return members

    def wait_gone(self, procs: Iterable[tuple[int, int]], timeout: float) -> list[int]:
        """Wait (at most ``timeout``) until ``procs`` are gone; the PIDs still running."""
        return sorted(pid for pid, _ in wait_processes_gone(procs, timeout))

    def _write_connection(self) -> None:
        lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]"]
        lines.append(f'address = "{self.address}"')
        if self.tls is None:
            lines.append("insecure = true")
        else:
            lines.append(f'root-certificates = "{self.tls.ca_cert}"')
        (self.flwr_home / "config.toml").write_text("\n".join(lines) + "\n")

    def _wait_healthy(self) -> None:
        scheme = "http" if self.tls is None else "https"
        context = (
            None if self.tls is None else ssl.create_default_context(cafile=str(self.tls.ca_cert))
        )
        deadline = time.monotonic() + self.startup_timeout
        assert self.superlink is not None
        while time.monotonic() < deadline:
            if not self.superlink.running():
                raise FlowerProcessError(f"flower-superlink exited:\n{self.superlink.log()}")
            try:
                url = f"{scheme}://{self.address}/health"
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise FlowerProcessError(f"the SuperLink is not healthy:\n{self.superlink.log()}")

    # ------------------------------------------------------------------------- SuperNodes
    def start_supernode(
        self,
        partition_id: int,
        num_partitions: int,
        *,
        private_key: Path | None = None,
        node_config: Mapping[str, object] | None = None,
    ) -> FlowerProcess:
        """Start one SuperNode with its own Runtime API port and node config."""
        config = {"partition-id": partition_id, "num-partitions": num_partitions}
        config.update(node_config or {})
        cmd = [
            str(BIN / "flower-supernode"),
            "--superlink",
            self.address,
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port(self.ports)),
            "--node-config",
            " ".join(f"{k}={_toml(v)}" for k, v in config.items()),
            "--max-wait-time",
            "60",  # give up when the SuperLink is gone for a minute
        ]
        if self.tls is None:
            cmd.append("--insecure")
        else:
            cmd += ["--root-certificates", str(self.tls.ca_cert)]
        if private_key is not None:
            cmd += ["--auth-supernode-private-key", str(private_key)]
        proc = self._spawn(f"supernode-{partition_id}", cmd)
        self.supernodes[partition_id] = proc
        return proc

    def kill_supernode(self, partition_id: int) -> None:
        """Pull the plug: SIGKILL the SuperNode and everything it started (no goodbye sent)."""
        self.supernodes[partition_id].stop(sig=signal.SIGKILL)

    def register_supernode(self, public_key: Path) -> int:
        """``flwr supernode register``: the SuperLink learns a SuperNode's public key."""
        out = self.flwr(["supernode", "register", str(public_key), CONNECTION, "--format", "json"])
        return int(_last_json(out)["node-id"])

    def online_nodes(self) -> list[dict]:
        """``flwr supernode list --format json``: the SuperNodes that are online now."""
        out = self.flwr(["supernode", "list", CONNECTION, "--format", "json"])
        nodes = _last_json(out).get("nodes", [])
        return [n for n in nodes if str(n.get("status", "")).lower() == "online"]

    def wait_for_nodes(self, count: int, timeout: float | None = None) -> list[dict]:
        """Wait until ``count`` SuperNodes are online. Asked of the SuperLink only once every
        SuperNode has logged its node ID: each ``flwr`` command is a process that costs more
        than a second of CPU."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        online: list[dict] = []
        while time.monotonic() < deadline:
            for proc in self.supernodes.values():
                if proc.popen.poll() not in (None, -signal.SIGKILL):
                    raise FlowerProcessError(f"{proc.name} exited:\n{proc.log()}")
            if not all(NODE_ID in proc.log() for proc in self.supernodes.values()):
                time.sleep(0.2)
                continue
            online = self.online_nodes()
            if len(online) >= count:
                return online
            time.sleep(0.5)
        raise FlowerProcessError(
            f"{len(online)} of {count} SuperNodes online after the timeout:\n"
            + "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in self.supernodes.values())
        )

    # ------------------------------------------------------------------------- flwr CLI
    def flwr(self, args: list[str], timeout: float = 60.0) -> str:
        """Run one ``flwr`` command (bounded); its stdout. Raises on a non-zero exit."""
        done = subprocess.run(
            [str(BIN / "flwr"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise FlowerProcessError(
                f"flwr {' '.join(args)} exited with {done.returncode}:\n"
                f"{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def start_run(self, app: Path, run_config: Mapping[str, object]) -> FlowerProcess:
        """``flwr run APP CONNECTION --stream --run-config ...`` in the background."""
        overrides = " ".join(f"{k}={_toml(v)}" for k, v in run_config.items())
        cmd = [str(BIN / "flwr"), "run", str(app), CONNECTION, "--stream"]
        if overrides:
            cmd += ["--run-config", overrides]
        proc = self._spawn(f"flwr-run-{len(self.runs)}", cmd)
        self.runs.append(proc)
        return proc

    def wait_run(self, proc: FlowerProcess, timeout: float) -> int:
        """Wait for ``flwr run`` to exit (SIGTERM/SIGKILL it after ``timeout``); its status."""
        try:
            return proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.stop()
            raise FlowerProcessError(f"flwr run did not finish in {timeout:.0f} s") from None

    def runs_status(self) -> list[dict]:
        """``flwr ls --format json``: every run with its status (``finished:completed`` ...)."""
        return _last_json(self.flwr(["ls", CONNECTION, "--format", "json"])).get("runs", [])

    def logs(self, tail: int = 4000) -> str:
        """The end of every process's log, for failure messages."""
        return "\n".join(f"===== {p.name}\n{p.log()[-tail:]}" for p in self.processes)


def _toml(value: object) -> str:
    """A value as Flower's ``key=value`` config syntax (TOML) expects it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a quoted TOML basic string


def _last_json(text: str) -> dict:
    """The JSON object a ``flwr ... --format json`` command printed (after any other output)."""
    start = text.find("{")
    if start < 0:
        raise FlowerProcessError(f"no JSON in the output:\n{text}")
    return json.loads(text[start:])
