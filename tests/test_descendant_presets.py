"""The MIFA, CA2FL and FADAS presets in the event loop (numpy nodes on the in-memory grid): their
"auto" settings, validation and a departed node's cache through the strategy base."""

import numpy as np
import pytest
from fakegrid import QuadraticNode, quadratic_fleet, task_identity
from strategy_loop import run

from fl_async.strategies import CA2FL, FADAS, MIFA

NODES = 5


class FlakyNode(QuadraticNode):
    """Trains once, then fails every task: it leaves, and the strategy forgets it."""

    def __call__(self, message):
        if message.metadata.message_type == "train" and self.trained >= 1:
            self.mode = "fail"
        return super().__call__(message)


def _start(strategy, nodes, rounds=4):
    with task_identity():
        return run(strategy, nodes, max_delay=0, num_rounds=rounds)[0]


@pytest.mark.parametrize(
    ("preset", "resolved"),
    [
        (MIFA, {"lr": 1 / NODES, "num_nodes": NODES}),
        (CA2FL, {"buffer_size": NODES, "num_nodes": NODES, "lr": 1.0}),
        (FADAS, {"buffer_size": NODES, "lr": 1e-3}),
    ],
)
def test_auto_settings_resolve_from_the_nodes_at_start_and_bad_nodes_are_rejected(preset, resolved):
    strategy = preset(min_nodes=NODES)
    result = _start(strategy, quadratic_fleet(NODES, modes={2: "nan"}))
    agg = strategy.aggregator
    assert {name: getattr(agg, name) for name in resolved} == resolved
    assert result.rejected.get("non-finite", 0) >= 1  # node 2's NaN model, never applied
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())
    assert agg.version == result.server_steps > 0


@pytest.mark.parametrize("preset", [MIFA, CA2FL])
def test_a_node_that_leaves_is_forgotten_from_the_cache(preset):
    nodes = quadratic_fleet(NODES)
    flaky_id = next(iter(nodes))
    flaky = nodes[flaky_id]
    nodes[flaky_id] = FlakyNode(flaky.partition_id, flaky.target, num_examples=flaky.num_examples)
    strategy = preset(min_nodes=NODES)
    result = _start(strategy, nodes)
    assert result.faults and nodes[flaky_id].trained == 1
    cached = strategy.aggregator.state_dict()["state"]["cache"]
    assert len(cached) == NODES - 1 == strategy.aggregator.num_cached
    assert flaky.partition_id not in cached  # cached by stable id: the partition id here
    total = sum(g[0] for g in cached.values())  # S is the sum of what stays cached
    np.testing.assert_allclose(
        strategy.aggregator.state_dict()["state"]["sum"][0], total, rtol=1e-5, atol=1e-6
    )


def test_bad_auto_values_are_refused_naming_them():
    with pytest.raises(ValueError, match="lr must be a number or 'auto', got 'fast'"):
        MIFA(lr="fast")
    with pytest.raises(ValueError, match="buffer_size must be a number or 'auto', got 'big'"):
        CA2FL(buffer_size="big")
    with pytest.raises(ValueError, match="buffer_size"):
        FADAS(buffer_size=0)


@pytest.mark.parametrize("preset", [CA2FL, FADAS])
def test_a_buffered_rule_resumes_from_a_checkpoint_to_the_uninterrupted_run(tmp_path, preset):
    """A crash between two checkpoints: the run resumed from the last one ends bit for bit where
    the uninterrupted one does (MIFA is in test_strategy_restart's crash test; a buffer held
    mid-way round-trips in test_aggregator_state)."""
    from test_strategy_restart import Crash, crash_at, history, start, with_new_node_ids

    from fl_async.scheduling import VirtualClock
    from fl_async.strategies.checkpoint import Checkpointer

    def make(directory=None):
        return preset(
            buffer_size=3,
            clock=VirtualClock(seed=2),
            min_nodes=4,
            seed=4,
            eval_every=1,
            checkpoint_dir=directory,
            checkpoint_every=2 if directory else None,
        )

    with task_identity():
        full = start(make(), quadratic_fleet(4, seed=21))
        with pytest.raises(Crash):
            start(make(tmp_path), quadratic_fleet(4, seed=21), crash_at(5))
        saved = Checkpointer(tmp_path, None).load()
        # step 4's checkpoint (taken as a step closes a buffer); tasks were in flight
        assert (saved.aggregator["version"], saved.num_updates) == (4, 12) and saved.in_flight
        resumed = start(make(tmp_path), with_new_node_ids(quadratic_fleet(4, seed=21)))
    assert resumed.num_updates == full.num_updates == 20 and full.server_steps == 6
    for a, b in zip(
        full.arrays.to_numpy_ndarrays(), resumed.arrays.to_numpy_ndarrays(), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert history(resumed) == history(full)
