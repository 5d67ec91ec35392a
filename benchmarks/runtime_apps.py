"""The ClientApp/ServerApp pair that ``benchmarks/runtime.py`` runs.

The ClientApp does a fixed synthetic workload per task: ``sleep`` (a device's time, no CPU),
``spin`` (a fixed count of pure-Python loop iterations: fixed CPU work, so 8 actors on 2 cores
really share 2 cores) or ``none``; then one pass over the model (``w * 0.999``) that becomes
the trained weights. It replies with FedAvg's contract, so the same ClientApp serves Flower's
FedAvg and fl_async's strategies; every node has the same speed. Its reply's metrics carry
timestamps (task created, received, work start/end, replied) and the ClientApp's CPU time.

The ServerApp runs the strategy ``SETUP`` names on a ``TimingGrid`` (a proxy timing every call
into Flower's Grid and stamping every reply) and, for fl_async strategies, a ``Probe`` that
times the event loop's parts by wrapping the strategy's methods and the protocol functions it
calls (both in ``runtime_timing``); it reads the process tree's CPU and memory with
``process_usage``.
"""

from __future__ import annotations

import os
import time
import types
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from process_usage import machine_busy_seconds, tree_cpu, tree_memory
from runtime_timing import Probe, Stopwatch, TimingGrid

from fl_async.protocol import to_record
from fl_async.strategies.async_strategy import AsyncStrategy

client = ClientApp()
server = ServerApp()
SETUP: dict[str, Any] = {}  # the ServerApp's settings, filled before run_simulation (same process)
RESULTS: list[dict[str, Any]] = []
RUNNING: list[Any] = []  # the strategy while it runs (read by the memory sampler)


# ----------------------------------------------------------------------------- the workload
def make_model(num_params: int) -> tuple[list[str], list[np.ndarray]]:
    """``num_params`` float32 values in four arrays shaped like a small network (seeded)."""
    rng = np.random.default_rng(0)
    big = num_params // 2
    quarter = num_params // 4
    rest = num_params - big - 2 * quarter
    width = 1000 if big >= 1000 else 1
    shapes = [(big // width, width), (quarter,), (quarter,), (rest + big % width,)]
    arrays = [rng.normal(scale=0.05, size=s).astype(np.float32) for s in shapes]
    return [f"layer{i}" for i in range(len(arrays))], arrays


def spin(units: int) -> int:
    """A fixed amount of single-threaded CPU work: ``units`` pure-Python loop iterations."""
    total = 0
    for i in range(units):
        total += i & 7
    return total


def client_work(arrays: list[np.ndarray], kind: str, seconds: float, units: int) -> list:
    """One task's work, the same in the simulation and in the plain loop (the ceiling)."""
    if kind == "sleep":
        time.sleep(seconds)
    elif kind == "spin":
        spin(units)
    elif kind != "none":
        raise ValueError(f"unknown workload {kind!r}")
    return [a * np.float32(0.999) if a.dtype.kind == "f" else a for a in arrays]


@client.query()
def query(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    metrics = MetricRecord({"partition-id": partition, "num-examples": 100})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


@client.train()
def train(msg: Message, context: Context) -> Message:
    started = time.time()
    cpu = time.process_time()
    partition = int(context.node_config["partition-id"])
    config = msg.content.config_records["config"]
    record = next(iter(msg.content.array_records.values()))
    arrays = record.to_numpy_ndarrays()
    work_start, work_cpu = time.time(), time.process_time()
    trained = client_work(
        arrays,
        str(config.get("work", "sleep")),
        float(config.get("work-seconds", 0.0)),
        int(config.get("spin-units", 0)),
    )
    work_end, work_cpu = time.time(), time.process_time() - work_cpu
    metrics = MetricRecord(
        {
            "num-examples": 100,
            "partition-id": partition,
            "t-task-created": float(msg.metadata.created_at),
            "t-received": started,
            "t-work-start": work_start,
            "t-work-end": work_end,
            "work-cpu": work_cpu,
            "client-cpu": 0.0,  # filled below, after serialising the reply
            "pid": os.getpid(),
        }
    )
    reply = RecordDict({"arrays": to_record(list(record.keys()), trained), "metrics": metrics})
    metrics["client-cpu"] = time.process_time() - cpu
    metrics["t-replied"] = time.time()
    return Message(reply, reply_to=msg)


# ------------------------------------------------------------------------ strategy state
def strategy_state() -> dict[str, int]:
    """What the running fl_async strategy holds now: tasks, stashed replies, stored bases,
    GSGM's cached gradients (empty for other strategies or between runs)."""
    strategy = RUNNING[0] if RUNNING else None
    if not isinstance(strategy, AsyncStrategy):
        return {}
    state = {
        "in_flight": len(strategy._run.book),
        "stashed_replies": strategy._run.book.stashed_replies,
        "stored_bases": strategy._run.book.stored_bases,
        "train_metric_records": len(strategy._run.recorder.result.train_metrics_clientapp),
    }
    cached = getattr(strategy.aggregator, "num_cached", None)
    if cached is not None:
        state["cached_gradients"] = cached
    return state


# ------------------------------------------------------------------------------ the floor
class PlainAsync:
    """The floor: the least an asynchronous ServerApp does on Flower's Message API.

    It sends every node a task, and re-sends a node a task as soon as its reply is pulled
    (polling every ``poll_interval`` s), always with one shared RecordDict (the initial model,
    serialised once, as FedAvg shares one per round): no identification, no aggregation, no
    copies. What it costs is Flower's and Ray's transport alone.
    """

    def __init__(self, *, min_nodes: int, poll_interval: float = 0.01) -> None:
        self.min_nodes = min_nodes
        self.poll_interval = poll_interval

    def start(self, grid, initial_arrays, *, timeout, train_config, max_updates, **_):
        while len(nodes := list(grid.get_node_ids())) < self.min_nodes:
            time.sleep(0.1)
        content = RecordDict({"arrays": initial_arrays, "config": train_config})

        def send(targets: list[int]) -> dict[str, int]:
            messages = [
                Message(content, dst_node_id=n, message_type="train", ttl=timeout) for n in targets
            ]
            return dict(zip(grid.push_messages(messages), targets, strict=True))

        in_flight = send(nodes)
        done = 0
        while done < max_updates:
            replies = list(grid.pull_messages(list(in_flight)))
            if not replies:
                time.sleep(self.poll_interval)
                continue
            again = [in_flight.pop(r.metadata.reply_to_message_id) for r in replies]
            done += sum(not r.has_error() for r in replies)
            in_flight.update(send(again))
        return types.SimpleNamespace(num_updates=done, faults={}, stopped_by="budget")


# ------------------------------------------------------------------------------ the server
@server.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``SETUP``'s strategy on a ``TimingGrid``; append what was measured to ``RESULTS``."""
    setup = SETUP
    keys, arrays = make_model(setup["params"])
    initial = to_record(keys, arrays)
    strategy = setup["strategy"]()
    RUNNING[:] = [strategy]
    watch = Stopwatch()
    timing_grid = TimingGrid(grid, watch, mark_after=setup["nodes"])
    probe = Probe(strategy, watch) if isinstance(strategy, AsyncStrategy) else None
    if probe is not None:
        probe.wrap_aggregator()
    train_config = ConfigRecord(dict(setup["train_config"]))
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    try:
        result, updates = _start(strategy, timing_grid, initial, train_config)
    finally:
        RUNNING.clear()
        if probe is not None:
            probe.restore()
    end = time.time()
    RESULTS.append(
        {
            "updates": updates,
            "start_wall": time.perf_counter() - wall0,
            "server_thread_cpu": time.thread_time() - cpu0,
            "first_train_push": timing_grid.first_train_push,
            "end": end,
            "cpu_at_mark": timing_grid.cpu_at_mark or {},
            "cpu_at_end": tree_cpu(),
            "busy_at_mark": timing_grid.busy_at_mark,
            "busy_at_end": machine_busy_seconds(),
            "mark_time": timing_grid.mark_time,
            "memory_at_end": tree_memory(),
            "seconds": dict(watch.seconds),
            "calls": dict(watch.calls),
            "replies": timing_grid.replies,
            "pulls": timing_grid.pulls,
            "empty_pulls": timing_grid.empty_pulls,
            "faults": dict(getattr(result, "faults", {}) or {}),
            "stopped_by": getattr(result, "stopped_by", "rounds"),
        }
    )


def _start(
    strategy: Any, grid: TimingGrid, initial: ArrayRecord, train_config: ConfigRecord
) -> tuple[Any, int]:
    """Run ``strategy`` to its end as ``SETUP`` says: its result and the updates it applied
    (FedAvg, which has no update count: the train replies received)."""
    setup = SETUP
    if isinstance(strategy, FedAvg):
        result = strategy.start(
            grid,
            initial,
            num_rounds=setup["rounds"],
            timeout=setup["timeout"],
            train_config=train_config,
        )
        return result, len(grid.replies)
    result = strategy.start(
        grid,
        initial,
        timeout=setup["timeout"],
        train_config=train_config,
        max_updates=setup["updates"],
        num_rounds=10**9,
    )
    return result, result.num_updates
