"""Who is in the run: waiting for the nodes at the start, admitting and retiring them as the
grid's node list changes, a node's failed task and its leaving the active set, and the wait for
one that may start when nothing is in flight.

The node registry (``nodes``) keeps the nodes themselves; ``Membership`` tells the dispatch
policy, the rule and the update guard what happened to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flwr.serverapp import Grid

from fl_async.aggregators import UpdateGuard
from fl_async.scheduling import DispatchPolicy
from fl_async.strategies.run import Run
from fl_async.strategies.tasks import Task


class Membership:
    """Follows the grid's nodes and what becomes of them.

    ``min_nodes``: connected nodes to wait for at the start; ``forget_after``: server steps
    after a node's failure before the rule forgets it; ``max_failures`` is the registry's, named
    in the stop detail. ``on_refresh(grid)`` runs after each look at the node list (a resumed
    run sends its saved tasks to the nodes back by then).
    """

    def __init__(
        self,
        run: Run,
        policy: DispatchPolicy,
        guard: UpdateGuard,
        *,
        min_nodes: int,
        forget_after: int,
        max_failures: int,
        on_refresh: Callable[[Grid], None] | None = None,
    ) -> None:
        self.run, self.policy, self.guard = run, policy, guard
        self.min_nodes, self.forget_after = min_nodes, forget_after
        self.max_failures, self.on_refresh = max_failures, on_refresh

    def wait_for_min_nodes(self, grid: Grid) -> None:
        """Wait for ``min_nodes`` connected nodes and admit them. When none could be admitted
        yet (each listed before it is reachable, as after a SuperLink restart), ask again about
        once a second, as the registry allows: no setting is resolved from no node. A run with
        some nodes admitted starts with them, and the others join when they answer."""
        run = self.run
        deadline = time.time() + run.timeout
        while len(set(grid.get_node_ids())) < self.min_nodes:
            if time.time() > deadline:
                raise TimeoutError(
                    f"only {len(set(grid.get_node_ids()))} nodes connected after "
                    f"{run.timeout:.0f} s; min_nodes={self.min_nodes}"
                )
            time.sleep(run.node_wait / 2)
        self.refresh(grid)
        while not len(run.registry):
            if time.time() > deadline or run.out_of_wall_time():
                raise TimeoutError(
                    "no connected node was admitted (answered the identify query, or was keyed "
                    f"by its node id) within {self._limit()}"
                )
            time.sleep(run.node_wait / 2)
            self.refresh(grid, every=1.0)

    def _limit(self) -> str:
        """The limit the start's wait for an admitted node ran into, in words."""
        if self.run.out_of_wall_time():
            return f"max_wall_time ({self.run.max_wall_time:g} s)"
        return f"the timeout ({self.run.timeout:g} s)"

    def refresh(self, grid: Grid, every: float = 0.0, *, wait: bool = True) -> None:
        """Admit new nodes (identified by a query) and retire vanished ones. With
        ``wait=False`` (the event loop) a new node's query is answered at a later call, while
        the loop goes on: a node slow to answer holds up no other node's reply."""
        run = self.run
        if run.out_of_wall_time():
            return  # past the wall limit the loop stops next: no new node is asked anything
        admitted, departed = run.registry.admit_answered(grid), []
        if run.registry.due(every):
            # A node that never answers the query must not hold the run past its wall limit.
            limit = min(run.timeout, run.wall_time_left())
            more, departed = run.registry.arrivals_and_departures(grid, timeout=limit, wait=wait)
            admitted += more
        elif not admitted:
            return
        for stable in admitted:
            run.forget_at.pop(stable, None)
            self.policy.join(stable)
        for node_id, node in departed:
            run.recorder.fault("node-left", f"node {node_id} (stable id {node.stable_id}) left")
            for key in run.book.of_node(node_id):
                self.drop(key, "lost")
            self.leave(node.stable_id)
        if self.on_refresh is not None:
            self.on_refresh(grid)

    def all_left(self) -> bool:
        """Whether every connected node has left the run for failing too often (and say so)."""
        registry = self.run.registry
        if not len(registry) or registry.usable:
            return False
        self.run.stop_detail = (
            f"every node left the run after {self.max_failures} failed tasks "
            "or rejected updates in a row"
        )
        return True

    def wait_for_nodes(self, grid: Grid, may_start: Callable[[], object]) -> str:
        """Nothing is in flight: wait until ``may_start()`` (a node may start), or give up
        after the timeout; the stop reason ("" when a node may start)."""
        run = self.run
        deadline = time.time() + run.timeout
        while time.time() < deadline:
            if run.out_of_wall_time():
                return "max-wall-time"
            self.refresh(grid, every=1.0, wait=False)
            if may_start():
                return ""
            if self.all_left():
                return "no-active-nodes"
            if self._deadlocked():
                return "deadlock"
            time.sleep(run.node_wait)
        run.stop_detail = f"no node could take a task within {run.timeout:.0f} s"
        return "no-nodes"

    def _deadlocked(self) -> bool:
        """Whether the policy lets none of the usable nodes start (and say so)."""
        usable = [n for n in self.run.registry.nodes.values() if not n.retired]
        version = self.run.version
        if usable and not any(self.policy.may_start(n.stable_id, version) for n in usable):
            self.run.stop_detail = f"{self.policy!r} lets no idle node start at step {version}"
            return True
        return False

    def failed(self, task: Task, why: str, kind: str) -> None:
        """``task`` ended without an update: count it against its node, which leaves the
        active set (the policy's bound stops waiting for it) until its next success."""
        run = self.run
        run.recorder.fault(kind, f"node {task.node_id} (stable id {task.stable_id}): {why}")
        run.recorder.task_failed()
        self.guard.heard(task.stable_id)
        node = run.registry.get(task.node_id)
        if node is not None:
            run.registry.failed(node, run.version, f"{kind}: {why}")
        self.leave(task.stable_id)

    def drop(self, key: str, kind: str) -> None:
        """Give up on a task in flight (timed out, or its node left)."""
        task, _ = self.run.close(key)
        self.run.order.closed(key, task, arrival=time.time(), advance=kind == "timeout")
        self.failed(task, f"task {kind}", kind)

    def leave(self, stable_id: int) -> None:
        """A node left the active set: the policy stops counting it; the rule forgets it at
        once or ``forget_after`` steps later."""
        self.policy.leave(stable_id)
        if self.forget_after == 0:
            self.run.rule.forget(stable_id)
        else:
            self.run.forget_at[stable_id] = self.run.version + self.forget_after

    def forget_due(self) -> None:
        """Let the rule forget the departed nodes whose ``forget_after`` steps have passed."""
        version = self.run.version
        for stable, at in list(self.run.forget_at.items()):
            if version >= at:
                self.run.rule.forget(stable)
                del self.run.forget_at[stable]
