"""Flower's abstract ``Strategy`` methods, working for real on the asynchronous loop's state.

``configure_train`` / ``aggregate_train`` build and read the same messages the event loop uses,
so code written against Flower's round-based API (or Flower's own tooling) can drive an
asynchronous strategy one "round" at a time; ``start()`` is the asynchronous way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from fl_async import protocol


class FlowerStrategyAPI(Strategy):
    """The round-based methods of Flower's ``Strategy`` on top of ``AsyncStrategy``'s state."""

    def summary(self) -> None:
        """Log the strategy's configuration."""
        log(INFO, "\t├──> Aggregator: %r", self.aggregator)
        log(INFO, "\t├──> Dispatch policy: %r", self.policy)
        log(INFO, "\t├──> Clock: %s", repr(self.clock) if self.clock else "real time")
        log(INFO, "\t└──> Minimum nodes: %d", self.min_nodes)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Tasks for every connected node the policy allows now, built as the event loop does."""
        if not self._started:
            self._new_run(timeout=3600.0, evaluate_fn=None)
            self._begin(grid, arrays, config)
        self._refresh_nodes(grid)
        made = [self._make_task(node_id) for node_id in self._dispatchable()]
        for task, _ in made:  # matched to replies by node: at most one task per node
            self._track(f"configured-{task.node_id}", task)
        return [make() for _, make in made]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply each reply as the event loop does; return the model and the last record."""
        last: MetricRecord | None = None
        for reply in replies:
            msg_id = reply.metadata.reply_to_message_id
            if msg_id not in self._book:
                msg_id = f"configured-{reply.metadata.src_node_id}"
            if msg_id not in self._book:
                self._recorder.fault("unknown-reply", f"a reply to unknown message {msg_id!r}")
                continue
            last = self._handle(msg_id, reply, arrival=time.time())
        self._release_if_ready()
        while self._guard_queue:
            last = self._apply_queued()
            self._settle_barrier()
        self._settle_barrier()
        return self._model_record(), last

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Evaluation messages for every connected node without a task in flight."""
        keys = list(arrays.keys())
        model = arrays.to_numpy_ndarrays()
        busy = {task.node_id for task in self._book.tasks()}
        return [
            protocol.evaluate_message(n, keys, model, dict(config), ttl=3600.0)
            for n in sorted(grid.get_node_ids())
            if n not in busy
        ]

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Average the replies' metrics weighted by ``num-examples`` (as FedAvg does), each count
        capped as a train reply's is; a reply beyond the metric bounds, or with a bad count, is
        left out as ``malformed`` (docs/algorithms.md, What a node claims)."""
        contents = [c for r in replies if not r.has_error() and (c := self._bounded(r)) is not None]
        if not contents:
            return None
        return aggregate_metricrecords(contents, "num-examples")

    def _bounded(self, reply: Message) -> RecordDict | None:
        """An evaluate reply's scalar metrics, its ``num-examples`` capped; None if malformed."""
        try:
            protocol.check_metrics(reply)
            metrics = protocol.metrics_of(reply)
            claimed = protocol.check_num_examples(metrics)
        except ValueError as err:
            self._recorder.fault(
                "malformed", f"evaluate reply of node {reply.metadata.src_node_id}: {err}"
            )
            return None
        node = self._registry.get(reply.metadata.src_node_id)
        weight = self._registry.cap.weight(claimed, None if node is None else node.declared)
        return RecordDict({protocol.METRICS_KEY: MetricRecord({**metrics, "num-examples": weight})})

    def _federated_evaluation(self, grid: Grid, config: ConfigRecord | None) -> None:
        """Evaluate the final model on the nodes (the run is over: nothing else is in flight)."""
        version = self.aggregator.version
        messages = self.configure_evaluate(
            version, self._model_record(), config or ConfigRecord(), grid
        )
        replies = grid.send_and_receive(messages, timeout=self._timeout)
        metrics = self.aggregate_evaluate(version, replies)
        if metrics is not None:
            self._recorder.result.evaluate_metrics_clientapp[version] = metrics
