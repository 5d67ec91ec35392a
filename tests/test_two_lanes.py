"""The test command's scheduler (``tests/two_lanes.py``) on fake workers: the first worker takes
the queue's front (the slow tests, the longest first), the other its back (the fast tests), and
every test is handed out once."""

from __future__ import annotations

from types import SimpleNamespace

from two_lanes import TwoLanesScheduling

# conftest's order: slow tests first, the longest first, then the fast ones
COLLECTION = [f"tests/test_e2e.py::test_slow{i}" for i in range(4)] + [
    f"tests/test_unit.py::test_fast{i}" for i in range(8)
]


class FakeWorker:
    """What the scheduler uses of a worker: its id, the tests sent to it, its shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[str] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += [COLLECTION[i] for i in indices]

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(workers: list[FakeWorker]) -> TwoLanesScheduling:
    config = SimpleNamespace(getvalue=lambda name: {"tx": [f"{len(workers)}*popen"]}[name],
                             option=SimpleNamespace(loadscopereorder=False))  # fmt: skip
    scheduler = TwoLanesScheduling(config)
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler


def _finish_one(scheduler: TwoLanesScheduling, worker: FakeWorker, done: set[str]) -> None:
    nodeid = next(n for n in worker.sent if n not in done)
    done.add(nodeid)
    scheduler.mark_test_complete(worker, COLLECTION.index(nodeid))


def test_the_first_worker_takes_the_slow_tests_and_the_other_the_fast_ones() -> None:
    first, other = FakeWorker("gw0"), FakeWorker("gw1")
    scheduler = _scheduler([first, other])
    slow, fast = COLLECTION[:4], COLLECTION[4:]
    assert first.sent and first.sent == slow[: len(first.sent)]  # from the front
    assert other.sent and other.sent == fast[::-1][: len(other.sent)]  # from the back
    sent_first = list(first.sent)
    done: set[str] = set()
    for _ in range(5):  # the fast worker goes on from the back while the slow one still runs
        _finish_one(scheduler, other, done)
    assert first.sent == sent_first
    assert len(other.sent) > 5 and other.sent == fast[::-1][: len(other.sent)]
    while any(n not in done for n in other.sent):  # the slow worker still on its first tests
        _finish_one(scheduler, other, done)
    # the fast worker, done with the fast tests, took the slow ones left, the shortest first
    assert first.sent == sent_first and other.shutting_down
    assert other.sent == fast[::-1] + slow[::-1][: len(slow) - len(first.sent)]
    while any(n not in done for n in first.sent):
        _finish_one(scheduler, first, done)
    assert sorted(first.sent + other.sent) == sorted(COLLECTION)  # every test once
    assert scheduler.tests_finished


def test_one_worker_takes_the_queue_in_order() -> None:
    only = FakeWorker("gw0")
    scheduler = _scheduler([only])
    done: set[str] = set()
    while not only.shutting_down:
        _finish_one(scheduler, only, done)
    while any(n not in done for n in only.sent):
        _finish_one(scheduler, only, done)
    assert only.sent == COLLECTION and scheduler.tests_finished
