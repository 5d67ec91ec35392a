"""Holding tasks back (``send_ahead``): same histories, at most ``ahead`` unanswered at the
grid, held tasks sent earliest virtual finish first, failures and timeouts still bounded."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord, Message
from golden import GOLDEN, SCENARIOS, record

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, GSGM, PRESETS
from fl_async.validation import InvalidArgument

EXPECTED = __import__("json").loads(GOLDEN.read_text())


@pytest.mark.parametrize("ahead", [2])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_holding_tasks_back_gives_the_golden_history(preset, scenario, ahead):
    assert record(preset, scenario, send_ahead=ahead) == EXPECTED[f"{preset}/{scenario}"]


class CountingGrid(FakeGrid):
    """Counts train tasks sent and not yet pulled back; notes each task's send order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.out: set[str] = set()
        self.most = 0
        self.sent: list[tuple[int, int]] = []  # (node, server step) in send order

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for message, msg_id in zip(messages, ids, strict=True):
            if message.metadata.message_type == "train":
                self.out.add(msg_id)
                config = message.content["config"]
                self.sent.append((message.metadata.dst_node_id, int(config["server-step"])))
        self.most = max(self.most, len(self.out))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(super().pull_messages(message_ids))
        for reply in replies:
            self.out.discard(reply.metadata.reply_to_message_id)
        return replies


def run(strategy, nodes, grid=None, rounds: int = 4):
    grid = grid or CountingGrid(nodes, delay_seed=1)
    config = ConfigRecord({"local-steps": 1, "lr": 0.3})
    with task_identity():
        result = strategy.start(
            grid, initial_arrays(), num_rounds=rounds, timeout=5, train_config=config
        )
    return result, grid


@pytest.mark.parametrize("ahead", [1, 2, 4])
def test_at_most_ahead_tasks_are_unanswered_at_the_grid(ahead):
    nodes = quadratic_fleet(8, seed=2)
    result, grid = run(ASGD(clock=VirtualClock(seed=3), min_nodes=8, send_ahead=ahead), nodes)
    assert result.num_updates == 32 and result.stopped_by == "budget"
    # the awaited task goes out even when the window is full: one more at most
    assert 1 < grid.most <= ahead + 1 or ahead == 1 and grid.most <= 2


def test_without_send_ahead_every_task_goes_out_at_once():
    nodes = quadratic_fleet(8, seed=2)
    _, grid = run(ASGD(clock=VirtualClock(seed=3), min_nodes=8), nodes)
    assert grid.most == 8


def test_held_tasks_go_out_earliest_virtual_finish_first():
    nodes = quadratic_fleet(6, seed=2)
    strategy = ASGD(clock=VirtualClock(seed=3), min_nodes=6, send_ahead=2)
    _, grid = run(strategy, nodes)
    first = [node for node, step in grid.sent if step == 0]
    # the first six tasks all start at virtual time 0: the faster node's goes first
    by_speed = sorted(
        first,
        key=lambda n: strategy.clock.duration(
            strategy._run.registry[n].stable_id, 0, examples=10, bytes_down=1, bytes_up=1
        ),
    )
    assert first == by_speed


def test_a_node_that_never_answers_ends_the_run_with_held_tasks_too():
    nodes = quadratic_fleet(4, seed=1, modes=dict.fromkeys(range(4), "silent"))
    strategy = GSGM(clock=VirtualClock(seed=0), min_nodes=4, send_ahead=1, patience=4)
    grid = CountingGrid(nodes, delay_seed=1)
    with task_identity():
        result = strategy.start(grid, initial_arrays(), num_rounds=2, timeout=0.3)
    assert result.stopped_by == "no-progress" and result.faults["timeout"] == 4
    assert len(grid.sent) == 4  # every task went out, held ones once others timed out


def test_a_push_that_fails_is_a_fault_and_the_run_goes_on():
    class Refusing(CountingGrid):
        refused = 0

        def push_messages(self, messages):
            messages = list(messages)
            if self.refused < 2 and messages[0].metadata.message_type == "train":
                self.refused += 1
                return list(super().push_messages(messages[1:])) and []
            return super().push_messages(messages)

    nodes = quadratic_fleet(4, seed=1)
    result, _ = run(
        ASGD(clock=VirtualClock(seed=0), min_nodes=4, send_ahead=2),
        nodes,
        grid=Refusing(nodes, delay_seed=1),
    )
    assert result.faults.get("push-failed", 0) >= 2 and result.stopped_by == "budget"


def test_send_ahead_needs_a_clock_and_a_positive_count():
    with pytest.raises(InvalidArgument, match="send_ahead=2 needs a clock"):
        ASGD(send_ahead=2)
    with pytest.raises(InvalidArgument, match="send_ahead"):
        ASGD(clock=VirtualClock(seed=0), send_ahead=0)


def test_the_run_config_key_reaches_the_strategy_and_needs_the_virtual_clock():
    from fl_async.app.config import parse_run_config
    from fl_async.app.server_run import build_strategy

    config = parse_run_config({"send-ahead": 3, "strategy": "asgd"})
    assert build_strategy(config, clock=VirtualClock(seed=0)).send_ahead == 3
    assert build_strategy(parse_run_config({}), clock=VirtualClock(seed=0)).send_ahead is None
    with pytest.raises(InvalidArgument, match="'send-ahead' = 2 needs clock.type = 'virtual'"):
        parse_run_config({"send-ahead": 2, "clock.type": "real"})
