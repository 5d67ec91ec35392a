"""TaskQueue: virtual finish order, ties, removal and bad arguments."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.scheduling import TaskQueue
from fl_async.validation import InvalidArgument


def drain(queue):
    out = []
    while queue:
        out.append(queue.pop())
    return out


def test_order_and_ties():
    q = TaskQueue()
    q.push("late", 5.0, 0)
    q.push("b-first", 2.0, 9)
    q.push("tie-id-1", 2.0, 1)
    q.push("tie-id-1-again", 2.0, 1)  # same finish and id: push order decides
    q.push("early", 0.5, 4)
    assert len(q) == 5 and "late" in q and "absent" not in q
    assert q.peek() == ("early", 0.5) and len(q) == 5
    expected = [
        ("early", 0.5),
        ("tie-id-1", 2.0),
        ("tie-id-1-again", 2.0),
        ("b-first", 2.0),
        ("late", 5.0),
    ]
    assert drain(q) == expected
    assert len(q) == 0


def test_remove_and_push_again():
    q = TaskQueue()
    for i in range(5):
        q.push(f"t{i}", float(i), i)
    q.remove("t0")
    q.remove("t3")
    assert "t0" not in q and len(q) == 3
    assert q.peek() == ("t1", 1.0)
    q.push("t0", 10.0, 0)  # a removed key may be queued again, at its new time
    assert drain(q) == [("t1", 1.0), ("t2", 2.0), ("t4", 4.0), ("t0", 10.0)]


def test_errors():
    q = TaskQueue()
    with pytest.raises(IndexError, match="empty"):
        q.peek()
    with pytest.raises(IndexError, match="empty"):
        q.pop()
    with pytest.raises(KeyError, match="'x' is not queued"):
        q.remove("x")
    q.push("x", 1.0, 0)
    with pytest.raises(InvalidArgument, match="'x' is already queued"):
        q.push("x", 2.0, 0)
    with pytest.raises(InvalidArgument, match="finish must be a finite number >= 0, got nan"):
        q.push("y", float("nan"), 0)
    with pytest.raises(InvalidArgument, match="stable_id must be an integer >= 0, got -1"):
        q.push("y", 1.0, -1)
    with pytest.raises(InvalidArgument, match="stable_id must be an integer >= 0, got True"):
        q.push("y", 1.0, True)
    with pytest.raises(InvalidArgument, match="task_key must be a str, got 3"):
        q.push(3, 1.0, 0)
    assert len(q) == 1


operations = st.lists(
    st.tuples(
        st.sampled_from(["push", "push", "pop", "remove"]),
        st.integers(0, 30),  # key
        st.integers(0, 6),  # finish (few values: many ties)
        st.integers(0, 3),  # stable id
    ),
    max_size=200,
)


@settings(deadline=None, max_examples=150)
@given(ops=operations)
def test_matches_a_sorted_list(ops):
    q, model, pushed = TaskQueue(), [], 0  # model: (finish, stable_id, push order, key)
    for kind, key, finish, sid in ops:
        name = f"k{key}"
        if kind == "push" and name not in q:
            q.push(name, float(finish), sid)
            model.append((float(finish), sid, pushed, name))
            pushed += 1
        elif kind == "pop" and model:
            best = min(model)
            model.remove(best)
            assert q.pop() == (best[3], best[0])
        elif kind == "remove" and name in q:
            q.remove(name)
            model = [m for m in model if m[3] != name]
        assert len(q) == len(model)
        assert all(m[3] in q for m in model)
        if model:
            assert q.peek() == (min(model)[3], min(model)[0])
    assert drain(q) == [(m[3], m[0]) for m in sorted(model)]
