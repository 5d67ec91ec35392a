"""FedCompass: its aggregator driven by a plan against the plain reference, the preset in the
event loop (numpy nodes on the in-memory grid), resuming, the app's main run and a sweep
(docs/algorithms.md, FedCompass)."""

from pathlib import Path

import numpy as np
import pytest
from bench_fakes import FakeLaunch, parse
from fakegrid import (
    Crash,
    QuadraticNode,
    crash_at,
    quadratic_fleet,
    task_identity,
)
from flwr.app import ConfigRecord
from memory_app import run_in_memory
from strategy_loop import history, run

from fl_async.aggregators import ClientUpdate
from fl_async.aggregators import FedCompass as FedCompassRule
from fl_async.aggregators.fedcompass import SUPERSEDED
from fl_async.aggregators.reference import fedcompass as reference
from fl_async.bench.options import build_spec
from fl_async.bench.schedule import run_suite
from fl_async.bench.sweep import load_grid, point_name
from fl_async.scheduling import VirtualClock
from fl_async.strategies import FedCompass
from fl_async.strategies.checkpoint import Checkpointer

SHAPES = ((3, 4), (5,))
NODES = 5


class Plan:
    """A plan that names the steps a test gives it."""

    def __init__(self) -> None:
        self.due: list[list[int]] = []

    def steps_due(self) -> int:
        return len(self.due)

    def take_step(self) -> list[int] | None:
        return self.due.pop(0) if self.due else None


def _update(rng, node: int, tau: int) -> ClientUpdate:
    delta = [rng.normal(scale=0.3, size=s).astype(np.float32) for s in SHAPES]
    return ClientUpdate(node_id=node, delta=delta, staleness=tau, num_examples=1)


@pytest.mark.parametrize("seed", range(6))
def test_plan_driven_steps_equal_the_reference_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    plan = Plan()
    agg = FedCompassRule(alpha=0.7, num_nodes=NODES, staleness="polynomial", plan=plan)
    agg.init(params)
    state = reference.init(params)
    for _ in range(30):
        node = int(rng.integers(NODES))
        u = _update(rng, node, tau=min(int(rng.integers(0, 3)), agg.version))
        assert agg.apply(u).status == "held"
        state, _ = reference.update(state, u)
        if rng.random() < 0.4:
            nodes = sorted({int(k) for k in rng.integers(NODES, size=3)})
            plan.due.append(nodes)
            stepped = agg.flush()
            before = state["v"]
            state = reference.flush(
                state, alpha=0.7, num_nodes=NODES, staleness=agg.staleness, nodes=nodes
            )
            assert stepped == (state["v"] > before) and agg.version == state["v"]
            assert agg.held == len(state["held"])
        for got, want in zip(agg.params, state["w"], strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_newer_update_replaces_its_nodes_held_one_and_an_empty_step_is_dropped():
    plan = Plan()
    agg = FedCompassRule(num_nodes=2, plan=plan)
    agg.init([np.zeros(3, np.float32)])
    for value in (1.0, 2.0):
        delta = [np.full(3, value, np.float32)]
        agg.apply(ClientUpdate(node_id=0, delta=delta, staleness=0, num_examples=1))
    assert agg.num_rejected == {SUPERSEDED: 1} and agg.held == 1
    plan.due = [[1], [0]]  # node 1 holds nothing: its step is dropped, node 0's is taken
    assert agg.held == 3 and agg.flush() and agg.version == 1 and agg.held == 0
    np.testing.assert_allclose(agg.params[0], -0.9 * 2.0 / 2)  # alpha s(0) / N = 0.45
    plan.due = [[1]]
    assert not agg.flush() and agg.held == 0 and agg.version == 1


class Recording:
    """A node handler that also records each train task's ``local-steps``."""

    def __init__(self, node, log):
        self.node, self.log = node, log

    def __call__(self, message):
        if message.metadata.message_type == "train":
            config = message.content.config_records["config"]
            self.log.append((self.node.partition_id, int(config["local-steps"])))
        return self.node(message)


def _start(strategy, nodes, **kwargs):
    with task_identity():
        train = ConfigRecord({"local-steps": 2, "lr": 0.05})
        return run(strategy, nodes, max_delay=0, num_rounds=6, train_config=train, **kwargs)[0]


def test_the_preset_sends_each_task_its_steps_and_steps_by_group():
    log: list[tuple[int, int]] = []
    fleet = quadratic_fleet(NODES, seed=3)
    nodes = {k: Recording(n, log) for k, n in fleet.items()}
    strategy = FedCompass(
        clock=VirtualClock(seed=1), min_nodes=NODES, min_local_steps=4, max_local_steps=12
    )
    result = _start(strategy, nodes)
    assert strategy.aggregator.num_nodes == NODES
    assert len(log) >= NODES * 6 and all(4 <= q <= 12 for _, q in log)
    assert {q for _, q in log[:NODES]} == {12}  # the first tasks: Q_max
    assert len({q for _, q in log}) > 1  # later ones follow the measured speeds
    assert result.num_updates == NODES * 6 and 0 < result.server_steps < result.num_updates
    # a task lasts its own local-steps x batch-size examples: each speed is 32 t_sample exactly
    for k, speed in strategy.policy.speeds.items():
        assert speed == pytest.approx(32 * strategy.clock.profile(k).t_sample, rel=1e-12)
    # the guard may clip an update of many steps; nothing else goes wrong
    assert set(result.faults) <= {"clipped"} and result.rejected == {}
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())


def test_a_crash_between_checkpoints_resumes_to_the_uninterrupted_run(tmp_path):
    def make(directory=None):
        return FedCompass(
            clock=VirtualClock(seed=2, jitter=0.3),
            min_nodes=4,
            seed=4,
            eval_every=1,
            min_local_steps=2,
            max_local_steps=8,
            checkpoint_dir=directory,
            checkpoint_every=3 if directory else None,
        )

    full = _start(make(), quadratic_fleet(4, seed=21))
    with pytest.raises(Crash):
        _start(make(tmp_path), quadratic_fleet(4, seed=21), evaluate_fn=crash_at(7))
    saved = Checkpointer(tmp_path, None).load()
    assert saved.policy["name"] == "Compass" and saved.in_flight
    nodes = {k + 10**9: n for k, n in quadratic_fleet(4, seed=21).items()}
    resumed = _start(make(tmp_path), nodes)
    assert resumed.num_updates == full.num_updates
    for a, b in zip(
        full.arrays.to_numpy_ndarrays(), resumed.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert history(resumed) == history(full)


def test_the_app_runs_fedcompass_from_the_run_config(tmp_path):
    run = {"num-rounds": 2, "max-updates": 0, "eval-every": 4}
    settings = {"fedcompass.min-local-steps": 1, "fedcompass.max-local-steps": 3}
    with task_identity():
        hist, _ = run_in_memory(
            tmp_path, "run", num_nodes=4, strategy="fedcompass", **run, **settings
        )
    assert hist["config"]["strategy"] == "fedcompass"
    assert hist["num-updates"] == 8 and 0 < hist["server-steps"] <= 8 and hist["faults"] == {}
    assert {u["stable-id"] for u in hist["updates"]} == set(range(4))
    assert hist["final-accuracy"] is not None


def test_a_sweep_of_fedcompass_runs_each_point(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text("[grid.fedcompass]\nalpha = [0.45, 0.9]\n")
    args = parse(
        "--sweep",
        str(grid),
        "--out",
        str(tmp_path / "sweep"),
        "--nodes",
        "4",
        "--rounds",
        "2",
        "--seeds",
        "0",
        "--splits",
        "dirichlet",
    )
    built = build_spec(args)
    # SSGD's run first sets the virtual-time budget of the grid's runs
    assert built.strategies == ("ssgd", "fedcompass-alpha0.45", "fedcompass")
    launch = FakeLaunch()
    outcome = run_suite(built, tmp_path / "sweep", launch=launch, jobs=1, echo=lambda _: None)
    assert len(outcome.ran) == 3 and not outcome.failed
    ours = [c for c in launch.configs if c["strategy"] == "fedcompass"]
    assert sorted(c.get("fedcompass.alpha", 0.9) for c in ours) == [0.45, 0.9]


def test_the_committed_fedcompass_grid_holds_its_default():
    grid = load_grid(Path(__file__).resolve().parents[1] / "benchmarks/sweeps/fedcompass.toml")
    assert list(grid.grid) == ["fedcompass"] and grid.size() == 4
    assert "fedcompass" in [point_name("fedcompass", p) for p in grid.points("fedcompass")]


class FailsAfterOne(QuadraticNode):
    """Trains once, then fails every task: it leaves the groups it was in."""

    def __call__(self, message):
        if message.metadata.message_type == "train" and self.trained >= 1:
            self.mode = "fail"
        return super().__call__(message)


@pytest.mark.parametrize("clock", [VirtualClock(seed=5, jitter=0.5), None])
def test_failing_nodes_and_measured_time_do_not_stall_the_groups(clock):
    nodes = quadratic_fleet(NODES, seed=8)
    flaky_id = next(iter(nodes))
    flaky = nodes[flaky_id]
    nodes[flaky_id] = FailsAfterOne(flaky.partition_id, flaky.target)
    strategy = FedCompass(clock=clock, min_nodes=NODES, min_local_steps=2, max_local_steps=6)
    result = _start(strategy, nodes)
    assert result.stopped_by == "budget" and result.num_updates == NODES * 6
    assert nodes[flaky_id].trained == 1 and result.faults.get("error", 0) >= 1
    assert 0 < result.server_steps <= result.num_updates
