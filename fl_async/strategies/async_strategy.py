"""``AsyncStrategy``: Flower's Strategy with an asynchronous event loop in ``start()``.

The loop (docs/architecture.md, "The event loop") sends a task to every node the dispatch policy
allows, handles replies one at a time in the reply order, re-dispatches, evaluates and
checkpoints, until a budget is spent or the run can make no more progress. ``start()`` is a
template over one run state (``run.Run``: the model and its version, the nodes, the tasks in
flight, the time and the records) and the collaborators that share it, each in its own module:
membership (``membership``), dispatch (``dispatch``), reply handling with the update guard
(``replies``, ``guarded``), evaluation boundaries (``evaluation``), the stop reasons
(``stops``) and checkpoints (``resume``, ``resend``). The aggregator and the dispatch policy
decide the arithmetic and who may start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import INFO
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fl_async.aggregators import GUARD_FACTOR, Aggregator, UpdateGuard
from fl_async.scheduling import Asynchronous, DispatchPolicy, VirtualClock
from fl_async.strategies.claims import WEIGHT_CAP, WeightCap
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.evaluation import EvaluateFn, ShouldStop, grid_times
from fl_async.strategies.flower_api import average_evaluations, evaluate_messages
from fl_async.strategies.loop import Parts, Settings, build
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.order import reply_order
from fl_async.strategies.outbox import Outbox
from fl_async.strategies.recorder import Recorder
from fl_async.strategies.result import AsyncResult
from fl_async.strategies.resume import Auto
from fl_async.strategies.run import Run, node_wait
from fl_async.strategies.stops import Limits, check_pairs, stop_reason
from fl_async.strategies.tasks import TaskBook
from fl_async.validation import check_int, check_number

__all__ = ["AsyncStrategy", "EvaluateFn"]


class AsyncStrategy(Strategy):
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
        Seconds between pulls while waiting for replies, at first: the wait grows to 0.05 s
        (or stays at ``poll_interval``, where that is longer). While nothing can be sent, the
        grid is looked at every ten poll intervals, at most every 0.2 s.
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

    _auto: Auto
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
        check_pairs(aggregator, clock, checkpoint_dir, checkpoint_every, eval_grid, send_ahead)
        self.aggregator, self.send_ahead, self.clock = aggregator, send_ahead, clock
        self.policy = policy if policy is not None else Asynchronous()
        self.target_metric, self.identify_nodes = target_metric, identify_nodes
        self.task_bases = task_bases if task_bases is not None else TaskBases()
        self.min_nodes = check_int("min_nodes", min_nodes, minimum=1)
        self.max_in_flight = _optional("max_in_flight", max_in_flight)
        self.memory_budget = check_number("memory_budget", memory_budget, minimum=0, min_open=True)
        self.eval_every = _optional("eval_every", eval_every)
        self.eval_grid = _optional("eval_grid", eval_grid)
        self.forget_after = check_int("forget_after", forget_after, minimum=0)
        self.max_failures = check_int("max_failures", max_failures, minimum=1)
        self.patience = _optional("patience", patience)
        self.checkpoint_every = _optional("checkpoint_every", checkpoint_every)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.task_config, self.federated_evaluation = dict(task_config or {}), federated_evaluation
        self.seed, self.guard = check_int("seed", seed, minimum=0), UpdateGuard.of(guard)
        self.poll_interval = check_number("poll_interval", poll_interval, minimum=0, min_open=True)
        self.refresh_interval = check_number("refresh_interval", refresh_interval, minimum=0)
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
        self._loop.snapshots.claim()  # before resuming: a run still alive on it stops
        self._loop.boundaries.points = grid_times(self.eval_grid, max_virtual_time)
        resumed = self._resume_or_begin(grid, initial_arrays, train_config)
        run, nodes = self._run, len(self._run.registry)
        log(INFO, "Starting %s (asynchronous) with %d nodes:", type(self).__name__, nodes)
        self.summary()
        limits = Limits(num_rounds * nodes, max_updates, max_virtual_time, target_accuracy)
        if not resumed:  # step 0, as Flower's start() evaluates before the first round, while
            self._dispatch_early(grid, limits)  # the first tasks train (if it cannot stop the run)
            self._loop.boundaries.evaluate()
        stop = ""
        while not stop:
            self._loop.snapshots.check_owner()
            self._loop.membership.refresh(grid, every=self.refresh_interval, wait=False)
            stop = self._stop_reason(limits)
            if stop:
                break
            if not (self._loop.gate.draining() or self._loop.dispatcher.dispatch(grid) or run.book):
                stop = self._when_idle(grid)
            elif self._loop.replies.next(grid):
                self._after_step(dispatch=lambda: self._dispatch_early(grid, limits))
        return self._end(grid, stop, evaluate_config)

    def _when_idle(self, grid: Grid) -> str:
        """Nothing is in flight and no task could go: open the guard on what it holds, or wait
        for a node that may start; the stop reason ("" to go on)."""
        if self._loop.gate.open():
            return ""
        return self._loop.membership.wait_for_nodes(grid, self._loop.dispatcher.dispatchable)

    def _dispatch_early(self, grid: Grid, limits: Limits) -> None:
        """Send the tasks a step allows before its evaluation when that evaluation cannot stop
        the run (no target accuracy, no ``should_stop``) and nothing else stops it: what the
        loop would send next, sent before the server spends its time evaluating."""
        if (
            limits.target is None  # target accuracy: an evaluation that may stop the run
            and self._loop.boundaries.should_stop is None
            and not self._loop.gate.draining()
            and not self._stop_reason(limits)
        ):
            self._loop.dispatcher.dispatch(grid)

    def _stop_reason(self, limits: Limits) -> str:
        """The budget or limit that ends the run now ("" to go on)."""
        requested = self._loop.boundaries.stop_requested
        nodes_left = self._loop.membership.all_left
        return stop_reason(limits, self._run, requested, self.target_metric, nodes_left, self.guard)

    def _after_step(self, dispatch: Callable[[], object] | None = None) -> None:
        """Forget departed nodes that are due, evaluate when due (``dispatch`` first: see
        ``Boundaries.at_step``), checkpoint when due."""
        self._loop.membership.forget_due()
        self._loop.boundaries.at_step(dispatch)
        self._loop.snapshots.save_if_due()

    def _before_reply(self, finish: float) -> None:
        """Before a reply (or a timeout) ending at virtual time ``finish`` is handled: a run that
        took over the checkpoint while this one waited gets it, and the grid points before
        ``finish`` see the model in force then."""
        self._loop.snapshots.check_owner()
        self._loop.boundaries.evaluate_grid(until=finish)

    def _end(self, grid: Grid, stop: str, evaluate_config: ConfigRecord | None) -> AsyncResult:
        """Evaluate the final model, checkpoint, optionally evaluate on the nodes; the result."""
        run = self._run
        if not run.recorder.evaluated(run.version):
            self._loop.boundaries.evaluate()
        self._loop.boundaries.evaluate_grid(until=run.order.now, inclusive=True)
        self._loop.snapshots.save()  # before tasks in flight are abandoned: a resume resends them
        run.book.abandon()
        run.outbox.clear()
        if self.federated_evaluation:
            self._federated_evaluation(grid, evaluate_config)
        return run.recorder.finish(
            stop,
            run.stop_detail,
            run.model_record(),
            rejected=self.aggregator.num_rejected,
            server_steps=run.version,
            now=run.order.now,
        )

    # ------------------------------------------------------------------------------ set-up
    def _new_run(
        self,
        timeout: float,
        evaluate_fn: EvaluateFn | None,
        max_wall_time: float | None = None,
        should_stop: ShouldStop | None = None,
    ) -> None:
        """Make a run's state and its collaborators, empty (the one place they are made)."""
        self.policy.clear_idle()  # the registry below starts empty and tells the policy
        registry = NodeRegistry(
            identify=self.identify_nodes,
            poll_interval=self.poll_interval,
            max_failures=self.max_failures,
            on_idle=self.policy.set_idle,
            weight_cap=self.weight_cap,
        )
        book, outbox = TaskBook(), Outbox(self.send_ahead)
        self.guard.reset()
        order, recorder = reply_order(self.clock), Recorder()
        run = Run(self.aggregator, registry, book, outbox, order, recorder, float(timeout))
        run.max_wall_time = max_wall_time
        run.node_wait = node_wait(self.poll_interval)
        self._run = run
        parts = Parts(self.policy, self.guard, self.task_bases, self.clock)
        self._loop = build(
            run,
            parts,
            Settings.of(self),
            evaluate_fn=evaluate_fn,
            should_stop=should_stop,
            before_reply=self._before_reply,
        )

    def _resume_or_begin(
        self, grid: Grid, arrays: ArrayRecord, config: ConfigRecord | None
    ) -> bool:
        """Begin the run; then pick up from the checkpoint in ``checkpoint_dir``, if there is
        one (whether it did)."""
        state = self._loop.snapshots.load()
        self._begin(grid, arrays, config)
        if state is None:
            return False
        given = {"eval_every": self.eval_every, "patience": self.patience}
        self._loop.snapshots.restore(state, self._auto, **given)
        self._loop.snapshots.resume(grid, state, self._loop.membership.refresh)
        return True

    def _begin(self, grid: Grid, arrays: ArrayRecord, config: ConfigRecord | None) -> None:
        """Wait for the nodes, resolve "auto" settings from their number, start the model."""
        run = self._run
        run.started = True
        run.keys = list(arrays.keys())
        run.train_config = dict(config or {})
        self._loop.membership.wait_for_min_nodes(grid)
        num_nodes = len(run.registry)
        for owner, name, rule in self._auto:
            setattr(owner, name, rule(num_nodes))
        run.eval_every = self.eval_every if self.eval_every is not None else max(1, num_nodes)
        run.patience = self.patience if self.patience is not None else max(10 * num_nodes, 100)
        self.guard.begin(num_nodes)
        self.aggregator.init(arrays.to_numpy_ndarrays())
        run.model_bytes = max(1, sum(a.nbytes for a in self.aggregator.params))

    # ----------------------------------------------------------- Flower's round-based methods
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
        if not self._run.started:
            self._new_run(timeout=3600.0, evaluate_fn=None)
            self._begin(grid, arrays, config)
        self._loop.membership.refresh(grid)
        return self._loop.dispatcher.configure()

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply each reply as the event loop does; return the model and the last record."""
        last = self._loop.replies.handle_all(replies)
        return self._run.model_record(), last

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Evaluation messages for every connected node without a task in flight."""
        busy = {task.node_id for task in self._run.book.tasks()}
        return evaluate_messages(grid, arrays, config, busy)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Average the replies' metrics weighted by ``num-examples`` (as FedAvg does), each count
        capped as a train reply's is; a reply beyond the metric bounds, or with a bad count, is
        left out as ``malformed`` (docs/algorithms.md, What a node claims)."""
        return average_evaluations(replies, self._run.registry, self._run.recorder)

    def _federated_evaluation(self, grid: Grid, config: ConfigRecord | None) -> None:
        """Evaluate the final model on the nodes (the run is over: nothing else is in flight)."""
        run = self._run
        messages = self.configure_evaluate(
            run.version, run.model_record(), config or ConfigRecord(), grid
        )
        replies = grid.send_and_receive(messages, timeout=run.timeout)
        metrics = self.aggregate_evaluate(run.version, replies)
        if metrics is not None:
            run.recorder.result.evaluate_metrics_clientapp[run.version] = metrics


def _optional(name: str, value: int | None) -> int | None:
    """``value`` checked as an int >= 1, or None."""
    return check_int(name, value, minimum=1, allow_none=True)
