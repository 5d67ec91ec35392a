"""Who is in the run: waiting for the nodes at the start, admitting and retiring them as the
grid's node list changes, and waiting for one that may start when nothing is in flight.

``AsyncStrategy`` mixes this in; the node registry (``nodes``) keeps the nodes themselves.
"""

from __future__ import annotations

import time

from flwr.serverapp import Grid


class NodeMembership:
    """``AsyncStrategy``'s side that follows the grid's nodes: the start's wait, each look at
    the node list, and the wait when no task is in flight."""

    def _wait_for_min_nodes(self, grid: Grid) -> None:
        """Wait for ``min_nodes`` connected nodes and admit them. When none could be admitted
        yet (each listed before it is reachable, as after a SuperLink restart), ask again about
        once a second, as the registry allows: no setting is resolved from no node. A run with
        some nodes admitted starts with them, and the others join when they answer."""
        deadline = time.time() + self._timeout
        while len(set(grid.get_node_ids())) < self.min_nodes:
            if time.time() > deadline:
                raise TimeoutError(
                    f"only {len(set(grid.get_node_ids()))} nodes connected after "
                    f"{self._timeout:.0f} s; min_nodes={self.min_nodes}"
                )
            time.sleep(0.1)
        self._refresh_nodes(grid)
        while not len(self._registry):
            if time.time() > deadline or self._out_of_wall_time():
                limit = (f"max_wall_time ({self._max_wall_time:g} s)" if self._out_of_wall_time()
                         else f"the timeout ({self._timeout:g} s)")  # fmt: skip
                raise TimeoutError(
                    "no connected node was admitted (answered the identify query, or was keyed "
                    f"by its node id) within {limit}"
                )
            time.sleep(0.1)
            self._refresh_nodes(grid, every=1.0)

    def _refresh_nodes(self, grid: Grid, every: float = 0.0, *, wait: bool = True) -> None:
        """Admit new nodes (identified by a query) and retire vanished ones. With
        ``wait=False`` (the event loop) a new node's query is answered at a later call, while
        the loop goes on: a node slow to answer holds up no other node's reply."""
        if self._out_of_wall_time():
            return  # past the wall limit the loop stops next: no new node is asked anything
        admitted, departed = self._registry.admit_answered(grid), []
        if self._registry.due(every):
            # A node that never answers the query must not hold the run past its wall limit.
            limit = min(self._timeout, self._wall_time_left())
            more, departed = self._registry.arrivals_and_departures(grid, timeout=limit,
                                                                    wait=wait)  # fmt: skip
            admitted += more
        elif not admitted:
            return
        for stable in admitted:
            self._forget_at.pop(stable, None)
            self.policy.join(stable)
        for node_id, node in departed:
            self._recorder.fault("node-left", f"node {node_id} (stable id {node.stable_id}) left")
            for msg_id in self._book.of_node(node_id):
                self._drop(msg_id, "lost")
            self._leave(node.stable_id)
        self._resend_held(grid)

    def _all_nodes_left(self) -> bool:
        """Whether every connected node has left the run for failing too often (and say so)."""
        if not len(self._registry) or self._registry.usable:
            return False
        self._stop_detail = (f"every node left the run after {self.max_failures} failed tasks "
                             "or rejected updates in a row")  # fmt: skip
        return True

    def _wait_for_nodes(self, grid: Grid) -> str:
        """Nothing is in flight: wait for a node that may start, or give up after the timeout."""
        deadline = time.time() + self._timeout
        while time.time() < deadline:
            if self._out_of_wall_time():
                return "max-wall-time"
            self._refresh_nodes(grid, every=1.0, wait=False)
            if self._dispatchable():
                return ""
            if self._all_nodes_left():
                return "no-active-nodes"
            usable = [n for n in self._registry.nodes.values() if not n.retired]
            version = self.aggregator.version
            if usable and not any(self.policy.may_start(n.stable_id, version) for n in usable):
                self._stop_detail = f"{self.policy!r} lets no idle node start at step {version}"
                return "deadlock"
            time.sleep(0.2)
        self._stop_detail = f"no node could take a task within {self._timeout:.0f} s"
        return "no-nodes"
