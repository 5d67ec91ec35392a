"""``AsyncStrategy``: Flower's Strategy with an asynchronous event loop in ``start()``.

The loop (docs/architecture.md, "The event loop") sends a task to every node the dispatch policy
allows, handles replies one at a time in the reply order, re-dispatches, evaluates and
checkpoints, until a budget is spent or the run can make no more progress. Each concern is a
collaborator with its own module: the node registry (``nodes``), the task book (``tasks``), the
reply order (``order``), the recorder (``recorder``), the checkpointer (``checkpoint``) and the
task bases (``compensation``); the aggregator and the dispatch policy decide the arithmetic and
who may start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from logging import INFO
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async.aggregators import GUARD_FACTOR, Aggregator, UpdateGuard
from fl_async.scheduling import Asynchronous, DispatchPolicy, VirtualClock
from fl_async.strategies.checkpoint import Checkpointer
from fl_async.strategies.claims import WEIGHT_CAP, WeightCap
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.dispatch import TaskDispatch
from fl_async.strategies.evaluation import ShouldStop, StepBoundaries, check_should_stop, grid_times
from fl_async.strategies.flower_api import FlowerStrategyAPI
from fl_async.strategies.membership import NodeMembership
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.order import reply_order
from fl_async.strategies.outbox import Outbox
from fl_async.strategies.recorder import Recorder
from fl_async.strategies.replies import ReplyHandling
from fl_async.strategies.result import AsyncResult
from fl_async.strategies.resume import RunSnapshot
from fl_async.strategies.tasks import TaskBook
from fl_async.validation import InvalidArgument, check_int, check_number

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


class AsyncStrategy(
    TaskDispatch, ReplyHandling, StepBoundaries, RunSnapshot, NodeMembership, FlowerStrategyAPI
):
    """Asynchronous aggregation on Flower's Message API: any aggregator with any dispatch policy.

    Parameters
    ----------
    aggregator : Aggregator
        The update rule (``fl_async.aggregators``).
    policy : DispatchPolicy, optional
        Who may start a task when (default ``Asynchronous()``).
    clock : VirtualClock, optional
        Handle replies in virtual-finish order with simulated durations (reproducible); without
        one, replies are handled in arrival order and durations are measured (deployment).
    task_bases : TaskBases, optional
        Gives a node's task a base model of its own (OD-SGD's compensation); default: the
        current global model.
    min_nodes : int (default: 2)
        Wait for this many connected nodes before the first task (and for one admitted).
    max_in_flight : int, optional
        At most this many tasks at once. Default: every node, as far as ``memory_budget``
        allows (each task in flight may hold a stored base version of the model).
    memory_budget : float (default: 2 GiB)
        Bytes of stored base versions the default ``max_in_flight`` may use.
    eval_every : int, optional
        Central evaluation every this many server steps (default: the number of nodes).
    eval_grid : int, optional
        Also evaluate the model in force at ``eval_grid`` equally spaced virtual times over
        ``start()``'s ``max_virtual_time`` (``T i / G``, i = 1..G: the version applied at or
        before each), so that strategies compare on the same points (docs/algorithms.md,
        Metrics). Needs a clock.
    forget_after : int (default: 0)
        Server steps after a node's failure before the aggregator forgets it.
    max_failures : int (default: 5)
        A node whose tasks fail, or whose updates are rejected for their content, this many
        times in a row leaves the run.
    patience : int, optional
        Stop with ``no-progress`` after this many tasks in a row end without an accepted update
        (default: 10 per node, at least 100). Each task's wait is bounded by ``timeout``.
    target_metric : str (default: "accuracy")
        The ``evaluate_fn`` metric that ``target_accuracy`` is compared with.
    checkpoint_dir, checkpoint_every :
        Write the run's whole state atomically every ``checkpoint_every`` server steps (and at
        the end); ``start()`` with the same directory resumes from it.
    identify_nodes : bool or "at-once" (default: True)
        Query each node's ``partition-id`` to key reproducible state (one node first; with
        ``"at-once"`` all at once, for a ClientApp known to answer, as fl-async's own).
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
    guard : UpdateGuard, float or None (default: 3.0)
        Judge every update before the rule sees it (``UpdateGuard``): a number is its
        ``factor``, the multiple of the nodes' median norm an update is clipped to; None or 0:
        off.
    weight_cap : float or None (default: 10.0)
        A reply's sample count weighs at most this multiple of the median count the connected
        nodes declared, and never more than its node declared (None or 0: the latter only).
    send_ahead : int, optional
        Keep at most this many tasks unanswered at the grid, held ones sent earliest virtual
        finish first, so a simulation's actors compute them about in the order they are applied
        (``Outbox``; same history; needs a clock). Default: every task is sent when made.
    """

    _auto: list[tuple[object, str, Callable[[int], Any]]]
    """``(owner, attribute, rule)``: hyperparameters resolved from the node count at start (the
    presets' ``"auto"``)."""

    def __init__(
        self,
        *,
        aggregator: Aggregator,
        policy: DispatchPolicy | None = None,
        clock: VirtualClock | None = None,
        task_bases: TaskBases | None = None,
        min_nodes: int = 2,
        max_in_flight: int | None = None,
        memory_budget: float = 2 * 1024**3,
        eval_every: int | None = None,
        eval_grid: int | None = None,
        forget_after: int = 0,
        max_failures: int = 5,
        patience: int | None = None,
        target_metric: str = "accuracy",
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int | None = None,
        identify_nodes: bool | str = True,
        task_config: dict[str, Any] | None = None,
        federated_evaluation: bool = False,
        seed: int = 0,
        poll_interval: float = 0.02,
        refresh_interval: float = 2.0,
        guard: UpdateGuard | float | None = GUARD_FACTOR,
        send_ahead: int | None = None,
        weight_cap: float | None = WEIGHT_CAP,
    ) -> None:
        _check_pairs(aggregator, clock, checkpoint_dir, checkpoint_every, eval_grid, send_ahead)
        self.aggregator, self.send_ahead = aggregator, send_ahead
        self.policy = policy if policy is not None else Asynchronous()
        self.clock, self.target_metric, self.identify_nodes = clock, target_metric, identify_nodes
        self.task_bases = task_bases if task_bases is not None else TaskBases()
        self.min_nodes = check_int("min_nodes", min_nodes, minimum=1)
        self.max_in_flight = check_int("max_in_flight", max_in_flight, minimum=1, allow_none=True)
        self.memory_budget = check_number("memory_budget", memory_budget, minimum=0, min_open=True)
        self.eval_every = check_int("eval_every", eval_every, minimum=1, allow_none=True)
        self.eval_grid = check_int("eval_grid", eval_grid, minimum=1, allow_none=True)
        self.forget_after = check_int("forget_after", forget_after, minimum=0)
        self.max_failures = check_int("max_failures", max_failures, minimum=1)
        self.patience = check_int("patience", patience, minimum=1, allow_none=True)
        self.checkpoint_every = check_int("checkpoint_every", checkpoint_every, minimum=1,
                                          allow_none=True)  # fmt: skip
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.task_config, self.federated_evaluation = dict(task_config or {}), federated_evaluation
        self.seed = check_int("seed", seed, minimum=0)
        self.poll_interval = check_number("poll_interval", poll_interval, minimum=0, min_open=True)
        self.refresh_interval = check_number("refresh_interval", refresh_interval, minimum=0)
        self.guard = UpdateGuard.of(guard)
        self.weight_cap = WeightCap(weight_cap).ratio  # checked here, not at start()
        self._auto = []
        self._new_run(timeout=3600.0, evaluate_fn=None)

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
        should_stop: ShouldStop | None = None,
        *,
        max_updates: int | None = None,
        max_virtual_time: float | None = None,
        max_wall_time: float | None = None,
        target_accuracy: float | None = None,
    ) -> AsyncResult:
        """Run asynchronously until a budget is spent; a drop-in for ``FedAvg.start``.

        ``num_rounds``: a budget of ``num_rounds x (number of nodes)`` accepted updates; the
        ``max_*`` limits, ``target_accuracy`` (on ``evaluate_fn``'s ``target_metric``) and Flower
        1.43's ``should_stop(server_step, result)`` stop it earlier. ``timeout``: each task's TTL
        and the longest wait. A run that cannot progress stops by itself (``stopped_by``).
        """
        self._new_run(timeout, evaluate_fn, max_wall_time, should_stop)
        if self._checkpointer is not None:
            self._checkpointer.claim()  # before resuming: a run still alive on it stops
        self._grid = grid_times(self.eval_grid, max_virtual_time)
        resumed = self._resume(grid, initial_arrays, train_config)
        if not resumed:
            self._begin(grid, initial_arrays, train_config)
        log(INFO, "Starting %s (asynchronous) with %d nodes:", type(self).__name__,
            len(self._registry))  # fmt: skip
        self.summary()
        limits = (num_rounds * len(self._registry), max_updates, max_virtual_time,
                  target_accuracy)  # fmt: skip
        if not resumed:  # step 0, as Flower's start() evaluates before the first round, while
            self._dispatch_early(grid, limits)  # the first tasks train (if it cannot stop the run)
            self._evaluate()
        stop = ""
        while not stop:
            self._check_owner()
            self._refresh_nodes(grid, every=self.refresh_interval, wait=False)
            stop = self._stop_reason(*limits)
            if stop:
                break
            if not (self._draining() or self._dispatch(grid) or self._book):
                stop = "" if self._open_guard() else self._wait_for_nodes(grid)
            elif self._next_reply(grid):
                self._after_step(dispatch=lambda: self._dispatch_early(grid, limits))
        return self._end(grid, stop, evaluate_config)

    def _dispatch_early(self, grid: Grid, limits: tuple) -> None:
        """Send the tasks a step allows before its evaluation when that evaluation cannot stop
        the run (no target accuracy, no ``should_stop``) and nothing else stops it: what the
        loop would send next, sent before the server spends its time evaluating."""
        *_, target = limits  # target accuracy: an evaluation that may stop the run
        if (
            target is None
            and self._should_stop is None
            and not self._draining()
            and not self._stop_reason(*limits)
        ):
            self._dispatch(grid)

    def _stop_reason(self, budget: int, max_updates: int | None, max_virtual_time: float | None,
                     target: float | None) -> str:  # fmt: skip
        """The budget or limit that ends the run now ("" to go on)."""
        rec = self._recorder
        if self._stop_requested:
            return "should-stop"
        if rec.num_updates >= (budget if max_updates is None else min(budget, max_updates)):
            return "budget"
        if self._out_of_wall_time():
            return "max-wall-time"
        if max_virtual_time is not None and self._order.now >= max_virtual_time:
            return "max-virtual-time"
        if target is not None and rec.reached(target, self.target_metric):
            return "target-accuracy"
        if self._all_nodes_left():
            return "no-active-nodes"
        detail = self.guard.one_node(self._patience)
        if detail:
            self._stop_detail = detail
            return "one-node"
        if rec.since_progress >= self._patience:
            self._stop_detail = (
                f"{rec.since_progress} tasks in a row ended without an accepted update"
            )
            return "no-progress"
        return ""

    def _end(self, grid: Grid, stop: str, evaluate_config: ConfigRecord | None) -> AsyncResult:
        """Evaluate the final model, checkpoint, optionally evaluate on the nodes; the result."""
        if not self._recorder.evaluated(self.aggregator.version):
            self._evaluate()
        self._evaluate_grid(until=self._order.now, inclusive=True)
        if self._checkpointer is not None:
            self._save_checkpoint()  # before tasks in flight are abandoned: a resume resends them
        self._book.abandon()
        self._outbox.clear()
        if self.federated_evaluation:
            self._federated_evaluation(grid, evaluate_config)
        return self._recorder.finish(
            stop, self._stop_detail, self._model_record(),
            rejected=self.aggregator.num_rejected, server_steps=self.aggregator.version,
            now=self._order.now,
        )  # fmt: skip

    # ------------------------------------------------------------------------------ set-up
    def _new_run(self, timeout: float, evaluate_fn: EvaluateFn | None,
                 max_wall_time: float | None = None,
                 should_stop: ShouldStop | None = None) -> None:  # fmt: skip
        """Create all of a run's state, empty (the one place run state is made)."""
        self._timeout = float(timeout)
        self._max_wall_time = max_wall_time
        self._next_sweep = 0.0  # the first pull asks for every reply in flight
        self._evaluate_fn = evaluate_fn
        self.policy.clear_idle()  # the registry below starts empty and tells the policy
        self._registry = NodeRegistry(
            identify=self.identify_nodes,
            poll_interval=self.poll_interval,
            max_failures=self.max_failures,
            on_idle=self.policy.set_idle,
            weight_cap=self.weight_cap,
        )
        self._book = TaskBook()
        self._outbox = Outbox(self.send_ahead)
        self.guard.reset()
        self._guard_held, self._guard_queue = [], []
        self._order = reply_order(self.clock)
        self._recorder = Recorder()
        self._checkpointer = None
        if self.checkpoint_dir is not None:
            self._checkpointer = Checkpointer(self.checkpoint_dir, self.checkpoint_every)
        self._keys: list[str] = []
        self._train_config: dict[str, Any] = {}
        self._forget_at: dict[int, int] = {}
        self._held, self._held_until, self._unrestored = [], 0.0, {}  # a resume's waiting nodes
        self._record_cache: tuple[int, ArrayRecord] | None = None
        self._model_bytes = 1
        self._eval_every = 1
        self._patience = 1
        self._stop_detail = ""
        self._should_stop = check_should_stop(should_stop)
        self._stop_requested = False
        self._evaluated: tuple[int, MetricRecord | None] | None = None
        """The last server step evaluated centrally and its metrics (``_central``)."""
        self._started = False
        self._grid: list[tuple[int, float]] = []
        """Grid points ``(index, virtual time)`` not evaluated yet, earliest first."""

    def _begin(self, grid: Grid, arrays: ArrayRecord, config: ConfigRecord | None) -> None:
        """Wait for the nodes, resolve "auto" settings from their number, start the model."""
        self._started = True
        self._keys = list(arrays.keys())
        self._train_config = dict(config or {})
        self._wait_for_min_nodes(grid)
        num_nodes = len(self._registry)
        for owner, name, rule in self._auto:
            setattr(owner, name, rule(num_nodes))
        self._eval_every = self.eval_every if self.eval_every is not None else max(1, num_nodes)
        self._patience = self.patience if self.patience is not None else max(10 * num_nodes, 100)
        self.guard.begin(num_nodes)
        self.aggregator.init(arrays.to_numpy_ndarrays())
        self._model_bytes = max(1, sum(a.nbytes for a in self.aggregator.params))

    def _wall_time_left(self) -> float:
        """Seconds until the run's ``max_wall_time`` (infinite without one)."""
        limit = self._max_wall_time
        return math.inf if limit is None else limit - self._recorder.wall()

    def _out_of_wall_time(self) -> bool:
        """Whether the run's ``max_wall_time`` has passed (also checked while waiting)."""
        return self._wall_time_left() <= 0


def _check_pairs(aggregator: object, clock: object, checkpoint_dir: object,
                 checkpoint_every: object, eval_grid: object,
                 send_ahead: object) -> None:  # fmt: skip
    """Refuse what no single argument check sees: a foreign aggregator, settings that need
    another one."""
    if not isinstance(aggregator, Aggregator):
        raise InvalidArgument(f"aggregator must be an fl_async Aggregator, got {aggregator!r}")
    if checkpoint_every is not None and checkpoint_dir is None:
        raise InvalidArgument("checkpoint_every needs checkpoint_dir")
    if eval_grid is not None and clock is None:
        raise InvalidArgument("eval_grid needs a clock (its times are virtual)")
    check_int("send_ahead", send_ahead, minimum=1, allow_none=True)
    if send_ahead is not None and clock is None:
        raise InvalidArgument(
            f"send_ahead={send_ahead} needs a clock: without one every task is awaited at once "
            "(real devices), so none may be held back; leave send_ahead out"
        )
