"""What happens at each step boundary: forgetting, central evaluation, ``should_stop``,
checkpoints.

An asynchronous run has no rounds. Its counterpart of the end of a Flower round is the
evaluation boundary: every ``eval_every`` server steps the global model is evaluated centrally
and, where ``start()`` was given one, ``should_stop(server_step, result)`` is asked whether to
stop there, as Flower's ``Strategy.start()`` (1.43) asks it after each round's evaluations.
The virtual-time grid's evaluations (``eval_grid``) are no boundaries: they look back at the
model in force at a past time.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO

from flwr.app import ArrayRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp.strategy import Result

from fl_async.strategies.run import Run
from fl_async.validation import InvalidArgument

ShouldStop = Callable[[int, Result], bool]
"""``should_stop(server_step, result)``: True stops the run (stop reason ``should-stop``)."""
EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]
"""``evaluate_fn(server_step, arrays)``: the central evaluation of the model (None: none)."""


class Boundaries:
    """Central evaluations (every ``run.eval_every`` server steps and at the grid's virtual
    times ``points``) and ``should_stop`` at each evaluation boundary."""

    def __init__(
        self,
        run: Run,
        *,
        evaluate_fn: EvaluateFn | None,
        should_stop: ShouldStop | None,
        points: list[tuple[int, float]] | None = None,
    ) -> None:
        self.run, self.evaluate_fn = run, evaluate_fn
        self.should_stop = check_should_stop(should_stop)
        self.stop_requested = False
        """Whether ``should_stop`` said yes: the loop stops before its next task."""
        self.points = list(points or [])
        """Grid points ``(index, virtual time)`` not evaluated yet, earliest first."""
        self._evaluated: tuple[int, MetricRecord | None] | None = None
        """The last server step evaluated centrally and its metrics (``_central``)."""

    def due(self) -> bool:
        """Whether an evaluation is due at the current server step."""
        return self.run.version - self.run.recorder.last_eval_step >= self.run.eval_every

    def at_step(self, dispatch: Callable[[], object] | None = None) -> None:
        """Evaluate when due, and ask ``should_stop`` then. ``dispatch`` sends the tasks the
        step allows; it runs before an evaluation that cannot stop the run, so that the nodes
        train while the server evaluates (they get the same model either way)."""
        if not self.due():
            return
        if dispatch is not None:
            dispatch()
        self.evaluate()
        self._ask_should_stop(self.run.version)

    def _ask_should_stop(self, version: int) -> None:
        """Ask ``should_stop`` at this boundary, with the result so far (its ``arrays`` the
        current model); the loop stops before its next task when it says yes."""
        if self.should_stop is None or self.stop_requested:
            return
        result = self.run.recorder.result
        result.arrays = self.run.model_record()
        if self.should_stop(version, result):
            self.stop_requested = True
            self.run.stop_detail = f"should_stop returned True at server step {version}"
            log(INFO, "Stopping early after server step %d (should_stop)", version)

    def evaluate_grid(self, *, until: float, inclusive: bool = False) -> None:
        """Evaluate the current model at each grid time before ``until`` (or at it): it is the
        model in force then, since nothing is applied before the task that ends at ``until``."""
        points, version = self.points, self.run.version
        while points and (points[0][1] < until or inclusive and points[0][1] <= until):
            index, at = points.pop(0)
            metrics = self._central(version)
            if metrics is not None:
                self.run.recorder.grid_evaluation(index, at, version, metrics)

    def evaluate(self) -> None:
        """Evaluate the current model centrally and record it (at its server step)."""
        run = self.run
        version = run.version
        run.recorder.last_eval_step = version
        metrics = self._central(version)
        if metrics is not None:
            when = run.order.describe(run.recorder.elapsed())
            run.recorder.evaluation(version, metrics, now=run.order.now, when=when)

    def _central(self, version: int) -> MetricRecord | None:
        """``evaluate_fn`` on the current model, called once per server step: a version names
        one model, and every grid point until the next step (and an evaluation due at that
        step) sees the same one."""
        if self.evaluate_fn is None:
            return None
        if self._evaluated is None or self._evaluated[0] != version:
            self._evaluated = (version, self.evaluate_fn(version, self.run.model_record()))
        return self._evaluated[1]


def grid_times(size: int | None, budget: float | None) -> list[tuple[int, float]]:
    """``(i, budget * i / size)`` for i = 1..size (none without a grid)."""
    if size is None:
        return []
    if budget is None:
        raise InvalidArgument("eval_grid needs start(max_virtual_time=...): the grid spans it")
    # The last point is T itself: T * G / G can exceed T by one ulp, and a run that stops at T
    # (its last update applied at T) would then never take it.
    return [(i, budget if i == size else budget * i / size) for i in range(1, size + 1)]


def check_should_stop(should_stop: object) -> ShouldStop | None:
    """``should_stop`` if None or callable; ``InvalidArgument`` otherwise."""
    if should_stop is not None and not callable(should_stop):
        raise InvalidArgument(
            f"should_stop must be None or a function (server_step, result) -> bool, "
            f"got {should_stop!r}"
        )
    return should_stop
