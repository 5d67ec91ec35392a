"""The identify queries: the start's, which it waits for, and those the event loop does not.

At the start every node is asked for its ``partition-id`` and the run waits for the answers
(``ask_and_wait``). A node that joins while the run goes on is asked the same, but the loop goes
on applying the other nodes' replies while it answers (``PendingQueries``): its answer is read
at the loop's next look (one more pull each time round while a query is unanswered), and a
node that has not answered within ``QUERY_QUIET`` seconds (at most the task timeout) counts as
one that never answered, as in the start's query. So a node slow to answer, or one that never
will, holds no one else up.
"""

from __future__ import annotations

import time

from flwr.app import Message
from flwr.serverapp import Grid

from fl_async import protocol

QUERY_QUIET = 120.0
"""Seconds without a new answer after which an identify query gives up on the nodes left."""
NO_QUERY_HANDLER = "No query function registered"
"""What Flower's ClientApp raises for a query it has no handler for (in the error's reason)."""


def ask_and_wait(
    grid: Grid, node_ids: list[int], *, wait: float, poll_interval: float
) -> list[Message | None]:
    """Send the identify query to ``node_ids``; their replies (None: no answer in time).

    It waits while answers keep coming, up to ``wait``, and gives up on the rest once
    ``QUERY_QUIET`` seconds (at most ``wait``) pass without a new one: 10,000 simulated
    nodes on two actors take minutes to answer, a node that never will should not hold
    the start for the whole timeout.
    """
    ids = list(grid.push_messages([protocol.query_message(n, ttl=wait) for n in node_ids]))
    answers: dict[str, Message] = {}
    now = time.time()
    deadline, quiet = now + wait, min(QUERY_QUIET, wait)
    last_answer = now
    while len(answers) < len(ids) and time.time() < min(deadline, last_answer + quiet):
        for reply in grid.pull_messages([i for i in ids if i not in answers]):
            answers[reply.metadata.reply_to_message_id] = reply
            last_answer = time.time()
        if len(answers) < len(ids):
            time.sleep(poll_interval)
    return [answers.get(msg_id) for msg_id in ids]


class PendingQueries:
    """The identify queries in flight, by node id: their message ids and when to give up."""

    def __init__(self) -> None:
        self._asked: dict[int, tuple[str, float]] = {}

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._asked

    def send(self, grid: Grid, node_ids: list[int], *, wait: float) -> None:
        """Ask ``node_ids`` for their identity; each is given up on after ``QUERY_QUIET``
        seconds, or ``wait`` if shorter (a query the SuperLink did not take: at that time too)."""
        ids = list(grid.push_messages([protocol.query_message(n, ttl=wait) for n in node_ids]))
        give_up = time.time() + min(QUERY_QUIET, wait)
        for at, node_id in enumerate(node_ids):
            self._asked[node_id] = (ids[at] if at < len(ids) else "", give_up)

    def collect(self, grid: Grid) -> list[tuple[int, Message | None]]:
        """``(node id, reply)`` of each query that was answered or given up on (reply None)
        since the last look."""
        if not self._asked:
            return []
        waiting = [msg_id for msg_id, _ in self._asked.values() if msg_id]
        pulled = grid.pull_messages(waiting) if waiting else []
        replies = {r.metadata.reply_to_message_id: r for r in pulled}
        now, done = time.time(), []
        for node_id, (msg_id, give_up) in list(self._asked.items()):
            reply = replies.get(msg_id) if msg_id else None
            if reply is not None or now >= give_up:
                del self._asked[node_id]
                done.append((node_id, reply))
        return done

    def keep(self, connected: set[int]) -> None:
        """Forget the queries of the nodes no longer listed: they left before answering."""
        for node_id in [n for n in self._asked if n not in connected]:
            del self._asked[node_id]


def lacks_query_handler(reply: Message | None) -> bool:
    """Whether ``reply`` is Flower's error for a ClientApp with no query function."""
    return reply is not None and reply.has_error() and NO_QUERY_HANDLER in reply.error.reason
