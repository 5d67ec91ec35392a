"""The MIFA, CA2FL and FADAS presets in the event loop (numpy nodes on the in-memory grid): their
"auto" settings, validation and a departed node's cache through the strategy base."""

import numpy as np
import pytest
from fakegrid import FakeGrid, QuadraticNode, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

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
        return strategy.start(
            FakeGrid(nodes, max_delay=0), initial_arrays(), num_rounds=rounds, timeout=5,
            train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}),
        )  # fmt: skip


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
