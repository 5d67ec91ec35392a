"""The presets in the event loop on an in-memory grid: ordering, reproducibility, the white list,
FedAvg, auto learning rates, ODSGD, ASP, bad arguments, Flower's API, replies and bases."""

import numpy as np
import pytest
from fakegrid import FakeGrid, QuadraticNode, initial_arrays, quadratic_fleet
from flwr.app import ConfigRecord
from strategy_loop import (
    TRAIN,
    _identity,  # noqa: F401  (autouse: every test runs under task_identity())
    history,
    model,
    run,
)

from fl_async.protocol import to_record, train_message
from fl_async.scheduling import VirtualClock
from fl_async.strategies import (
    ASGD,
    ASP,
    DCASGD,
    GSGM,
    ODSGD,
    PRESETS,
    SSGD,
    AsyncStrategy,
    FedAsync,
    FedBuff,
    TrendSmooth,
)


def test_asgd_runs_out_of_order_with_staleness_and_reaches_the_budget():
    nodes = quadratic_fleet(4)
    result, grid = run(ASGD(clock=VirtualClock(seed=1), min_nodes=4), nodes)
    assert result.num_updates == 12 and result.stopped_by == "budget"
    assert result.server_steps == 12
    staleness = [r["staleness"] for r in result.train_metrics_clientapp.values()]
    assert max(staleness) > 0
    times = [r["virtual-time"] for _, r in sorted(result.train_metrics_clientapp.items())]
    assert times == sorted(times)  # applied strictly in virtual-finish order
    record = result.train_metrics_clientapp[1]
    for key in ("server-step", "node-id", "staleness", "virtual-time", "wall-time", "train-loss"):
        assert key in record
    assert all(np.isfinite(a).all() for a in model(result))
    assert sum(1 for _, kind in grid.log if kind == "query") == 4
    # the model moved towards the nodes' mean target
    target = np.mean([n.target for n in nodes.values()], axis=0)
    assert np.linalg.norm(model(result)[0] - target) < np.linalg.norm(target)


def test_seeded_virtual_clock_runs_are_identical_whatever_the_real_arrival_order():
    results = []
    for delay_seed in (0, 1, 2):
        nodes = quadratic_fleet(5, seed=3)
        strategy = GSGM(clock=VirtualClock(seed=7), min_nodes=5, slack=1, seed=11)
        results.append(run(strategy, nodes, delay_seed=delay_seed)[0])
    for other in results[1:]:
        for a, b in zip(model(results[0]), model(other), strict=True):
            np.testing.assert_array_equal(a, b)
        assert history(results[0]) == history(other)


def test_gsgm_white_list_keeps_counts_within_slack():
    for slack in (0, 2):
        nodes = quadratic_fleet(5, seed=4)
        strategy = GSGM(clock=VirtualClock(seed=2, sigma=1.5), min_nodes=5, slack=slack)
        result, _ = run(strategy, nodes, num_rounds=4)
        counts: dict[int, int] = {}
        for _, r in sorted(result.train_metrics_clientapp.items()):
            counts[r["stable-id"]] = counts.get(r["stable-id"], 0) + 1
            assert max(counts.values()) - min(counts.get(k, 0) for k in range(5)) <= slack + 1
        assert max(counts.values()) - min(counts.values()) <= slack + 1


def test_asgd_without_white_list_lets_fast_nodes_dominate():
    nodes = quadratic_fleet(5, seed=4)
    result, _ = run(ASGD(clock=VirtualClock(seed=2, sigma=1.5), min_nodes=5), nodes, num_rounds=4)
    counts: dict[int, int] = {}
    for r in result.train_metrics_clientapp.values():
        counts[r["stable-id"]] = counts.get(r["stable-id"], 0) + 1
    assert max(counts.values()) - min(counts.values()) > 2


def test_ssgd_with_lr_one_is_fedavg():
    nodes = quadratic_fleet(3, seed=5)
    strategy = SSGD(clock=VirtualClock(seed=0), min_nodes=3)
    result, _ = run(strategy, nodes, num_rounds=2)
    assert result.server_steps == 2
    assert all(r["staleness"] == 0 for r in result.train_metrics_clientapp.values())
    # FedAvg by hand: each round, the num-examples-weighted mean of the trained models, each
    # node training from the round's model with the task seed the strategy derives.
    w = np.zeros(5, np.float32)
    twins = {
        n.partition_id: QuadraticNode(n.partition_id, n.target, num_examples=n.num_examples)
        for n in nodes.values()
    }
    for round_ in range(2):
        total, acc = 0, np.zeros(5)
        for k, twin in sorted(twins.items()):
            seed = int(np.random.SeedSequence([0, k, round_]).generate_state(1)[0])
            config = {**dict(TRAIN), "task-seed": seed}
            record = to_record(["w", "count"], [w, np.array(0)])
            reply = twin(train_message(1, record, config, ttl=10))
            trained = reply.content.array_records["arrays"].to_numpy_ndarrays()[0]
            acc += twin.num_examples * trained.astype(np.float64)
            total += twin.num_examples
        w = (acc / total).astype(np.float32)
    np.testing.assert_allclose(model(result)[0], w, rtol=1e-5, atol=1e-6)


def test_every_preset_runs_with_no_arguments_but_the_clock():
    for name, cls in PRESETS.items():
        nodes = quadratic_fleet(3, seed=6)
        result, _ = run(cls(clock=VirtualClock(seed=0), min_nodes=3), nodes, num_rounds=2)
        assert result.num_updates >= 5, name
        assert all(np.isfinite(a).all() for a in model(result)), name
        assert result.faults == {}, name


def test_auto_learning_rates_resolve_with_the_number_of_nodes():
    nodes = quadratic_fleet(4)
    cases = [
        (ASGD(), 1 / 4),
        (DCASGD(lr="auto"), 1 / 4),
        (GSGM(), 0.1 / 4),
        (GSGM(momentum=0.5), 0.5 / 4),
        (TrendSmooth(lr="auto"), 1 / 4),
        (TrendSmooth(base="momentum", beta=0.8), 0.2 / 4),
        (TrendSmooth(base="adam"), 0.01),
        (ASP(), 1 / 4),
        # the claims study's tuned rates: fixed, whatever N
        (DCASGD(), 0.2),
        (TrendSmooth(), 0.2),
        (TrendSmooth(base="sgd", lr=0.5), 0.5),
    ]
    for strategy, lr in cases:
        strategy.min_nodes = 4
        run(strategy, nodes, num_rounds=1)
        assert strategy.aggregator.lr == pytest.approx(lr)
    fedbuff = FedBuff(min_nodes=4)
    run(fedbuff, nodes, num_rounds=1)
    assert fedbuff.aggregator.buffer_size == 4 and fedbuff.aggregator.lr == 2.0
    assert ASGD(lr=0.5).aggregator.lr == 0.5


def test_odsgd_compensates_and_runs_one_step_ahead():
    nodes = quadratic_fleet(4, seed=13)
    strategy = ODSGD(clock=VirtualClock(seed=3, sigma=1.0), min_nodes=4)
    result, _ = run(strategy, nodes, num_rounds=4)
    records = [r for _, r in sorted(result.train_metrics_clientapp.items())]
    assert result.server_steps >= 3
    # a fast node ran one iteration ahead: its update arrived before its iteration's step
    assert any(r["iteration"] > r["server-step"] for r in records)
    assert all(r["staleness"] <= 1 for r in records)
    assert strategy.task_bases.state_dict()["previous"]  # each node's last pseudo-gradient
    assert strategy.local_lr == 1.0 / 4  # "auto": lr / N
    # every iteration's barrier waited for all its nodes: no update came too late
    assert result.rejected == {} and result.server_steps >= result.num_updates // 4 - 1


def test_odsgd_compensated_base_subtracts_local_lr_times_the_previous_update():
    bases = ODSGD(lr=0.5, local_lr=0.2).task_bases
    params = [np.full(3, 2.0, dtype=np.float32), np.array(7)]
    bases.accepted(1, [np.array([1.0, -1.0, 0.0], dtype=np.float32), np.array(0)])
    base = bases.base_for(1, 1, params, 0)  # version 0 lacks iteration 0's update
    np.testing.assert_allclose(base[0], [1.8, 2.2, 2.0])
    assert base[1] == 7  # integer arrays are sent as they are
    assert bases.base_for(1, 0, params, 0) is None  # the version holds it: no compensation
    assert bases.base_for(2, 1, params, 0) is None  # no previous update


def test_asp_moves_a_persistently_slow_node_out_of_the_group():
    nodes = quadratic_fleet(5, seed=14)
    # partitions 4 and 0 are the slowest nodes; 0 is about 7x slower than the median
    clock = VirtualClock(seed=1, ranking=[1, 2, 3, 4, 0], sigma=3.0)
    strategy = ASP(clock=clock, min_nodes=5, period=5, p_min=0.5)
    result, _ = run(strategy, nodes, num_rounds=5)
    assert 0 not in strategy.policy.group and {1, 2, 3} <= strategy.policy.group
    # outside the group it commits asynchronously: fast nodes ran ahead of it
    counts: dict[int, int] = {}
    for r in result.train_metrics_clientapp.values():
        counts[r["stable-id"]] = counts.get(r["stable-id"], 0) + 1
    assert counts.get(0, 0) < min(counts[k] for k in (1, 2, 3, 4))


def test_bad_strategy_arguments_are_named():
    with pytest.raises(ValueError, match="min_nodes must be an integer >= 1, got 0"):
        ASGD(min_nodes=0)
    with pytest.raises(ValueError, match="lr must be a number >= 0 or 'auto', got 'fast'"):
        GSGM(lr="fast")
    with pytest.raises(ValueError, match="checkpoint_every needs checkpoint_dir"):
        ASGD(checkpoint_every=3)
    with pytest.raises(ValueError, match="local_lr must be a number >= 0 or 'auto', got -1"):
        ODSGD(local_lr=-1)
    with pytest.raises(TypeError, match="aggregator must be an fl_async Aggregator"):
        AsyncStrategy(aggregator="asgd")


def test_flowers_abstract_methods_build_and_read_the_loops_messages():
    nodes = quadratic_fleet(3, seed=16)
    grid = FakeGrid(nodes, max_delay=0)
    strategy = ASGD(lr=0.5, min_nodes=3)
    messages = list(strategy.configure_train(1, initial_arrays(), TRAIN, grid))
    assert len(messages) == 3
    config = messages[0].content.config_records["config"]
    assert {"server-step", "server-round", "task-seed", "iteration", "lr"} <= set(config)
    replies = grid.send_and_receive(messages, timeout=5)
    arrays, record = strategy.aggregate_train(1, replies)
    assert strategy.aggregator.version == 3
    assert record["server-step"] == 3 and record["accepted"] == 1
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], strategy.aggregator.params[0])
    evaluate = list(strategy.configure_evaluate(1, arrays, ConfigRecord(), grid))
    assert len(evaluate) == 3 and evaluate[0].metadata.message_type == "evaluate"


def test_memory_budget_limits_tasks_in_flight():
    nodes = quadratic_fleet(4, seed=17)
    # room for one stored base version: one task at a time, so nothing is stale but the update
    # guard's quorum: the first three updates, all from the initial model, applied in turn
    strategy = ASGD(clock=VirtualClock(seed=0), min_nodes=4, memory_budget=40)
    result, _ = run(strategy, nodes, num_rounds=2)
    assert result.num_updates == 8
    staleness = [r["staleness"] for _, r in sorted(result.train_metrics_clientapp.items())]
    assert staleness == [0, 1, 2] + [0] * 5
    with pytest.raises(ValueError, match="memory_budget must be a finite number > 0, got 0"):
        ASGD(memory_budget=0)


def test_pseudo_gradient_replies_equal_trained_weight_replies():
    weights, _ = run(ASGD(clock=VirtualClock(seed=0), min_nodes=3), quadratic_fleet(3, seed=18))
    pseudo_nodes = quadratic_fleet(3, seed=18)
    for node in pseudo_nodes.values():
        node.mode = "pseudo"
    pseudo, _ = run(ASGD(clock=VirtualClock(seed=0), min_nodes=3), pseudo_nodes)
    assert pseudo.num_updates == weights.num_updates == 9
    np.testing.assert_allclose(model(pseudo)[0], model(weights)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("preset", "sent"), [(ASGD, False), (FedAsync, True)])
def test_the_base_goes_only_to_rules_that_read_it(preset, sent):
    nodes = quadratic_fleet(2, seed=4)
    strategy = preset(clock=VirtualClock(seed=0), min_nodes=2)
    seen = []
    apply = strategy.aggregator.apply
    strategy.aggregator.apply = lambda update: seen.append(update.base is not None) or apply(update)
    floats_only = to_record(["w"], [np.zeros(5, np.float32)])  # no integer array to carry over
    strategy.start(FakeGrid(nodes), floats_only, num_rounds=1, timeout=5, train_config=TRAIN)
    assert seen == [sent, sent] and strategy.aggregator.reads_base == sent
