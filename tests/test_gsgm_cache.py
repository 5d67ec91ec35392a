"""GSGM's cache under a memory budget (docs/algorithms.md, GSGM, The cache under a memory
budget): the same history, bit for bit, whether the cached gradients stay in memory or spill to
a memory-mapped file; state_dict across budgets; freed rows reused; no file left behind."""

import gc
import math
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest
from exact import assert_same
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import ConfigRecord

from fl_async.aggregators import GSGM, ClientUpdate, kernels
from fl_async.aggregators.cache import GradientCache
from fl_async.scheduling import VirtualClock
from fl_async.strategies import GSGM as GSGMPreset
from fl_async.validation import InvalidArgument

SHAPES = ((40, 30), (30,), ())
NODE_BYTES = 4 * (40 * 30 + 30 + 1)
COMMON = {"lr": 0.3, "momentum": 0.8, "average_weight": 0.4, "staleness": "polynomial"}
RULES = {
    "update": {},
    "sgd": {"server_optimizer": "sgd"},
    "adam": {"server_optimizer": "adam", "lr": 0.05, "beta1": 0.8, "beta2": 0.99},
    "cycle": {"momentum_rule": "cycle"},
    "implicit": {"momentum_rule": "implicit"},
    "buffer": {"schedule": "buffer", "num_nodes": 6, "slack": 1},
    "buffer-cycle": {"schedule": "buffer", "num_nodes": 6, "momentum_rule": "cycle"},
}
BUDGETS = {"all-on-disk": 0, "two-in-memory": 2.5 * NODE_BYTES}
SKEWED = [0.3, 0.25, 0.15, 0.12, 0.1, 0.08]


def _params():
    rng = np.random.default_rng(0)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def events(seed=1, count=60):
    """``(node, delta, staleness, forget)``: 6 nodes (skewed, so the buffer holds some), and now
    and then a node forgotten, which later comes back."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        node = int(rng.choice(6, p=SKEWED))
        delta = [rng.normal(scale=0.3, size=s).astype(np.float32) for s in SHAPES]
        forget = int(rng.integers(6)) if rng.random() < 0.15 else None
        yield node, delta, int(rng.integers(0, 4)), forget


def run(agg, updates, history=None, watch=None):
    """Feed ``updates``; return the model's bytes after every apply (and every forget)."""
    history = history if history is not None else [[p.copy() for p in agg.params]]
    seen = []
    for node, delta, tau, forget in updates:
        b = max(len(history) - 1 - tau, 0)
        update = ClientUpdate(
            node_id=node, delta=delta, base=history[b], staleness=len(history) - 1 - b
        )
        outcome = agg.apply(update)
        seen.append(b"".join(p.tobytes() for p in agg.params))
        if forget is not None:
            agg.forget(forget)
        if outcome.stepped:
            history.append([p.copy() for p in agg.params])
        if watch is not None:
            watch(agg)
    return seen


def rule_state(agg):
    """The state_dict without the hyperparameters (they name the budget)."""
    return {k: v for k, v in agg.state_dict().items() if k != "hyperparameters"}


def make(rule, **extra):
    agg = GSGM(**{**COMMON, **RULES[rule], **extra})
    agg.init(_params())
    return agg


def open_files(directory):
    """This process's open descriptors and mappings of files in ``directory`` (Linux)."""
    found = [
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    ]
    found += Path("/proc/self/maps").read_text().splitlines()
    return [line for line in found if str(directory) in line]


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")


@pytest.fixture(params=["in-place", "scratch"])
def branch(request, monkeypatch):
    """On "scratch" every step goes through the checked scratch branch (no bound is below 0)."""
    if request.param == "scratch":
        monkeypatch.setattr(kernels, "IN_PLACE_LIMIT", 0.0)
    return request.param


# ------------------------------------------------------------------------------ same history
@pytest.mark.parametrize("budget", sorted(BUDGETS))
@pytest.mark.parametrize("rule", sorted(RULES))
def test_spilling_changes_nothing_bit_for_bit(rule, budget, branch, tmp_path):
    updates = list(events())
    unlimited = make(rule)
    want = run(unlimited, updates)
    assert unlimited.cache_usage.nodes_on_disk == 0 and unlimited.cache_usage.disk_bytes == 0

    spilled = make(rule, cache_memory=BUDGETS[budget], cache_dir=tmp_path)
    usage = []
    got = run(spilled, updates, watch=lambda agg: usage.append(agg.cache_usage))
    assert got == want  # every model after every apply
    assert_same(rule_state(spilled), rule_state(unlimited))
    assert max(u.nodes_on_disk for u in usage) >= 4  # it spilled, and forgotten nodes came back
    assert max(u.nodes_in_memory for u in usage) == (0 if budget == "all-on-disk" else 2)
    assert all(u.memory_bytes == u.nodes_in_memory * NODE_BYTES for u in usage)
    assert os.listdir(tmp_path) == []  # the file has no name
    spilled.close()


@pytest.mark.parametrize("rule", ["update", "adam", "buffer"])
@pytest.mark.parametrize(
    ("saved", "loaded"), [(0, None), (None, 0), (2 * NODE_BYTES, 0), (0, 3 * NODE_BYTES)]
)
def test_state_dict_resumes_bit_for_bit_across_budgets(rule, saved, loaded, tmp_path):
    updates = list(events(seed=4))
    whole = make(rule)
    want = run(whole, updates)

    first = make(rule, cache_memory=saved, cache_dir=tmp_path)
    history = [[p.copy() for p in first.params]]
    got = run(first, updates[:30], history)
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as a checkpoint keeps it
    assert all(type(a) is np.ndarray for g in state["state"]["cache"].values() for a in g)
    first.close()
    resumed = GSGM(**{**COMMON, **RULES[rule]}, cache_memory=loaded, cache_dir=tmp_path)
    resumed.load_state_dict(state)
    expected_on_disk = 0 if loaded is None else max(0, resumed.num_cached - loaded // NODE_BYTES)
    assert resumed.cache_usage.nodes_on_disk == expected_on_disk
    got += run(resumed, updates[30:], history)
    assert got == want
    assert_same(rule_state(resumed), rule_state(whole))


def test_a_rejected_update_leaves_a_spilled_cache_unchanged(tmp_path):
    agg = GSGM(cache_memory=0, cache_dir=tmp_path)
    agg.init([np.zeros(3, np.float32)])
    big = [np.full(3, 3e38, np.float32)]
    agg.apply(ClientUpdate(node_id=0, delta=big))
    before = rule_state(agg)
    outcome = agg.apply(ClientUpdate(node_id=1, delta=big))  # S = 6e38 overflows float32
    assert outcome.reason == "overflow"
    assert_same({**rule_state(agg), "num_rejected": {}}, before)
    assert agg.num_cached == agg.cache_usage.nodes_on_disk == 1


# ---------------------------------------------------------------------------- rows and files
def test_forgotten_nodes_free_their_rows_and_the_file_stops_growing(tmp_path):
    """200 nodes come and go, at most 3 cached at once: the file keeps 3 rows."""
    agg = GSGM(cache_memory=0, cache_dir=tmp_path)
    agg.init(_params())
    rng = np.random.default_rng(0)
    sizes = []
    for node in range(200):
        delta = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
        agg.apply(ClientUpdate(node_id=node, delta=delta))
        if node >= 2:
            agg.forget(node - 2)
        sizes.append(agg.cache_usage.disk_bytes)
    row = 2 * 4096  # one gradient of 4,924 bytes, padded to whole pages
    assert sizes[:3] == [row, 2 * row, 3 * row] and set(sizes[3:]) == {3 * row}
    assert agg.num_cached == agg.cache_usage.nodes_on_disk == 2


def test_first_come_in_memory_and_rows_reused_lowest_first(tmp_path):
    cache = GradientCache(memory=2 * 8, directory=tmp_path)
    cache.reset([(2,)])  # 8 bytes a node: two fit in memory
    for node in (10, 11, 12, 13):
        cache.put(node, [np.full(2, node, np.float32)])
    assert [cache.on_disk(k) for k in (10, 11, 12, 13)] == [False, False, True, True]
    cache.discard(10)  # memory is freed: the next new node takes it; 12 and 13 stay on disk
    cache.slot(14)[0][:] = 14
    assert not cache.on_disk(14) and cache.on_disk(12)
    cache.discard(12)  # row 0 is free: the next node to spill takes it
    cache.put(15, [np.full(2, 15, np.float32)])
    assert cache._rows == {13: 1, 15: 0}
    stored = [(k, g[0].tolist()) for k, g in cache.items()]  # in the order first stored
    assert stored == [(11, [11, 11]), (13, [13, 13]), (14, [14, 14]), (15, [15, 15])]
    usage = cache.usage
    assert (usage.nodes_in_memory, usage.nodes_on_disk, usage.memory_bytes) == (2, 2, 16)
    assert usage.disk_bytes == 2 * 4096
    cache.close()
    assert len(cache) == 0 and cache.usage.disk_bytes == 0


@needs_proc
def test_no_file_is_left_after_close_or_garbage_collection(tmp_path, monkeypatch):
    agg = make("update", cache_memory=NODE_BYTES, cache_dir=tmp_path)
    run(agg, events(count=20))
    assert agg.cache_usage.nodes_on_disk > 0
    assert os.listdir(tmp_path) == [] and open_files(tmp_path)  # open, mapped, but nameless
    agg.close()
    assert open_files(tmp_path) == []
    with pytest.raises(RuntimeError, match="init"):
        agg.apply(ClientUpdate(node_id=0, delta=_params()))
    agg.init(_params())  # usable again
    run(agg, events(count=20))
    assert open_files(tmp_path)
    del agg
    gc.collect()
    assert open_files(tmp_path) == []
    # without cache_dir the file goes to the system's temporary directory
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    agg = make("update", cache_memory=0)
    run(agg, events(count=5))
    assert agg.cache_usage.nodes_on_disk > 0 and open_files(tmp_path)
    assert os.listdir(tmp_path) == []
    agg.close()
    assert open_files(tmp_path) == []


def test_no_file_until_something_spills(tmp_path):
    agg = make("update", cache_memory=6 * NODE_BYTES, cache_dir=tmp_path)
    run(agg, events(count=30))
    assert agg.cache_usage.disk_bytes == 0 and agg.cache_usage.nodes_in_memory == agg.num_cached
    assert agg._cache._file is None


# ---------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_memory": -1}, "cache_memory must be a finite number >= 0 or None, got -1"),
        ({"cache_memory": "2GiB"}, "cache_memory must be a finite number >= 0 or None, got '2GiB'"),
        ({"cache_memory": True}, "cache_memory must be a finite number >= 0 or None, got True"),
        ({"cache_memory": math.inf}, "cache_memory must be a finite number >= 0 or None, got inf"),
        ({"cache_memory": math.nan}, "cache_memory must be a finite number >= 0 or None, got nan"),
        (
            {"cache_dir": "/no/such/dir"},
            "cache_dir must be an existing directory or None, got '/no/such/dir'",
        ),
        ({"cache_dir": 3}, "cache_dir must be an existing directory or None, got 3"),
        ({"cache_dir": ""}, "cache_dir must be an existing directory or None, got ''"),
    ],
)
def test_bad_budgets_and_directories_name_the_value(kwargs, message):
    with pytest.raises(InvalidArgument) as err:
        GSGM(**kwargs)
    assert message in str(err.value)


def test_a_file_is_not_a_cache_dir(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(InvalidArgument, match="cache_dir must be an existing directory"):
        GSGM(cache_dir=path)


def test_budgets_are_whole_bytes_and_reach_the_hyperparameters(tmp_path):
    agg = GSGM(cache_memory=1.5e3, cache_dir=tmp_path)
    assert agg.cache_memory == 1500
    assert agg.hyperparameters()["cache_memory"] == 1500
    assert agg.hyperparameters()["cache_dir"] == str(tmp_path)
    assert GSGM().hyperparameters()["cache_memory"] is None


# ----------------------------------------------------------------------- preset and run config
def test_preset_and_run_config_keys_reach_the_aggregator(tmp_path):
    from fl_async.app import server_run
    from fl_async.app.config import parse_run_config

    agg = GSGMPreset(cache_memory=0, cache_dir=tmp_path).aggregator
    assert (agg.cache_memory, agg.cache_dir) == (0, str(tmp_path))
    config = parse_run_config(
        {"strategy": "gsgm", "gsgm.cache-memory": 2000000, "gsgm.cache-dir": str(tmp_path)}
    )
    agg = server_run.build_strategy(config, clock=None).aggregator
    assert (agg.cache_memory, agg.cache_dir) == (2000000, str(tmp_path))
    agg = server_run.build_strategy(parse_run_config({"strategy": "gsgm"}), clock=None).aggregator
    assert (agg.cache_memory, agg.cache_dir) == (None, None)
    with pytest.raises(ValueError, match="'gsgm': cache_memory must be a finite number >= 0"):
        server_run.build_strategy(
            parse_run_config({"strategy": "gsgm", "gsgm.cache-memory": -5}), clock=None
        )


def test_the_loop_runs_the_same_with_everything_on_disk(tmp_path):
    def start(**kwargs):
        nodes = quadratic_fleet(5, seed=3, modes={4: "pseudo"})
        strategy = GSGMPreset(clock=VirtualClock(seed=7), min_nodes=5, seed=11, **kwargs)
        with task_identity():
            result = strategy.start(
                FakeGrid(nodes, delay_seed=1),
                initial_arrays(),
                num_rounds=4,
                timeout=5,
                train_config=ConfigRecord({"local-steps": 2, "lr": 0.3}),
            )
        updates = [
            {k: v for k, v in dict(r).items() if k != "wall-time"}
            for _, r in sorted(result.train_metrics_clientapp.items())
        ]
        return result.arrays.to_numpy_ndarrays(), updates, strategy.aggregator

    arrays, updates, _ = start()
    spilled_arrays, spilled_updates, agg = start(cache_memory=0, cache_dir=tmp_path)
    assert agg.cache_usage.nodes_on_disk == 5
    assert spilled_updates == updates
    assert_same(spilled_arrays, arrays)
