"""The update guard against the red team's attacks (docs/algorithms.md, The update guard): a
huge, zero or tiny first update; two colluders of ten sending sign-flipped or inner-product-
manipulation updates; one node whose updates alone pass; and honest non-IID fleets, whose
updates differ a hundredfold in size, which must see no refusal."""

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, Message, RecordDict
from test_poisoned_node import PoisonedNode

from fl_async.protocol import to_record
from fl_async.scheduling import VirtualClock
from fl_async.strategies import FAILED_STOPS, PRESETS

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
RATE = {
    "fadas": {"lr": 0.05},  # FADAS's default is sized for network weights (test_poisoned_node)
    # FedCompass's "auto" steps at 2 local steps are [1, 2]: too narrow to group nodes whose
    # speeds differ more than twofold (docs/algorithms.md, FedCompass); [2, 10] lets it group them
    "fedcompass": {"max_local_steps": 10},
}


def _run(preset, handlers, *, rounds=12, dim=5, **kwargs):
    strategy = PRESETS[preset](
        clock=VirtualClock(seed=4, sigma=0.5),
        min_nodes=len(handlers),
        seed=1,
        poll_interval=0.001,
        **{**RATE.get(preset, {}), **kwargs},
    )
    with task_identity():
        return strategy.start(
            FakeGrid(handlers, delay_seed=2, max_delay=0),
            initial_arrays(dim),
            num_rounds=rounds,
            timeout=5,
            train_config=TRAIN,
        )


def _loss(result, targets):
    """``||w - t||^2 / ||t||^2``, ``t`` the mean of ``targets``: 1 for the initial model."""
    target = np.mean(targets, axis=0).astype(np.float64)
    w = result.arrays.to_numpy_ndarrays()[0].astype(np.float64)
    return float(np.sum((w - target) ** 2) / np.sum(target**2))


def _refused(result, nodes):
    return [
        r
        for r in result.train_metrics_clientapp.values()
        if r["stable-id"] in nodes and not r["accepted"]
    ]


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("first", [1000.0, 0.0, 1e-6])
def test_a_huge_zero_or_tiny_first_update_leaves_every_preset_near_its_honest_result(preset, first):
    nodes = quadratic_fleet(5, seed=21)
    targets = [n.target for n in nodes.values()]
    honest = _run(preset, dict(nodes))
    # The attacker is the node whose update the honest run applied first.
    stable = honest.train_metrics_clientapp[1]["stable-id"]
    attacker = next(k for k, n in nodes.items() if n.partition_id == stable)
    handlers = {**nodes, attacker: PoisonedNode(nodes[attacker], lambda t: first if t == 0 else 1)}
    attacked = _run(preset, handlers)
    assert attacked.stopped_by == "budget" and honest.rejected == {}
    assert _refused(attacked, set(range(5)) - {stable}) == []  # no honest update refused
    assert _loss(attacked, targets) <= _loss(honest, targets) + 0.05
    if first != 1000.0:
        assert attacked.rejected == {"no-update": 1}


class InnerProduct:
    """Sends ``base + 4 x`` the honest nodes' mean update at this base (the update applied is
    ``-4 x`` their mean: inner-product manipulation)."""

    def __init__(self, node, honest):
        self.node, self.honest = node, honest

    def __call__(self, message):
        reply = self.node(message)
        if message.metadata.message_type != "train":
            return reply
        record = message.content.array_records["arrays"]
        base = record.to_numpy_ndarrays()
        trained = [
            h(message).content.array_records["arrays"].to_numpy_ndarrays()[0] for h in self.honest
        ]
        mean = np.mean([base[0] - t for t in trained], axis=0)
        poisoned = [base[0] + np.float32(4.0) * mean, *base[1:]]
        content = RecordDict(
            {
                "arrays": to_record(list(record.keys()), poisoned),
                "metrics": reply.content.metric_records["metrics"],
            }
        )
        return Message(content, reply_to=message)


def _shared_fleet(num_nodes, seed, dim=20):
    """Non-IID nodes with a shared component: targets ``c + 0.5 e_k`` (the model starts at 0)."""
    nodes = quadratic_fleet(num_nodes, seed=seed, dim=dim)
    shared = np.random.default_rng(seed + 7).normal(size=dim).astype(np.float32)
    for node in nodes.values():
        node.target = shared + np.float32(0.5) * node.target
    return nodes


@pytest.mark.parametrize("preset", ["gsgm", "asgd"])
@pytest.mark.parametrize("attack", ["sign-flipped-x5", "inner-product"])
def test_two_colluders_of_ten_are_refused_and_their_damage_bounded(preset, attack):
    nodes = _shared_fleet(10, seed=1)
    bad = sorted(k for k, n in nodes.items() if n.partition_id >= 8)
    honest_nodes = [n for k, n in nodes.items() if k not in bad]
    targets = [n.target for n in honest_nodes]
    handlers = dict(nodes)
    for k in bad:
        handlers[k] = (
            PoisonedNode(nodes[k], lambda t: -5.0)
            if attack == "sign-flipped-x5"
            else InnerProduct(nodes[k], honest_nodes)
        )
    guarded = _run(preset, handlers, dim=20)
    unguarded = _run(preset, handlers, dim=20, guard=None)
    honest = _run(preset, {k: n for k, n in nodes.items() if k not in bad}, dim=20)
    assert _refused(guarded, set(range(8))) == []
    assert guarded.rejected["wrong-direction"] >= 4
    # Bounded, not erased: the colluders' updates judged while the nodes' updates point every
    # which way pass, clipped to the median (docs/algorithms.md, The update guard).
    assert _loss(guarded, targets) < 0.2 * _loss(unguarded, targets)
    assert _loss(guarded, targets) < 0.04 and _loss(honest, targets) < 0.02


def test_a_run_where_one_node_alone_passes_stops_with_one_node():
    # Four nodes return the model they received after their first task: only one node's
    # updates can be applied, and the run says so instead of ending "budget".
    nodes = quadratic_fleet(5, seed=21)
    lazy = sorted(nodes)[:4]
    handlers = {
        k: PoisonedNode(n, lambda t: 1.0 if t == 0 else 0.0) if k in lazy else n
        for k, n in nodes.items()
    }
    result = _run("asgd", handlers, rounds=40, patience=30)
    assert result.stopped_by == "one-node" and "one-node" in FAILED_STOPS
    assert "only the updates of the node with stable id" in result.stop_detail
    assert result.rejected["no-update"] >= 15


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize(("num_nodes", "seed", "spread"), [(10, 2, 1.0), (30, 5, 1.0), (6, 5, 0)])
def test_honest_non_iid_fleets_with_very_different_norms_see_no_refusal(
    preset, num_nodes, seed, spread
):
    nodes = quadratic_fleet(num_nodes, seed=seed)
    rng = np.random.default_rng(seed + 100)
    for node in nodes.values():  # targets 0.1 to 10 times as far: norms differ a hundredfold
        node.target = node.target * np.float32(10 ** rng.uniform(-spread, spread))
    result = _run(preset, nodes, rounds=6)
    assert result.rejected == {} and result.stopped_by == "budget"
