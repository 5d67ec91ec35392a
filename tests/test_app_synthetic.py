"""dataset = 'synthetic' in the Flower App: the run config, each node generating its own devices
only, the server splitting by device as the nodes do, and a run in memory (its run through
the Flower App is in test_app_study.py)."""

import json

import numpy as np
import pytest
from fakegrid import FakeGrid, task_identity
from flwr.app import Context, RecordDict

from fl_async import config as schema
from fl_async.app import preflight, results, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.clients.node_data import load_node_data, load_run_data, synthetic_of
from fl_async.config import check_run_config
from fl_async.data import Synthetic
from fl_async.data import synthetic as synthetic_module
from fl_async.data_spec import DataSpec
from fl_async.partitioning import natural, natural_assignment
from fl_async.validation import InvalidArgument

FAST = {"local-steps": 2, "batch-size": 16, "lr": 0.05}


def synthetic_config(**overrides):
    return {"dataset": "synthetic", **overrides}


def test_the_run_config_reads_the_synthetic_keys_and_splits_by_device():
    spec = DataSpec.from_config(synthetic_config(**{"synthetic.alpha": 0.5, "seed": 4}))
    assert spec.scheme == "natural" and spec.params == ()  # whatever partition.scheme says
    assert synthetic_of(spec, 7) == Synthetic(alpha=0.5, beta=1.0, devices=7, seed=4)
    more = DataSpec.from_config(
        synthetic_config(**{"synthetic.devices": 20, "synthetic.iid": True})
    )
    assert synthetic_of(more, 7) == Synthetic(devices=20, iid=True)
    assert synthetic_of(DataSpec.from_config({}), 7) is None
    assert schema.SYNTHETIC == synthetic_module.NAME
    assert schema.SYNTHETIC_MIN_SAMPLES == synthetic_module.MIN_SAMPLES
    with pytest.raises(
        InvalidArgument,
        match=r"run config 'synthetic.max-samples' must be 0 \(no cap\) or at least 50 .*got 20",
    ):
        check_run_config(synthetic_config(**{"synthetic.max-samples": 20}))


def test_a_node_generates_its_own_devices_and_no_other(monkeypatch):
    drawn = []
    model = Synthetic._model
    monkeypatch.setattr(Synthetic, "_model", lambda self, k: drawn.append(k) or model(self, k))
    node = load_node_data({"partition-id": 17, "num-partitions": 10_000}, synthetic_config())
    (device,) = natural_assignment(np.arange(10_000), 10_000, 0)[17]
    assert set(drawn) == {device} and node.partition_id == 17
    expected = Synthetic(devices=10_000).load([device])
    np.testing.assert_array_equal(node.data.train.features, expected.train.features)
    np.testing.assert_array_equal(node.test_index, np.arange(len(expected.test)))
    assert set(node.data.owners.tolist()) == {device}


def test_nodes_hold_whole_devices_as_the_server_splits_them():
    run_config = synthetic_config(**{"synthetic.devices": 10, "seed": 2})
    spec = DataSpec.from_config(run_config)
    server = load_run_data(spec, 3)
    parts = spec.split(server.labels, 3, owners=server.owners)
    np.testing.assert_array_equal(parts[1], natural(server.labels, 3, server.owners, 2)[1])
    held = []
    for k in range(3):
        node = load_node_data({"partition-id": k, "num-partitions": 3}, run_config)
        devices = sorted(set(node.data.owners.tolist()))
        assert devices == sorted(set(server.owners[parts[k]].tolist()))
        assert len(node.train_index) == len(parts[k])
        held += devices
    assert sorted(held) == list(range(10))
    sizes = Synthetic(devices=10, seed=2).sizes()
    assert len(server.labels) == (sizes * 9 // 10).sum()
    assert len(server.test) == (sizes - sizes * 9 // 10).sum()


def test_the_checks_before_a_run_take_synthetic_and_name_too_few_devices(tmp_path):
    def check(**overrides):
        preflight.check_server_side(parse_run_config(synthetic_config(**overrides)), tmp_path)

    check(**{"num-nodes": 5})
    with pytest.raises(
        InvalidArgument,
        match=r"cannot split 'synthetic' .* into num-nodes = 5 partitions with partition.scheme "
        r"= 'natural': num_partitions must be an integer in \[1, 3\], got 5",
    ):
        check(**{"num-nodes": 5, "synthetic.devices": 3})


def test_server_and_nodes_train_logreg_on_synthetic_in_memory(tmp_path):
    nodes = 4
    run_config = synthetic_config(
        **{"num-nodes": nodes, "max-updates": 8, "eval-every": 4, **FAST},
        **{"output-dir": str(tmp_path / "run")},
    )

    def node(k):
        nodes_config = {"partition-id": k, "num-partitions": nodes}
        ctx = Context(
            run_id=1,
            node_id=100 + k,
            node_config=nodes_config,
            state=RecordDict(),
            run_config=run_config,
        )
        return lambda message: client_app(message, ctx)

    with task_identity():
        grid = FakeGrid({100 + k: node(k) for k in range(nodes)}, delay_seed=1)
        output = server_run.run(grid, parse_run_config(run_config))
    history = json.loads((output / results.HISTORY).read_text())
    spec = Synthetic(devices=nodes)
    assert history["dataset"] == {
        "name": "synthetic",
        "train-examples": int((spec.sizes() * 9 // 10).sum()),
        "test-examples": int((spec.sizes() - spec.sizes() * 9 // 10).sum()),
        "num-classes": 10,
        "input-shape": [60],
    }
    assert history["model"] == {"class": "LogReg", "parameters": 610}
    assert history["num-updates"] == 8 and history["faults"] == {}
    sizes = dict(zip(range(nodes), history["partitions"]["sizes"], strict=True))
    assert all(u["num-examples"] == sizes[u["stable-id"]] for u in history["updates"])
    assert history["final-accuracy"] is not None
