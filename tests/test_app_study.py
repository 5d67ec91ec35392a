"""Three datasets through the Flower App in one simulation (the study engine of ``fl-async
bench``): FEMNIST split by writer, FedProx's Synthetic and CIFAR-100 with ResNet-8, each on tiny
files in its real format; and that simulation, a default one, listens on loopback only and runs
no Ray Client server (docs/running.md, The Ray head of a run).

One launch for what were four (one per dataset and one for the sockets): a launch costs about
20 CPU-seconds of start-up on two cores, the same for every run it makes. Each run is still
checked on its own history; the datasets' other tests are in ``test_app_natural.py``,
``test_app_synthetic.py`` and ``test_app_cifar100.py``.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import sockets
import torchvision.datasets
from cifar_files import fixture_checksums, make_cifar100
from femnist_files import write_femnist
from flower_processes import TAG_VAR, tagged, wait_processes_gone
from test_app_cifar100 import SITECUSTOMIZE

from fl_async.app.results import HISTORY, read_history
from fl_async.bench.engines import Study
from fl_async.data import Synthetic, load_labels, load_owners
from fl_async.partitioning import natural

ROOT = Path(__file__).resolve().parents[1]
NODES = 4
ACTOR = "ray::ClientAppActor"
"""What Ray names the process of a Flower actor (its command line)."""


def _runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict]:
    """Each run's settings, its files written; CIFAR-100's md5 table pointed at its tiny files
    in every process of the simulation (``SITECUSTOMIZE`` on ``PYTHONPATH``)."""
    hub = tmp_path / "hub"
    write_femnist(hub)
    cifar = tmp_path / "cifar"
    folder, _, _ = make_cifar100(cifar, np.random.default_rng(5), n_train=40, n_test=20)
    site = tmp_path / "site"
    site.mkdir()
    table = fixture_checksums(torchvision.datasets.CIFAR100, folder)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(table=table))
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    budget = {"eval-every": 2, "local-steps": 2}
    return {
        "femnist": {
            "dataset": "femnist",
            "data-root": str(hub),
            "partition.scheme": "natural",
            **budget,
            "max-updates": 6,
        },
        "synthetic": {
            "dataset": "synthetic",
            "synthetic.max-samples": 200,
            **budget,
            "max-updates": 8,
        },
        "cifar100": {
            "dataset": "cifar100",
            "model": "resnet8",
            "data-root": str(cifar),
            "partition.scheme": "iid",
            "max-updates": 4,
            "eval-every": 2,
            "local-steps": 1,
            "batch-size": 8,
        },
    }


def _make(study: Study, name: str, config: dict, out: Path, codes: dict[str, int]) -> None:
    directory = out / name
    directory.mkdir(parents=True)
    settings = {**config, "num-nodes": NODES, "output-dir": str(directory)}
    codes[name] = study.run(settings, directory, directory / "launch.log")


def _listening(tag: str) -> tuple[list, list[str]]:
    """The sockets that the simulation's processes (tagged ``tag``) listen on, and their
    command lines, read while it still runs (its actors wait for the next run)."""
    pids = [pid for pid, _ in tagged(tag)]
    assert any(sockets.program(p).startswith(ACTOR) for p in pids), "no Flower actor found"
    return sockets.listening(pids), [sockets.program(p) for p in pids]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
@pytest.mark.slow(seconds=50)
def test_three_datasets_in_one_simulation_that_listens_on_loopback_only(tmp_path, monkeypatch):
    runs = _runs(tmp_path, monkeypatch)
    tag = f"app-study-{os.getpid()}"
    monkeypatch.setenv(TAG_VAR, tag)  # every process of the simulation, to find them by
    out = tmp_path / "out"
    study = Study(out, app_dir=ROOT, actors=1, runs_at_a_time=len(runs))
    codes: dict[str, int] = {}
    threads = [
        threading.Thread(target=_make, args=(study, name, config, out, codes))
        for name, config in runs.items()
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        found, programs = _listening(tag)
    finally:
        study.close()
    assert wait_processes_gone(tagged(tag), timeout=30) == set()
    assert codes == dict.fromkeys(runs, 0), [
        (out / name / "launch.log").read_text(errors="replace")[-2000:] for name in runs
    ]
    histories = {name: read_history(out / name / HISTORY) for name in runs}
    _check_femnist(histories["femnist"], Path(runs["femnist"]["data-root"]))
    _check_synthetic(histories["synthetic"])
    _check_cifar100(histories["cifar100"])
    # The reading finds what must listen: the SuperLink (HTTP), Ray's GCS and raylet.
    listeners = {s.program.split()[0].rsplit("/", 1)[-1] for s in found}
    assert {"gcs_server", "raylet"} <= listeners, found
    assert any("flower-superlink" in s.program for s in found), found
    assert [s for s in found if not s.loopback] == [], found
    assert not [p for p in programs if "ray.util.client.server" in p], programs


def _check_femnist(history: dict, hub: Path) -> None:
    """Split by writer: each node's partition is the natural split of the tiny FEMNIST."""
    assert history["num-updates"] == 6 and history["faults"] == {}
    assert history["config"]["partition.scheme"] == "natural"
    assert history["final-accuracy"] is not None
    assert {u["stable-id"] for u in history["updates"]} <= set(range(NODES))
    labels, owners = load_labels("femnist", root=hub), load_owners("femnist", root=hub)
    parts = natural(labels, NODES, owners, 0)
    assert history["partitions"]["sizes"] == [len(part) for part in parts]


def _check_synthetic(history: dict) -> None:
    """Synthetic(1, 1) by device, with the logistic-regression model."""
    assert history["num-updates"] == 8 and history["faults"] == {}
    assert history["model"]["class"] == "LogReg"
    assert history["final-accuracy"] is not None
    assert {u["stable-id"] for u in history["updates"]} <= set(range(NODES))
    spec = Synthetic(devices=NODES, max_samples=200)
    parts = natural(spec.labels(), NODES, spec.owners(), 0)
    assert history["partitions"]["sizes"] == [len(part) for part in parts]


def _check_cifar100(history: dict) -> None:
    """CIFAR-100's pickled batches read (md5 checked) and ResNet-8 trained on them."""
    assert history["dataset"]["name"] == "cifar100"
    assert history["dataset"]["num-classes"] == 100
    assert history["dataset"]["image-shape"] == [3, 32, 32]
    assert history["dataset"]["train-examples"] == 40 and history["dataset"]["test-examples"] == 20
    assert history["model"]["class"] == "ResNet8"
    assert history["num-updates"] == 4 and history["final-accuracy"] is not None
