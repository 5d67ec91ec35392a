"""The suite's own order (tests/conftest.py): slow tests first, the longest first, and the tests
that mostly wait on processes (``slow(waits=True)``) kept apart."""

from types import SimpleNamespace

import conftest


class Item:
    """What the ordering reads of a test: its name and its ``slow`` marker, if any."""

    def __init__(self, name: str, **slow: object) -> None:
        self.name, self.slow = name, slow

    def get_closest_marker(self, name: str):  # noqa: D102
        return SimpleNamespace(kwargs=self.slow) if name == "slow" and self.slow else None


def test_waiting_tests_are_held_until_the_others_cover_the_previous_ones_seconds():
    items = [
        Item("fast"),
        Item("tls", seconds=90, waits=True),
        Item("bench", seconds=150),
        Item("restart", seconds=100, waits=True),
        Item("sim", seconds=90),
        Item("study", seconds=50),
        Item("churn", seconds=50),
        Item("killed", seconds=120),
    ]
    conftest.pytest_collection_modifyitems(items)
    assert [i.name for i in items] == [
        "bench", "killed", "restart", "sim", "study", "tls", "churn", "fast",
    ]  # fmt: skip


def test_a_waiting_test_with_too_few_others_after_it_still_runs_last_among_the_slow():
    items = [Item("a", seconds=100, waits=True), Item("b", seconds=90, waits=True), Item("c")]
    conftest.pytest_collection_modifyitems(items)
    assert [i.name for i in items] == ["a", "b", "c"]
