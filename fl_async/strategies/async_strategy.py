"""``AsyncStrategy``: Flower's Strategy with an asynchronous event loop in ``start()``.

DESIGN.md, "The event loop": dispatch to every node the policy allows, pull replies as they
come, apply each (in virtual-finish order with a virtual clock, in arrival order otherwise),
re-dispatch, evaluate, checkpoint, and survive what real fleets do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from fl_async import protocol
from fl_async.aggregators import SSGD, Aggregator, ClientUpdate
from fl_async.scheduling import Asynchronous, DispatchPolicy, TaskQueue, VirtualClock
from fl_async.strategies.checkpoint import load_checkpoint, save_checkpoint

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]

# Flower's error codes (flwr.common.constant.ErrorCode) that name a fault more precisely than
# "error": the SuperLink answers a message past its TTL with 3 and one to a lost node with 5.
_ERROR_KINDS = {3: "timeout", 4: "timeout", 5: "lost"}


@dataclass
class AsyncResult(Result):
    """Flower's ``Result`` plus what an asynchronous run adds: fault counts and budgets used."""

    faults: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    num_updates: int = 0
    server_steps: int = 0
    virtual_time: float = 0.0
    wall_time: float = 0.0
    stopped_by: str = ""


@dataclass
class _Task:
    """One task in flight."""

    node_id: int
    stable_id: int
    base_version: int
    iteration: int
    task_index: int
    seed: int
    start: float  # virtual time (virtual clock) or wall time (real-time mode)
    finish: float  # virtual finish time; math.inf in real-time mode
    dispatched_wall: float
    base: list[np.ndarray] | None = None  # a task-specific base (OD-SGD's compensation)


@dataclass
class _Node:
    """What the server knows of a node."""

    stable_id: int
    partition_id: int | None = None
    num_examples: int | None = None
    tasks: int = 0  # tasks dispatched so far (the clock's task index)
    busy: bool = False
    failed_at: int | None = None  # server step of its last failure
    failures: int = 0  # failures in a row


class AsyncStrategy(Strategy):
    """Asynchronous aggregation on Flower's Message API: any aggregator with any dispatch policy.

    Parameters
    ----------
    aggregator : Aggregator
        The update rule (``fl_async.aggregators``).
    policy : DispatchPolicy, optional
        Who may start a task when (default ``Asynchronous()``).
    clock : VirtualClock, optional
        Apply replies in virtual-finish order with simulated durations (reproducible); without
        one, replies are applied in arrival order and durations are measured (deployment).
    min_nodes : int (default: 2)
        Wait for this many connected nodes before the first task.
    max_in_flight : int, optional
        At most this many tasks at once. Default: every node, as far as ``memory_budget``
        allows (each task in flight may hold a stored base version of the model).
    memory_budget : float (default: 2 GiB)
        Bytes of stored base versions the default ``max_in_flight`` may use.
    eval_every : int, optional
        Central evaluation every this many server steps (default: the number of nodes).
    forget_after : int (default: 0)
        Server steps after a node's failure before the aggregator forgets it.
    target_metric : str (default: "accuracy")
        The ``evaluate_fn`` metric that ``target_accuracy`` is compared with.
    checkpoint_dir, checkpoint_every :
        Write model, version, aggregator, policy, clock and history atomically every
        ``checkpoint_every`` server steps; ``start()`` with the same directory resumes.
    identify_nodes : bool (default: True)
        Ask each node for its ``partition-id`` (a ``query`` message) to key reproducible state.
    task_config : mapping, optional
        Extra settings sent with every task (e.g. ``proximal-mu``).
    federated_evaluation : bool (default: False)
        At the end, send the final model to the idle nodes for evaluation.
    seed : int (default: 0)
        Seeds every task (``task-seed``) together with the node's stable id and task index.
    poll_interval : float (default: 0.02)
        Seconds between pulls while waiting for replies.
    refresh_interval : float (default: 2.0)
        Seconds between looks at the grid's node list (joins and departures).
    """

    def __init__(
        self,
        *,
        aggregator: Aggregator,
        policy: DispatchPolicy | None = None,
        clock: VirtualClock | None = None,
        min_nodes: int = 2,
        max_in_flight: int | None = None,
        memory_budget: float = 2 * 1024**3,
        eval_every: int | None = None,
        forget_after: int = 0,
        target_metric: str = "accuracy",
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int | None = None,
        identify_nodes: bool = True,
        task_config: Mapping[str, Any] | None = None,
        federated_evaluation: bool = False,
        seed: int = 0,
        poll_interval: float = 0.02,
        refresh_interval: float = 2.0,
    ) -> None:
        if not isinstance(aggregator, Aggregator):
            raise TypeError(f"aggregator must be an fl_async Aggregator, got {aggregator!r}")
        for name, value, minimum in (
            ("min_nodes", min_nodes, 1),
            ("max_in_flight", max_in_flight, 1),
            ("eval_every", eval_every, 1),
            ("forget_after", forget_after, 0),
            ("checkpoint_every", checkpoint_every, 1),
        ):
            if value is not None and (not isinstance(value, int) or value < minimum):
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ValueError("checkpoint_every needs checkpoint_dir")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}")
        self.aggregator = aggregator
        self.policy = policy if policy is not None else Asynchronous()
        self.clock = clock
        self.min_nodes = min_nodes
        self.max_in_flight = max_in_flight
        if memory_budget <= 0:
            raise ValueError(f"memory_budget must be > 0 bytes, got {memory_budget!r}")
        self.memory_budget = memory_budget
        self.eval_every = eval_every
        self.forget_after = forget_after
        self.target_metric = target_metric
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.checkpoint_every = checkpoint_every
        self.identify_nodes = identify_nodes
        self.task_config = dict(task_config or {})
        self.federated_evaluation = federated_evaluation
        self.seed = int(seed)
        self.poll_interval = poll_interval
        self.refresh_interval = refresh_interval
        self._auto: dict[str, Callable[[int], Any]] = {}
        """Aggregator attributes resolved from the number of nodes at start (presets' "auto")."""

    # ------------------------------------------------------------------- Flower's Strategy API
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
        self._ensure_run(arrays, config, grid, timeout=3600.0)
        self._refresh_nodes(grid)
        made = [self._make_task(node_id) for node_id in self._dispatchable()]
        for task, _ in made:  # matched to replies by node: at most one task per node
            self._track(f"configured-{task.node_id}", task)
        return [message for _, message in made]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply each reply as the event loop does; return the model and the last record."""
        last: MetricRecord | None = None
        for reply in replies:
            msg_id = reply.metadata.reply_to_message_id
            if msg_id not in self._in_flight:
                msg_id = f"configured-{reply.metadata.src_node_id}"
            task = self._in_flight.pop(msg_id, None)
            if task is None:
                self._fault("unknown-reply", f"a reply to unknown message {msg_id!r}")
                continue
            if self._queue is not None and msg_id in self._queue:
                self._queue.remove(msg_id)
            last = self._handle(task, reply, arrival=time.time())
        self._flush_barrier()
        return self._model_record(), last

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Evaluation messages for every connected node without a task in flight."""
        keys = list(arrays.keys())
        model = arrays.to_numpy_ndarrays()
        busy = {t.node_id for t in getattr(self, "_in_flight", {}).values()}
        return [
            protocol.evaluate_message(n, keys, model, dict(config), ttl=3600.0)
            for n in sorted(grid.get_node_ids())
            if n not in busy
        ]

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Average the replies' metrics weighted by ``num-examples`` (as FedAvg does)."""
        contents = [r.content for r in replies if not r.has_error()]
        if not contents:
            return None
        return aggregate_metricrecords(contents, "num-examples")

    # --------------------------------------------------------------------------- the event loop
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: EvaluateFn | None = None,
        *,
        max_updates: int | None = None,
        max_virtual_time: float | None = None,
        max_wall_time: float | None = None,
        target_accuracy: float | None = None,
    ) -> AsyncResult:
        """Run asynchronously until a budget is spent; a drop-in for ``FedAvg.start``.

        ``num_rounds`` is a budget of ``num_rounds x (number of nodes)`` accepted updates;
        ``max_updates``, ``max_virtual_time``, ``max_wall_time`` and ``target_accuracy`` (on
        ``evaluate_fn``'s ``target_metric``) stop it earlier. ``timeout`` is each task's TTL
        and the longest wait for a reply or for nodes.
        """
        self._timeout = float(timeout)
        self._wall_start = time.time()
        self._evaluate_fn = evaluate_fn
        resumed = self._try_resume(grid, initial_arrays, train_config)
        if not resumed:
            self._ensure_run(initial_arrays, train_config, grid, timeout=self._timeout, fresh=True)
        log(
            INFO, "Starting %s (asynchronous) with %d nodes:", type(self).__name__, len(self._nodes)
        )
        self.summary()
        num_nodes = len(self._nodes)
        budget = num_rounds * num_nodes
        if max_updates is not None:
            budget = min(budget, max_updates)
        if self.eval_every is None:
            self.eval_every = max(1, num_nodes)
        if not resumed:
            self._evaluate()
        stop = ""
        while not stop:
            self._refresh_nodes(grid, every=self.refresh_interval)
            if self._num_updates >= budget:
                stop = "budget"
            elif max_wall_time is not None and time.time() - self._wall_start >= max_wall_time:
                stop = "max-wall-time"
            elif max_virtual_time is not None and self._now >= max_virtual_time:
                stop = "max-virtual-time"
            elif target_accuracy is not None and self._reached(target_accuracy):
                stop = "target-accuracy"
            elif not self._dispatch(grid) and not self._in_flight:
                stop = self._wait_for_nodes(grid)
            else:
                stepped = self._next_reply(grid)
                if stepped:
                    self._after_step()
        if not self._result.evaluate_metrics_serverapp.get(self.aggregator.version):
            self._evaluate()
        if self.checkpoint_dir is not None:
            self._checkpoint()  # before tasks in flight are abandoned: a resume sends them again
        if self.federated_evaluation:
            self._federated_evaluation(grid, evaluate_config)
        return self._finish(stop)

    # ------------------------------------------------------------------------------ set-up
    def _ensure_run(
        self,
        arrays: ArrayRecord,
        config: ConfigRecord | None,
        grid: Grid,
        *,
        timeout: float,
        fresh: bool = False,
    ) -> None:
        """Initialise the run state once (or again, when ``fresh``)."""
        if not fresh and getattr(self, "_started", False):
            return
        self._started = True
        self._timeout = float(getattr(self, "_timeout", timeout))
        self._wall_start = getattr(self, "_wall_start", time.time())
        self._keys = list(arrays.keys())
        self._train_config = dict(config or {})
        self._nodes: dict[int, _Node] = {}
        self._by_stable: dict[int, int] = {}
        self._order: list[int] = []  # stable ids, sorted: the dispatch order
        self._in_flight: dict[str, _Task] = {}
        self._stash: dict[str, Message] = {}
        self._queue = TaskQueue() if self.clock is not None else None
        self._bases: dict[int, tuple[list[np.ndarray], int]] = {}
        self._forget_at: dict[int, int] = {}
        self._now = 0.0
        self._num_updates = 0
        self._num_replies = 0
        self._faults: dict[str, int] = {}
        self._result = AsyncResult()
        self._last_eval_step = -1
        self._last_checkpoint_step = 0
        self._last_refresh = 0.0
        self._record_cache: tuple[int, ArrayRecord] | None = None
        self._wait_for_min_nodes(grid)
        for name, rule in self._auto.items():  # "auto" hyperparameters need the node count
            owner = self.aggregator if hasattr(self.aggregator, name) else self
            setattr(owner, name, rule(len(self._nodes)))
        self.aggregator.init(arrays.to_numpy_ndarrays())
        self._model_bytes = max(1, sum(a.nbytes for a in self.aggregator.params))

    def _wait_for_min_nodes(self, grid: Grid) -> None:
        deadline = time.time() + self._timeout
        while len(set(grid.get_node_ids())) < self.min_nodes:
            if time.time() > deadline:
                raise TimeoutError(
                    f"only {len(set(grid.get_node_ids()))} nodes connected after "
                    f"{self._timeout:.0f} s; min_nodes={self.min_nodes}"
                )
            time.sleep(0.1)
        self._refresh_nodes(grid)

    def _refresh_nodes(self, grid: Grid, every: float = 0.0) -> None:
        """Admit new nodes (identified by a query) and retire vanished ones."""
        if time.time() - self._last_refresh < every:
            return
        self._last_refresh = time.time()
        connected = set(grid.get_node_ids())
        new = sorted(connected - set(self._nodes))
        if new:
            for node_id, info in zip(new, self._identify(grid, new), strict=True):
                self._admit(node_id, *info)
        for node_id in sorted(set(self._nodes) - connected):
            node = self._nodes.pop(node_id)
            del self._by_stable[node.stable_id]
            self._order = sorted(self._by_stable)
            self._fault("node-left", f"node {node_id} (stable id {node.stable_id}) left")
            for msg_id, task in list(self._in_flight.items()):
                if task.node_id == node_id:
                    self._drop(msg_id, "lost")
            self.policy.leave(node.stable_id)
            self._schedule_forget(node.stable_id)

    def _identify(self, grid: Grid, node_ids: list[int]) -> list[tuple[int | None, int | None]]:
        """Ask nodes for ``partition-id`` and ``num-examples``; (None, None) where they cannot."""
        if not self.identify_nodes:
            return [(None, None)] * len(node_ids)
        wait = min(self._timeout, 120.0)
        ids = list(grid.push_messages([protocol.query_message(n, ttl=wait) for n in node_ids]))
        answers: dict[str, Message] = {}
        deadline = time.time() + wait
        while len(answers) < len(ids) and time.time() < deadline:
            for reply in grid.pull_messages([i for i in ids if i not in answers]):
                answers[reply.metadata.reply_to_message_id] = reply
            if len(answers) < len(ids):
                time.sleep(self.poll_interval)
        found = []
        for node_id, msg_id in zip(node_ids, ids, strict=True):
            reply = answers.get(msg_id)
            metrics = {} if reply is None or reply.has_error() else protocol.metrics_of(reply)
            partition = metrics.get("partition-id")
            examples = metrics.get("num-examples")
            if partition is None:
                log(
                    WARNING,
                    "node %s did not report a partition-id; its node id keys its state "
                    "(runs are reproducible only when every node reports one)",
                    node_id,
                )
            found.append(
                (
                    None if partition is None else int(partition),
                    None if examples is None else int(examples),
                )
            )
        return found

    def _admit(self, node_id: int, partition: int | None, examples: int | None) -> None:
        stable = (
            partition if partition is not None and partition not in self._by_stable else node_id
        )
        if partition is not None and stable != partition:
            log(
                WARNING,
                "partition-id %s is reported twice; node %s keeps its id",
                partition,
                node_id,
            )
        self._nodes[node_id] = _Node(
            stable_id=stable, partition_id=partition, num_examples=examples
        )
        self._by_stable[stable] = node_id
        self._order = sorted(self._by_stable)
        self._forget_at.pop(stable, None)
        self.policy.join(stable)

    # ----------------------------------------------------------------------------- dispatch
    def _dispatchable(self) -> list[int]:
        """Idle nodes the policy lets start now, by stable id (room in ``max_in_flight``)."""
        version = self.aggregator.version
        limit = self.max_in_flight
        if limit is None:
            limit = min(len(self._nodes), max(1, int(self.memory_budget // self._model_bytes)))
        room = limit - len(self._in_flight)
        chosen = []
        for stable in self._order:
            if room <= 0:
                break
            node_id = self._by_stable[stable]
            node = self._nodes[node_id]
            if node.busy or not self._may_retry(node):
                continue
            if self.policy.may_start(stable, version):
                chosen.append(node_id)
                room -= 1
        return chosen

    def _may_retry(self, node: _Node) -> bool:
        # A failed node gets work again once the model has moved on by 1, 2, 4, ... (at most
        # 64) server steps for each failure in a row, or when nothing else runs: a node that
        # fails at once cannot spin the loop, and a dead one costs few tasks until it is gone.
        if node.failed_at is None or not self._in_flight:
            return True
        backoff = 2 ** min(node.failures - 1, 6)
        return self.aggregator.version >= node.failed_at + backoff

    def _dispatch(self, grid: Grid) -> bool:
        """Send a task to every node that may start one; return whether any was sent."""
        chosen = self._dispatchable()
        if not chosen:
            return False
        made = [self._make_task(node_id) for node_id in chosen]
        ids = list(grid.push_messages([message for _, message in made]))
        for (task, _), msg_id in zip(made, ids, strict=True):
            self._track(msg_id, task)
        if len(ids) < len(made):
            self._fault("push-failed", f"{len(made) - len(ids)} tasks could not be pushed")
        return bool(ids)

    def _make_task(self, node_id: int) -> tuple[_Task, Message]:
        node = self._nodes[node_id]
        version = self.aggregator.version
        iteration = self.policy.started(node.stable_id, version)
        base = self._task_base(node.stable_id, iteration)
        seed = int(
            np.random.SeedSequence([self.seed, node.stable_id, node.tasks]).generate_state(1)[0]
        )
        start = self._now if self.clock is not None else time.time()
        finish = math.inf
        if self.clock is not None:
            finish = start + self.clock.duration(
                node.stable_id,
                node.tasks,
                examples=self._examples_for(node),
                bytes_down=self._model_bytes,
                bytes_up=self._model_bytes,
            )
        task = _Task(
            node_id=node_id,
            stable_id=node.stable_id,
            base_version=version,
            iteration=iteration,
            task_index=node.tasks,
            seed=seed,
            start=start,
            finish=finish,
            dispatched_wall=time.time(),
            base=base,
        )
        node.tasks += 1
        node.busy = True
        config = self._task_config(version, seed, iteration)
        if base is not None:
            record = protocol.to_record(self._keys, base)
        else:
            record = self._version_record(version)
        return task, protocol.train_message(node_id, record, config, ttl=self._timeout)

    def _task_config(self, version: int, seed: int, iteration: int) -> dict[str, Any]:
        """A task's config: the training settings and what identifies the task."""
        return {
            **self._train_config,
            **self.task_config,
            "server-step": version,
            "server-round": version + 1,
            "task-seed": seed,
            "iteration": iteration,
        }

    def _version_record(self, version: int) -> ArrayRecord:
        """The current model as an ArrayRecord, serialised once per version for all its tasks."""
        cached = self._record_cache
        if cached is None or cached[0] != version:
            cached = self._record_cache = (version, self._model_record())
        return cached[1]

    def _examples_for(self, node: _Node) -> int:
        """Examples the next task processes: last ``num-examples`` x local epochs (or steps)."""
        config = {**self._train_config, **self.task_config}
        if int(config.get("local-steps", 0)) > 0:
            return int(config["local-steps"]) * int(config.get("batch-size", 32))
        known = node.num_examples if node.num_examples is not None else 100
        return known * int(config.get("local-epochs", 1))

    def _track(self, msg_id: str, task: _Task) -> None:
        self._in_flight[msg_id] = task
        if task.base is None:
            version = task.base_version
            arrays, count = self._bases.get(version) or (
                [p.copy() for p in self.aggregator.params],
                0,
            )
            self._bases[version] = (arrays, count + 1)
        if self._queue is not None:
            self._queue.push(msg_id, task.finish, task.stable_id)

    def _task_base(self, stable_id: int, iteration: int) -> list[np.ndarray] | None:
        """A task-specific base model, or None for the current global model (hook)."""
        return None

    # ------------------------------------------------------------------------------ replies
    def _next_reply(self, grid: Grid) -> bool:
        """Wait for and handle the next reply; return whether the server stepped."""
        version = self.aggregator.version
        if self._queue is not None:
            msg_id, _ = self._queue.peek()
            reply = self._wait_for(grid, [msg_id])
            if reply is None:
                self._drop(msg_id, "timeout")
            else:
                self._queue.pop()
                task = self._in_flight.pop(msg_id)
                self._handle(task, reply, arrival=time.time())
        else:
            reply = self._wait_for(grid, list(self._in_flight))
            if reply is None:
                oldest = min(self._in_flight, key=lambda m: self._in_flight[m].dispatched_wall)
                self._drop(oldest, "timeout")
            else:
                msg_id = reply.metadata.reply_to_message_id
                self._handle(self._in_flight.pop(msg_id), reply, arrival=time.time())
        self._flush_barrier()
        return self.aggregator.version > version

    def _wait_for(self, grid: Grid, wanted: list[str]) -> Message | None:
        """The first reply among ``wanted`` (stashing others), or None when the oldest timed out."""
        interval = self.poll_interval
        while True:
            for msg_id in wanted:
                if msg_id in self._stash:
                    return self._stash.pop(msg_id)
            pending = [m for m in self._in_flight if m not in self._stash]
            for reply in grid.pull_messages(pending) if pending else []:
                self._stash[reply.metadata.reply_to_message_id] = reply
            if any(m in self._stash for m in wanted):
                continue
            oldest = min(self._in_flight[m].dispatched_wall for m in wanted)
            if time.time() - oldest > self._timeout:
                return None
            time.sleep(interval)
            # A pull is cheap next to a reply left waiting: back off to 50 ms at most.
            interval = min(interval * 1.5, 0.05)

    def _handle(self, task: _Task, reply: Message, *, arrival: float) -> MetricRecord | None:
        """Turn one reply into a client update and apply it; record what happened."""
        node = self._nodes.get(task.node_id)
        base = self._release_base(task)
        if self.clock is not None:
            self._now = max(self._now, task.finish)
        if node is not None:
            node.busy = False
        if reply.has_error():
            kind = _ERROR_KINDS.get(reply.error.code, "error")
            self._failed(task, f"error reply {reply.error.code}: {reply.error.reason}", kind)
            return None
        try:
            parsed = protocol.read_train_reply(reply)
        except ValueError as err:
            self._failed(task, str(err), "malformed")
            return None
        delta = parsed.arrays if parsed.is_pseudo_gradient else _difference(base, parsed.arrays)
        update = ClientUpdate(
            node_id=task.stable_id,
            delta=delta,
            base=base,
            staleness=self.aggregator.version - task.base_version,
            num_examples=parsed.num_examples,
            iteration=task.iteration,
        )
        rejected_before = sum(self.aggregator.num_rejected.values())
        self.aggregator.apply(update)
        accepted = sum(self.aggregator.num_rejected.values()) == rejected_before
        duration = task.finish - task.start if self.clock is not None else arrival - task.start
        self.policy.finished(task.stable_id, duration=duration)
        if node is not None:
            node.failed_at = None
            node.failures = 0
            if parsed.num_examples > 0:
                node.num_examples = parsed.num_examples
        if accepted:
            self._num_updates += 1
            self._accepted(task, update)
        self._num_replies += 1
        record = protocol.metric_record(
            {
                **parsed.metrics,
                "server-step": self.aggregator.version,
                "node-id": task.node_id,
                "stable-id": task.stable_id,
                "staleness": update.staleness,
                "iteration": task.iteration,
                "virtual-time": self._now,
                "wall-time": arrival - self._wall_start,
                "accepted": accepted,
            }
        )
        self._result.train_metrics_clientapp[self._num_replies] = record
        return record

    def _accepted(self, task: _Task, update: ClientUpdate) -> None:
        """Hook: an update was accepted (OD-SGD keeps it for the node's compensation)."""

    def _release_base(self, task: _Task) -> list[np.ndarray]:
        if task.base is not None:
            return task.base
        arrays, count = self._bases[task.base_version]
        if count <= 1:
            del self._bases[task.base_version]
        else:
            self._bases[task.base_version] = (arrays, count - 1)
        return arrays

    def _failed(self, task: _Task, why: str, kind: str) -> None:
        self._fault(kind, f"node {task.node_id} (stable id {task.stable_id}): {why}")
        node = self._nodes.get(task.node_id)
        if node is not None:
            node.busy = False
            node.failed_at = self.aggregator.version
            node.failures += 1
        self.policy.leave(task.stable_id)
        self._schedule_forget(task.stable_id)

    def _drop(self, msg_id: str, kind: str) -> None:
        """Give up on a task in flight (timed out, or its node left)."""
        task = self._in_flight.pop(msg_id)
        self._stash.pop(msg_id, None)
        if self._queue is not None and msg_id in self._queue:
            self._queue.remove(msg_id)
        self._release_base(task)
        if self.clock is not None and kind == "timeout":
            self._now = max(self._now, task.finish)
        self._failed(task, f"task {kind}", kind)

    def _flush_barrier(self) -> None:
        """Step a barrier rule once nothing in flight can still join its step."""
        agg = self.aggregator
        if not isinstance(agg, SSGD):
            return
        while agg.held and not self._barrier_owed():
            if not agg.flush():
                break

    def _barrier_owed(self) -> bool:
        """Whether an update for the step being filled may still come: from a task in flight,
        or from an active node that has not reported for it yet (it may be waiting to start)."""
        version = self.aggregator.version
        if any(self._joins_barrier(t) for t in self._in_flight.values()):
            return True
        return any(self.policy.clock(k) <= version for k in self.policy.active)

    def _joins_barrier(self, task: _Task) -> bool:
        """Whether ``task``'s update belongs to the barrier now being filled."""
        return task.base_version == self.aggregator.version

    def _schedule_forget(self, stable_id: int) -> None:
        if self.forget_after == 0:
            self.aggregator.forget(stable_id)
        else:
            self._forget_at[stable_id] = self.aggregator.version + self.forget_after

    # ------------------------------------------------------------- evaluation, checkpoints
    def _after_step(self) -> None:
        version = self.aggregator.version
        for stable, at in list(self._forget_at.items()):
            if version >= at:
                self.aggregator.forget(stable)
                del self._forget_at[stable]
        if version - self._last_eval_step >= self.eval_every:
            self._evaluate()
        if (
            self.checkpoint_every is not None
            and version - self._last_checkpoint_step >= self.checkpoint_every
        ):
            self._checkpoint()

    def _evaluate(self) -> None:
        version = self.aggregator.version
        self._last_eval_step = version
        if self._evaluate_fn is None:
            return
        metrics = self._evaluate_fn(version, self._model_record())
        if metrics is None:
            return
        record = protocol.metric_record(
            {
                **dict(metrics),
                "virtual-time": self._now,
                "wall-time": time.time() - self._wall_start,
                "num-updates": self._num_updates,
            }
        )
        self._result.evaluate_metrics_serverapp[version] = record
        shown = ", ".join(f"{k}={v:.4g}" for k, v in dict(metrics).items())
        if self.clock is not None:
            log(INFO, "step %d | virtual time %.1f | %s", version, self._now, shown)
        else:
            log(INFO, "step %d | wall time %.1f s | %s", version, record["wall-time"], shown)

    def _reached(self, target: float) -> bool:
        if not self._result.evaluate_metrics_serverapp:
            return False
        last = self._result.evaluate_metrics_serverapp[max(self._result.evaluate_metrics_serverapp)]
        value = last.get(self.target_metric)
        return value is not None and float(value) >= target

    def _federated_evaluation(self, grid: Grid, config: ConfigRecord | None) -> None:
        self._in_flight.clear()  # the run is over: tasks still in flight are abandoned
        self._stash.clear()
        messages = self.configure_evaluate(
            self.aggregator.version, self._model_record(), config or ConfigRecord(), grid
        )
        replies = grid.send_and_receive(messages, timeout=self._timeout)
        metrics = self.aggregate_evaluate(self.aggregator.version, replies)
        if metrics is not None:
            self._result.evaluate_metrics_clientapp[self.aggregator.version] = metrics

    def _checkpoint(self) -> None:
        self._last_checkpoint_step = self.aggregator.version
        state = {
            "keys": self._keys,
            "aggregator": self.aggregator.state_dict(),
            "policy": self.policy.state_dict(),
            "clock": None if self.clock is None else self.clock.state_dict(),
            "now": self._now,
            "num_updates": self._num_updates,
            "num_replies": self._num_replies,
            "faults": dict(self._faults),
            "last_eval_step": self._last_eval_step,
            "train_config": self._train_config,
            "nodes": {
                n.stable_id: (n.partition_id, n.num_examples, n.tasks) for n in self._nodes.values()
            },
            "forget_at": dict(self._forget_at),
            "in_flight": [
                (
                    task.stable_id,
                    task.base_version,
                    task.iteration,
                    task.task_index,
                    task.seed,
                    task.start,
                    task.finish,
                    task.base if task.base is not None else self._bases[task.base_version][0],
                    task.base is not None,  # a task-specific base (OD-SGD's compensation)
                )
                for task in self._in_flight.values()
            ],  # fmt: skip
            "train_metrics": {k: dict(v) for k, v in self._result.train_metrics_clientapp.items()},
            "evaluate_metrics": {
                k: dict(v) for k, v in self._result.evaluate_metrics_serverapp.items()
            },
            "extra": self._extra_state(),
        }
        save_checkpoint(self.checkpoint_dir, state)

    def _extra_state(self) -> dict[str, Any]:
        """Hook: a preset's own state for checkpoints."""
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        """Hook: restore ``_extra_state()``."""

    def _try_resume(
        self, grid: Grid, initial_arrays: ArrayRecord, train_config: ConfigRecord | None
    ) -> bool:
        if self.checkpoint_dir is None:
            return False
        state = load_checkpoint(self.checkpoint_dir)
        if state is None:
            return False
        self._ensure_run(initial_arrays, train_config, grid, timeout=self._timeout, fresh=True)
        self._keys = state["keys"]
        self.aggregator.load_state_dict(state["aggregator"])
        self.policy.load_state_dict(state["policy"])
        if self.clock is not None and state["clock"] is not None:
            self.clock.load_state_dict(state["clock"])
        self._now = state["now"]
        self._num_updates = state["num_updates"]
        self._num_replies = state["num_replies"]
        self._faults = dict(state["faults"])
        self._last_eval_step = state["last_eval_step"]
        self._last_checkpoint_step = self.aggregator.version
        self._forget_at = dict(state["forget_at"])
        self._result.train_metrics_clientapp = {
            k: protocol.metric_record(v) for k, v in state["train_metrics"].items()
        }
        self._result.evaluate_metrics_serverapp = {
            k: protocol.metric_record(v) for k, v in state["evaluate_metrics"].items()
        }
        for stable, (_, examples, tasks) in state["nodes"].items():
            node_id = self._by_stable.get(stable)
            if node_id is not None:
                self._nodes[node_id].tasks = tasks
                self._nodes[node_id].num_examples = examples
        self._load_extra_state(state["extra"])
        self._resume_tasks(grid, state["in_flight"])
        log(INFO, "Resumed from %s at server step %d", self.checkpoint_dir, self.aggregator.version)
        return True

    def _resume_tasks(self, grid: Grid, saved: list[tuple]) -> None:
        """Send the tasks that were in flight again, exactly as they were."""
        for stable, version, iteration, index, seed, start, finish, base, own in saved:
            node_id = self._by_stable.get(stable)
            if node_id is None:
                self._fault("lost", f"stable id {stable} did not come back after the resume")
                self.policy.leave(stable)
                continue
            task = _Task(node_id, stable, version, iteration, index, seed, start, finish,
                         time.time(), base if own else None)  # fmt: skip
            if not own and version not in self._bases:
                self._bases[version] = (base, 0)  # _track counts this task in
            config = self._task_config(version, seed, iteration)
            record = protocol.to_record(self._keys, base)
            message = protocol.train_message(node_id, record, config, ttl=self._timeout)
            (msg_id,) = grid.push_messages([message])
            self._nodes[node_id].busy = True
            self._track(msg_id, task)

    # ------------------------------------------------------------------------------ helpers
    def _wait_for_nodes(self, grid: Grid) -> str:
        """Nothing is in flight: wait for a node that may start, or give up after the timeout."""
        deadline = time.time() + self._timeout
        while time.time() < deadline:
            self._refresh_nodes(grid, every=1.0)
            if self._dispatchable():
                return ""
            if (
                self._nodes
                and not self._in_flight
                and not any(
                    self.policy.may_start(n.stable_id, self.aggregator.version)
                    for n in self._nodes.values()
                )
            ):
                return "deadlock"
            time.sleep(0.2)
        return "no-nodes"

    def _fault(self, kind: str, message: str) -> None:
        self._faults[kind] = self._faults.get(kind, 0) + 1
        log(WARNING, "fault (%s): %s", kind, message)

    def _model_record(self) -> ArrayRecord:
        return protocol.to_record(self._keys, self.aggregator.params)

    def _finish(self, stop: str) -> AsyncResult:
        result = self._result
        result.arrays = self._model_record()
        result.faults = dict(self._faults)
        result.rejected = dict(self.aggregator.num_rejected)
        result.num_updates = self._num_updates
        result.server_steps = self.aggregator.version
        result.virtual_time = self._now
        result.wall_time = time.time() - self._wall_start
        result.stopped_by = stop
        log(
            INFO,
            "Finished (%s): %d updates, %d server steps, virtual time %.1f, wall time %.1f s, "
            "faults %s, rejected %s",
            stop, result.num_updates, result.server_steps, result.virtual_time,
            result.wall_time, result.faults, result.rejected,
        )  # fmt: skip
        return result


def _difference(base: list[np.ndarray], trained: list[np.ndarray]) -> list[np.ndarray]:
    """``base - trained`` per array; arrays that do not match are passed on for rejection."""
    if len(base) != len(trained) or any(
        b.shape != t.shape or (b.dtype.kind == "f") != (t.dtype.kind == "f")
        for b, t in zip(base, trained, strict=False)
    ):
        return trained
    with np.errstate(all="ignore"):
        # In place into the freshly decoded arrays where possible: no allocation per reply.
        return [
            np.subtract(b, t, out=t) if t.flags.writeable and t.dtype == b.dtype else b - t
            for b, t in zip(base, trained, strict=True)
        ]
