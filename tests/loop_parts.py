"""A run's state and its collaborators built by hand, with no Grid: for each collaborator's own
tests (``test_run_state``, ``test_membership``, ``test_dispatcher``, ``test_replies``,
``test_guard_gate``, ``test_boundaries``, ``test_snapshots``, ``test_stops``)."""

from __future__ import annotations

import numpy as np
import pytest
from fakegrid import QuadraticNode, task_identity
from flwr.app import Error, Message

from fl_async.aggregators import ASGD, Aggregator, ClientUpdate, UpdateGuard
from fl_async.scheduling import Asynchronous, DispatchPolicy, VirtualClock
from fl_async.strategies.compensation import TaskBases
from fl_async.strategies.loop import Collaborators, Parts, Settings, build
from fl_async.strategies.nodes import NodeRegistry
from fl_async.strategies.order import reply_order
from fl_async.strategies.outbox import Outbox
from fl_async.strategies.recorder import Recorder
from fl_async.strategies.run import Run
from fl_async.strategies.tasks import TaskBook

DIM = 3


@pytest.fixture(autouse=True)
def _identity():
    with task_identity():
        yield


class NodeList:
    """Stands in for the grid where a collaborator reads the node list and pushes messages:
    every push is taken (or, with ``refuse``, none is) and no reply ever comes."""

    def __init__(self, node_ids, *, refuse: bool = False) -> None:
        self.node_ids, self.refuse = list(node_ids), refuse
        self.pushed: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)

    def push_messages(self, messages) -> list[str]:
        messages = list(messages)
        if self.refuse:
            return ["" for _ in messages]
        start = len(self.pushed)
        self.pushed += messages
        return [f"msg-{start + i}" for i in range(len(messages))]

    def pull_messages(self, message_ids) -> list[Message]:
        return []


def make_run(
    *,
    nodes: int = 3,
    rule: Aggregator | None = None,
    policy: DispatchPolicy | None = None,
    clock: VirtualClock | None = None,
    max_failures: int = 2,
) -> tuple[Run, DispatchPolicy]:
    """A run of ``nodes`` nodes (node ids and stable ids 1..nodes, none identified by a query)
    whose rule (ASGD, lr 0.5) holds a zero model of ``DIM`` floats; and its policy."""
    rule = rule if rule is not None else ASGD(lr=0.5)
    policy = policy if policy is not None else Asynchronous()
    policy.clear_idle()
    registry = NodeRegistry(
        identify=False, poll_interval=0.001, max_failures=max_failures, on_idle=policy.set_idle
    )
    run = Run(rule, registry, TaskBook(), Outbox(), reply_order(clock), Recorder(), timeout=5.0)
    run.keys, run.started, run.patience = ["w"], True, 100
    rule.init([np.zeros(DIM, np.float32)])
    registry.arrivals_and_departures(NodeList(range(1, nodes + 1)), timeout=1.0)
    for stable in registry.order:
        policy.join(stable)
    return run, policy


def settings(**changes) -> Settings:
    """The collaborators' settings: ``AsyncStrategy``'s defaults but a short poll."""
    values = dict(
        seed=0,
        task_config={},
        max_in_flight=None,
        memory_budget=2 * 1024**3,
        min_nodes=1,
        forget_after=0,
        max_failures=2,
        poll_interval=0.001,
        checkpoint_dir=None,
        checkpoint_every=None,
    )
    return Settings(**{**values, **changes})


def collaborators(
    run: Run,
    policy: DispatchPolicy,
    *,
    guard: UpdateGuard | None = None,
    clock: VirtualClock | None = None,
    evaluate_fn=None,
    should_stop=None,
    before_reply=None,
    **changes,
) -> Collaborators:
    """``loop.build`` over ``run``; the guard off unless given one."""
    guard = guard if guard is not None else UpdateGuard.of(None)
    parts = Parts(policy, guard, TaskBases(), clock)
    return build(
        run,
        parts,
        settings(**changes),
        evaluate_fn=evaluate_fn,
        should_stop=should_stop,
        before_reply=before_reply or (lambda finish: None),
    )


def answer(message: Message, *, target: float = 1.0, mode: str = "ok") -> Message:
    """A quadratic node's reply to ``message`` (a train task): it trains towards ``target``."""
    node = QuadraticNode(0, np.full(DIM, target, np.float32), mode=mode)
    return node(message)


def error_reply(message: Message) -> Message:
    """A ClientApp's error reply to ``message``."""
    return Message(Error(code=0, reason="ClientApp raised"), reply_to=message)


def step(run: Run, node: int = 1, value: float = 1.0) -> None:
    """One server step: the rule applies node ``node``'s update of ``value`` everywhere."""
    delta = [np.full(DIM, value, np.float32)]
    assert run.rule.apply(ClientUpdate(node_id=node, delta=delta)).accepted
