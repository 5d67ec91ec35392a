"""A pytest-xdist scheduler for this suite: one worker takes the slow tests, the others the fast.

``tests/conftest.py`` sorts the collection slow tests first, the longest first, the fast tests
after them. Under ``--dist loadgroup`` every worker took from the front of that queue, so two
slow tests ran at once from the start: each starts a SuperLink, Ray or SuperNodes, with processes
that import Flower or torch, and on two cores a pair of them starved each other (task timeouts,
retries, a run ended by its wall-time limit) while the fast tests waited for the end. Here the
first worker (``gw0``) takes from the front of the queue and every other worker from its back: the
fast tests run beside one slow test at a time, and when they are done, the other workers go on
with the shortest slow tests while the first still runs the longest. The work units and the rest
of the bookkeeping are ``loadgroup``'s (``xdist_group`` marks still group tests).
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

FRONT = "gw0"
"""The worker that takes the queue's front (the longest slow tests)."""


class TwoLanesScheduling(LoadGroupScheduling):
    """``loadgroup`` with the queue taken from both ends: ``FRONT`` from the front, the other
    workers from the back."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        scope, work_unit = self.workqueue.popitem(last=node.gateway.id != FRONT)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        pending = [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        node.send_runtest_some(pending)
