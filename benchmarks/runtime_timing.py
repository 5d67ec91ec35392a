"""The instruments that time one ServerApp run of ``runtime.py``: a ``Stopwatch``, the
``TimingGrid`` proxy of Flower's Grid and the ``Probe`` of an ``AsyncStrategy``'s event loop.

Nothing in ``fl_async`` is changed: the wrappers are installed on the instance and on module
attributes for the duration of one run.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterable

from flwr.app import Message
from flwr.serverapp import Grid
from process_usage import machine_busy_seconds, tree_cpu

from fl_async import protocol
from fl_async.strategies import membership, replies
from fl_async.strategies.async_strategy import AsyncStrategy
from fl_async.strategies.dispatch import Dispatcher
from fl_async.strategies.evaluation import Boundaries
from fl_async.strategies.membership import Membership
from fl_async.strategies.replies import Replies


class Stopwatch:
    """Inclusive seconds and call counts per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.active = True

    def add(self, name: str, seconds: float) -> None:
        if self.active:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, fn: Callable, name: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)

        return timed


class TimingGrid(Grid):
    """Delegates to Flower's Grid, timing each call and stamping each train reply's arrival.

    ``send_and_receive`` (FedAvg's path) is the in-memory Grid's own loop (push, then pull every
    ``pull_interval`` s) written against this proxy so its pushes and pulls are seen too.
    """

    def __init__(self, grid: Grid, watch: Stopwatch, *, mark_after: int) -> None:
        self._grid = grid
        self.watch = watch
        self.mark_after = mark_after
        self.cpu_at_mark: dict[str, list] | None = None  # the tree's CPU at reply mark_after
        self.busy_at_mark = 0.0  # the machine's, then
        self.mark_time = 0.0
        self.pull_interval = getattr(grid, "pull_interval", 0.1)
        self.first_train_push: float | None = None
        self.replies: list[dict[str, float]] = []  # one per train reply, in arrival order
        self.pulls = 0
        self.empty_pulls = 0

    def set_run(self, run) -> None:  # noqa: D102
        self._grid.set_run(run)

    @property
    def run(self):  # noqa: D102
        return self._grid.run

    def create_message(self, *args, **kwargs):  # noqa: D102
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        start = time.perf_counter()
        ids = list(self._grid.get_node_ids())
        self.watch.add("grid.get_node_ids", time.perf_counter() - start)
        return ids

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        messages = list(messages)
        if self.first_train_push is None and any(
            m.metadata.message_type == "train" for m in messages
        ):
            self.first_train_push = time.time()
        start = time.perf_counter()
        ids = list(self._grid.push_messages(messages))
        self.watch.add("grid.push_messages", time.perf_counter() - start)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        start = time.perf_counter()
        replies = list(self._grid.pull_messages(message_ids))
        self.watch.add("grid.pull_messages", time.perf_counter() - start)
        now = time.time()
        if self.watch.active:
            self.pulls += 1
            self.empty_pulls += not replies
        for reply in replies:
            if reply.metadata.message_type != "train" or reply.has_error():
                continue
            metrics = protocol.metrics_of(reply)
            self.replies.append(
                {
                    "arrival": now,
                    "pickup_latency": now - float(metrics.get("t-replied", now)),
                    "work": float(metrics.get("t-work-end", 0.0))
                    - float(metrics.get("t-work-start", 0.0)),
                    "client_cpu": float(metrics.get("client-cpu", 0.0)),
                    "work_cpu": float(metrics.get("work-cpu", 0.0)),
                    "received": float(metrics.get("t-received", now)),
                    "task_created": float(metrics.get("t-task-created", now)),
                    "replied": float(metrics.get("t-replied", now)),
                    "work_start": float(metrics.get("t-work-start", 0.0)),
                    "pid": int(metrics.get("pid", 0)),
                }
            )
        if self.cpu_at_mark is None and len(self.replies) >= self.mark_after:
            self.cpu_at_mark = tree_cpu()
            self.busy_at_mark = machine_busy_seconds()
            self.mark_time = time.time()
        return replies

    def send_and_receive(self, messages, *, timeout=None) -> Iterable[Message]:  # noqa: D102
        msg_ids = set(self.push_messages(messages))
        end_time = time.time() + (timeout if timeout is not None else 0.0)
        ret: list[Message] = []
        while timeout is None or time.time() < end_time:
            res = list(self.pull_messages(msg_ids))
            ret.extend(res)
            msg_ids.difference_update({m.metadata.reply_to_message_id for m in res})
            if not msg_ids:
                break
            start = time.perf_counter()
            time.sleep(self.pull_interval)
            self.watch.add("sleep", time.perf_counter() - start)
        return ret


class Probe:
    """Times the parts of an ``AsyncStrategy``'s event loop (inclusive seconds per part).

    The collaborators' methods are wrapped on their classes (the strategy builds its
    collaborators afresh at ``start()``), the strategy's own on the strategy object;
    ``protocol.train_message``, ``protocol.read_train_reply``, ``replies._difference`` and the
    ``time.sleep`` the loop calls are wrapped on their modules; ``restore()`` puts all back.
    Each part keeps the name it had when the loop's methods were the strategy's own.
    """

    METHODS = (
        ("_refresh_nodes", Membership, "refresh"),
        ("_dispatch", Dispatcher, "dispatch"),
        ("_dispatchable", Dispatcher, "dispatchable"),
        ("_make_task", Dispatcher, "make_task"),
        ("_track", Dispatcher, "track"),
        ("_next_reply", Replies, "next"),
        ("_wait_for", Replies, "_wait_for"),
        ("_handle", Replies, "handle"),
        ("_settle_barrier", Replies, "settle_barrier"),
        ("_evaluate", Boundaries, "evaluate"),
        ("_wait_for_nodes", Membership, "wait_for_nodes"),
    )

    def __init__(self, strategy: AsyncStrategy, watch: Stopwatch) -> None:
        self.watch = watch
        self._saved: list[tuple[object, str, object]] = []
        for label, owner, name in self.METHODS:
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, watch.wrap(original, label))
        strategy._after_step = watch.wrap(strategy._after_step, "_after_step")
        original_begin = strategy._begin

        def begin(*args, **kwargs):  # start-up (waiting for nodes, identify): set apart
            watch.active = False
            start = time.perf_counter()
            try:
                return original_begin(*args, **kwargs)
            finally:
                watch.active = True
                watch.add("startup", time.perf_counter() - start)

        strategy._begin = begin
        name = "_wait_for_min_nodes"  # the start-up's wait for (and identification of) nodes
        original = Membership.wait_for_min_nodes
        self._saved.append((Membership, "wait_for_min_nodes", original))
        Membership.wait_for_min_nodes = self._always(original, f"startup:{name}")
        self._patch(protocol, "train_message")
        self._patch(protocol, "read_train_reply")
        self._patch(protocol, "metric_record")
        self._patch(replies, "_difference")
        timed_sleep = watch.wrap(time.sleep, "sleep")
        shim = types.SimpleNamespace(
            **{k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
        )
        shim.sleep = timed_sleep
        for module in (membership, replies):
            self._saved.append((module, "time", module.time))
            module.time = shim
        self._strategy = strategy

    def _always(self, fn: Callable, name: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.watch.seconds[name] = self.watch.seconds.get(name, 0.0) + (
                    time.perf_counter() - start
                )

        return timed

    def wrap_aggregator(self) -> None:
        """Time ``aggregator.apply`` (call once the strategy has built its aggregator)."""
        agg = self._strategy.aggregator
        agg.apply = self.watch.wrap(agg.apply, "aggregator.apply")

    def _patch(self, module: object, name: str) -> None:
        original = getattr(module, name)
        self._saved.append((module, name, original))
        setattr(module, name, self.watch.wrap(original, name))

    def restore(self) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)
        self._saved = []
