"""The launcher's free ports: below the system's ephemeral range, never the same twice."""

from __future__ import annotations

import socket

import pytest

from fl_async.app import ports


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ports handed out by other tests in this process do not count here."""
    monkeypatch.setattr(ports, "_taken", set())
    monkeypatch.setattr(ports, "_cursor", {})


def test_ports_lie_below_the_ephemeral_range_and_differ(fresh: None) -> None:
    top = ports.ephemeral_start()
    handed = [ports.free_port() for _ in range(20)]
    assert len(set(handed)) == 20
    assert all(ports.PORT_FLOOR <= port < top for port in handed)
    for port in handed:  # each was free when handed out, and nothing took it since
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_in_use_is_skipped(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        # Only a port below the ephemeral range can be where the search starts.
        monkeypatch.setattr(ports, "ephemeral_start", lambda: 65536)
        pid = ports.os.getpid()
        monkeypatch.setitem(ports._cursor, pid, taken - ports.PORT_FLOOR)
        port = ports.free_port()
    assert port != taken
    assert port > taken  # the next one free after it


def test_two_processes_start_apart(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports.os, "getpid", lambda: 1000)
    first = ports.free_port()
    monkeypatch.setattr(ports.os, "getpid", lambda: 1001)
    second = ports.free_port()
    assert abs(first - second) > 1000


@pytest.mark.parametrize(
    ("text", "start"),
    [("32768\t60999\n", 32768), ("1024 65535", 1024), ("", ports.DYNAMIC_PORTS)],
)
def test_the_ephemeral_range_is_read_from_linux(tmp_path, text: str, start: int) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ports.ephemeral_start(path) == start
    assert ports.ephemeral_start(tmp_path / "absent") == ports.DYNAMIC_PORTS


def test_no_room_below_the_range_asks_the_system(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "ephemeral_start", lambda: ports.PORT_FLOOR + 10)
    handed = {ports.free_port() for _ in range(5)}
    assert len(handed) == 5


class _SamePort:
    """A socket the system always gives port 40000."""

    def __enter__(self) -> _SamePort:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        return None

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 40000)


def test_the_fallback_gives_up_with_a_reason(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_start", lambda: ports.PORT_FLOOR)
    monkeypatch.setattr(ports.socket, "socket", _SamePort)
    assert ports.free_port() == 40000
    with pytest.raises(OSError, match="no free TCP port: the system gave 100 ports"):
        ports.free_port()
