"""CIFAR-100 with the ResNet model: the bench's suite accepts it, and a ResNet's state crosses
messages. Its run through the Flower App, on tiny files in the real format (pickled batches under
``cifar-100-python``), is in ``test_app_study.py``.

torchvision checks every CIFAR file against its md5 table whenever it opens one, in every
process of a run (the launcher, the ServerApp, each Ray worker). The end-to-end run therefore
gets ``SITECUSTOMIZE`` as a ``sitecustomize`` module on ``PYTHONPATH``, which points that table
at the tiny files as soon as ``torchvision.datasets.cifar`` is imported: the check still runs,
on these files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torchvision.datasets
from cifar_files import make_cifar100, trust_fixture_checksums

from fl_async.app import preflight
from fl_async.app.config import parse_run_config
from fl_async.bench import cli as bench_cli
from fl_async.bench import commands as bench_commands
from fl_async.bench import options as bench_options
from fl_async.bench.runner import planned_runs
from fl_async.models import build_model, get_weights, set_weights
from fl_async.protocol import to_record

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(5)

SITECUSTOMIZE = '''"""Written by tests/test_app_cifar100.py for one run: torchvision's
CIFAR-100 md5 table pointed at the test's tiny files in every process that imports
torchvision.datasets.cifar."""

import importlib.machinery
import sys

TABLE = {table!r}


class _PointChecksums:
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision.datasets.cifar":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            for attribute, value in TABLE.items():
                setattr(module.CIFAR100, attribute, value)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PointChecksums())
'''


def test_the_bench_plans_cifar100_suites_the_app_accepts(tmp_path, monkeypatch):
    data_root = tmp_path / "data"
    folder, _, _ = make_cifar100(data_root, RNG, n_train=600, n_test=100)
    trust_fixture_checksums(monkeypatch, torchvision.datasets.CIFAR100, folder)
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--dataset", "cifar100", "--scenario", "b", "--data-root", str(data_root)]
        + ["--run-config", "model='resnet8'", "--out", str(tmp_path / "suite")]
    )
    spec = bench_options.build_spec(args)
    bench_commands.check_dataset(spec)  # the labels are read, as before the suite's first run
    assert len(planned_runs(spec, tmp_path / "suite")) == 2 * 3  # two splits, three strategies
    for split in spec.scenario.splits:
        for strategy in spec.ordered_strategies():
            budget = None if strategy == "ssgd" else 1000.0
            config = parse_run_config(spec.config(strategy, split, 0, budget))
            assert config.data.dataset == "cifar100" and config.data.model == "resnet8"
            assert config.num_nodes == 30 and config.data.root == str(data_root.resolve())
            # What the launcher checks before each run: the 30-way split, clock and strategy.
            preflight.check_server_side(config, tmp_path / "run")


def test_resnet8_state_crosses_messages_with_its_shapes():
    """BatchNorm's num_batches_tracked is a 0-d tensor: a message carries it as one, so a
    ResNet's weights load back on the other side."""
    model = build_model("resnet8", num_classes=100, in_channels=3, image_size=32, seed=0)
    names, arrays = list(model.state_dict()), get_weights(model)
    assert any(array.ndim == 0 for array in arrays)
    received = to_record(names, arrays).to_numpy_ndarrays()
    assert [a.shape for a in received] == [a.shape for a in arrays]
    other = build_model("resnet8", num_classes=100, in_channels=3, image_size=32, seed=1)
    set_weights(other, received)
    for mine, theirs in zip(get_weights(other), arrays, strict=True):
        np.testing.assert_array_equal(mine, theirs)
