"""FedCompass's scheduler as a dispatch policy (Li et al., ICLR 2024; docs/algorithms.md,
FedCompass).

Each node's speed ``s_k`` (seconds per local step) is measured from its tasks. When a node is
dispatched, it gets the number of local steps ``Q_k`` in ``[Q_min, Q_max]`` that makes it reach
an *arrival group* together with the nodes already in it, or it opens a new group. A node that
reaches its group in time (by the group's deadline ``T_max``) waits, idle, until every member
has; the group then steps (the aggregator, ``fl_async.aggregators.FedCompass``, takes the step
this policy names: its ``StepPlan``) and its nodes start again, fastest first. A node past the
deadline is late: its update waits in the general buffer for the next group step, and it starts
again at once. A node's first reply steps alone. Deadlines are checked at the next reply or
departure (the event loop has no timer): the step of a group whose deadline passed is taken then.

Times are the reply order's (virtual seconds with a clock; wall seconds without one). Task
settings (``local-steps``) go out with each task (``task_settings``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fl_async.scheduling.dispatch import DispatchPolicy
from fl_async.validation import InvalidArgument, check_int, check_number

MIN_SPEED = 1e-12
"""The least seconds per step a node is credited with: a task measured at 0 s (no clock cost)
must not divide by zero."""
AUTO = "auto"
AUTHORS_MAX_STEPS = 100
"""``Q_max`` for ``"auto"`` when the run trains by epochs: the authors' examples' value."""
Q_RATIO = 0.2
"""``"auto"``'s ``Q_min = max(floor(Q_RATIO Q_max), 1)`` (the authors' earlier code; 20 of 100)."""


def _steps_bound(name: str, value: int | str) -> int | str:
    if value == AUTO:
        return AUTO
    if isinstance(value, str):
        raise InvalidArgument(f"{name} must be an integer >= 1 or 'auto', got {value!r}")
    return check_int(name, value, minimum=1)


@dataclass
class Group:
    """An arrival group: nodes still training, nodes arrived (waiting), and its times."""

    pending: list[int]
    arrived: list[int]
    expected: float
    """``T_a``: when its members should arrive (0 once it stepped: no one joins it)."""
    latest: float
    """``T_max = t + lambda Q s``: its deadline (0 once it stepped: its pending nodes are late)."""


class Compass(DispatchPolicy):
    """FedCompass's scheduler: per-task local steps from measured speeds, and arrival groups.

    ``min_local_steps`` / ``max_local_steps`` bound ``Q_k``. ``"auto"``: ``Q_max`` is the run's
    ``local-steps`` (the steps every other preset's task trains), or 100 (the authors'
    examples) when the run trains by epochs; ``Q_min = max(floor(0.2 Q_max), 1)``.
    ``speed_momentum`` ``m`` weighs a new speed sample (``s <- (1 - m) s + m x``);
    ``latest_time_factor`` ``lambda >= 1`` sets a group's deadline.
    """

    name = "Compass"

    def __init__(
        self,
        *,
        min_local_steps: int | str = AUTO,
        max_local_steps: int | str = AUTO,
        speed_momentum: float = 0.9,
        latest_time_factor: float = 1.5,
    ) -> None:
        super().__init__()
        self.min_local_steps = _steps_bound("min_local_steps", min_local_steps)
        self.max_local_steps = _steps_bound("max_local_steps", max_local_steps)
        self._q_min, self._q_max = 1, AUTHORS_MAX_STEPS
        """The bounds in force (``"auto"`` resolved by ``task_settings``)."""
        if AUTO not in (self.min_local_steps, self.max_local_steps):
            self._resolve({})
        self.speed_momentum = check_number(
            "speed_momentum", speed_momentum, minimum=0, maximum=1, min_open=True
        )
        self.latest_time_factor = check_number("latest_time_factor", latest_time_factor, minimum=1)
        self._speed: dict[int, float] = {}
        self._steps: dict[int, int] = {}
        self._start: dict[int, float] = {}
        self._group_of: dict[int, int] = {}
        self._groups: dict[int, Group] = {}
        self._next_group = 0
        self._general: list[int] = []
        """Late nodes whose updates wait for the next group step."""
        self._due: list[list[int]] = []
        """Steps due, each the nodes whose held updates it takes (``StepPlan``)."""
        self._waiting: set[int] = set()
        """Nodes that arrived in their group's window: they start when it steps."""

    # ----------------------------------------------------------------------------- public API
    @property
    def speeds(self) -> dict[int, float]:
        """A copy of each measured node's ``s_k``, seconds per local step."""
        return dict(self._speed)

    @property
    def groups(self) -> dict[int, Group]:
        """Copies of the arrival groups, by id (ascending: creation order)."""
        return {
            g: Group(list(x.pending), list(x.arrived), x.expected, x.latest)
            for g, x in self._groups.items()
        }

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "min_local_steps": self.min_local_steps,
            "max_local_steps": self.max_local_steps,
            "speed_momentum": self.speed_momentum,
            "latest_time_factor": self.latest_time_factor,
        }

    @property
    def bounds(self) -> tuple[int, int]:
        """``(Q_min, Q_max)`` in force (``"auto"`` resolved at the first task)."""
        return self._q_min, self._q_max

    def task_settings(
        self, node: int, now: float, run_settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``node``'s next task, dispatched at ``now``: ``Q_max`` before its first reply, else
        the steps of the group it joins or opens (``run_settings``: the run's own, which
        ``"auto"`` bounds follow)."""
        node = self._known(node)
        self._resolve(run_settings or {})
        self._start[node] = float(now)
        self._group_of.pop(node, None)
        if node in self._speed:
            steps = self._join(node, now)
            if steps is None:
                steps = self._create(node, now, self._new_group_steps(node, now))
        else:
            steps = self._q_max
        self._steps[node] = steps
        return {"local-steps": steps}

    def settings_in_flight(self, node: int) -> dict[str, Any]:
        """The settings of ``node``'s task in flight (a resume sends it again as it was)."""
        return {"local-steps": self._steps.get(node, self._q_max)}

    def may_start(self, node: int, version: int) -> bool:
        """False while ``node`` waits for its group to step; else as every policy."""
        return node not in self._waiting and super().may_start(node, version)

    def startable(self, version: int) -> Iterator[int]:
        """The idle nodes that may start, fastest first (ties and unmeasured nodes by id), so
        that a group's nodes join the next groups in the authors' order."""
        ready = [k for k in super().startable(version) if k not in self._waiting]
        return iter(sorted(ready, key=lambda k: (self._speed.get(k, 0.0), k)))

    def leave(self, node: int) -> None:
        """As every policy; and ``node`` no longer holds its group back."""
        super().leave(node)
        group = self._group_of.pop(node, None)
        if group in self._groups and node in self._groups[group].pending:
            self._drop_pending(group, node)

    def owes(self, version: int) -> bool:
        """No step is owed to a barrier while none is due (the loop then calls ``flush``)."""
        return not self._due

    def steps_due(self) -> int:
        """The steps due now (``StepPlan``)."""
        return len(self._due)

    def take_step(self) -> list[int] | None:
        """The nodes of the next due step, taken off the plan; None when none is due."""
        return self._due.pop(0) if self._due else None

    # ------------------------------------------------------------------------- the rule
    def _resolve(self, run_settings: Mapping[str, Any]) -> None:
        """The bounds in force: the numbers given, ``"auto"`` from the run's ``local-steps``."""
        q_max = self.max_local_steps
        if q_max == AUTO:
            q_max = int(run_settings.get("local-steps", 0)) or AUTHORS_MAX_STEPS
        q_min = self.min_local_steps
        if q_min == AUTO:
            q_min = max(math.floor(Q_RATIO * q_max), 1)
        if q_max < q_min:
            raise InvalidArgument(
                f"max_local_steps ({q_max}, from {self.max_local_steps!r}) must be >= "
                f"min_local_steps ({q_min}, from {self.min_local_steps!r})"
            )
        self._q_min, self._q_max = q_min, q_max

    def _on_finished(self, node: int, duration: float) -> None:
        arrival = self._start.get(node, 0.0) + duration
        sample = duration / self._steps.get(node, self._q_max)
        old, m = self._speed.get(node), self.speed_momentum
        speed = sample if old is None else (1.0 - m) * old + m * sample
        self._speed[node] = max(speed, MIN_SPEED)
        self._expire(arrival)
        self._route(node, arrival)

    def _expire(self, now: float) -> None:
        """Step the groups whose deadline passed before ``now`` with arrived nodes."""
        passed = [g for g, x in self._groups.items() if x.arrived and x.latest < now]
        for g in sorted(passed, key=lambda g: (self._groups[g].latest, g)):
            self._step_group(g)

    def _route(self, node: int, now: float) -> None:
        """``node``'s reply at ``now``: a step alone (first reply), late, or in its window."""
        if node in self._general:  # its earlier late update was replaced by this one
            self._general.remove(node)
        g = self._group_of.pop(node, None)
        if g is None:
            self._due.append([node])
            return
        group = self._groups.get(g)
        if group is None or now > group.latest:
            if group is not None:
                self._drop_pending(g, node)
            self._general.append(node)
            return
        group.pending.remove(node)
        group.arrived.append(node)
        self._waiting.add(node)
        if not group.pending:
            self._step_group(g)

    def _drop_pending(self, g: int, node: int) -> None:
        group = self._groups[g]
        group.pending.remove(node)
        if group.pending:
            return
        if group.arrived:
            self._step_group(g)
        else:
            del self._groups[g]

    def _step_group(self, g: int) -> None:
        """Group ``g`` steps with the general buffer; its arrived nodes may start again."""
        group = self._groups[g]
        self._due.append(self._general + group.arrived)
        self._general = []
        self._waiting.difference_update(group.arrived)
        group.arrived, group.expected, group.latest = [], 0.0, 0.0
        if not group.pending:
            del self._groups[g]

    def _join(self, node: int, now: float) -> int | None:
        """Join the group whose expected arrival gives the most steps in bounds (ties: the
        later group); its steps, or None."""
        speed, chosen, steps = self._speed[node], None, -1
        for g, group in self._groups.items():
            q = math.floor((group.expected - now) / speed)
            if self._q_min <= q <= self._q_max and q >= steps:
                chosen, steps = g, q
        if chosen is None:
            return None
        self._groups[chosen].pending.append(node)
        self._group_of[node] = chosen
        return steps

    def _new_group_steps(self, node: int, now: float) -> int:
        """A new group's ``Q``: arrive one ``Q_max`` of the fastest member after a live
        group's deadline, in bounds (``Q_max`` when no group is live)."""
        speed, steps = self._speed[node], -1
        for group in self._groups.values():
            members = group.pending + group.arrived
            if now < group.latest and members:
                fastest = min(self._speed[j] for j in members)
                q = math.floor((group.latest + fastest * self._q_max - now) / speed)
                if q <= self._q_max:
                    steps = max(steps, q)
        if steps < 0:
            return self._q_max
        return max(steps, self._q_min)

    def _create(self, node: int, now: float, steps: int) -> int:
        speed = self._speed[node]
        self._groups[self._next_group] = Group(
            pending=[node],
            arrived=[],
            expected=now + steps * speed,
            latest=now + steps * speed * self.latest_time_factor,
        )
        self._group_of[node] = self._next_group
        self._next_group += 1
        return steps

    # ------------------------------------------------------------------------- state
    def _extra_state(self) -> dict[str, Any]:
        return {
            "speed": dict(self._speed),
            "steps": dict(self._steps),
            "start": dict(self._start),
            "group_of": dict(self._group_of),
            "groups": {g: asdict(x) for g, x in self._groups.items()},
            "next_group": self._next_group,
            "bounds": [self._q_min, self._q_max],
            "general": list(self._general),
            "due": [list(d) for d in self._due],
            "waiting": sorted(self._waiting),
        }

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self._speed = {int(k): float(v) for k, v in state["speed"].items()}
        self._steps = {int(k): int(v) for k, v in state["steps"].items()}
        self._start = {int(k): float(v) for k, v in state["start"].items()}
        self._group_of = {int(k): int(v) for k, v in state["group_of"].items()}
        self._groups = {
            int(g): Group(
                pending=[int(k) for k in x["pending"]],
                arrived=[int(k) for k in x["arrived"]],
                expected=float(x["expected"]),
                latest=float(x["latest"]),
            )
            for g, x in sorted(state["groups"].items(), key=lambda item: int(item[0]))
        }
        self._next_group = int(state["next_group"])
        self._q_min, self._q_max = (int(q) for q in state["bounds"])
        self._general = [int(k) for k in state["general"]]
        self._due = [[int(k) for k in d] for d in state["due"]]
        self._waiting = {int(k) for k in state["waiting"]}
