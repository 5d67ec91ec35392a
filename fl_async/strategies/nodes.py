"""The node registry: who is connected, their stable ids, and who may get work again.

Simulated node ids are random for every run, so each node is asked once for its
``partition-id`` (a ``query`` message, ``fl_async.protocol``) and keyed by it: its *stable id*.
A node the SuperLink lists but that is not there yet (after a SuperLink restart its heartbeat
may lag) is asked again when next listed, at most ``QUERY_ATTEMPTS`` times, rather than keyed by
its node id for good. A node that joins while the run goes on is asked without the run waiting
for its answer (``queries``).
A node that fails is retried after a back-off; one that fails or is rejected ``max_failures``
times in a row leaves the run for good, so that a broken ClientApp cannot keep a run busy.

What a node claims is bounded (docs/algorithms.md, What a node claims): a ``partition-id`` that a
connected node holds is refused to any other (that node is kept out of the run, and asked again
once the holder has left), and the weight of a claimed sample count is capped (``claims``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from logging import INFO, WARNING

from flwr.app import Message
from flwr.common.logger import log
from flwr.serverapp import Grid

from fl_async import protocol
from fl_async.strategies import queries
from fl_async.strategies.claims import WEIGHT_CAP, WeightCap
from fl_async.validation import InvalidArgument

MAX_BACKOFF_STEPS = 64
"""A failed node waits 1, 2, 4, ... server steps (at most this many) before its next task."""
RETRY_DELAY = 0.1
"""With nothing else in flight, a failed node waits 0.1, 0.2, 0.4, ... wall seconds instead."""
MAX_RETRY_DELAY = 10.0
QUERY_ATTEMPTS = 3
"""Identify queries a node may miss so before it is keyed by its node id."""
AT_ONCE = "at-once"
"""``identify_nodes`` value: query every node at once, for a ClientApp known to answer."""


@dataclass
class Node:
    """What the server knows of one node."""

    stable_id: int
    partition_id: int | None = None
    num_examples: int | None = None
    """The weight of its latest claimed sample count (the virtual clock times its tasks by it)."""
    declared: int | None = None
    """The sample count it declared when it joined (or in its first reply, if it gave none)."""
    capped: bool = False
    """Whether a claim of it was capped already (said once in the log)."""
    tasks: int = 0
    """Tasks dispatched so far: the virtual clock's task index."""
    busy: bool = False
    failed_at: int | None = None
    """Server step of its last failure (None once a reply was read since)."""
    failed_wall: float = 0.0
    failures: int = 0
    """Failed tasks in a row (error replies, malformed replies, timeouts)."""
    strikes: int = 0
    """Failed tasks and rejected updates in a row: ``max_failures`` of them and it leaves."""
    last_fault: str = ""
    retired: bool = False


class NodeRegistry:
    """Connected nodes by node id, their stable ids, and the dispatch order (by stable id).

    Each server step costs O(1) here, not a pass over every node: the idle nodes are kept in a
    set (``set_busy`` moves a node in or out) and the retired ones are counted.
    ``on_idle(stable id, idle)`` is told every change of that set: the dispatch policy keeps the
    one ordered index of the idle nodes from it, which the dispatch reads.
    """

    def __init__(
        self,
        *,
        identify: bool | str,
        poll_interval: float,
        max_failures: int,
        on_idle: Callable[[int, bool], None] | None = None,
        weight_cap: float | None = WEIGHT_CAP,
    ) -> None:
        self.identify = check_identify(identify)
        self.cap = WeightCap(weight_cap)
        self._on_idle = on_idle
        self.poll_interval = poll_interval
        self.max_failures = max_failures
        self.nodes: dict[int, Node] = {}
        self._by_stable: dict[int, int] = {}
        self.order: list[int] = []
        """Stable ids, sorted: the order in which idle nodes are offered work."""
        self._idle: set[int] = set()
        """Stable ids of the connected nodes that are neither busy nor retired."""
        self._retired = 0
        """Connected nodes that have left the run for failing too often."""
        self._last_refresh = 0.0
        self._warned_unidentified = False
        self._probed = False
        self._missed: dict[int, int] = {}
        """Identify queries each node id missed so far (``protocol.UNDELIVERED``)."""
        self._pending = queries.PendingQueries()
        """The identify queries in flight that the run does not wait for."""
        self._refused: dict[int, int] = {}
        """Node id -> the partition-id it claimed while another connected node held it."""

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def get(self, node_id: int) -> Node | None:
        """The node, or None when it has left."""
        return self.nodes.get(node_id)

    def node_of(self, stable_id: int) -> int | None:
        """The node id now holding ``stable_id``, if connected."""
        return self._by_stable.get(stable_id)

    def candidates(self) -> Iterator[tuple[int, Node]]:
        """``(stable id, node)`` of every node that may be offered work, in dispatch order: a
        sort of the idle set, for checks (the dispatch reads the policy's index instead)."""
        for stable in sorted(self._idle):
            yield stable, self.nodes[self._by_stable[stable]]

    def set_busy(self, node: Node, busy: bool) -> None:
        """Mark ``node`` busy (a task was sent to it) or idle (its task ended)."""
        node.busy = busy
        stable = node.stable_id
        if self.nodes.get(self._by_stable.get(stable, -1)) is not node:
            return  # it has left: it is in no list
        if busy or node.retired:
            self._discard_idle(stable)
        elif not self._is_idle(stable):
            self._add_idle(stable)

    @property
    def usable(self) -> int:
        """Nodes that have not left the run for failing too often."""
        return len(self.nodes) - self._retired

    def _is_idle(self, stable: int) -> bool:
        return stable in self._idle

    def _add_idle(self, stable: int) -> None:
        self._idle.add(stable)
        if self._on_idle is not None:
            self._on_idle(stable, True)

    def _discard_idle(self, stable: int) -> None:
        if stable in self._idle:
            self._idle.remove(stable)
            if self._on_idle is not None:
                self._on_idle(stable, False)

    def due(self, every: float) -> bool:
        """Whether ``every`` seconds have passed since the last look at the grid's nodes."""
        if time.time() - self._last_refresh < every:
            return False
        self._last_refresh = time.time()
        return True

    def arrivals_and_departures(
        self, grid: Grid, *, timeout: float, wait: bool = True
    ) -> tuple[list, list]:
        """Admit nodes new to the grid; remove vanished ones. Returns ``(admitted stable ids,
        departed (node id, node) pairs)``. With ``wait=False`` a new node's identify query is
        only sent: ``admit_answered`` admits it once it answers."""
        connected = set(grid.get_node_ids())
        known = set(self.nodes) | set(self._refused)
        new = sorted(n for n in connected - known if n not in self._pending)
        admitted = []
        if new and not wait and self._asks_without_waiting():
            self._pending.send(grid, new, wait=timeout)
        elif new:
            for node_id, info in zip(new, self._ask(grid, new, timeout), strict=True):
                if info is not None:  # None: not there yet, asked again when next listed
                    admitted.append(self._admit(node_id, *info))
        self._pending.keep(connected)
        departed = []
        for node_id in sorted(set(self.nodes) - connected):
            node = self.nodes.pop(node_id)
            del self._by_stable[node.stable_id]
            self._discard_idle(node.stable_id)
            self._retired -= node.retired
            if node.declared is not None:
                self.cap.withdraw(node.declared)
            departed.append((node_id, node))
        # A refused node is asked again once it or the holder of its partition-id has left.
        self._refused = {
            n: p for n, p in self._refused.items() if n in connected and p in self._by_stable
        }
        admitted = [stable for stable in admitted if stable is not None]
        if admitted or departed:  # sorted once per change, not once per node
            self.order = sorted(self._by_stable)
        return admitted, departed

    def admit_answered(self, grid: Grid) -> list[int]:
        """Admit the nodes whose identify query (sent with ``wait=False``) was answered or
        given up on since the last look; their stable ids."""
        found = [(n, self._identity(n, reply)) for n, reply in self._pending.collect(grid)]
        found = [(n, info) for n, info in found if info is not None]  # None: asked again
        self._warn_unidentified([info for _, info in found])
        admitted = [self._admit(node_id, *info) for node_id, info in found]
        admitted = [stable for stable in admitted if stable is not None]
        if admitted:
            self.order = sorted(self._by_stable)
        return admitted

    def _asks_without_waiting(self) -> bool:
        """Whether a new node's query may be sent without waiting for its answer: the nodes are
        identified, and the one-node probe for a query handler is behind."""
        return self.identify == AT_ONCE or (self.identify is True and self._probed)

    def may_retry(self, node: Node, version: int, *, anything_in_flight: bool) -> bool:
        """Whether a node that failed may get work again: after 1, 2, 4, ... server steps, or,
        when nothing else runs, 0.1, 0.2, 0.4, ... seconds (so a node that fails at once can
        neither spin the loop nor be retried forever: ``max_failures`` ends it)."""
        if node.failed_at is None:
            return True
        if anything_in_flight:
            steps = min(2 ** (node.failures - 1), MAX_BACKOFF_STEPS)
            return version >= node.failed_at + steps
        delay = min(RETRY_DELAY * 2 ** (node.failures - 1), MAX_RETRY_DELAY)
        return time.time() >= node.failed_wall + delay

    def failed(self, node: Node, version: int, why: str) -> bool:
        """``node``'s task failed; True when that makes it leave the run."""
        self.set_busy(node, False)
        node.failed_at = version
        node.failed_wall = time.time()
        node.failures += 1
        return self._strike(node, why)

    def rejected(self, node: Node, why: str) -> bool:
        """``node``'s update was rejected for its content; True when that makes it leave."""
        return self._strike(node, why)

    def answered(self, node: Node, weight: int, *, accepted: bool) -> None:
        """``node`` sent a readable reply (its update ``accepted`` or not), whose claimed sample
        count weighs ``weight``."""
        self.set_busy(node, False)
        node.failed_at = None
        node.failures = 0
        if accepted:
            node.strikes = 0
        if weight > 0:
            node.num_examples = weight

    def examples(self, node: Node) -> int | None:
        """``node``'s latest weight, within the cap as it stands now (None: never said)."""
        if node.num_examples is None:
            return None
        return self.cap.weight(node.num_examples, node.declared)

    def weight(self, node: Node | None, claimed: int) -> int:
        """The weight a reply's ``claimed`` sample count may have (``claims.WeightCap``); a node
        that declared no count when it joined declares ``claimed`` now. ``node`` None: it has left,
        and only the median bounds its claim."""
        if node is not None and node.declared is None:
            node.declared = claimed
            self.cap.declare(claimed)
        weight = self.cap.weight(claimed, None if node is None else node.declared)
        if weight < claimed and node is not None and not node.capped:
            node.capped = True
            log(
                WARNING,
                "node with stable id %d claims %d examples; weighted as %d (it declared "
                "%d when it joined, and the cap is %s times the median declared count): said "
                "once per node",
                node.stable_id,
                claimed,
                weight,
                node.declared,
                self.cap.ratio,
            )
        return weight

    def _strike(self, node: Node, why: str) -> bool:
        node.strikes += 1
        node.last_fault = why
        if node.strikes < self.max_failures or node.retired:
            return False
        node.retired = True
        if self.nodes.get(self._by_stable.get(node.stable_id, -1)) is node:
            self._retired += 1
            self._discard_idle(node.stable_id)
        log(
            WARNING,
            "node with stable id %d leaves the run after %d failed tasks or rejected updates "
            "in a row; the last: %s",
            node.stable_id,
            node.strikes,
            why,
        )
        return True

    def _admit(self, node_id: int, partition: int | None, examples: int | None) -> int | None:
        """Admit ``node_id`` keyed by ``partition`` (its node id when it reported none); its
        stable id, or None when a connected node holds that partition-id (it is refused)."""
        holder = None if partition is None else self._by_stable.get(partition)
        if holder is not None:
            self._refused[node_id] = partition
            log(
                WARNING,
                "node %d claims partition-id %d, which node %d holds: refused, it gets "
                "no task while node %d is connected",
                node_id,
                partition,
                holder,
                holder,
            )
            return None
        stable = node_id if partition is None else partition
        node = Node(
            stable_id=stable, partition_id=partition, num_examples=examples, declared=examples
        )
        if examples is not None:
            self.cap.declare(examples)
        self.nodes[node_id] = node
        self._by_stable[stable] = node_id
        self._add_idle(stable)
        return stable

    def _ask(self, grid: Grid, node_ids: list[int], timeout: float) -> list[tuple | None]:
        """``(partition-id, num-examples)`` per node (each None where it cannot tell), or None
        for a node to ask again later."""
        ask = functools.partial(
            queries.ask_and_wait, grid, wait=timeout, poll_interval=self.poll_interval
        )
        answers: list[Message | None] = []
        if self.identify is True and not self._probed:
            # One node first: an ordinary Flower ClientApp has no query handler and raises on
            # the query (Flower logs a traceback for it), so ask no other node in that case.
            # "at-once" skips this: the first node's start-up (seconds in a simulation, while
            # the other actors wait) is not paid alone.
            self._probed = True
            answers = ask(node_ids[:1])
            if queries.lacks_query_handler(answers[0]):
                self.identify = False
                log(
                    INFO,
                    "The ClientApp has no query handler (no @app.query()): nodes are keyed "
                    "by their node ids, so runs are not reproducible from a seed (pass "
                    "identify_nodes=False to skip this query)",
                )
        if not self.identify:
            return [(None, None)] * len(node_ids)
        answers += ask(node_ids[len(answers) :])
        found = [self._identity(n, reply) for n, reply in zip(node_ids, answers, strict=True)]
        self._warn_unidentified([f for f in found if f is not None])
        return found

    def _warn_unidentified(self, found: list[tuple]) -> None:
        """Warn once that nodes without a partition-id make the run not reproducible."""
        unidentified = sum(partition is None for partition, _ in found)
        if unidentified and not self._warned_unidentified:
            self._warned_unidentified = True
            log(
                WARNING,
                "%d of %d nodes reported no partition-id: their node ids key their "
                "state, so this run is not reproducible from a seed",
                unidentified,
                len(found),
            )

    def _identity(self, node_id: int, reply: Message | None) -> tuple | None:
        """``(partition-id, num-examples)`` from ``reply``; None to ask again later (the node
        never got the query, and has missed fewer than ``QUERY_ATTEMPTS``)."""
        if reply is not None and reply.has_error() and reply.error.code in protocol.UNDELIVERED:
            self._missed[node_id] = self._missed.get(node_id, 0) + 1
            if self._missed[node_id] < QUERY_ATTEMPTS:
                log(
                    INFO,
                    "node %d did not get the identify query (%s); it is asked again when "
                    "next listed",
                    node_id,
                    reply.error.reason,
                )
                return None
        self._missed.pop(node_id, None)
        return protocol.read_identity(reply)


def check_identify(value: object) -> bool | str:
    """``identify_nodes``: True (one node first, then the rest), False or ``"at-once"``."""
    if value is True or value is False or value == AT_ONCE:
        return value  # type: ignore[return-value]
    raise InvalidArgument(f"identify_nodes must be True, False or {AT_ONCE!r}, got {value!r}")
