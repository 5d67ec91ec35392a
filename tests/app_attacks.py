"""Attacks on the real ClientApp's train replies, and the app's ServerApp run over in-memory nodes
that make them: the red team's attacks of issue 69 on MNIST, without Flower's engines.

Each attacker wraps a node's handler (the real ClientApp with its node's context) and rewrites its
train replies; every other message passes unchanged. An update is the pseudo-gradient
``Δ = base − trained`` of the floating arrays (others are sent as trained). ``app_run`` is what
``tests/test_app_attacks.py`` and ``benchmarks/attacks.py`` run.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any
from unittest import mock

import numpy as np
from fakegrid import FakeGrid, task_identity
from flwr.app import Context, Message, MetricRecord, RecordDict
from memory_app import without_plots

from fl_async.aggregators.guard import REFUSALS
from fl_async.app import results, server_run
from fl_async.app.client_app import app as client_app
from fl_async.app.config import parse_run_config
from fl_async.protocol import to_record
from fl_async.strategies.guarded import GuardGate

Handler = Callable[[Message], Message]
Attack = Callable[[Handler, Sequence[Handler]], Handler]
"""Makes a node's attacking handler from its honest one and the honest nodes' handlers."""

SMALL = {
    "model": "logreg",
    "local-steps": 5,
    "batch-size": 32,
    "threads": 1,
}
"""What keeps a run cheap: MNIST's logistic regression, five local steps of 32 examples."""
REJECTIONS = "rejections"
"""The key ``app_run`` adds to a history: each rejected update's ``[partition-id, reason]``."""
NODE_IDS = 9000
"""The first node id; node ``k`` (partition ``k``) has ``NODE_IDS + 31 k``."""


def _floating(arrays: Sequence[np.ndarray]) -> list[bool]:
    return [np.issubdtype(a.dtype, np.floating) for a in arrays]


class Rewriter:
    """A node whose train replies carry ``rewrite(message, base, trained)`` instead of its
    trained arrays (the metrics its ClientApp sent, unless ``metrics`` rewrites them)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.tasks = 0
        """Train tasks answered so far."""

    def __call__(self, message: Message) -> Message:
        """The handler's reply; a train reply rewritten."""
        reply = self.handler(message)
        if message.metadata.message_type != "train" or reply.has_error():
            return reply
        record = message.content.array_records["arrays"]
        base = record.to_numpy_ndarrays()
        trained = reply.content.array_records["arrays"].to_numpy_ndarrays()
        sent = self.rewrite(message, base, trained)
        metrics = self.metrics(dict(reply.content.metric_records["metrics"]))
        self.tasks += 1
        content = {"arrays": to_record(list(record.keys()), sent), "metrics": metrics}
        return Message(RecordDict(content), reply_to=message)

    def rewrite(
        self, message: Message, base: list[np.ndarray], trained: list[np.ndarray]
    ) -> list[np.ndarray]:
        """The arrays to send: the trained ones (overridden by attacks on the update)."""
        return trained

    def metrics(self, metrics: dict[str, Any]) -> MetricRecord:
        """The metrics to send: the ClientApp's (overridden by attacks on the claims)."""
        return MetricRecord(metrics)


def with_update(
    base: Sequence[np.ndarray], trained: Sequence[np.ndarray], update: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """The arrays whose update against ``base`` is ``update`` (non-floating ones as trained)."""
    return [
        (b - u).astype(b.dtype) if floating else t
        for b, t, u, floating in zip(base, trained, update, _floating(base), strict=True)
    ]


def update_of(base: Sequence[np.ndarray], trained: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``base − trained`` in float64 (zero for non-floating arrays)."""
    return [
        b.astype(np.float64) - t.astype(np.float64) if floating else np.zeros(b.shape)
        for b, t, floating in zip(base, trained, _floating(base), strict=True)
    ]


class Scaled(Rewriter):
    """Sends ``multiple(t)`` times its honest update on its ``t``-th task (t = 0, 1, ...)."""

    def __init__(self, handler: Handler, multiple: Callable[[int], float]) -> None:
        super().__init__(handler)
        self.multiple = multiple

    def rewrite(
        self, message: Message, base: list[np.ndarray], trained: list[np.ndarray]
    ) -> list[np.ndarray]:
        """``base`` less ``multiple(t)`` times the honest update."""
        scale = self.multiple(self.tasks)
        return with_update(base, trained, [scale * u for u in update_of(base, trained)])


class Colluding(Rewriter):
    """Sends ``combine`` of the honest nodes' updates on the same base and task seed, array by
    array (stacked on axis 0): an omniscient colluder, which trains each honest node's ClientApp
    on its own task."""

    def __init__(
        self,
        handler: Handler,
        honest: Sequence[Handler],
        combine: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        super().__init__(handler)
        self.honest, self.combine = list(honest), combine

    def rewrite(
        self, message: Message, base: list[np.ndarray], trained: list[np.ndarray]
    ) -> list[np.ndarray]:
        """``base`` less ``combine`` of the honest nodes' updates on ``message``'s task."""
        updates = []
        for node in self.honest:
            theirs = node(message).content.array_records["arrays"].to_numpy_ndarrays()
            updates.append(update_of(base, theirs))
        stacked = [np.stack(layer) for layer in zip(*updates, strict=True)]
        return with_update(base, trained, [self.combine(layer) for layer in stacked])


def inner_product(scale: float = 4.0) -> Callable[[np.ndarray], np.ndarray]:
    """Inner-product manipulation: ``−scale`` times the honest nodes' mean update."""
    return lambda updates: -scale * updates.mean(axis=0)


def little_is_enough(z: float) -> Callable[[np.ndarray], np.ndarray]:
    """The "little is enough" attack (Baruch et al., 2019): each coordinate's honest mean minus
    ``z`` times its standard deviation (ddof 0)."""
    return lambda updates: updates.mean(axis=0) - z * updates.std(axis=0)


def alie_z(nodes: int, colluders: int) -> float:
    """Baruch et al.'s ``z_max``: with ``s = ⌊n/2 + 1⌋ − m`` honest nodes needed for a majority,
    the standard normal quantile of ``(n − s) / n``."""
    needed = nodes // 2 + 1 - colluders
    return NormalDist().inv_cdf((nodes - needed) / nodes)


class Claiming(Rewriter):
    """Sends its honest update with ``num-examples = count`` and ``extra`` made-up metrics."""

    def __init__(self, handler: Handler, count: int | None = None, extra: int = 0) -> None:
        super().__init__(handler)
        self.count, self.extra = count, extra

    def metrics(self, metrics: dict[str, Any]) -> MetricRecord:
        """The ClientApp's metrics with the claimed count and the made-up ones."""
        if self.count is not None:
            metrics["num-examples"] = self.count
        metrics.update({f"made-up-metric-{k}": float(k) for k in range(self.extra)})
        return MetricRecord(metrics)


def node_handler(partition: int, nodes: int, run_config: Mapping[str, Any]) -> Handler:
    """The real ClientApp on partition ``partition`` of ``nodes``."""
    context = Context(
        run_id=1,
        node_id=NODE_IDS + 31 * partition,
        node_config={"partition-id": partition, "num-partitions": nodes},
        state=RecordDict(),
        run_config=dict(run_config),
    )
    return lambda message: client_app(message, context)


def app_run(
    strategy: str,
    *,
    nodes: int,
    attackers: Mapping[int, Attack] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The ServerApp's run of ``strategy`` over ``nodes`` real ClientApps (partition ``k`` made
    ``attackers[k](handler, honest handlers)`` where given); its history."""
    attackers = attackers or {}
    with tempfile.TemporaryDirectory() as out:
        run_config = {
            **SMALL,
            "strategy": strategy,
            "num-nodes": nodes,
            "output-dir": out,
            **overrides,
        }
        handlers = [node_handler(k, nodes, run_config) for k in range(nodes)]
        honest = [h for k, h in enumerate(handlers) if k not in attackers]
        for k, attack in attackers.items():
            handlers[k] = attack(handlers[k], honest)
        grid = FakeGrid({NODE_IDS + 31 * k: h for k, h in enumerate(handlers)}, max_delay=0)
        rejections: list[list] = []
        # The plots are left out: they cost more than the run's training.
        with (
            task_identity(),
            without_plots(),
            mock.patch.object(GuardGate, "_apply_judged", _noting(rejections)),
        ):
            output = server_run.run(grid, parse_run_config(run_config))
        history = json.loads((Path(output) / results.HISTORY).read_text())
        return {**history, REJECTIONS: rejections}


def _noting(rejections: list[list]) -> Callable[..., Any]:
    """``GuardGate._apply_judged`` that also notes each rejected update's partition-id and
    reason (a history's records say only whether an update was accepted)."""
    apply = GuardGate._apply_judged

    def apply_judged(self: GuardGate, update: Any, verdict: Any, task: Any) -> Any:
        outcome = apply(self, update, verdict, task)
        if not outcome.accepted:
            rejections.append([task.stable_id, outcome.reason])
        return outcome

    return apply_judged


def accuracy(history: Mapping[str, Any]) -> float:
    """The mean central test accuracy over the second half of the run's virtual-time grid
    (``eval-grid``): what a run reached, without one evaluation's swing."""
    points = [e["accuracy"] for e in history["grid-evaluations"]]
    half = points[len(points) // 2 :]
    return sum(half) / len(half)


def honest_refused(history: Mapping[str, Any], attackers: set[int]) -> int:
    """How many updates of nodes not in ``attackers`` (partition-ids) the update guard refused."""
    return sum(
        1 for node, reason in history[REJECTIONS] if node not in attackers and reason in REFUSALS
    )


def first_applied(history: Mapping[str, Any]) -> int:
    """The partition-id of the node whose update a run applied first."""
    return int(history["updates"][0]["stable-id"])
