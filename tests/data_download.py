"""What the ``test_data_download_*`` files share: a loopback HTTP server that serves tiny files in
the published formats (four IDX .gz files; the CIFAR tarballs), publishing them with torchvision's
class-level URLs and md5 sums pointed at it, the autouse fixture that drops the wait between
attempts (import it), and the launcher run in this process."""

from __future__ import annotations

import http.server
import socket
from pathlib import Path

import numpy as np
import pytest
import torchvision.datasets
from cifar_files import (
    CIFAR_TARBALLS,
    fixture_checksums,
    make_cifar10,
    make_cifar100,
    md5,
    tarball,
)
from idx_files import make_idx_set

from fl_async.app import launch
from fl_async.data import download as download_module

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(0)
IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class Server(http.server.ThreadingHTTPServer):
    """Serves ``files`` by path; ``modes[path]`` lists how the next GETs of a path go: ``ok``,
    ``truncate`` (the full Content-Length promised, half the bytes sent, connection closed) or
    ``corrupt`` (as many bytes, some of them wrong); ``ok`` once the list is used up."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, list[str]] = {}
        self.served: list[tuple[str, str]] = []

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:
        body = self.server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.headers.get("Method") == "HEAD":
            return  # torchvision's redirect probe: headers only, no transfer
        queue = self.server.modes.get(self.path) or []
        mode = queue.pop(0) if queue else "ok"
        self.server.served.append((self.path, mode))
        if mode == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif mode == "corrupt":
            self.wfile.write(bytes(byte ^ 0xFF for byte in body[:64]) + body[64:])
        else:
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch):
    monkeypatch.setattr(download_module, "RETRY_WAIT", 0.0)


def publish_fashion_mnist(server, monkeypatch, upstream):
    """Fashion-MNIST's four .gz IDX files on the server, torchvision pointed at them."""
    arrays = make_idx_set(upstream, "FashionMNIST", compress=True, rng=RNG)
    raw = upstream / "FashionMNIST" / "raw"
    for path in raw.iterdir():
        server.files[f"/fashion/{path.name}"] = path.read_bytes()
    resources = [(f"{name}.gz", md5(raw / f"{name}.gz")) for name in IDX_NAMES]
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "mirrors", [server.url("/fashion/")])
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "resources", resources)
    return arrays


def publish_cifar(name, server, monkeypatch, upstream, **sizes):
    """The tiny CIFAR tarball on the server, torchvision's URL and md5 sums pointed at it."""
    make, dataset_class = {
        "cifar10": (make_cifar10, torchvision.datasets.CIFAR10),
        "cifar100": (make_cifar100, torchvision.datasets.CIFAR100),
    }[name]
    folder, images, labels = make(upstream, RNG, **sizes)
    archive = tarball(folder)
    path = f"/{CIFAR_TARBALLS[name]}"
    server.files[path] = archive
    monkeypatch.setattr(dataset_class, "url", server.url(path))
    monkeypatch.setattr(dataset_class, "tgz_md5", md5(archive))
    for attribute, value in fixture_checksums(dataset_class, folder).items():
        monkeypatch.setattr(dataset_class, attribute, value)
    return path, images, labels


def contents(root):
    """Every entry directly under the data root: no hidden staging folder may remain."""
    return sorted(path.name for path in root.iterdir()) if root.exists() else []


def launch_with(run_config, *, nodes=2):
    """``python -m fl_async.app`` in this process, on ``nodes`` virtual nodes."""
    return launch.main(["--app", str(ROOT), "--nodes", str(nodes), "--run-config", run_config])
