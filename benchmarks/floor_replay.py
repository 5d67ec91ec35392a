"""The floor of a run: its own client work replayed in plain processes, one per core.

``replay(history, processes)`` reads a run's ``history.json``: every applied update's
``partition-id`` and ``steps`` (in the order the run applied them) and every central evaluation.
It loads each node's partition with the ClientApp's own function (``load_node_data``) and trains
with the ClientApp's own ``training.train`` (the run's batch size, learning rate, momentum,
weight decay and proximal term), evaluates with the ServerApp's ``training.evaluate`` on the
test split, in ``processes`` plain Python processes with one torch thread each, one model
reused per process, pulling the tasks in the run's order from one queue. Data loading, model
building and one warm-up task per process happen before the clock starts: the figure is the
least time this work takes on these cores, the ``floor`` that ``floor.py`` divides by the run's
wall time.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import Any

Task = tuple[str, int, int]
"""``("train", partition-id, steps)`` or ``("eval", 0, 0)``."""

READY_TIMEOUT = 300.0
"""Seconds a worker may take to load its data and warm up before the replay gives up."""


def tasks_of(history: dict[str, Any]) -> list[Task]:
    """The run's train tasks (applied updates, in order) and central evaluations, interleaved
    at the server step where each evaluation happened."""
    updates = sorted(history["updates"], key=lambda u: u["index"])
    evaluations = [e["server-step"] for e in history["evaluations"]]
    evaluations += [e["server-step"] for e in history.get("grid-evaluations", [])]
    missing = [u["index"] for u in updates if u.get("partition-id") is None]
    if missing:
        raise ValueError(f"updates {missing[:5]} report no partition-id: cannot replay them")
    pending = sorted(evaluations)
    out: list[Task] = []
    for update in updates:
        while pending and pending[0] < update["server-step"]:
            out.append(("eval", 0, 0))
            pending.pop(0)
        out.append(("train", int(update["partition-id"]), int(update["steps"])))
    out += [("eval", 0, 0)] * len(pending)
    return out


def _worker(config: dict, tasks: mp.Queue, ready: mp.Queue, go: Any, done: mp.Queue) -> None:
    """Load every partition once, warm up, then run tasks from ``tasks`` until ``None``."""
    import torch

    from fl_async.clients import training
    from fl_async.clients.node_data import load_node_data, new_model
    from fl_async.config import TrainSpec
    from fl_async.data_spec import DataSpec

    torch.set_num_threads(1)
    nodes = int(config["num-nodes"])
    node_config = {"num-partitions": nodes}
    data = [load_node_data({**node_config, "partition-id": p}, config) for p in range(nodes)]
    model = new_model(DataSpec.from_config(config), data[0].data)
    spec = TrainSpec.from_configs({}, config)
    settings = dict(
        batch_size=spec.batch_size,
        lr=spec.lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        proximal_mu=spec.proximal_mu,
    )

    def run(task: Task) -> None:
        kind, partition, steps = task
        if kind == "eval":
            training.evaluate(model, data[0].data.test)
        else:
            node = data[partition]
            training.train(model, node.data.train, node.train_index, steps=steps, **settings)

    run(("train", 0, 1))  # warm-up: first-call costs are not the work's
    run(("eval", 0, 0))
    ready.put(True)
    go.wait()
    busy = 0.0
    cpu = time.process_time()
    while (task := tasks.get()) is not None:
        started = time.perf_counter()
        run(task)
        busy += time.perf_counter() - started
    done.put((busy, time.process_time() - cpu))


def replay(history: dict[str, Any], processes: int) -> dict[str, Any]:
    """Seconds the run's client work and evaluations take in ``processes`` plain processes."""
    work = tasks_of(history)
    context = mp.get_context("spawn")
    tasks, ready, done = context.Queue(), context.Queue(), context.Queue()
    go = context.Event()
    for task in work:
        tasks.put(task)
    for _ in range(processes):
        tasks.put(None)
    workers = [
        context.Process(target=_worker, args=(history["config"], tasks, ready, go, done))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            ready.get(timeout=READY_TIMEOUT)
        started = time.perf_counter()
        go.set()
        finished = [done.get(timeout=READY_TIMEOUT + 60 * len(work)) for _ in workers]
        floor = time.perf_counter() - started
    except queue.Empty as error:
        raise RuntimeError("a replay worker neither finished nor failed in time") from error
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    trains = sum(kind == "train" for kind, _, _ in work)
    return {
        "floor-seconds": floor,
        "busy-seconds": [b for b, _ in finished],
        "cpu-seconds": [c for _, c in finished],
        "train-tasks": trains,
        "evaluations": len(work) - trains,
        "processes": processes,
    }
