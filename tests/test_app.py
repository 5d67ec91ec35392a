"""The Flower App without Flower's engines: run config, ClientApp handlers, the ServerApp's run
on an in-memory grid and its result files (the launcher: tests/test_launch.py)."""

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
from fakegrid import task_identity
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.config import flatten_dict, get_project_config
from memory_app import FAST, context, run_in_memory

from fl_async import config as schema
from fl_async.app import results, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import STUDY_DIR, parse_run_config
from fl_async.clients import client_app as handlers
from fl_async.clients.node_data import cached_dataset, load_node_data, new_model
from fl_async.config import DEFAULTS, TrainSpec
from fl_async.data_spec import DataSpec
from fl_async.hyperparameters import PRESET_DEFAULT
from fl_async.models import MODEL_NAMES
from fl_async.partitioning import SCHEMES, scheme_parameters
from fl_async.protocol import IDENTIFY, to_record
from fl_async.scheduling import SPEED_MODELS
from fl_async.strategies import PRESETS, FedBuff

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def initial_record(run_config=None):
    spec = DataSpec.from_config(run_config or {})
    model = new_model(spec, cached_dataset(spec.dataset, spec.root), seed=3)
    return to_record(list(model.state_dict()), [t.numpy() for t in model.state_dict().values()])


def train_message(config, arrays=None):
    content = RecordDict(
        {"arrays": arrays or initial_record(), "config": ConfigRecord(dict(config))}
    )
    return Message(content, dst_node_id=100, message_type="train")


# ----------------------------------------------------------------------------------- run config
def test_defaults_are_the_pyproject_app_config():
    declared = flatten_dict(get_project_config(ROOT)["tool"]["flwr"]["app"]["config"])
    # study-dir is the launcher's (fl-async bench), taken out before a run's config is read
    assert declared == {**DEFAULTS, STUDY_DIR: ""}
    components = get_project_config(ROOT)["tool"]["flwr"]["app"]["components"]
    assert components == {
        "serverapp": "fl_async.app.server_app:app",
        "clientapp": "fl_async.app.client_app:app",
    }


def test_the_schema_holds_the_names_the_server_packages_define():
    """fl_async.config keeps them as data, so that the ClientApp never imports those packages."""
    assert schema.STRATEGIES == tuple(PRESETS)
    for name, cls in PRESETS.items():
        keywords = {
            p.name.replace("_", "-"): PRESET_DEFAULT if p.default is None else p.default
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        assert schema.PRESET_TABLES[name] == keywords, name
    assert set(schema.SPEEDS) == set(SPEED_MODELS)
    assert schema.MODELS == MODEL_NAMES
    taken = {f"partition.{p.replace('_', '-')}" for s in SCHEMES for p in scheme_parameters(s)}
    # partition.owner-column says where natural's owners come from: the data, not a parameter.
    rest = {"partition.scheme", "partition.owner-column"}
    assert {k for k in DEFAULTS if k.startswith("partition.")} - taken == rest


def test_every_preset_builds_from_the_defaults():
    for name in PRESETS:
        config = parse_run_config({"strategy": name})
        strategy = server_run.build_strategy(config, clock=None)
        assert isinstance(strategy, PRESETS[name])
        assert strategy.min_nodes == config.num_nodes == 20


def test_hyperparameters_reach_the_preset():
    config = parse_run_config({"strategy": "fedbuff", "fedbuff.buffer-size": 5, "fedbuff.lr": 3})
    assert config.hyperparameters["buffer_size"] == 5
    assert config.hyperparameters["lr"] == 3.0  # TOML's 3 for a float
    assert "staleness" not in config.hyperparameters  # "default": the preset's own
    strategy = server_run.build_strategy(config, clock=None)
    assert isinstance(strategy, FedBuff) and strategy.aggregator.buffer_size == 5
    gsgm = parse_run_config({"gsgm.lr": 0.01, "gsgm.max-staleness": 4})
    assert gsgm.hyperparameters["lr"] == 0.01 and gsgm.hyperparameters["max_staleness"] == 4
    assert DEFAULTS["gsgm.staleness"] == PRESET_DEFAULT
    # Trend-Smooth's "default" rate depends on its base: left to the preset (0.2 with sgd)
    trend = parse_run_config({"strategy": "trendsmooth"})
    assert "lr" not in trend.hyperparameters
    assert server_run.build_strategy(trend, clock=None).aggregator.lr == 0.2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"strategy": "fedavg"}, "'strategy' must be one of 'gsgm', 'asgd'"),
        ({"partition.scheme": "zipf"}, "must be one of 'iid', 'dirichlet'"),
        ({"partition.alpha": -1}, "'partition.alpha' must be a finite number > 0, got -1"),
        ({"clock.type": "wall"}, "one of 'virtual', 'real', got 'wall'"),
        ({"clock.speed": "fast"}, "'clock.speed' must be one of 'lognormal'"),
        ({"correlate": "yes"}, "one of 'none', 'few-classes-fast'"),
        ({"clock.type": "real", "correlate": "few-classes-fast"}, "needs clock.type"),
        ({"num-rounds": "ten"}, "'num-rounds' must be an integer >= 1, got 'ten'"),
        ({"num-nodes": 0}, "run config 'num-nodes' must be an integer >= 1, got 0"),
        ({"lr": "fast"}, "'lr' must be a finite number >= 0"),
        ({"federated-evaluation": 1}, "must be true or false"),
        ({"max-updates": -1}, "'max-updates' must be an integer >= 0"),
        ({"target-accuracy": 1.5}, "must be a finite number in [0, 1]"),
        ({"timeout": 0}, "'timeout' must be a finite number > 0"),
        ({"model": "vgg"}, "'model' must be one of 'auto', 'cnn'"),
        ({"seed": -1}, "'seed' must be an integer >= 0"),
        ({"output-dir": 3}, "'output-dir' must be a string"),
        ({"local-steps": 0, "local-epochs": 0}, "local-epochs >= 1"),
        ({"num_rounds": 3}, "unknown run config key 'num_rounds': did you mean 'num-rounds'?"),
        ({"gsgm.speed": 3}, "'gsgm.speed': allowed: gsgm.lr, gsgm.momentum"),
        ({"gsgm.momentum": [1]}, "'gsgm.momentum' must be a number or 'default', got [1]"),
    ],
)
def test_bad_values_say_what_is_allowed(overrides, message):
    with pytest.raises(ValueError) as error:
        parse_run_config(overrides)
    assert message in str(error.value)


def test_values_are_typed_and_names_normalised():
    config = parse_run_config({"lr": 1, "strategy": "GSGM", "partition.scheme": "label-skew"})
    assert config.values["lr"] == 1.0 and isinstance(config.values["lr"], float)
    assert config.strategy == "gsgm" and config.data.scheme == "label_skew"
    assert dict(config.data.params) == {"classes_per_partition": 2}


def test_bad_hyperparameters_and_unknown_datasets_are_named():
    config = parse_run_config({"gsgm.momentum": 1.5})
    with pytest.raises(ValueError, match="strategy 'gsgm': momentum"):
        server_run.build_strategy(config, clock=None)
    with pytest.raises(ValueError, match="unknown dataset 'emnist'; choose one of: mnist"):
        load_node_data({"partition-id": 0, "num-partitions": 2}, {"dataset": "emnist"})


def test_budgets_of_zero_are_off_and_train_config_sends_steps_or_epochs():
    config = parse_run_config({})
    assert config.max_updates is config.max_virtual_time is config.target_accuracy is None
    assert config.train_config() == {
        "local-epochs": 2,
        "lr": 0.1,
        "momentum": 0.0,
        "weight-decay": 0.0,
        "batch-size": 32,
        "proximal-mu": 0.0,
    }
    steps = parse_run_config({"local-steps": 3, "max-updates": 7})
    assert steps.train_config()["local-steps"] == 3 and "local-epochs" not in steps.train_config()
    assert steps.max_updates == 7


# ------------------------------------------------------------------------------------- handlers
def test_query_identifies_the_node_by_its_partition():
    ctx = context(partition=2)
    query = Message(
        RecordDict({"config": ConfigRecord(dict(IDENTIFY))}), dst_node_id=102, message_type="query"
    )
    reply = client_app(query, ctx)
    metrics = dict(reply.content.metric_records["metrics"])
    spec = DataSpec.from_config({})
    parts = spec.split(cached_dataset("mnist", "").train.labels.numpy(), 4)
    assert metrics == {"partition-id": 2, "num-examples": len(parts[2])}
    other = Message(
        RecordDict({"config": ConfigRecord({"x": 1})}), dst_node_id=1, message_type="query"
    )
    with pytest.raises(ValueError, match="unknown query"):
        handlers.query(other, ctx)


def arrays_of(reply):
    return reply.content.array_records["arrays"].to_numpy_ndarrays()


def same(first, second):
    return all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_train_replies_trained_weights_under_the_same_keys_reproducibly():
    received = initial_record()
    config = {**FAST, "task-seed": 11, "server-step": 0, "lr": 0.1}
    first = client_app(train_message(config, received), context(partition=1))
    again = client_app(train_message(config, received), context(partition=1))
    other = client_app(train_message({**config, "task-seed": 12}, received), context(partition=1))
    assert list(first.content.array_records["arrays"].keys()) == list(received.keys())
    assert not same(arrays_of(first), received.to_numpy_ndarrays())
    assert same(arrays_of(first), arrays_of(again))
    assert not same(arrays_of(first), arrays_of(other))
    metrics = dict(first.content.metric_records["metrics"])
    assert metrics["partition-id"] == 1 and metrics["steps"] == 1
    assert metrics["examples-processed"] == 16 and metrics["num-examples"] > 16
    assert all(isinstance(v, (int, float)) for v in metrics.values())


def test_task_config_overrides_the_run_config_and_epochs_win_when_sent():
    run_config = {"local-steps": 5, "batch-size": 8}
    by_run = TrainSpec.from_configs({}, run_config)
    assert (by_run.steps, by_run.epochs, by_run.batch_size) == (5, None, 8)
    by_task = TrainSpec.from_configs({"local-epochs": 1, "batch-size": 4}, run_config)
    assert (by_task.steps, by_task.epochs, by_task.batch_size) == (None, 1, 4)
    reply = client_app(
        train_message({"local-steps": 2, "batch-size": 4}), context(run_config=run_config)
    )
    assert dict(reply.content.metric_records["metrics"])["steps"] == 2


def test_a_fedavg_task_without_a_task_seed_still_trains():
    reply = client_app(train_message({**FAST, "server-round": 3}), context())
    assert not reply.has_error()
    assert reply.content.metric_records["metrics"]["steps"] == 1


def test_evaluate_uses_the_nodes_share_of_the_test_split():
    message = Message(
        RecordDict({"arrays": initial_record(), "config": ConfigRecord({})}),
        dst_node_id=100,
        message_type="evaluate",
    )
    metrics = dict(client_app(message, context(partition=3)).content.metric_records["metrics"])
    assert metrics["num-examples"] == 250  # 1,000 test digits, 4 nodes
    assert 0 <= metrics["accuracy"] <= 1 and metrics["loss"] > 0


def test_a_device_reads_its_own_data_dir(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for k in range(10):
            pixels = rng.integers(0, 256, size=(12, 12), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(tmp_path / label / f"{k}.png")
    node_config = {"data-dir": f"imagefolder:{tmp_path}", "partition-id": 7}
    node = load_node_data(node_config, {})
    assert (len(node.train_index), len(node.test_index), node.partition_id) == (16, 4, 7)
    spec = DataSpec.from_config({})
    model = new_model(spec, node.data)
    record = to_record(list(model.state_dict()), [t.numpy() for t in model.state_dict().values()])
    ctx = context(node_config=node_config)
    reply = client_app(train_message({**FAST, "task-seed": 1}, record), ctx)
    assert dict(reply.content.metric_records["metrics"])["num-examples"] == 16


def test_a_node_without_partition_or_data_dir_is_told_what_to_set():
    with pytest.raises(ValueError, match="needs partition-id and num-partitions"):
        load_node_data({}, {})
    with pytest.raises(ValueError, match="partition-id must lie in"):
        load_node_data({"partition-id": 4, "num-partitions": 4}, {})


# ------------------------------------------------------------------------------ the ServerApp
def comparable(history):
    drop = {"wall-time", "node-id"}
    return {
        "evaluations": [
            {k: v for k, v in e.items() if k not in drop} for e in history["evaluations"]
        ],
        "updates": [{k: v for k, v in u.items() if k not in drop} for u in history["updates"]],
        "final-accuracy": history["final-accuracy"],
    }


def test_server_run_writes_history_and_plots_and_is_reproducible(tmp_path):
    history, output = run_in_memory(tmp_path, "first")
    assert sorted(p.name for p in output.iterdir()) == [
        "accuracy.png",
        "history.json",
        "run-status.json",
        "staleness.png",
    ]
    status = json.loads((output / "run-status.json").read_text())
    assert status == {
        "state": "finished",
        "stopped-by": "budget",
        "stop-detail": history["stop-detail"],
        **{key: history[key] for key in ("num-updates", "server-steps", "virtual-time")},
        "wall-time": history["wall-time"],
        "final-accuracy": history["final-accuracy"],
        "history": str(output / "history.json"),
        "plots": [str(output / "accuracy.png"), str(output / "staleness.png")],
    }
    assert status["num-updates"] == 8
    assert history["num-updates"] == 8 and history["stopped-by"] == "budget"
    assert isinstance(history["stop-detail"], str)
    assert [e["server-step"] for e in history["evaluations"]] == [0, 4, 8]
    assert history["final-accuracy"] == history["evaluations"][-1]["accuracy"]
    assert history["config"]["strategy"] == "gsgm" and history["config"]["num-nodes"] == 4
    assert {u["stable-id"] for u in history["updates"]} == {0, 1, 2, 3}
    assert {"staleness", "virtual-time", "accepted", "train-loss"} <= set(history["updates"][0])
    assert history["faults"] == {} and history["rejected"] == {}
    assert len(history["partitions"]["sizes"]) == 4
    lr = re.search(r"lr=([0-9.e-]+)", history["strategy"]["aggregator"]).group(1)
    assert float(lr) == pytest.approx(0.025)  # "auto": (1 - momentum) / 4 nodes
    # Another grid delivers the replies in another real-time order: the same history.
    again, _ = run_in_memory(tmp_path, "second-run")
    assert comparable(again) == comparable(history)


def test_the_grid_of_virtual_times_reaches_the_history(tmp_path):
    # 12 updates in 40 virtual seconds, none of the grid's intervals empty
    budget = {"max-updates": 0, "num-rounds": 50, "max-virtual-time": 40.0, "eval-grid": 4}
    history, _ = run_in_memory(tmp_path, "grid", strategy="asgd", **budget)
    grid = history["grid-evaluations"]
    assert [g["index"] for g in grid] == [1, 2, 3, 4]
    assert [g["virtual-time"] for g in grid] == [10.0, 20.0, 30.0, 40.0]
    assert len({g["server-step"] for g in grid}) == 4
    assert all(0 <= g["accuracy"] <= 1 for g in grid)
    applied = [u["virtual-time"] for u in history["updates"]]
    assert all(g["server-step"] == sum(t <= g["virtual-time"] for t in applied) for g in grid)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_runs_from_the_run_config(tmp_path, name):
    history, _ = run_in_memory(tmp_path, name, num_nodes=2, strategy=name, **{"max-updates": 2})
    assert history["num-updates"] == 2 and history["faults"] == {}
    assert history["strategy"]["class"].lower() == name


def test_real_clock_federated_evaluation_and_speed_correlation(tmp_path):
    history, _ = run_in_memory(
        tmp_path, "real", strategy="asgd", **{"clock.type": "real", "federated-evaluation": True}
    )
    assert history["strategy"]["clock"] is None and history["num-updates"] == 8
    federated = history["federated-evaluations"]["8"]  # every node's share of the test split
    assert set(federated) == {"accuracy", "loss"} and 0 <= federated["accuracy"] <= 1
    ranked, _ = run_in_memory(tmp_path, "ranked", correlate="few-classes-fast")
    counts = np.array(ranked["partitions"]["classes-held"])
    assert ranked["strategy"]["clock"]["ranking"] == sorted(range(4), key=lambda k: (counts[k], k))


def test_checkpoints_let_a_rerun_resume(tmp_path):
    part, output = run_in_memory(tmp_path, "resumed", **{"max-updates": 4, "checkpoint-every": 2})
    assert part["num-updates"] == 4 and (output / "checkpoint").is_dir()
    resumed, _ = run_in_memory(tmp_path, "resumed", **{"checkpoint-every": 2})
    full, _ = run_in_memory(tmp_path, "uninterrupted")
    assert resumed["num-updates"] == 8 and resumed["stopped-by"] == "budget"
    # Resumed, not restarted: the first part's records come back as they were (wall times too)
    assert resumed["updates"][:4] == part["updates"]
    assert comparable(resumed) == comparable(full)


def test_checkpoints_without_an_output_dir_say_which_one_resumes(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)  # the default output-dir is outputs/<strategy>-seed<seed>-<time>
    overrides = {"output-dir": "", "max-updates": 2, "checkpoint-every": 2}
    _, output = run_in_memory(tmp_path, "default", **overrides)
    assert output.parent == tmp_path / "outputs" and (output / "checkpoint").is_dir()
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"--run-config \"output-dir='{output}'\"" in m for m in said), said


def test_results_are_strict_json_and_plots_label_the_clock(tmp_path):
    history = {
        "config": {"clock.type": "real", "strategy": "asgd", "dataset": "mnist"},
        "num-nodes": 2,
        "evaluations": [{"accuracy": 0.5, "wall-time": 1.0, "loss": float("nan")}],
        "updates": [{"staleness": 0}, {"staleness": 2}],
    }
    paths = results.write_results(tmp_path, history)
    assert json.loads(paths[0].read_text())["evaluations"][0]["loss"] is None
    assert all(p.stat().st_size > 1000 for p in paths[1:])
