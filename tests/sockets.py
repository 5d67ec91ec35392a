"""The sockets that processes listen on, read from ``/proc`` (Linux): TCP sockets in the LISTEN
state and unconnected UDP sockets, each with its address and owner."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


@dataclass(frozen=True)
class Listening:
    """One socket open to connections or datagrams: where, and which process holds it."""

    protocol: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    pid: int
    program: str

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach it (127.0.0.0/8, ::1, or ::ffff:127.x.x.x)."""
        mapped = getattr(self.address, "ipv4_mapped", None)
        return (mapped or self.address).is_loopback


def listening(pids: Iterable[int]) -> list[Listening]:
    """The listening sockets held by the processes ``pids`` (those that have ended are skipped)."""
    owners = _socket_owners(pids)
    found = []
    for protocol in ("tcp", "tcp6", "udp", "udp6"):
        for inode, address, port in _table(protocol):
            if inode in owners:
                pid = owners[inode]
                found.append(Listening(protocol, address, port, pid, program(pid)))
    return found


def _socket_owners(pids: Iterable[int]) -> dict[str, int]:
    """Socket inode -> the process (of ``pids``) holding it open."""
    owners = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                owners[target[8:-1]] = pid
    return owners


def _table(protocol: str) -> list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """``(inode, address, port)`` of the listening sockets in ``/proc/net/<protocol>``."""
    try:
        lines = Path(f"/proc/net/{protocol}").read_text().splitlines()[1:]
    except OSError:  # no IPv6 on this machine
        return []
    wanted = _TCP_LISTEN if protocol.startswith("tcp") else _UDP_UNCONNECTED
    rows = []
    for line in lines:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == wanted:
            host, port = local.split(":")
            rows.append((inode, _address(host), int(port, 16)))
    return rows


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The kernel's hex address: 32-bit words, each in the machine's (little-endian) order."""
    words = [bytes.fromhex(host[i : i + 8])[::-1] for i in range(0, len(host), 8)]
    return ipaddress.ip_address(b"".join(words))


def program(pid: int) -> str:
    """The command line of ``pid``, shortened (Ray rewrites its workers' to ``ray::Name``)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(arg.decode(errors="replace") for arg in argv[:3])[:160]
