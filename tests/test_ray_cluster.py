"""Simulation on a Ray cluster: ``--ray-address HOST:PORT`` (else ``RAY_ADDRESS``) is checked
before anything starts and reaches the simulation's ``ray.init()`` through ``RAY_ADDRESS``. That a
seeded run on a two-node cluster trains on both nodes and gives the history of one machine is
checked in ``test_app_simulation.py``, beside the run on one machine it is compared with."""

import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from launch_fakes import fake_heads

from fl_async import cli
from fl_async.app import cluster, launch, superlink
from fl_async.bench import cli as bench_cli
from fl_async.bench.runner import launcher_command
from fl_async.validation import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]


class _Started(Exception):
    """Raised instead of starting a SuperLink, with the environment it would have had."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__("a SuperLink would start here")
        self.env = env


@pytest.fixture
def no_superlink(monkeypatch):
    """No SuperLink starts: the launcher stops with ``_Started`` where it would start one."""

    def refuse(env, **kwargs):
        raise _Started(env)

    monkeypatch.setattr(superlink, "start_superlink", refuse)
    monkeypatch.delenv(cluster.RAY_ADDRESS, raising=False)
    handler = signal.getsignal(signal.SIGTERM)  # the launcher sets its own before the SuperLink
    yield
    signal.signal(signal.SIGTERM, handler)


def refused(capsys, *argv):
    """The one line a refused command printed (it must exit 2)."""
    assert launch.main([*argv, "--app", str(ROOT)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def closed_port() -> int:
    """A port on 127.0.0.1 that nobody listens on (free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ray-address", "head"], "--ray-address 'head': expected HOST:PORT"),
        (["--ray-address", "head:0"], "--ray-address 'head:0': expected HOST:PORT"),
        (["--ray-address", "head:65536"], "--ray-address 'head:65536': expected HOST:PORT"),
        (["--ray-address", "ray://head:10001"], "Ray Client addresses (ray://...) are not"),
        (["--ray-address", "10.0.0.1:6379", "--actors", "2"], "--actors 2 with the Ray cluster"),
        (
            ["--ray-address", "10.0.0.1:6379", "--federation-config", "init-args-num-cpus=4"],
            "--federation-config sets init-args-num-cpus, which Ray refuses",
        ),
    ],
)
def test_a_bad_ray_address_or_option_is_one_line_and_exit_code_2(
    no_superlink, capsys, argv, message
):
    assert message in refused(capsys, *argv)


def test_ray_address_from_the_environment_is_checked_the_same_way(
    no_superlink, monkeypatch, capsys
):
    monkeypatch.setenv(cluster.RAY_ADDRESS, "auto")
    assert "RAY_ADDRESS 'auto': expected HOST:PORT" in refused(capsys)


def test_a_head_that_does_not_answer_is_refused_before_a_superlink_starts(no_superlink, capsys):
    address = f"127.0.0.1:{closed_port()}"
    line = refused(capsys, "--ray-address", address)
    assert f"Ray cluster {address}: cannot connect to its head ([Errno" in line
    assert "ray start --head --port" in line


def grpc_server(*, healthy: bool) -> tuple[grpc.Server, str]:
    """A gRPC server on 127.0.0.1 and its address; ``healthy``: it answers the standard health
    check with SERVING, as Ray's GCS does."""
    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    if healthy:
        servicer = health.HealthServicer()
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_a_port_that_is_not_a_ray_head_is_refused_in_bounded_time():
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(InvalidArgument, match="health check: DEADLINE_EXCEEDED"):
            cluster.check_reachable(address, timeout=1.0)
    server, address = grpc_server(healthy=False)  # another gRPC service
    try:
        with pytest.raises(InvalidArgument, match="not as Ray's head .* UNIMPLEMENTED"):
            cluster.check_reachable(address, timeout=5.0)
    finally:
        server.stop(grace=None)


@pytest.fixture
def grpc_head():
    """The address of a gRPC server that passes for the head's GCS port."""
    server, address = grpc_server(healthy=True)
    yield address
    server.stop(grace=None)


def test_the_address_reaches_the_simulation_as_ray_address(
    no_superlink, grpc_head, monkeypatch, tmp_path
):
    output = f"output-dir='{tmp_path}'"
    with pytest.raises(_Started) as started:
        launch.main(["--app", str(ROOT), "--ray-address", grpc_head, "--run-config", output])
    assert started.value.env[cluster.RAY_ADDRESS] == grpc_head
    monkeypatch.setenv(cluster.RAY_ADDRESS, grpc_head)
    with pytest.raises(_Started) as started:
        launch.main(["--app", str(ROOT), "--run-config", output])
    assert started.value.env[cluster.RAY_ADDRESS] == grpc_head
    # Without an address, a Ray of its own (the launcher's head), even when `ray start` left a
    # cluster on this machine; stopped when the run ends.
    monkeypatch.delenv(cluster.RAY_ADDRESS)
    heads = fake_heads(monkeypatch)
    with pytest.raises(_Started) as started:
        launch.main(["--app", str(ROOT), "--run-config", output])
    assert started.value.env[cluster.RAY_ADDRESS] == heads[0].address != grpc_head
    assert heads[0].stopped is not None


def test_addresses_and_federation_options():
    env = {cluster.RAY_ADDRESS: "10.0.0.5:6379"}
    assert cluster.resolve_address(None, env) == "10.0.0.5:6379"
    assert cluster.resolve_address("[::1]:6379", env) == "[::1]:6379"  # the option wins
    assert cluster.resolve_address("local", env) is None
    assert cluster.resolve_address(None, {cluster.RAY_ADDRESS: " "}) is None
    assert cluster.parse_address("x", "[fe80::1]:6379") == ("fe80::1", 6379)
    assert cluster.parse_address("x", "head-1.lan:6379") == ("head-1.lan", 6379)
    assert cluster.federation_options(None, 3) == (
        "client-resources-num-cpus=1 init-args-num-cpus=3"
    )
    assert cluster.federation_options("10.0.0.5:6379", None) == "client-resources-num-cpus=1"


def test_bench_runs_every_run_on_the_cluster(no_superlink, grpc_head, monkeypatch, tmp_path):
    calls = []

    def run_and_report(spec, out, actors, ray_address=None, **launching):
        calls.append((actors, ray_address))
        return 0

    monkeypatch.setattr(bench_cli, "run_and_report", run_and_report)
    monkeypatch.setenv(cluster.RAY_ADDRESS, grpc_head)
    assert cli.main(["bench", "--out", str(tmp_path / "suite")]) == 0
    assert calls == [(2, grpc_head)]
    command = launcher_command({"seed": 0}, nodes=4, actors=2, app_dir=ROOT, ray_address=grpc_head)
    assert command[command.index("--ray-address") + 1] == grpc_head and "--actors" not in command
    assert "--actors" in launcher_command({"seed": 0}, nodes=4, actors=2, app_dir=ROOT)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ray-address", "head"], "--ray-address 'head': expected HOST:PORT"),
        (["--ray-address", "10.0.0.1:6379", "--actors", "3"], "--actors 3 with the Ray cluster"),
    ],
)
def test_bench_refuses_a_bad_ray_address(no_superlink, capsys, tmp_path, argv, message):
    assert cli.main(["bench", "--out", str(tmp_path / "suite"), *argv]) == 2
    assert message in capsys.readouterr().err
