"""Helpers shared by the ``test_gsgm_variants_*`` files: the arrays' shapes, the common
hyperparameters, a seeded stream of updates, and ``feed``, which applies it with stale bases."""

import numpy as np

from fl_async.aggregators import ClientUpdate

SHAPES = ((3, 4), (5,), ())
COMMON = {"lr": 0.3, "momentum": 0.8, "average_weight": 0.4, "staleness": "polynomial"}


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def stream(seed, count=24, num_nodes=4, scale=0.3, p=None):
    """``(node, delta, tau, forget)`` tuples: a node's update, then maybe a node to forget."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        node = int(rng.choice(num_nodes, p=p))
        delta = [rng.normal(scale=scale, size=s).astype(np.float32) for s in SHAPES]
        forget = int(rng.integers(num_nodes)) if rng.random() < 0.1 else None
        yield node, delta, int(rng.integers(0, 4)), forget


def feed(agg, updates, history, on_step=None):
    """Apply ``updates`` with bases from ``history`` (list of model versions); return outcomes."""
    outcomes = []
    for node, delta, tau, forget in updates:
        b = max(len(history) - 1 - tau, 0)
        tau = len(history) - 1 - b
        update = ClientUpdate(node_id=node, delta=delta, base=history[b], staleness=tau)
        outcome = agg.apply(update)
        outcomes.append(outcome.status)
        if on_step is not None:
            on_step(node, delta, agg.staleness(tau), tau, forget, outcome.status)
        if forget is not None:
            agg.forget(forget)
        if outcome.stepped:
            history.append([p.copy() for p in agg.params])
    return outcomes
