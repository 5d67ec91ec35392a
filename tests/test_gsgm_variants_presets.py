"""GSGM's variants (docs/algorithms.md, GSGM) from the outside: bad arguments, the ``GSGM``
preset and its run config keys, and the variants in the event loop on an in-memory grid."""

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async.aggregators import GSGM
from fl_async.scheduling import Asynchronous, VirtualClock, WhiteList
from fl_async.strategies import GSGM as GSGMPreset
from fl_async.validation import InvalidArgument


# ---------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"server_optimizer": "nadam"},
            "server_optimizer must be one of 'sgd', 'momentum', 'adam', got 'nadam'",
        ),
        (
            {"momentum_rule": "nesterov"},
            "momentum_rule must be one of 'update', 'cycle', 'implicit', got 'nesterov'",
        ),
        (
            {"server_optimizer": "sgd", "momentum_rule": "cycle"},
            "momentum_rule='cycle' needs server_optimizer='momentum', got server_optimizer='sgd'",
        ),
        (
            {"server_optimizer": "adam", "momentum_rule": "implicit"},
            "momentum_rule='implicit' needs server_optimizer='momentum', got server_optimizer=",
        ),
        ({"schedule": "wait"}, "schedule must be one of 'block', 'buffer', got 'wait'"),
        ({"slack": -1}, "slack must be an integer >= 0, got -1"),
        ({"num_nodes": 0}, "num_nodes must be an integer >= 1 or None, got 0"),
        ({"beta1": 1.0}, "beta1 must be a finite number in [0, 1), got 1.0"),
        ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
    ],
)
def test_bad_arguments_name_the_value_and_what_is_allowed(kwargs, message):
    with pytest.raises(InvalidArgument) as err:
        GSGM(**kwargs)
    assert message in str(err.value)


# ------------------------------------------------------------------------------------ presets
def _resolve(strategy, num_nodes):
    """Resolve the preset's "auto" settings as ``start()`` does."""
    for owner, name, rule in strategy._auto:
        setattr(owner, name, rule(num_nodes))
    return strategy.aggregator


def test_preset_defaults_dispatch_with_the_white_list_and_keep_the_rule():
    preset = GSGMPreset()
    assert type(preset.policy) is WhiteList and preset.policy.staleness_bound == 0
    agg = _resolve(preset, 10)
    assert agg.lr == pytest.approx(0.01) and agg.num_nodes is None
    assert (agg.server_optimizer, agg.momentum_rule, agg.schedule) == (
        "momentum",
        "update",
        "block",
    )


@pytest.mark.parametrize(
    ("kwargs", "lr"),
    [
        ({"server_optimizer": "sgd"}, 0.1),
        ({"server_optimizer": "adam"}, 0.01),
        ({"momentum_rule": "cycle", "momentum": 0.5}, 0.05),
        ({"momentum_rule": "implicit"}, 0.01),
    ],
)
def test_preset_auto_lr_follows_the_server_optimizer(kwargs, lr):
    assert _resolve(GSGMPreset(**kwargs), 10).lr == pytest.approx(lr)
    assert _resolve(GSGMPreset(lr=0.2, **kwargs), 10).lr == 0.2


def test_preset_buffer_schedule_dispatches_asynchronously_and_knows_n():
    preset = GSGMPreset(schedule="buffer", slack=2)
    assert type(preset.policy) is Asynchronous
    agg = _resolve(preset, 7)
    assert (agg.schedule, agg.slack, agg.num_nodes) == ("buffer", 2, 7)
    with pytest.raises(InvalidArgument, match="momentum_rule='cycle' needs"):
        GSGMPreset(server_optimizer="adam", momentum_rule="cycle")


def test_run_config_keys_reach_the_preset():
    from fl_async.app import server_run
    from fl_async.app.config import parse_run_config

    config = parse_run_config(
        {
            "strategy": "gsgm",
            "gsgm.server-optimizer": "adam",
            "gsgm.beta1": 0.8,
            "gsgm.beta2": 0.99,
            "gsgm.eps": 1e-6,
            "gsgm.schedule": "buffer",
            "gsgm.slack": 1,
        }
    )
    agg = server_run.build_strategy(config, clock=None).aggregator
    assert (agg.server_optimizer, agg.beta1, agg.beta2, agg.eps) == ("adam", 0.8, 0.99, 1e-6)
    assert (agg.schedule, agg.slack) == ("buffer", 1)
    config = parse_run_config({"strategy": "gsgm", "gsgm.momentum-rule": "cycle"})
    assert server_run.build_strategy(config, clock=None).aggregator.momentum_rule == "cycle"
    # refused as the run config is read, before any node is started
    refused = "'gsgm.server-optimizer' must be one of 'sgd', 'momentum', 'adam', 'default'"
    with pytest.raises(ValueError, match=refused):
        parse_run_config({"strategy": "gsgm", "gsgm.server-optimizer": "nadam"})


# ---------------------------------------------------------------------------- the event loop
def _run(strategy, nodes, num_rounds=4):
    with task_identity():
        return strategy.start(
            FakeGrid(nodes, delay_seed=0),
            initial_arrays(),
            num_rounds=num_rounds,
            timeout=5,
            train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}),
        )


@pytest.mark.parametrize("slack", [0, 2])
def test_buffer_schedule_in_the_loop_never_blocks_and_keeps_applied_counts_even(slack):
    nodes = quadratic_fleet(5, seed=4)
    strategy = GSGMPreset(
        clock=VirtualClock(seed=2, sigma=1.5), min_nodes=5, slack=slack, schedule="buffer"
    )
    result = _run(strategy, nodes)
    assert result.stopped_by == "budget" and result.num_updates == 20
    agg = strategy.aggregator
    assert agg.num_nodes == 5
    held = sum(agg.waiting.values())
    assert result.server_steps < result.num_updates  # some updates were averaged
    counts = agg.applied_counts
    assert max(counts.values()) - min(counts.values()) <= slack + 1
    # the fast nodes kept training: their finished tasks spread wider than the white list's
    tasks: dict[int, int] = {}
    for r in result.train_metrics_clientapp.values():
        tasks[r["stable-id"]] = tasks.get(r["stable-id"], 0) + 1
    assert max(tasks.values()) - min(tasks.values()) > slack + 1
    assert sum(tasks.values()) == result.num_updates >= result.server_steps + held
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"server_optimizer": "sgd"},
        {"server_optimizer": "adam"},
        {"momentum_rule": "cycle"},
        {"momentum_rule": "implicit", "schedule": "buffer"},
    ],
)
def test_variants_run_in_the_loop(kwargs):
    nodes = quadratic_fleet(4, seed=1)
    strategy = GSGMPreset(clock=VirtualClock(seed=1), min_nodes=4, **kwargs)
    result = _run(strategy, nodes, num_rounds=3)
    assert result.stopped_by == "budget" and result.num_updates == 12
    w = result.arrays.to_numpy_ndarrays()[0]
    target = np.mean([n.target for n in nodes.values()], axis=0)
    assert np.isfinite(w).all() and np.linalg.norm(w - target) < np.linalg.norm(target)
