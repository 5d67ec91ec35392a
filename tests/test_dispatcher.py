"""The dispatcher on its own: who may start, what each task holds, what the outbox sends."""

import numpy as np
from loop_parts import NodeList, _identity, collaborators, make_run, step  # noqa: F401

from fl_async import protocol
from fl_async.scheduling import VirtualClock


def test_every_idle_node_gets_one_task_seeded_by_its_stable_id_and_task_index():
    run, policy = make_run(nodes=3)
    dispatcher = collaborators(run, policy, seed=7).dispatcher
    grid = NodeList([1, 2, 3])
    assert dispatcher.dispatch(grid)
    assert len(run.book) == 3 and len(grid.pushed) == 3
    assert dispatcher.dispatchable() == []  # every node is busy now
    seeds = [m.content.config_records["config"]["task-seed"] for m in grid.pushed]
    expected = [
        int(np.random.SeedSequence([7, stable, 0]).generate_state(1)[0]) for stable in (1, 2, 3)
    ]
    assert seeds == expected
    assert [run.registry[n].tasks for n in (1, 2, 3)] == [1, 1, 1]


def test_max_in_flight_and_the_memory_budget_bound_the_tasks_at_once():
    run, policy = make_run(nodes=4)
    assert len(collaborators(run, policy, max_in_flight=2).dispatcher.dispatchable()) == 2
    run, policy = make_run(nodes=4)
    run.model_bytes = 100
    budget = collaborators(run, policy, memory_budget=300).dispatcher
    assert len(budget.dispatchable()) == 3  # 300 bytes hold three stored bases of 100


def test_a_tasks_config_carries_the_settings_and_what_identifies_it():
    run, policy = make_run(nodes=1)
    run.train_config = {"lr": 0.1, "local-epochs": 2}
    dispatcher = collaborators(run, policy, task_config={"proximal-mu": 0.01}).dispatcher
    task, make = dispatcher.make_task(1)
    config = dict(make().content.config_records["config"])
    assert config["lr"] == 0.1 and config["proximal-mu"] == 0.01
    assert config["server-step"] == 0 and config["server-round"] == 1
    assert config["iteration"] == task.iteration and config["task-seed"] == task.seed
    assert run.registry[1].busy


def test_the_virtual_clock_times_a_task_by_its_examples_and_the_model_size():
    clock = VirtualClock(seed=0)
    run, policy = make_run(nodes=1, clock=clock)
    run.train_config = {"local-steps": 3, "batch-size": 8}
    dispatcher = collaborators(run, policy, clock=clock).dispatcher
    task, _ = dispatcher.make_task(1)
    duration = clock.duration(1, 0, examples=24, bytes_down=1, bytes_up=1)
    assert (task.start, task.finish) == (0.0, duration)
    assert dispatcher.examples_for(run.registry[1]) == 24


def test_one_record_is_serialised_per_version_for_all_its_tasks():
    run, policy = make_run(nodes=2)
    dispatcher = collaborators(run, policy).dispatcher
    first = dispatcher.version_record(0)
    assert dispatcher.version_record(0) is first
    step(run)
    second = dispatcher.version_record(1)
    assert second is not first
    assert second.to_numpy_ndarrays()[0].tolist() == run.rule.params[0].tolist()


def test_a_task_whose_push_failed_leaves_the_book_as_a_fault_and_frees_its_node():
    run, policy = make_run(nodes=2)
    dispatcher = collaborators(run, policy).dispatcher
    assert not dispatcher.dispatch(NodeList([1, 2], refuse=True))
    assert len(run.book) == 0 and run.recorder.faults == {"push-failed": 2}
    assert not run.registry[1].busy and not run.registry[2].busy


def test_configure_books_each_task_under_its_node_for_flowers_round_based_api():
    run, policy = make_run(nodes=2)
    messages = collaborators(run, policy).dispatcher.configure()
    assert [m.metadata.dst_node_id for m in messages] == [1, 2]
    assert sorted(run.book.ids()) == ["configured-1", "configured-2"]
    sent = messages[0].content.array_records["arrays"]
    assert list(sent.keys()) == list(protocol.to_record(["w"], run.rule.params).keys())
