"""The run state on its own: the model as records, closing a task, the wall-time limit."""

import time

from loop_parts import NodeList, _identity, collaborators, make_run, step  # noqa: F401


def test_the_model_and_its_version_are_the_rules():
    run, _ = make_run()
    assert run.version == 0
    step(run, value=2.0)
    assert run.version == 1
    record = run.model_record()
    assert list(record.keys()) == ["w"]
    assert record.to_numpy_ndarrays()[0].tolist() == run.rule.params[0].tolist()


def test_closing_a_task_takes_it_out_of_the_book_and_the_outbox():
    run, policy = make_run(nodes=1)
    collaborators(run, policy).dispatcher.dispatch(NodeList([1]))
    (key,) = run.book.ids()
    task, base = run.close(key)
    assert task.node_id == 1 and len(run.book) == 0 and run.outbox.to_pull(run.book) == []
    assert [b.tolist() for b in base] == [p.tolist() for p in run.rule.params]


def test_the_wall_time_limit():
    run, _ = make_run()
    assert not run.out_of_wall_time() and run.wall_time_left() == float("inf")
    run.max_wall_time = 10.0
    assert 9.0 < run.wall_time_left() <= 10.0
    run.recorder.wall_start = time.time() - 11.0
    assert run.out_of_wall_time()
