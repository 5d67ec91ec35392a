"""An in-memory Grid and toy nodes for fast strategy tests.

This is the one module that touches Flower's internal task identity: building a ``Message``
outside a running app needs ``TaskIdentity.run_id``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

import numpy as np
from flwr.app import ArrayRecord, Error, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fl_async.protocol import to_record

Handler = Callable[[Message], Message | None]


@contextlib.contextmanager
def task_identity(run_id: int = 1, node_id: int = 0) -> Iterator[None]:
    """Set Flower's task identity for the block (internal API, isolated here)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = node_id
    TaskIdentity.task_id = 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


class FakeGrid(Grid):
    """Replies computed at push time by per-node handlers, released after random delays.

    ``max_delay`` pulls may pass before a reply shows up, drawn from ``delay_seed``, so replies
    arrive out of order in real time; a handler returning None never replies (a lost node).
    """

    def __init__(self, handlers: dict[int, Handler], *, delay_seed: int = 0, max_delay: int = 3):
        self.handlers = dict(handlers)
        self._rng = np.random.default_rng(delay_seed)
        self.max_delay = max_delay
        self._pending: dict[str, list] = {}
        self.log: list[tuple[int, str]] = []

    def set_run(self, run) -> None:  # noqa: D102
        self._run = run

    @property
    def run(self):  # noqa: D102
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: D102
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self.handlers)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        ids = []
        for message in messages:
            msg_id = uuid.uuid4().hex
            message.metadata.__dict__["_message_id"] = msg_id
            node = message.metadata.dst_node_id
            self.log.append((node, message.metadata.message_type))
            handler = self.handlers.get(node)
            reply = None if handler is None else handler(message)
            if reply is not None:
                self._pending[msg_id] = [reply, int(self._rng.integers(0, self.max_delay + 1))]
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        out = []
        for msg_id in message_ids:
            entry = self._pending.get(msg_id)
            if entry is None:
                continue
            if entry[1] <= 0:
                out.append(self._pending.pop(msg_id)[0])
            else:
                entry[1] -= 1
        return out

    def send_and_receive(self, messages, *, timeout=None) -> Iterable[Message]:  # noqa: D102
        ids = list(self.push_messages(messages))
        replies: list[Message] = []
        deadline = time.time() + (timeout or 10)
        while len(replies) < len(ids) and time.time() < deadline:
            replies.extend(self.pull_messages([i for i in ids if i in self._pending]))
        return replies


class QuadraticNode:
    """A node minimising ``||w - target||^2 / 2`` with plain SGD: deterministic, numpy only.

    It answers ``query`` with its partition id, trains ``local-steps`` steps of ``lr``, and can
    misbehave: ``fail`` (error replies), ``nan``, ``wrong_shape``, ``no_arrays`` (a train reply
    with metrics only), ``silent`` (never replies),
    ``no_query`` (a standard ClientApp without a query handler); or reply with its
    pseudo-gradient (``pseudo``). It answers ``evaluate`` with its loss.
    """

    def __init__(
        self, partition_id: int, target: np.ndarray, *, num_examples: int = 10, mode: str = "ok"
    ) -> None:
        self.partition_id = partition_id
        self.target = target.astype(np.float32)
        self.num_examples = num_examples
        self.mode = mode
        self.trained = 0

    def __call__(self, message: Message) -> Message | None:
        kind = message.metadata.message_type
        if self.mode == "silent":
            return None
        if kind == "query":
            if self.mode == "no_query":
                reason = "<class 'ValueError'>:<'No query function registered with name 'default''>"
                return Message(Error(code=2, reason=reason), reply_to=message)
            metrics = MetricRecord(
                {"partition-id": self.partition_id, "num-examples": self.num_examples}
            )
            return Message(RecordDict({"metrics": metrics}), reply_to=message)
        if self.mode == "fail":
            return Message(Error(code=0, reason="ClientApp raised"), reply_to=message)
        if self.mode == "no_arrays" and kind == "train":  # metrics only, no model
            metrics = MetricRecord({"num-examples": self.num_examples})
            return Message(RecordDict({"metrics": metrics}), reply_to=message)
        if kind == "evaluate":
            return self._evaluate(message)
        return self._train(message)

    def _evaluate(self, message: Message) -> Message:
        w = message.content.array_records["arrays"].to_numpy_ndarrays()[0]
        loss = float(0.5 * np.sum((w - self.target) ** 2))
        metrics = MetricRecord({"loss": loss, "num-examples": self.num_examples})
        return Message(RecordDict({"metrics": metrics}), reply_to=message)

    def _train(self, message: Message) -> Message:
        record = message.content.array_records["arrays"]
        config = message.content.config_records["config"]
        arrays = record.to_numpy_ndarrays()
        w = arrays[0].copy()
        steps = int(config.get("local-steps", 2))
        lr = float(config.get("lr", 0.1))
        # The task seed makes each task's noise reproducible, as a real ClientApp's shuffling.
        noise = np.random.default_rng(int(config["task-seed"])).normal(scale=0.01, size=w.shape)
        for _ in range(steps):
            w = w - np.float32(lr) * (w - self.target + noise.astype(np.float32))
        loss = float(0.5 * np.sum((w - self.target) ** 2))
        if self.mode == "nan":
            w[...] = np.nan
        if self.mode == "wrong_shape":
            w = np.zeros(w.shape + (2,), np.float32)
        self.trained += 1
        if self.mode == "pseudo":  # send base - trained under the documented key instead
            diffs = [arrays[0] - w, *(np.zeros_like(a) for a in arrays[1:])]
            out = to_record(list(record.keys()), diffs)
            metrics = MetricRecord({"num-examples": self.num_examples})
            reply = RecordDict({"pseudo-gradient": out, "metrics": metrics})
            return Message(reply, reply_to=message)
        out = to_record(list(record.keys()), [w, *arrays[1:]])
        metrics = MetricRecord(
            {
                "num-examples": self.num_examples,
                "partition-id": self.partition_id,
                "train-loss": loss,
            }
        )
        return Message(RecordDict({"arrays": out, "metrics": metrics}), reply_to=message)


def quadratic_fleet(num_nodes: int, *, dim: int = 5, seed: int = 0, modes=None):
    """``num_nodes`` quadratic nodes (random node ids, partition ids 0..n-1) and their handlers."""
    rng = np.random.default_rng(seed)
    node_ids = [int(x) for x in rng.choice(10**9, size=num_nodes, replace=False)]
    modes = modes or {}
    nodes = {
        node_id: QuadraticNode(
            k,
            rng.normal(size=dim).astype(np.float32),
            num_examples=10 + k,
            mode=modes.get(k, "ok"),
        )
        for k, node_id in enumerate(node_ids)
    }
    return nodes


def initial_arrays(dim: int = 5) -> ArrayRecord:
    """A model of one float array and one integer counter (as BatchNorm's)."""
    return to_record(["w", "count"], [np.zeros(dim, np.float32), np.array(0, np.int64)])


class Crash(Exception):
    """The ServerApp process dies (here: inside an evaluation, between two checkpoints)."""


def crash_at(step: int) -> Callable[[int, ArrayRecord], MetricRecord]:
    """An ``evaluate_fn`` raising ``Crash`` at server step ``step``: a ServerApp killed there."""

    def evaluate(server_step: int, arrays: ArrayRecord) -> MetricRecord:
        if server_step == step:
            raise Crash(f"killed at server step {server_step}")
        return MetricRecord({"step": server_step})

    return evaluate
