"""The base of every dispatch policy: each node's task clock and the active set, and the index
of idle nodes that makes ``startable`` cheap (docs/algorithms.md, Dispatch policies).

Each rule is stated once, as a *start limit*: a node may start when its task clock is at most
``_start_limit(version)`` (None: no limit), or when the rule exempts it (ASP's asynchronous
nodes). ``may_start`` applies it to one node; ``startable`` keeps the idle nodes grouped by clock
and reads off the groups at or below the limit, so waiting nodes (GSGM's white list can keep
nearly every node idle until its cycle) cost nothing per dispatch. The rules themselves are in
``fl_async.scheduling.policies``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from fl_async.validation import check_int, check_number


class _MinCounter:
    """The smallest clock over a set of nodes: O(1) per +1 tick, O(distinct clocks) otherwise."""

    def __init__(self, clocks: list[int] | None = None) -> None:
        self._count: dict[int, int] = {}
        self.min: int | None = None
        for c in clocks or []:
            self.add(c)

    def add(self, c: int) -> None:
        self._count[c] = self._count.get(c, 0) + 1
        if self.min is None or c < self.min:
            self.min = c

    def remove(self, c: int) -> None:
        left = self._count[c] - 1
        if left:
            self._count[c] = left
            return
        del self._count[c]
        if c == self.min:
            if c + 1 in self._count:  # the common case: the slowest node ticked forward
                self.min = c + 1
            else:
                self.min = min(self._count) if self._count else None

    def move(self, old: int, new: int) -> None:
        self.add(new)
        self.remove(old)


_UNJOINED, _EXEMPT, _INACTIVE = "unjoined", "exempt", "inactive"
"""Groups of idle nodes besides the clocks: not joined yet (never startable), exempt from the
limit (always startable), inactive (at the entry clock, the same for all of them)."""


class _IdleIndex:
    """The idle nodes: the joined ones sorted, and all of them grouped by key, each group sorted."""

    def __init__(self) -> None:
        self.joined: list[int] = []
        self.groups: dict[int | str, list[int]] = {}
        self._key: dict[int, int | str] = {}

    def __contains__(self, node: int) -> bool:
        return node in self._key

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._key))

    def add(self, node: int, key: int | str) -> None:
        self._key[node] = key
        insort(self.groups.setdefault(key, []), node)
        if key != _UNJOINED:
            insort(self.joined, node)

    def remove(self, node: int) -> None:
        key = self._key.pop(node)
        group = self.groups[key]
        del group[bisect_left(group, node)]
        if not group:
            del self.groups[key]
        if key != _UNJOINED:
            del self.joined[bisect_left(self.joined, node)]

    def move(self, node: int, key: int | str) -> None:
        if self._key[node] != key:
            self.remove(node)
            self.add(node, key)


def _check_node(node: int) -> int:
    return check_int("node", node, minimum=0)


class DispatchPolicy:
    """Base of every policy: the clocks ``c_k`` and the active set; subclasses decide starts.

    A node that left is inactive (not counted in the minimum) until its next success; a node
    that joins, or succeeds while inactive, starts at the minimum clock of the counted nodes.
    ``may_start`` and ``started`` treat an inactive node as if it stood at that minimum, since
    that is where its next success puts it.
    """

    name: ClassVar[str] = "DispatchPolicy"

    def __init__(self) -> None:
        self._clock: dict[int, int] = {}
        self._active: set[int] = set()
        self._floor = _MinCounter()
        self._idle = _IdleIndex()
        """The nodes the caller declared idle (``set_idle``), grouped for ``startable``."""

    # ----------------------------------------------------------------------------- public API
    def join(self, node: int) -> None:
        """``node`` enters (or re-enters) the active set at the active minimum (0 when none)."""
        node = _check_node(node)
        if node not in self._active:
            self._activate(node, self._entry_clock())

    def leave(self, node: int) -> None:
        """``node``'s task failed or timed out, or it vanished: inactive until its next success."""
        node = _check_node(node)
        if node not in self._active:
            return
        if self._counted(node):
            self._floor.remove(self._clock[node])
        self._active.discard(node)
        self._regroup(node)

    def may_start(self, node: int, version: int) -> bool:
        """Whether the idle ``node`` may start a task now, the global model being at ``version``."""
        node = self._known(node)
        if type(version) is not int or version < 0:
            version = check_int("version", version, minimum=0)
        if self._exempt(node):
            return True
        limit = self._start_limit(version)
        return limit is None or self._task_clock(node) <= limit

    def set_idle(self, node: int, idle: bool) -> None:
        """Declare whether ``node`` is idle: it has no task and may be offered one (the caller's
        bookkeeping, which ``startable`` reads; not part of ``state_dict``)."""
        node = _check_node(node)
        if idle and node not in self._idle:
            self._idle.add(node, self._idle_key(node))
        elif not idle and node in self._idle:
            self._idle.remove(node)

    def clear_idle(self) -> None:
        """Declare every node busy (a new run starts with no node known to be idle)."""
        self._idle = _IdleIndex()

    def startable(self, version: int) -> Iterator[int]:
        """The idle nodes (``set_idle``) that may start a task now, ascending: exactly those
        for which ``may_start`` is true, found without asking each node. Do not call
        ``set_idle`` while iterating."""
        if type(version) is not int or version < 0:
            version = check_int("version", version, minimum=0)
        limit = self._start_limit(version)
        if limit is None:
            return iter(self._idle.joined)
        groups = self._idle.groups
        ready = [g for k, g in groups.items() if type(k) is int and k <= limit]
        if _EXEMPT in groups:
            ready.append(groups[_EXEMPT])
        if _INACTIVE in groups and self._entry_clock() <= limit:
            ready.append(groups[_INACTIVE])
        if len(ready) == 1:
            return iter(ready[0])
        return heapq.merge(*ready)

    def started(self, node: int, version: int) -> int:
        """A task was dispatched to ``node`` at ``version``: return its iteration index, ``c_k``."""
        node = self._known(node)
        check_int("version", version, minimum=0)
        return self._task_clock(node)

    def finished(self, node: int, *, duration: float) -> None:
        """``node``'s reply was handled: ``c_k += 1`` (an inactive node first rejoins)."""
        node = self._known(node)
        duration = check_number("duration", duration, minimum=0)
        if node not in self._active:
            self._activate(node, self._entry_clock())
        self._set_clock(node, self._clock[node] + 1)
        self._on_finished(node, duration)

    def task_settings(
        self, node: int, now: float, run_settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Settings of ``node``'s next task, dispatched at time ``now``, that the policy sets
        itself (FedCompass: ``local-steps``); sent with the task over the run's own
        (``run_settings``)."""
        return {}

    def settings_in_flight(self, node: int) -> dict[str, Any]:
        """``task_settings`` of ``node``'s task in flight, for sending it again on a resume."""
        return {}

    def has_joined(self, node: int) -> bool:
        """Whether ``node`` has joined (the policy keeps its clock, active or not)."""
        return _check_node(node) in self._clock

    def clock(self, node: int) -> int:
        """``c_k``: the number of tasks ``node`` has finished (reset on rejoining)."""
        return self._clock[self._known(node)]

    @property
    def active(self) -> frozenset[int]:
        """The nodes counted as present: joined and not failed since their last success."""
        return frozenset(self._active)

    def owes(self, version: int) -> bool:
        """Whether an active node has yet to finish its task for ``version`` (``c_k <= version``):
        a barrier's step at ``version`` may still get an update from it."""
        return any(self._clock[k] <= version for k in self._active)

    def hyperparameters(self) -> dict[str, Any]:
        """The policy's parameters, for logs and checkpoints."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Copies of all state as plain Python values (no callables)."""
        return {
            "name": self.name,
            "hyperparameters": self.hyperparameters(),
            "clock": dict(self._clock),
            "active": sorted(self._active),
            **self._extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` (also on a freshly constructed policy) and resume exactly."""
        if state.get("name") != self.name:
            raise ValueError(f"state_dict is for {state.get('name')!r}, not {self.name!r}")
        saved = state.get("hyperparameters")
        if saved != self.hyperparameters():
            raise ValueError(
                f"state_dict was saved with hyperparameters {saved!r}; "
                f"this {self.name} has {self.hyperparameters()!r}"
            )
        self._clock = {int(k): int(c) for k, c in state["clock"].items()}
        self._active = {int(k) for k in state["active"]}
        self._load_extra_state(state)
        self._rebuild_floor()
        for node in self._idle:  # the idle nodes stay idle; their groups follow the new clocks
            self._regroup(node)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"

    # ---------------------------------------------------------------------- for subclasses
    def _start_limit(self, version: int) -> int | None:
        """The rule: the highest task clock that may start at ``version`` (None: any may)."""
        return None

    def _exempt(self, node: int) -> bool:
        """Whether ``node`` may start whatever its clock."""
        return False

    def _on_finished(self, node: int, duration: float) -> None:  # noqa: B027 (a hook)
        """Called after ``node``'s clock advanced; ``duration`` is its task's time in seconds."""

    def _counted(self, node: int) -> bool:
        """Whether ``node``'s clock enters the minimum the bound is measured from."""
        return node in self._active

    def _entry_clock(self) -> int:
        """The clock a joining or returning node starts at."""
        return self._floor.min if self._floor.min is not None else 0

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:  # noqa: B027 (a hook)
        """Restore what ``_extra_state`` saved."""

    def _rebuild_floor(self) -> None:
        self._floor = _MinCounter([c for k, c in self._clock.items() if self._counted(k)])

    # ------------------------------------------------------------------------- internals
    def _known(self, node: int) -> int:
        if type(node) is int and node in self._clock:  # a joined node id (join checked it)
            return node
        node = _check_node(node)
        if node not in self._clock:
            raise ValueError(f"node {node} has not joined {self.name}; call join({node}) first")
        return node

    def _task_clock(self, node: int) -> int:
        return self._clock[node] if node in self._active else self._entry_clock()

    def _activate(self, node: int, clock: int) -> None:
        self._clock[node] = clock
        self._active.add(node)
        if self._counted(node):
            self._floor.add(clock)
        self._regroup(node)

    def _set_clock(self, node: int, clock: int) -> None:
        if self._counted(node):
            self._floor.move(self._clock[node], clock)
        self._clock[node] = clock
        self._regroup(node)

    def _idle_key(self, node: int) -> int | str:
        """The group of ``startable``'s index that ``node`` belongs in."""
        if node not in self._clock:
            return _UNJOINED
        if self._exempt(node):
            return _EXEMPT
        if node not in self._active:
            return _INACTIVE
        return self._clock[node]

    def _regroup(self, node: int) -> None:
        """``node``'s clock, activity or exemption may have changed: move it if it is idle."""
        if node in self._idle:
            self._idle.move(node, self._idle_key(node))
