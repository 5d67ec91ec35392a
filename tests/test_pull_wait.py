"""The wait between two pulls of replies (``replies.next_wait``): it grows by half at each empty
pull, up to 50 times what the last pull took, within 50 ms and 0.5 s."""

import pytest

from fl_async.strategies.replies import PULL_SHARE, WAIT_RANGE, next_wait


def waits(first: float, pull_seconds: float, count: int) -> list[float]:
    found = [first]
    for _ in range(count):
        found.append(next_wait(found[-1], pull_seconds))
    return found


def test_an_in_memory_pull_waits_at_most_50_ms() -> None:
    # a simulation's pull (well under a millisecond): the 20-ms start grows to 50 ms and stays
    assert waits(0.02, 1e-4, 4) == pytest.approx([0.02, 0.03, 0.045, 0.05, 0.05])


def test_a_request_to_a_superlink_waits_up_to_50_times_its_cost() -> None:
    # about 6 ms a pull on loopback with TLS: the wait settles at 0.3 s
    assert waits(0.02, 0.006, 12)[-1] == pytest.approx(PULL_SHARE * 0.006)
    # a slow pull (a loaded SuperLink): never more than half a second between pulls
    assert waits(0.02, 0.1, 12)[-1] == WAIT_RANGE[1] == 0.5


def test_the_wait_only_grows_by_half_a_step() -> None:
    assert next_wait(0.1, 0.1) == pytest.approx(0.15)
    # a wait already past what a cheap pull allows comes down to it at once
    assert next_wait(0.4, 1e-4) == WAIT_RANGE[0]
