"""Where the simulation's Ray runs: a Ray of its own on this machine, or a Ray cluster the user
started with ``ray start`` (``--ray-address HOST:PORT``, else Ray's ``RAY_ADDRESS``).

Flower's Ray backend calls ``ray.init()`` in the simulation process, and ``ray.init()`` reads
``RAY_ADDRESS``: the launcher passes the address in that variable, and leaves
``init-args-num-cpus`` out of the federation config (Ray refuses CPU counts when it joins a
cluster). Flower then sizes its actor pool from every node's CPUs, so ClientApps run on every
machine. Without an address the variable is set to ``local``: a plain ``ray.init()`` would join
the latest cluster that ``ray start`` left on this machine, whose CPUs ``--actors`` cannot set.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping

from fl_async.validation import InvalidArgument, check_number

RAY_ADDRESS = "RAY_ADDRESS"
"""Ray's own variable for the cluster to join; honoured when ``--ray-address`` is not given."""

LOCAL = "local"
"""The ``RAY_ADDRESS`` value for a Ray of the simulation's own on this machine."""

CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the cluster's head to accept a connection before giving up."""

_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):(?P<port>\d{1,5})")
_INIT_ARGS = re.compile(r"init-args-num-[cg]pus")
_FORM = "HOST:PORT, the head's address as `ray start --head` prints it (e.g. 192.168.1.10:6379)"


def resolve_address(option: str | None, environ: Mapping[str, str]) -> str | None:
    """The Ray cluster to join as ``HOST:PORT``: ``option`` (``--ray-address``), else
    ``RAY_ADDRESS`` in ``environ``; None for a Ray of the simulation's own (neither set, empty
    or ``local``). InvalidArgument, naming where the value came from, for any other form."""
    if option is not None:
        name, text = "--ray-address", option
    else:
        name, text = RAY_ADDRESS, environ.get(RAY_ADDRESS, "")
    text = text.strip()
    if text in ("", LOCAL):
        return None
    parse_address(name, text)
    return text


def parse_address(name: str, text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as ``(host, port)``; InvalidArgument naming
    ``name`` otherwise. Ray Client addresses (``ray://``) are refused: the simulation joins the
    cluster as a driver through the head's GCS port."""
    if "://" in text:
        raise InvalidArgument(
            f"{name} {text!r}: Ray Client addresses (ray://...) are not supported; give {_FORM}"
        )
    match = _ADDRESS.fullmatch(text)
    port = int(match.group("port")) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise InvalidArgument(f"{name} {text!r}: expected {_FORM}")
    return match.group("host").strip("[]"), port


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Check, for at most ``timeout`` seconds, that the head's GCS port accepts a connection and
    reports itself serving to a standard gRPC health check (Ray's GCS answers it);
    InvalidArgument otherwise, before a SuperLink starts (on a wrong address, Ray itself would
    retry for minutes)."""
    host, port = parse_address("--ray-address", address)
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        reason = f"no answer in {timeout:.0f} s" if isinstance(error, TimeoutError) else error
        raise InvalidArgument(
            f"Ray cluster {address}: cannot connect to its head ({reason}); start the "
            f"head with `ray start --head --port {port}`, or check the address and that the "
            "port is open to this machine"
        ) from error
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return  # Ray's TLS needs its certificates, which ray.init() reads; no plain handshake
    status = _health(address, max(deadline - time.monotonic(), 0.1))
    if status != "SERVING":
        raise InvalidArgument(
            f"Ray cluster {address}: something answers there, but not as Ray's head (gRPC "
            f"health check: {status}); give the port that `ray start --head --port` was given "
            "(6379 by default)"
        )


def _health(address: str, timeout: float) -> str:
    """The answer of the gRPC health service at ``address`` (``SERVING`` when healthy), or the
    gRPC status code of the failed call."""
    # grpc and its health service are dependencies of flwr; imported only for this check.
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
        except grpc.RpcError as error:
            return error.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def check_options(address: str | None, actors: int | None, federation_config: str) -> None:
    """Refuse what a Ray cluster cannot take: ``--actors`` and Ray's CPU and GPU counts
    (``init-args-num-cpus``, ``init-args-num-gpus``) are for a Ray of the simulation's own."""
    if address is None:
        return
    if actors is not None:
        raise InvalidArgument(
            f"--actors {actors} with the Ray cluster {address}: each machine's `ray start "
            "--num-cpus` sets how many ClientApps train there at once; leave --actors out"
        )
    refused = sorted(set(_INIT_ARGS.findall(federation_config)))
    if refused:
        raise InvalidArgument(
            f"--federation-config sets {', '.join(refused)}, which Ray refuses when it joins the "
            f"cluster {address}: give each machine's counts to its `ray start`"
        )


def ray_environment(address: str | None) -> dict[str, str]:
    """The variables that point the simulation's ``ray.init()`` at ``address`` (None: a Ray of
    its own, even if a cluster started with ``ray start`` runs on this machine)."""
    return {RAY_ADDRESS: address or LOCAL}


def federation_options(
    address: str | None, actors: int | None, gpus_per_actor: float | None = None
) -> str:
    """Flower's simulation options for the Ray part: ``init-args-num-cpus`` (the local Ray's
    CPUs, one per actor) only for a Ray of its own; on a cluster ``ray start --num-cpus`` of
    each machine sets how many ClientApps run there at once. ``gpus_per_actor`` is the share of
    a GPU each actor reserves (``client-resources-num-gpus``: 0.25 puts four on one GPU)."""
    options = ["client-resources-num-cpus=1"]
    if gpus_per_actor is not None:
        options.append(f"client-resources-num-gpus={check_gpu_share(gpus_per_actor)}")
    if address is None:
        options.append(f"init-args-num-cpus={actors}")
    return " ".join(options)


def check_gpu_share(share: float) -> float:
    """``share`` if Ray can reserve it for an actor: above 0, and a fraction of one GPU or a
    whole number of GPUs; ``InvalidArgument`` otherwise."""
    share = check_number("--gpus-per-actor", share, minimum=0, min_open=True)
    if share > 1 and share != int(share):
        raise InvalidArgument(
            f"--gpus-per-actor must be a fraction of one GPU (0 < share <= 1) or a whole number "
            f"of GPUs, got {share}: Ray cannot give an actor part of a second GPU"
        )
    return share
