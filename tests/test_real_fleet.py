"""The pieces of a real fleet on the wall clock: a node made slow by its node config
(``slowdown``), and Flower's own FedAvg run by the ServerApp (``strategy = "flwr-fedavg"``)."""

import json
from types import SimpleNamespace

import pytest
from fakegrid import FakeGrid, task_identity
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fl_async.app import results, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.clients import client_app as handlers
from fl_async.clients.node_data import cached_dataset, new_model
from fl_async.data_spec import DataSpec
from fl_async.protocol import to_record
from fl_async.validation import InvalidArgument

FAST = {"local-steps": 1, "batch-size": 16}


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def context(partition=0, num_partitions=4, run_config=None, **node):
    return Context(
        run_id=1,
        node_id=100 + partition,
        node_config={"partition-id": partition, "num-partitions": num_partitions, **node},
        state=RecordDict(),
        run_config=dict(run_config or {}),
    )


def message(kind, config=None):
    spec = DataSpec.from_config({})
    model = new_model(spec, cached_dataset(spec.dataset, spec.root), seed=3)
    arrays = to_record(list(model.state_dict()), [t.numpy() for t in model.state_dict().values()])
    content = RecordDict({"arrays": arrays, "config": ConfigRecord(dict(config or {}))})
    return Message(content, dst_node_id=101, message_type=kind)


class FakeTime:
    """``time`` for the handlers: ``perf_counter`` reads 10.0 then 12.5 (a 2.5 s task), and
    ``sleep`` only notes how long it was asked for."""

    def __init__(self):
        self.readings = iter([10.0, 12.5])
        self.slept = []
        self.module = SimpleNamespace(perf_counter=lambda: next(self.readings), sleep=self.sleep)

    def sleep(self, seconds):
        self.slept.append(seconds)


# ------------------------------------------------------------------------------------ slowdown
@pytest.mark.parametrize("kind", ["train", "evaluate"])
def test_a_slow_node_sleeps_k_minus_one_times_its_compute_time(monkeypatch, kind):
    fake = FakeTime()
    monkeypatch.setattr(handlers, "time", fake.module)
    reply = client_app(message(kind, {**FAST, "task-seed": 1}), context(slowdown=3))
    assert not reply.has_error()
    assert fake.slept == [pytest.approx(5.0)]  # (3 - 1) x 2.5 s measured


def test_a_node_without_slowdown_or_at_one_never_sleeps(monkeypatch):
    for node in ({}, {"slowdown": 1}, {"slowdown": 1.0}):
        fake = FakeTime()
        monkeypatch.setattr(handlers, "time", fake.module)
        handlers.train(message("train", {**FAST, "task-seed": 1}), context(**node))
        assert fake.slept == [], node


@pytest.mark.parametrize("value", [0.5, 0, -2, "5", True, float("nan")])
def test_a_bad_slowdown_is_named_with_what_is_allowed(value):
    assert handlers.slowdown_of({"slowdown": 2.5}) == 2.5
    with pytest.raises(InvalidArgument, match=r"node config 'slowdown' must be .* >= 1, got"):
        handlers.slowdown_of({"slowdown": value})
    with pytest.raises(InvalidArgument, match="slowdown"):
        handlers.train(message("train", FAST), context(slowdown=value))


# --------------------------------------------------------------------------- Flower's own FedAvg
def run_fedavg(tmp_path, num_nodes=3, **overrides):
    run_config = {
        "strategy": "flwr-fedavg",
        "clock.type": "real",
        "num-nodes": num_nodes,
        "num-rounds": 2,
        "output-dir": str(tmp_path / "fedavg"),
        **FAST,
        **overrides,
    }
    node_ids = [7000 + 13 * k for k in range(num_nodes)]

    def node(k):
        ctx = context(partition=k, num_partitions=num_nodes, run_config=run_config)
        return lambda msg: client_app(msg, ctx)

    grid = FakeGrid({node_ids[k]: node(k) for k in range(num_nodes)}, delay_seed=4)
    output = server_run.run(grid, parse_run_config(run_config))
    return json.loads((output / results.HISTORY).read_text()), output, node_ids


def test_flower_fedavg_runs_its_rounds_and_writes_the_presets_history(tmp_path):
    history, output, node_ids = run_fedavg(tmp_path, **{"federated-evaluation": True})
    assert {p.name for p in output.iterdir()} >= {"history.json", "accuracy.png", "staleness.png"}
    assert history["strategy"]["class"] == "flwr.serverapp.strategy.FedAvg"
    assert history["config"]["strategy"] == "flwr-fedavg"
    assert history["stopped-by"] == "budget" and history["faults"] == {}
    assert history["num-updates"] == 6 and history["server-steps"] == 2
    evaluations = history["evaluations"]
    assert [e["server-step"] for e in evaluations] == [0, 1, 2]
    assert [e["num-updates"] for e in evaluations] == [0, 3, 6]
    walls = [e["wall-time"] for e in evaluations]
    assert walls == sorted(walls) and walls[-1] <= history["wall-time"]
    assert all(0 <= e["accuracy"] <= 1 and e["loss"] > 0 for e in evaluations)
    assert history["final-accuracy"] == evaluations[-1]["accuracy"]
    updates = history["updates"]
    assert [u["index"] for u in updates] == list(range(1, 7))
    assert [u["server-step"] for u in updates] == [1, 1, 1, 2, 2, 2]
    assert {u["staleness"] for u in updates} == {0}
    assert {u["node-id"] for u in updates} == set(node_ids)
    assert {u["partition-id"] for u in updates} == {0, 1, 2}
    assert set(history["federated-evaluations"]) == {"1", "2"}


def test_flower_fedavg_and_a_preset_start_from_the_same_model(tmp_path):
    fedavg, _, _ = run_fedavg(tmp_path, num_nodes=2, **{"num-rounds": 1})
    ssgd_config = {"strategy": "ssgd", "max-updates": 2, "output-dir": str(tmp_path / "ssgd")}
    ssgd, _, _ = run_fedavg(tmp_path, num_nodes=2, **{"num-rounds": 1, **ssgd_config})
    # Step 0 is the same initial model evaluated centrally by the same function.
    first = {k: fedavg["evaluations"][0][k] for k in ("accuracy", "loss")}
    assert first == {k: ssgd["evaluations"][0][k] for k in ("accuracy", "loss")}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"clock.type": "virtual"}, "needs clock.type = 'real'.*got 'virtual'"),
        ({"max-updates": 8}, "'max-updates' must be 0 .*got 8"),
        ({"target-accuracy": 0.5}, "'target-accuracy' must be 0 .*got 0.5"),
        ({"checkpoint-every": 2}, "'checkpoint-every' must be 0"),
    ],
)
def test_flower_fedavg_refuses_what_its_loop_cannot_honour(overrides, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_run_config({"strategy": "flwr-fedavg", "clock.type": "real", **overrides})


def test_flower_fedavg_is_a_strategy_choice_but_not_a_preset():
    config = parse_run_config({"strategy": "FLWR-FedAvg", "clock.type": "real"})
    assert config.strategy == "flwr-fedavg" and config.hyperparameters == {}
    with pytest.raises(InvalidArgument, match="'flwr-fedavg'"):
        parse_run_config({"strategy": "fedavg"})
