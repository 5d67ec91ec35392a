"""Fashion-MNIST and CIFAR downloads through torchvision's real download and md5 code, from a
loopback server: the datasets, retries and failures, ``fl-async data``, and before a run."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from cifar_files import CIFAR_FOLDERS
from data_download import (
    IDX_NAMES,
    Server,
    _no_waiting,  # noqa: F401  (autouse: no wait between download attempts)
    contents,
    launch_with,
    publish_cifar,
    publish_fashion_mnist,
)

from fl_async import cli
from fl_async.app import launch, superlink
from fl_async.data import load_dataset
from fl_async.data.download import DownloadError, download


@pytest.fixture
def server():
    httpd = Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


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


# ---- data-download and the checks before a run --------------------------------------------------


class Started(Exception):
    """Raised in place of starting a SuperLink."""


def test_data_download_fetches_before_the_superlink_starts(server, monkeypatch, tmp_path, capsys):
    publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    found = []

    def start(*args, **kwargs):
        found.append((root / "cifar-10-batches-py" / "test_batch").is_file())
        raise Started

    monkeypatch.setattr(superlink, "start_superlink", start)
    monkeypatch.setattr(launch, "_start_ray_head", lambda *args: None)
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


def test_under_plain_flwr_run_the_server_fetches_before_its_first_task(
    server, monkeypatch, tmp_path
):
    from fl_async.app import server_run
    from fl_async.app.config import parse_run_config

    publish_cifar("cifar10", server, monkeypatch, tmp_path / "upstream")
    root = tmp_path / "data"
    config = parse_run_config({"dataset": "cifar10", "data-root": str(root), "data-download": True})
    server_run._fetch(config)
    assert contents(root) == ["cifar-10-batches-py"] and len(server.served) == 1
    server_run._fetch(config)  # present: nothing fetched again
    assert len(server.served) == 1
