"""Free TCP ports for the servers a run starts (the SuperLink's APIs, a Ray head's).

A port found free is bound by its server only a moment later, by another process. A port the
system picked (``bind`` to port 0) lies in its ephemeral range, the range it also hands out to
every outgoing connection and to every server asking for port 0, such as the workers of another
Ray head on the machine: two runs at once (``fl-async bench --jobs 2``) took each other's ports
that way. So ports are chosen below that range, where the system never hands one out by itself,
and each call in a process gives another port, starting from a place set by the process id so
that two launchers start apart.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

PORT_FLOOR = 20000
"""The lowest port handed out: above the well-known ports and Ray's defaults (6379, 8265, 10001,
and 10002 to 19999 for the workers of a node started without ``--min-worker-port``, which refuses
to start when one of its other ports lies in that range)."""
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Where Linux says which ports it hands out by itself."""
DYNAMIC_PORTS = 49152
"""The first port of IANA's dynamic range, which macOS and Windows hand out by themselves."""
MIN_BAND = 1000
"""Fewer ports than this below the ephemeral range: ask the system for one instead."""

SYSTEM_TRIES = 100
"""Ports the fallback asks the system for before it gives up."""

_lock = threading.Lock()
_taken: set[int] = set()
_cursor: dict[int, int] = {}
"""Process id -> where its next search starts, as an offset above ``PORT_FLOOR``: keyed by
process so that a forked child starts apart from its parent too."""


def ephemeral_start(path: Path = EPHEMERAL_RANGE) -> int:
    """The first port of the system's ephemeral range (``DYNAMIC_PORTS`` where it is not known)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DYNAMIC_PORTS


def free_port() -> int:
    """A TCP port free a moment ago, below the system's ephemeral range where that leaves room;
    never the same port twice in one process."""
    top = ephemeral_start()
    with _lock:
        if top - PORT_FLOOR < MIN_BAND:
            return _system_port()
        span, pid = top - PORT_FLOOR, os.getpid()
        start = _cursor.get(pid, pid * 7919)
        for step in range(span):
            port = PORT_FLOOR + (start + step) % span
            if port not in _taken and _bindable(port):
                _taken.add(port)
                _cursor[pid] = port - PORT_FLOOR + 1
                return port
        return _system_port()


def _bindable(port: int) -> bool:
    """Whether a socket can bind ``port`` on every address now (so on 127.0.0.1 and the
    machine's own address alike, where Ray's servers listen)."""
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def _system_port() -> int:
    """A port the system picks: the fallback when there is no room below its ephemeral range.
    Called with ``_lock`` held."""
    for _ in range(SYSTEM_TRIES):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in _taken:
            _taken.add(port)
            return port
    raise OSError(f"no free TCP port: the system gave {SYSTEM_TRIES} ports already handed out")
