"""The ClientApp/ServerApp pair that ``benchmarks/runtime.py`` runs, and its instruments.

The ClientApp does a fixed synthetic workload per task: ``sleep`` (a device's time, no CPU),
``spin`` (a fixed count of pure-Python loop iterations: fixed CPU work, so 8 actors on 2 cores
really share 2 cores) or ``none``; then one pass over the model (``w * 0.999``) that becomes
the trained weights. It replies with FedAvg's contract, so the same ClientApp serves Flower's
FedAvg and fl_async's strategies; every node has the same speed. Its reply's metrics carry
timestamps (task created, received, work start/end, replied) and the ClientApp's CPU time.

The ServerApp runs the strategy ``SETUP`` names on a ``TimingGrid`` (a proxy timing every call
into Flower's Grid and stamping every reply) and, for fl_async strategies, a ``Probe`` that
times the event loop's parts by wrapping the strategy's methods and the protocol functions it
calls. Nothing in ``fl_async`` is changed: the wrappers are installed on the instance and on
module attributes for the duration of one run.
"""

from __future__ import annotations

import os
import time
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fl_async import protocol
from fl_async.protocol import to_record
from fl_async.strategies import async_strategy, replies
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


# ------------------------------------------------------------------------- process tree
def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def process_tree(root: int | None = None) -> list[int]:
    """``root`` (default: this process) and all its descendants (Ray's GCS, raylet, workers)."""
    root = os.getpid() if root is None else root
    children = _children_map()
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def tree_cpu() -> dict[str, list]:
    """Per process of the tree: [group, user + system CPU seconds so far] by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in process_tree():
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        name = process_group(pid, head.split("(", 1)[1])
        found[str(pid)] = [name, (int(fields[11]) + int(fields[12])) / tick]  # utime, stime
    return found


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (busy time summed over cores)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of the process tree so far (processes alive now)."""
    return sum(cpu for _, cpu in tree_cpu().values())


def strategy_state() -> dict[str, int]:
    """What the running fl_async strategy holds now: tasks, stashed replies, stored bases,
    GSGM's cached gradients (empty for other strategies or between runs)."""
    strategy = RUNNING[0] if RUNNING else None
    if not isinstance(strategy, AsyncStrategy):
        return {}
    state = {
        "in_flight": len(strategy._book),
        "stashed_replies": strategy._book.stashed_replies,
        "stored_bases": strategy._book.stored_bases,
        "train_metric_records": len(strategy._recorder.result.train_metrics_clientapp),
    }
    cached = getattr(strategy.aggregator, "num_cached", None)
    if cached is not None:
        state["cached_gradients"] = cached
    return state


def process_group(pid: int, name: str) -> str:
    """Which part of the simulation a process of the tree is."""
    if pid == os.getpid():
        return "server process"
    if name.startswith("ray::ClientApp"):
        return "Ray actors"
    return "Ray services"


def tree_memory(root: int | None = None) -> dict[str, Any]:
    """Summed RSS and PSS (shared pages split between sharers) of the tree under ``root``
    (default: this process), in bytes, also per process group."""
    total = {"rss": 0, "pss": 0, "processes": 0}
    groups: dict[str, dict[str, int]] = {}
    for pid in process_tree(root):
        values = {"rss": 0, "pss": 0}
        try:
            with open(f"/proc/{pid}/stat") as f:
                name = f.read().split("(", 1)[1].rsplit(")", 1)[0]
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        values["rss"] = int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        values["pss"] = int(line.split()[1]) * 1024
        except OSError:
            continue
        group = groups.setdefault(process_group(pid, name), {"rss": 0, "pss": 0, "processes": 0})
        for key in ("rss", "pss"):
            group[key] += values[key]
            total[key] += values[key]
        group["processes"] += 1
        total["processes"] += 1
    return {**total, "groups": groups}


# ------------------------------------------------------------------------------- timing
class Stopwatch:
    """Inclusive seconds and call counts per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.active = True

    def add(self, name: str, seconds: float) -> None:
        if self.active:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, fn: Callable, name: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)

        return timed


class TimingGrid(Grid):
    """Delegates to Flower's Grid, timing each call and stamping each train reply's arrival.

    ``send_and_receive`` (FedAvg's path) is the in-memory Grid's own loop (push, then pull every
    ``pull_interval`` s) written against this proxy so its pushes and pulls are seen too.
    """

    def __init__(self, grid: Grid, watch: Stopwatch, *, mark_after: int) -> None:
        self._grid = grid
        self.watch = watch
        self.mark_after = mark_after
        self.cpu_at_mark: dict[str, list] | None = None  # the tree's CPU at reply mark_after
        self.busy_at_mark = 0.0  # the machine's, then
        self.mark_time = 0.0
        self.pull_interval = getattr(grid, "pull_interval", 0.1)
        self.first_train_push: float | None = None
        self.replies: list[dict[str, float]] = []  # one per train reply, in arrival order
        self.pulls = 0
        self.empty_pulls = 0

    def set_run(self, run) -> None:  # noqa: D102
        self._grid.set_run(run)

    @property
    def run(self):  # noqa: D102
        return self._grid.run

    def create_message(self, *args, **kwargs):  # noqa: D102
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        start = time.perf_counter()
        ids = list(self._grid.get_node_ids())
        self.watch.add("grid.get_node_ids", time.perf_counter() - start)
        return ids

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        messages = list(messages)
        if self.first_train_push is None and any(
            m.metadata.message_type == "train" for m in messages
        ):
            self.first_train_push = time.time()
        start = time.perf_counter()
        ids = list(self._grid.push_messages(messages))
        self.watch.add("grid.push_messages", time.perf_counter() - start)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        start = time.perf_counter()
        replies = list(self._grid.pull_messages(message_ids))
        self.watch.add("grid.pull_messages", time.perf_counter() - start)
        now = time.time()
        if self.watch.active:
            self.pulls += 1
            self.empty_pulls += not replies
        for reply in replies:
            if reply.metadata.message_type != "train" or reply.has_error():
                continue
            metrics = protocol.metrics_of(reply)
            self.replies.append(
                {
                    "arrival": now,
                    "pickup_latency": now - float(metrics.get("t-replied", now)),
                    "work": float(metrics.get("t-work-end", 0.0))
                    - float(metrics.get("t-work-start", 0.0)),
                    "client_cpu": float(metrics.get("client-cpu", 0.0)),
                    "work_cpu": float(metrics.get("work-cpu", 0.0)),
                    "received": float(metrics.get("t-received", now)),
                    "task_created": float(metrics.get("t-task-created", now)),
                    "replied": float(metrics.get("t-replied", now)),
                    "work_start": float(metrics.get("t-work-start", 0.0)),
                    "pid": int(metrics.get("pid", 0)),
                }
            )
        if self.cpu_at_mark is None and len(self.replies) >= self.mark_after:
            self.cpu_at_mark = tree_cpu()
            self.busy_at_mark = machine_busy_seconds()
            self.mark_time = time.time()
        return replies

    def send_and_receive(self, messages, *, timeout=None) -> Iterable[Message]:  # noqa: D102
        msg_ids = set(self.push_messages(messages))
        end_time = time.time() + (timeout if timeout is not None else 0.0)
        ret: list[Message] = []
        while timeout is None or time.time() < end_time:
            res = list(self.pull_messages(msg_ids))
            ret.extend(res)
            msg_ids.difference_update({m.metadata.reply_to_message_id for m in res})
            if not msg_ids:
                break
            start = time.perf_counter()
            time.sleep(self.pull_interval)
            self.watch.add("sleep", time.perf_counter() - start)
        return ret


class Probe:
    """Times the parts of an ``AsyncStrategy``'s event loop (inclusive seconds per part).

    Instance methods are wrapped on the strategy object; ``protocol.train_message``,
    ``protocol.read_train_reply``, ``replies._difference`` and the ``time.sleep`` the loop
    calls are wrapped on their modules, and put back by ``restore()``.
    """

    METHODS = (
        "_refresh_nodes", "_dispatch", "_dispatchable", "_make_task", "_track",
        "_next_reply", "_wait_for", "_handle", "_after_step", "_settle_barrier", "_evaluate",
        "_wait_for_nodes",
    )  # fmt: skip

    def __init__(self, strategy: AsyncStrategy, watch: Stopwatch) -> None:
        self.watch = watch
        self._saved: list[tuple[object, str, object]] = []
        for name in self.METHODS:
            setattr(strategy, name, watch.wrap(getattr(strategy, name), name))
        original_begin = strategy._begin

        def begin(*args, **kwargs):  # start-up (waiting for nodes, identify): set apart
            watch.active = False
            start = time.perf_counter()
            try:
                return original_begin(*args, **kwargs)
            finally:
                watch.active = True
                watch.add("startup", time.perf_counter() - start)

        strategy._begin = begin
        name = "_wait_for_min_nodes"  # the start-up's wait for (and identification of) nodes
        setattr(strategy, name, self._always(getattr(strategy, name), f"startup:{name}"))
        self._patch(protocol, "train_message")
        self._patch(protocol, "read_train_reply")
        self._patch(protocol, "metric_record")
        self._patch(replies, "_difference")
        timed_sleep = watch.wrap(time.sleep, "sleep")
        shim = types.SimpleNamespace(
            **{k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
        )
        shim.sleep = timed_sleep
        for module in (async_strategy, replies):
            self._saved.append((module, "time", module.time))
            module.time = shim
        self._strategy = strategy

    def _always(self, fn: Callable, name: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.watch.seconds[name] = self.watch.seconds.get(name, 0.0) + (
                    time.perf_counter() - start
                )

        return timed

    def wrap_aggregator(self) -> None:
        """Time ``aggregator.apply`` (call once the strategy has built its aggregator)."""
        agg = self._strategy.aggregator
        agg.apply = self.watch.wrap(agg.apply, "aggregator.apply")

    def _patch(self, module: object, name: str) -> None:
        original = getattr(module, name)
        self._saved.append((module, name, original))
        setattr(module, name, self.watch.wrap(original, name))

    def restore(self) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)
        self._saved = []


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
        if isinstance(strategy, FedAvg):
            result = strategy.start(
                timing_grid, initial, num_rounds=setup["rounds"], timeout=setup["timeout"],
                train_config=train_config,
            )  # fmt: skip
            updates = len(timing_grid.replies)
        else:
            result = strategy.start(
                timing_grid, initial, timeout=setup["timeout"], train_config=train_config,
                max_updates=setup["updates"], num_rounds=10**9,
            )  # fmt: skip
            updates = result.num_updates
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
