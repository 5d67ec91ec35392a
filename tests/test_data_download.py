"""``fl-async data`` and ``data-download`` without the internet.

Fashion-MNIST and CIFAR go through torchvision's real download and md5 code against a loopback
HTTP server that serves tiny files in the published formats (four IDX .gz files; the CIFAR
tarballs), with torchvision's class-level URLs and md5 sums pointed at it. FEMNIST is tested at
the ``huggingface_hub.snapshot_download`` boundary: a stand-in records how it is called and
answers as the Hub would (a snapshot folder of parquet files, or its errors).
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import datasets
import httpx
import huggingface_hub
import numpy as np
import pytest
import torchvision.datasets
from cifar_files import (
    CIFAR_FOLDERS,
    CIFAR_TARBALLS,
    fixture_checksums,
    make_cifar10,
    make_cifar100,
    md5,
    tarball,
)
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
from idx_files import make_idx_set

from fl_async import cli
from fl_async.app import launch, superlink
from fl_async.data import download as download_module
from fl_async.data import load_dataset
from fl_async.data.download import DownloadError, download, ensure, is_present
from fl_async.data.sources import fetch_command

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


@pytest.fixture
def server():
    httpd = Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


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


# ---- torchvision datasets through torchvision's own download code ----------------------------


def test_fashion_mnist_downloads_into_torchvisions_layout(server, monkeypatch, tmp_path):
    arrays = publish_fashion_mnist(server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    fetched = download("fashion-mnist", root=root)
    assert not fetched.already_present and fetched.examples == 30
    assert fetched.location == root / "FashionMNIST" / "raw"
    assert contents(root) == ["FashionMNIST"]
    assert sorted(p.name for p in fetched.location.iterdir()) == sorted(IDX_NAMES)  # no .gz
    assert fetched.size == sum(p.stat().st_size for p in fetched.location.iterdir())
    assert sorted(mode for _, mode in server.served) == ["ok"] * 4
    data = load_dataset("fashion-mnist", root=root)
    np.testing.assert_array_equal(data.train.images[:, 0].numpy(), arrays["train"][0])
    np.testing.assert_array_equal(data.test.labels.numpy(), arrays["t10k"][1])

    again = download("fashion-mnist", root=root)
    assert again.already_present and again.examples == 30 and len(server.served) == 4


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_downloads_the_tarball_and_keeps_only_the_batches(
    name, server, monkeypatch, tmp_path
):
    _, images, labels = publish_cifar(name, server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    fetched = download(name, root=root)
    assert contents(root) == [CIFAR_FOLDERS[name]]  # the tarball went with the staging folder
    assert fetched.location == root / CIFAR_FOLDERS[name]
    assert fetched.examples == len(labels) + (6 if name == "cifar10" else 4)
    assert "downloaded" in fetched.summary() and str(fetched.location) in fetched.summary()
    data = load_dataset(name, root=root)
    np.testing.assert_array_equal(data.train.images.numpy(), images)
    np.testing.assert_array_equal(data.train.labels.numpy(), labels)


def test_an_interrupted_download_is_reported_and_retried(server, monkeypatch, tmp_path):
    path, _, labels = publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    server.modes[path] = ["truncate"]
    lines = []
    root = tmp_path / "data"
    fetched = download("cifar10", root=root, report=lines.append)
    assert fetched.examples == len(labels) + 6
    assert [mode for _, mode in server.served] == ["truncate", "ok"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("fl-async data: cifar10: attempt 1 of 3 failed: ")
    # Python 3.11's http.client ends a short body without an error: torchvision's md5 check
    # is what notices (an IncompleteRead would be reported as a closed connection).
    half = len(server.files[path]) // 2
    assert f"checksum mismatch for cifar-10-python.tar.gz ({half:,} bytes received)" in lines[0]
    assert contents(root) == ["cifar-10-batches-py"]
    assert len(load_dataset("cifar10", root=root).train) == len(labels)


@pytest.mark.parametrize("mode", ["corrupt", "truncate"])
@pytest.mark.parametrize(
    ("name", "archive"),
    [("fashion-mnist", "train-images-idx3-ubyte.gz"), ("cifar10", "cifar-10-python.tar.gz")],
)
def test_a_broken_download_fails_after_bounded_attempts_and_leaves_nothing(
    name, archive, mode, server, monkeypatch, tmp_path
):
    if name == "cifar10":
        publish_cifar(name, server, monkeypatch, tmp_path / "upstream")
        path = f"/{archive}"
    else:
        publish_fashion_mnist(server, monkeypatch, tmp_path / "upstream")
        path = f"/fashion/{archive}"
    server.modes[path] = [mode] * 5
    lines = []
    root = tmp_path / "data"
    with pytest.raises(DownloadError) as error:
        download(name, root=root, attempts=2, report=lines.append)
    size = len(server.files[path]) // (2 if mode == "truncate" else 1)
    assert str(error.value) == (
        f"{name}: download failed after 2 attempts: checksum mismatch for {archive} "
        f"({size:,} bytes received): a corrupt or interrupted download"
    )
    assert len(lines) == 1 and "attempt 1 of 2 failed: checksum mismatch" in lines[0]
    assert [p for p, served in server.served if served == mode] == [path, path]
    assert contents(root) == []  # neither the bad archive nor a half-built folder
    with pytest.raises(FileNotFoundError, match=f"fl-async data download {name} --root"):
        load_dataset(name, root=root)


def test_an_incomplete_folder_is_replaced_whole(server, monkeypatch, tmp_path):
    publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    broken = root / "cifar-10-batches-py"
    broken.mkdir(parents=True)
    (broken / "data_batch_1").write_bytes(b"half a file")
    (broken / "stray").write_text("left by hand")
    lines = []
    fetched = download("cifar10", root=root, report=lines.append)
    assert "fetching a fresh copy" in lines[0]
    assert not (broken / "stray").exists() and contents(root) == ["cifar-10-batches-py"]
    assert fetched.examples == 26 and len(load_dataset("cifar10", root=root).train) == 20


def test_fetch_command_names_the_root_only_where_needed(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_ASYNC_DATA", str(tmp_path / "default"))
    assert fetch_command("cifar10", None) == "fl-async data download cifar10"
    assert fetch_command("cifar10", tmp_path / "default") == "fl-async data download cifar10"
    assert fetch_command("cifar10", tmp_path / "my data") == (
        f"fl-async data download cifar10 --root '{tmp_path / 'my data'}'"
    )
    assert fetch_command("flwrlabs/femnist", tmp_path) == (
        f"fl-async data download femnist --root {tmp_path}"
    )


# ---- the command ------------------------------------------------------------------------------


def test_the_command_downloads_lists_and_exits_1_on_failure(server, monkeypatch, tmp_path, capsys):
    path, _, _ = publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    assert cli.main(["data", "download", "cifar10", "--root", str(root)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("fl-async data: cifar10 downloaded: 26 examples (20 train / 6 test)")
    assert out[-1].endswith(f"in {root / 'cifar-10-batches-py'}")

    (root / "FashionMNIST" / "raw").mkdir(parents=True)
    (root / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte").write_bytes(b"\0" * 100)
    assert cli.main(["data", "list", "--root", str(root)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == f"data root: {root}"
    rows = {line.split()[0]: line.split() for line in table[2:]}
    assert list(rows) == ["mnist", "fashion-mnist", "cifar10", "cifar100", "femnist"]
    assert rows["mnist"][1] == "embedded" and rows["mnist"][-1].endswith("mnist_5k.csv.gz")
    assert rows["fashion-mnist"][1:4] == ["incomplete", "100", "B"]
    assert rows["cifar10"][1] == "present" and rows["cifar10"][3] == "kB"
    assert server.url(path) in " ".join(rows["cifar10"])
    assert rows["cifar100"][1:3] == ["absent", "-"]
    assert rows["femnist"][1:3] == ["absent", "-"] and "flwrlabs/femnist" in rows["femnist"]

    server.modes["/cifar-100-python.tar.gz"] = ["corrupt"]
    publish_cifar("cifar100", server, monkeypatch, tmp_path / "upstream")
    code = cli.main(["data", "download", "cifar100", "--root", str(root), "--attempts", "1"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fl-async data: error: cifar100: download failed after 1 attempt:")
    assert not (root / "cifar-100-python").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["imagenet"], "unknown dataset 'imagenet' to download; allowed: fashion-mnist, cifar10"),
        (["mnist"], "'mnist' is embedded (always present, nothing to download)"),
        (["cifar10", "--attempts", "0"], "--attempts must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_name_or_option_is_one_line_and_exit_code_2(argv, message, capsys):
    assert cli.main(["data", "download", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fl-async data: error: ") and message in err[0]


# ---- FEMNIST at the snapshot_download boundary -------------------------------------------------


class FakeHub:
    """Stands in for ``huggingface_hub.snapshot_download``: a snapshot folder in the Hub cache's
    layout once a download succeeded; ``outcomes`` are what the next downloads raise."""

    def __init__(self, cache: Path, outcomes: list[Exception | None]) -> None:
        self.cache = cache
        self.outcomes = outcomes
        self.calls: list[tuple[str, dict]] = []
        self.snapshot: Path | None = None

    def __call__(self, repo_id: str, **kwargs) -> str:
        self.calls.append((repo_id, kwargs))
        if kwargs["local_files_only"]:
            if self.snapshot is None:
                raise LocalEntryNotFoundError("not in the cache")
            return str(self.snapshot)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        folder = Path(kwargs["cache_dir"]) / "datasets--flwrlabs--femnist" / "snapshots" / "c0"
        (folder / "data").mkdir(parents=True)
        table = datasets.Dataset.from_dict({"character": list(range(12)), "writer_id": ["w"] * 12})
        table.to_parquet(folder / "data" / "train-00000-of-00001.parquet")
        self.snapshot = folder
        return str(folder)

    def downloads(self) -> list[tuple[str, dict]]:
        return [call for call in self.calls if not call[1]["local_files_only"]]


@pytest.fixture
def hub(monkeypatch, tmp_path):
    fake = FakeHub(tmp_path / "hub", [])
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return fake


def test_femnist_is_a_dataset_snapshot_in_the_hub_cache_under_the_root(hub, tmp_path):
    fetched = download("femnist", root=hub.cache)
    [(repo_id, kwargs)] = hub.downloads()
    assert repo_id == "flwrlabs/femnist"
    assert kwargs["repo_type"] == "dataset" and kwargs["cache_dir"] == str(hub.cache)
    assert fetched.location == hub.snapshot and fetched.examples == 12
    assert fetched.detail == "12 train" and fetched.size > 0
    again = download("femnist", root=hub.cache)
    assert again.already_present and len(hub.downloads()) == 1


def test_femnist_retries_when_the_hub_cannot_be_reached(hub):
    hub.outcomes = [LocalEntryNotFoundError("connection error")]
    lines = []
    fetched = download("femnist", root=hub.cache, report=lines.append)
    assert len(hub.downloads()) == 2 and fetched.examples == 12
    assert len(lines) == 1
    assert "attempt 1 of 3 failed: the Hugging Face Hub could not be reached" in lines[0]


def test_femnist_a_truncated_or_corrupt_file_is_reported_and_retried_and_never_read(hub):
    """huggingface_hub checks each file's size and hash as it lands and raises OSError
    ("Consistency check failed") for a truncated or corrupt one, keeping the bytes in an
    ``.incomplete`` blob that no snapshot links; our fetch reports it and tries again."""
    blobs = hub.cache / "datasets--flwrlabs--femnist" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "0123.incomplete").write_bytes(b"PAR1 half a parquet file")
    hub.outcomes = [
        OSError("Consistency check failed: file should be of size 200700000 but has size 1024"),
        OSError("Consistency check failed: file sha256 does not match"),
    ]
    assert not is_present("femnist", root=hub.cache)  # the partial blob is never read
    lines = []
    fetched = download("femnist", root=hub.cache, report=lines.append, retry_wait=0)
    assert len(hub.downloads()) == 3 and fetched.examples == 12
    assert len(lines) == 2 and all("Consistency check failed" in line for line in lines)
    assert "attempt 1 of 3 failed" in lines[0] and "attempt 2 of 3 failed" in lines[1]


def test_femnist_gives_up_at_once_when_retrying_cannot_help(hub, monkeypatch):
    request = httpx.Request("GET", "https://huggingface.co/api/datasets/flwrlabs/femnist")
    missing = RepositoryNotFoundError("404", response=httpx.Response(404, request=request))
    hub.outcomes = [missing]
    with pytest.raises(DownloadError, match="femnist: download failed: no dataset") as error:
        download("femnist", root=hub.cache)
    assert "after" not in str(error.value) and len(hub.downloads()) == 1

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE is set in the environment"):
        download("femnist", root=hub.cache)
    assert len(hub.downloads()) == 1  # never called online


# ---- data-download and the checks before a run --------------------------------------------------


class Started(Exception):
    """Raised in place of starting a SuperLink."""


def launch_with(run_config, *, nodes=2):
    """``python -m fl_async.app`` in this process, on ``nodes`` virtual nodes."""
    return launch.main(["--app", str(ROOT), "--nodes", str(nodes), "--run-config", run_config])


def test_data_download_fetches_before_the_superlink_starts(server, monkeypatch, tmp_path, capsys):
    publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    found = []

    def start(*args, **kwargs):
        found.append((root / "cifar-10-batches-py" / "test_batch").is_file())
        raise Started

    monkeypatch.setattr(superlink, "start_superlink", start)
    config = f"dataset='cifar10' data-root='{root}' data-download=true output-dir='{tmp_path}/o'"
    with pytest.raises(Started):
        launch_with(config)
    assert found == [True]
    assert "fl-async: cifar10 downloaded: 26 examples" in capsys.readouterr().out


def test_a_failed_fetch_exits_1_before_any_superlink(server, monkeypatch, tmp_path, capsys):
    path, _, _ = publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    server.modes[path] = ["corrupt"] * 3
    monkeypatch.setattr(superlink, "start_superlink", pytest.fail)
    config = f"dataset='cifar10' data-root='{tmp_path}' data-download=true"
    assert launch_with(config) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == (
        "error: cifar10: download failed after 3 attempts: checksum mismatch for "
        f"cifar-10-python.tar.gz ({len(server.files[path]):,} bytes received): a corrupt or "
        "interrupted download"
    )


def test_without_data_download_the_checks_never_touch_the_network(monkeypatch, tmp_path, capsys):
    connections = []

    def refuse(self, address, *args):
        connections.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(superlink, "start_superlink", pytest.fail)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for dataset in ("cifar100", "femnist"):
        assert launch_with(f"dataset='{dataset}' data-root='{tmp_path}'") == 2
        line = capsys.readouterr().out.strip()
        assert f"fetch it with: fl-async data download {dataset} --root {tmp_path}" in line
        assert line.endswith("or add data-download=true to --run-config (docs/data.md)")
    assert connections == []


# ---- the launcher and the bench in a subprocess: refused before anything starts -------------


def run_command(argv, tmp_path):
    """``argv`` in a fresh interpreter with the data root and the Hub cache in ``tmp_path``."""
    env = {**os.environ, "FL_ASYNC_DATA": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize(
    ("run_config", "nodes", "message"),
    [
        (
            "dataset='cifar10' data-root='{root}'",
            2,
            "fetch it with: fl-async data download cifar10 --root {root}, "
            "or add data-download=true to --run-config",
        ),
        (
            "",
            5000,
            "cannot split 'mnist' (4000 training examples) into num-nodes = 5000 partitions",
        ),
    ],
    ids=["missing-dataset", "too-many-nodes"],
)
def test_the_launcher_refuses_in_one_line_before_a_superlink(run_config, nodes, message, tmp_path):
    root = tmp_path / "elsewhere"
    output = tmp_path / "run"
    text = f"{run_config.format(root=root)} output-dir='{output}'"
    argv = ["-m", "fl_async.app", "--app", str(ROOT), "--nodes", str(nodes), "--run-config", text]
    done, seconds = run_command(argv, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert message.format(root=root) in lines[0]
    # The launcher creates the output folder and the SuperLink's log only once it starts one.
    assert not output.exists()
    print(f"refused in {seconds:.1f} s")


def test_the_bench_refuses_a_missing_dataset_before_any_run(tmp_path):
    suite = tmp_path / "suite"
    argv = ["-m", "fl_async.cli", "bench", "--dataset", "cifar100", "--out", str(suite)]
    done, seconds = run_command(argv, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fl-async bench: error: --dataset 'cifar100'")
    assert lines[0].endswith(
        "fetch it with: fl-async data download cifar100, or add data-download=true to --run-config"
    )
    assert not suite.exists()
    print(f"refused in {seconds:.1f} s")


def test_under_plain_flwr_run_the_server_fetches_before_its_first_task(
    server, monkeypatch, tmp_path
):
    from fl_async.app import server_app
    from fl_async.app.config import parse_run_config

    publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    config = parse_run_config({"dataset": "cifar10", "data-root": str(root), "data-download": True})
    server_app._fetch(config)
    assert contents(root) == ["cifar-10-batches-py"] and len(server.served) == 1
    server_app._fetch(config)  # present: nothing fetched again
    assert len(server.served) == 1


def test_ensure_leaves_local_paths_and_present_data_alone(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my" / "parquet").mkdir(parents=True)  # reads as owner/name, but is a folder
    assert ensure("my/parquet", root=hub.cache) is None
    assert ensure("mnist") is None and ensure(f"imagefolder:{tmp_path}") is None
    assert hub.downloads() == []
    fetched = ensure("femnist", root=hub.cache)
    assert fetched is not None and fetched.examples == 12
    assert ensure("femnist", root=hub.cache) is None and len(hub.downloads()) == 1
