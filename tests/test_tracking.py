"""Experiment tracking: what TensorBoard and MLflow hold after a run equals its history.json.

The runs are the ServerApp's ``run`` over in-process nodes calling the real ClientApp handlers
(a few seconds); TensorBoard's event files are read back with TensorBoard's own reader, MLflow's
store with ``MlflowClient``.
"""

import argparse
import json

import numpy as np
import pytest
from fakegrid import FakeGrid, task_identity
from flwr.app import Context, RecordDict
from memory_app import FAST, without_plots

from fl_async.app import server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.app.launch import tracking_overrides
from fl_async.bench.cli import add_arguments as add_bench_arguments
from fl_async.bench.options import build_spec
from fl_async.bench.runner import RUN_FILE, check_existing
from fl_async.extras import require
from fl_async.tracking import BACKENDS, Tracker, track_history
from fl_async.tracking.base import evaluation_points, summary_of, update_points
from fl_async.validation import InvalidArgument

RUN = {**FAST, "num-nodes": 3, "max-updates": 6, "eval-every": 2}
"""The logistic regression (``FAST``): what a tracker holds does not depend on the model, and
the CNN's evaluations took most of a run's time."""


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


def run_tracked(tmp_path, **tracking):
    """One GSGM run of 6 updates on 3 in-process nodes; its history and output folder."""
    run_config = {**RUN, "output-dir": str(tmp_path / "run"), **tracking}

    def node(k):
        ctx = Context(
            run_id=1,
            node_id=100 + k,
            state=RecordDict(),
            run_config=run_config,
            node_config={"partition-id": k, "num-partitions": 3},
        )
        return lambda message: client_app(message, ctx)

    grid = FakeGrid({7000 + k: node(k) for k in range(3)}, delay_seed=1)
    with without_plots():  # the trackers log numbers and settings, no file of the run's
        output = server_run.run(grid, parse_run_config(run_config))
    return json.loads((output / "history.json").read_text()), output


def test_tensorboard_event_files_hold_the_numbers_of_history_json(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history, output = run_tracked(tmp_path, **{"tracking.backend": "tensorboard"})
    events = EventAccumulator(str(output / "tensorboard"))
    events.Reload()

    def series(tag):
        return [(e.step, e.value) for e in events.Scalars(tag)]

    def f32(values):  # TensorBoard keeps scalars as 32-bit floats
        return [(step, float(np.float32(value))) for step, value in values]

    evaluations = history["evaluations"]
    assert [s for s, _ in series("eval/accuracy")] == [0, 2, 4, 6]
    assert series("eval/accuracy") == f32((e["server-step"], e["accuracy"]) for e in evaluations)
    assert series("eval/loss") == f32((e["server-step"], e["loss"]) for e in evaluations)
    assert series("eval-by-virtual-time/accuracy") == f32(
        (round(1000 * e["virtual-time"]), e["accuracy"]) for e in evaluations
    )
    updates = history["updates"]
    assert series("update/staleness") == f32((u["index"], u["staleness"]) for u in updates)
    assert series("update/virtual-time") == f32((u["index"], u["virtual-time"]) for u in updates)
    assert series("update/update-norm") == f32((u["index"], u["update-norm"]) for u in updates)
    assert series("summary/final-accuracy") == f32([(0, history["final-accuracy"])])
    assert series("summary/num-updates") == [(0, 6.0)]
    tensors = events.Tags()["tensors"]
    assert "summary/stopped-by/text_summary" in tensors
    stopped = events.Tensors("summary/stopped-by/text_summary")[0].tensor_proto.string_val[0]
    assert stopped.decode() == history["stopped-by"] == "budget"


def test_an_mlflow_run_holds_the_numbers_and_settings_of_history_json(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    history, output = run_tracked(tmp_path, **{"tracking.backend": "mlflow"})
    store = f"sqlite:///{output / 'mlflow.db'}"  # the default: a SQLite store in output-dir
    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("fl-async").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"

    def series(key):
        return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]

    evaluations = history["evaluations"]
    assert series("eval/accuracy") == [(e["server-step"], e["accuracy"]) for e in evaluations]
    assert series("eval/virtual-time") == [
        (e["server-step"], e["virtual-time"]) for e in evaluations
    ]
    assert series("update/staleness") == [(u["index"], u["staleness"]) for u in history["updates"]]
    assert series("update/rejected") == [(u["index"], 0.0) for u in history["updates"]]
    assert series("summary/final-loss") == [(0, history["final-loss"])]
    params, tags = run.data.params, run.data.tags
    assert params["strategy"] == "gsgm" and params["max-updates"] == "6"
    assert params["tracking.backend"] == "mlflow"
    assert params["strategy.aggregator"] == history["strategy"]["aggregator"]
    assert tags["stopped-by"] == "budget"


class Recording:
    """A tracker of one's own: anything with the ``Tracker`` methods."""

    def __init__(self):
        self.calls = []

    def log_params(self, params):
        self.calls.append(("params", dict(params)))

    def log_metrics(self, metrics, step):
        self.calls.append(("metrics", step, dict(metrics)))

    def log_summary(self, metrics, texts):
        self.calls.append(("summary", dict(metrics), dict(texts)))

    def close(self):
        self.calls.append(("close",))


HISTORY = {
    "config": {"strategy": "asgd", "clock.type": "virtual", "lr": 0.1},
    "num-nodes": 2,
    "strategy": {"class": "ASGD", "aggregator": "ASGD(lr=0.05)", "clock": {"sigma": 1.0}},
    "evaluations": [
        {"server-step": 0, "accuracy": 0.1, "loss": 2.3, "virtual-time": 0.0},
        {"server-step": 2, "accuracy": 0.4, "loss": None, "virtual-time": 1.2345},
    ],
    "updates": [
        {
            "index": 1,
            "staleness": 0,
            "server-step": 1,
            "virtual-time": 0.7,
            "accepted": True,
            "update-norm": 2.5,
        },
        {"index": 2, "staleness": 1, "server-step": 1, "virtual-time": 0.9, "accepted": False},
        {
            "index": 3,
            "staleness": 1,
            "server-step": 2,
            "virtual-time": 1.2,
            "accepted": True,
            "update-norm": 3.0,
        },
    ],
    "final-accuracy": 0.4,
    "final-loss": None,
    "num-updates": 2,
    "faults": {"error-reply": 1},
    "rejected": {"guard": 1},
    "stopped-by": "budget",
    "stop-detail": "",
}


def test_a_tracker_of_ones_own_gets_every_point_and_a_null_is_left_out():
    tracker = Recording()
    assert isinstance(tracker, Tracker)
    track_history(tracker, HISTORY)
    params = tracker.calls[0][1]
    assert params["lr"] == 0.1 and params["strategy.clock"] == '{"sigma": 1.0}'
    metrics = [c[1:] for c in tracker.calls if c[0] == "metrics"]
    assert metrics[:4] == [
        (0, {"eval/accuracy": 0.1, "eval/loss": 2.3, "eval/virtual-time": 0.0}),
        (0, {"eval-by-virtual-time/accuracy": 0.1, "eval-by-virtual-time/loss": 2.3}),
        (2, {"eval/accuracy": 0.4, "eval/virtual-time": 1.2345}),  # loss null: left out
        (1234, {"eval-by-virtual-time/accuracy": 0.4}),
    ]
    assert [m[1]["update/rejected"] for m in metrics[4:]] == [0.0, 1.0, 1.0]
    # an update the guard did not measure (here a malformed one) has no norm point
    assert [m[1].get("update/update-norm") for m in metrics[4:]] == [2.5, None, 3.0]
    summary = tracker.calls[-2]
    assert summary[1]["summary/faults/error-reply"] == 1.0
    assert summary[1]["summary/rejected/guard"] == 1.0
    assert "summary/final-loss" not in summary[1]
    assert summary[2] == {"stopped-by": "budget", "stop-detail": ""}
    assert tracker.calls[-1] == ("close",)


def test_a_real_clock_run_has_no_virtual_time_axis():
    real = {**HISTORY, "config": {**HISTORY["config"], "clock.type": "real"}}
    steps = [step for step, _ in evaluation_points(real)]
    assert steps == [0, 2]
    assert len(list(update_points(real))) == 3 and summary_of(real)[0]["summary/num-updates"] == 2


def test_bad_tracking_settings_name_the_value_and_what_is_allowed(tmp_path):
    allowed = "'tracking.backend' must be one of '', 'tensorboard', 'mlflow', got 'wandb'"
    with pytest.raises(ValueError, match=allowed):
        parse_run_config({"tracking.backend": "wandb"})
    with pytest.raises(InvalidArgument, match="--track-uri 'runs' needs --track"):
        tracking_overrides(None, "runs")
    with pytest.raises(ModuleNotFoundError, match=r"no_such_module .*fl-async\[tracking\]"):
        require("tracking", "no_such_module", install="pip install 'fl-async[tracking]'")
    assert BACKENDS == ("tensorboard", "mlflow")


def test_the_launcher_options_become_run_config_keys_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracking_overrides("tensorboard", "tb") == {
        "tracking.backend": "tensorboard",
        "tracking.uri": str(tmp_path / "tb"),
    }
    relative = tracking_overrides("mlflow", "sqlite:///db/mlflow.db")["tracking.uri"]
    assert relative == f"sqlite:///{tmp_path}/db/mlflow.db"
    for uri in ("sqlite:////abs/mlflow.db", "http://127.0.0.1:5000"):
        assert tracking_overrides("mlflow", uri)["tracking.uri"] == uri
    assert tracking_overrides(None, None) == {}


def test_a_bench_suite_gives_each_run_its_own_tracking_run(tmp_path):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    spec = build_spec(parser.parse_args(["--out", str(tmp_path), "--track", "mlflow"]))
    first = spec.config("ssgd", "dirichlet", 0, None)
    other = spec.config("gsgm", "label-skew", 1, 100.0)
    assert first["tracking.uri"] == other["tracking.uri"] == f"sqlite:///{tmp_path}/mlflow.db"
    assert first["tracking.run-name"] == "dirichlet/ssgd-seed0"
    assert other["tracking.run-name"] == "label-skew/gsgm-seed1"
    # resuming a suite with tracking switched on is not "other settings"
    directory = tmp_path / "dirichlet" / "ssgd-seed0"
    directory.mkdir(parents=True)
    untracked = {k: v for k, v in first.items() if not k.startswith("tracking.")}
    (directory / RUN_FILE).write_text(json.dumps({"run-config": untracked}))
    check_existing(directory, first)
