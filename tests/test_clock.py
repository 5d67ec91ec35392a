"""The virtual clock: determinism, the duration formula, speed models, traces, rankings, state."""

import json
import math
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_async.scheduling import (
    DeviceCapacity,
    LogNormal,
    NodeProfile,
    Pareto,
    Trace,
    Uniform,
    VirtualClock,
    load_fedscale_trace,
    ranking_by_classes,
    ranking_by_labels,
    save_fedscale_trace,
)
from fl_async.validation import InvalidArgument


def fixed(t_sample, **kwargs):
    """A clock whose every node takes exactly ``t_sample`` seconds per example."""
    return VirtualClock(speed=Uniform(low=t_sample, high=t_sample), **kwargs)


def task(clock, node, index=0, examples=10, down=0, up=0):
    return clock.duration(node, index, examples=examples, bytes_down=down, bytes_up=up)


# ---------------------------------------------------------------------------- the formula
def test_duration_by_hand():
    clock = fixed(0.25, bandwidth_down=1000.0, bandwidth_up=500.0, latency=0.5)
    assert clock.profile(7) == NodeProfile(t_sample=0.25, bw_down=1000.0, bw_up=500.0, latency=0.5)
    # 8 examples * 0.25 s + 3000 B / 1000 B/s + 1000 B / 500 B/s + 0.5 s
    assert task(clock, 7, examples=8, down=3000, up=1000) == 7.5


def test_default_transfers_take_no_time():
    clock = fixed(0.5)
    assert clock.profile(0).bw_down == math.inf and clock.profile(0).latency == 0.0
    assert task(clock, 0, examples=4, down=10**9, up=10**9) == 2.0
    assert task(clock, 0, examples=0) == 0.0


def test_jitter_is_a_lognormal_factor_keyed_by_node_and_task():
    clock = fixed(1.0, seed=3, jitter=0.2)
    z = np.random.default_rng([3, 5, 1, 4]).standard_normal()
    assert task(clock, 5, index=4, examples=10) == pytest.approx(10 * math.exp(0.2 * z), rel=1e-15)
    assert task(clock, 5, index=4) == task(clock, 5, index=4)
    assert task(clock, 5, index=4) != task(clock, 5, index=5)
    assert task(fixed(1.0, seed=3), 5, index=4) == 10.0  # jitter 0: no factor


def test_lognormal_draw_layout():
    clock = VirtualClock(seed=11, sigma=0.5, median=2.0)
    z = np.random.default_rng([11, 42, 0]).standard_normal()
    assert clock.profile(42).t_sample == 2.0 * math.exp(0.5 * z)


# ---------------------------------------------------------------------------- determinism
@settings(deadline=None, max_examples=30)
@given(
    seed=st.integers(0, 2**32),
    ids=st.lists(st.integers(0, 10**6), min_size=1, max_size=20, unique=True),
    order=st.randoms(use_true_random=False),
)
def test_results_do_not_depend_on_call_order(seed, ids, order):
    one = VirtualClock(seed=seed, jitter=0.3)
    two = VirtualClock(seed=seed, jitter=0.3)
    calls = [(k, i) for k in ids for i in range(3)]
    first = {c: task(one, *c) for c in calls}
    order.shuffle(calls)
    assert {c: task(two, *c) for c in calls} == first


def test_seeds_and_nodes_differ():
    a, b = VirtualClock(seed=0), VirtualClock(seed=1)
    assert a.profile(0) != b.profile(0)
    assert a.profile(0) != a.profile(1)


# --------------------------------------------------------------------------- speed models
def test_lognormal_default_has_median_one():
    clock = VirtualClock(seed=5)
    t = np.array([clock.profile(k).t_sample for k in range(4000)])
    assert np.median(t) == pytest.approx(1.0, abs=0.08)
    assert np.log(t).std() == pytest.approx(1.0, abs=0.05)


def test_uniform_and_pareto_ranges():
    uniform = VirtualClock(speed=Uniform(low=2.0, high=3.0))
    t = np.array([uniform.profile(k).t_sample for k in range(2000)])
    assert t.min() >= 2.0 and t.max() < 3.0 and np.median(t) == pytest.approx(2.5, abs=0.05)

    pareto = VirtualClock(speed=Pareto(shape=2.0, scale=0.5))
    t = np.array([pareto.profile(k).t_sample for k in range(4000)])
    assert t.min() >= 0.5
    assert np.median(t) == pytest.approx(0.5 * 2**0.5, rel=0.05)


@pytest.mark.parametrize(
    ("name", "model"),
    [("lognormal", LogNormal()), ("uniform", Uniform()), ("pareto", Pareto())],
)
def test_names_are_shorthand_for_defaults(name, model):
    assert VirtualClock(speed=name).profile(3) == VirtualClock(speed=model).profile(3)


# -------------------------------------------------------------------------------- ranking
def test_ranking_gives_the_fastest_speeds_to_the_first_ids():
    ranking = [5, 3, 9, 0, 12]
    plain, ranked = VirtualClock(seed=2), VirtualClock(seed=2, ranking=ranking)
    t = [ranked.profile(k).t_sample for k in ranking]
    assert t == sorted(t)
    assert sorted(t) == sorted(plain.profile(k).t_sample for k in ranking)  # same draws
    assert ranked.profile(4) == plain.profile(4)  # unranked nodes are untouched


def test_ranking_by_classes():
    counts = [
        [5, 5, 0, 0],  # 2 classes
        [1, 0, 0, 0],  # 1
        [3, 3, 3, 3],  # 4
        [0, 0, 2, 2],  # 2
    ]
    assert ranking_by_classes(counts) == [1, 0, 3, 2]
    assert ranking_by_classes(counts, fast="many") == [2, 0, 3, 1]
    assert ranking_by_labels(counts, [2, 3]) == [3, 2, 0, 1]
    assert ranking_by_labels(np.zeros((2, 3)), [0]) == [0, 1]


def test_ranking_by_classes_drives_the_clock():
    counts = np.array([[9, 9, 9], [9, 0, 0], [0, 9, 9]])
    clock = VirtualClock(ranking=ranking_by_classes(counts, fast="few"))
    assert clock.profile(1).t_sample < clock.profile(2).t_sample < clock.profile(0).t_sample


# ---------------------------------------------------------------------------------- traces
def write_trace(path, entries):
    """A device-capacity file exactly as FedScale ships it: a pickled dict of dicts."""
    with open(path, "wb") as f:
        pickle.dump(entries, f)
    return path


TINY = {
    10: {"computation": 20.0, "communication": 8000.0},
    3: {"computation": 50.0, "communication": 1000.0},
}


def test_trace_sets_speed_and_bandwidth(tmp_path):
    path = write_trace(tmp_path / "client_device_capacity", TINY)
    clock = VirtualClock(trace=path, latency=0.25)
    # Entries by sorted client id: stable id 0 -> client 3, 1 -> client 10, 2 -> client 3 again.
    assert clock.profile(0) == NodeProfile(0.15, 128_000.0, 128_000.0, 0.25)
    assert clock.profile(1) == NodeProfile(0.06, 1_024_000.0, 1_024_000.0, 0.25)
    assert clock.profile(2) == clock.profile(0)
    # 100 examples * 3 * 50 ms + (128 000 + 256 000) B / 128 000 B/s + 0.25 s
    assert task(clock, 0, examples=100, down=128_000, up=256_000) == pytest.approx(18.25)
    assert VirtualClock(speed=Trace(path)).profile(1).latency == 0.0
    assert VirtualClock(trace=path, bandwidth_up=1.0).profile(0).bw_up == 1.0


def test_ranking_moves_whole_trace_devices(tmp_path):
    path = write_trace(tmp_path / "trace", TINY)
    plain, ranked = VirtualClock(trace=path), VirtualClock(trace=path, ranking=[0, 1])
    assert ranked.profile(0) == plain.profile(1)  # the fast device, with its own bandwidth
    assert ranked.profile(1) == plain.profile(0)


def test_trace_file_round_trip(tmp_path):
    entries = {4: DeviceCapacity(12.5, 300.0), 1: DeviceCapacity(7.0, 64.0)}
    save_fedscale_trace(tmp_path / "trace", entries)
    with open(tmp_path / "trace", "rb") as f:
        raw = pickle.load(f)
    assert raw == {
        4: {"computation": 12.5, "communication": 300.0},
        1: {"computation": 7.0, "communication": 64.0},
    }
    loaded = load_fedscale_trace(tmp_path / "trace")
    assert loaded.client_ids == (1, 4)
    assert loaded.capacities == (entries[1], entries[4])
    assert loaded.entry(5) == (4, entries[4])


def test_trace_accepts_numpy_numbers(tmp_path):
    entries = {np.int64(2): {"computation": np.float32(10.0), "communication": np.float64(5.0)}}
    path = write_trace(tmp_path / "trace", entries)
    assert load_fedscale_trace(path).capacities == (DeviceCapacity(10.0, 5.0),)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ({1: {"computation": 5.0}}, "client 1 needs 'communication'"),
        ({1: {"computation": -5.0, "communication": 1.0}}, "client 1 needs 'computation'.*-5.0"),
        ({"a": {"computation": 5.0, "communication": 1.0}}, "client ids must be integers, got 'a'"),
        ({}, "non-empty dict"),
        ([1, 2], "non-empty dict"),
        ({1: Evil()}, "refers to (posix|nt).system"),
    ],
)
def test_bad_trace_files(tmp_path, entries, match):
    path = write_trace(tmp_path / "trace", entries)
    with pytest.raises(ValueError, match=match):
        load_fedscale_trace(path)


def test_missing_trace_file_names_the_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="nope"):
        VirtualClock(trace=missing)
    with pytest.raises(FileNotFoundError, match="nope"):
        Trace(missing)
    with pytest.raises(FileNotFoundError, match="nope"):
        load_fedscale_trace(missing)


# ----------------------------------------------------------------------------------- state
def test_state_dict_round_trip(tmp_path):
    clock = VirtualClock(seed=4, jitter=0.1, ranking=[2, 0, 1], bandwidth_down=1e6)
    before = [task(clock, k, index=1, down=100) for k in range(6)]
    state = json.loads(json.dumps(clock.state_dict()))
    fresh = VirtualClock(seed=4, jitter=0.1, ranking=[2, 0, 1], bandwidth_down=1e6)
    fresh.load_state_dict(state)
    assert fresh.state_dict()["profiles"] == clock.state_dict()["profiles"]
    assert [task(fresh, k, index=1, down=100) for k in range(6)] == before


def test_state_dict_of_a_trace_survives_a_moved_file(tmp_path):
    path = write_trace(tmp_path / "a", TINY)
    clock = VirtualClock(trace=path)
    clock.profile(1)
    moved = write_trace(tmp_path / "b", TINY)
    fresh = VirtualClock(trace=moved)
    fresh.load_state_dict(clock.state_dict())
    assert fresh.profile(1) == clock.profile(1)
    other = VirtualClock(trace=write_trace(tmp_path / "c", {1: TINY[3]}))
    with pytest.raises(ValueError, match="speed"):
        other.load_state_dict(clock.state_dict())


def test_state_dict_from_another_configuration_is_refused():
    with pytest.raises(
        ValueError, match=r"differently in \['seed'\]: saved \[1\], this clock \[0\]"
    ):
        VirtualClock(seed=0).load_state_dict(VirtualClock(seed=1).state_dict())


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": -1.0}, "LogNormal sigma must be a finite number >= 0, got -1.0"),
        ({"median": 0.0}, "LogNormal median must be a finite number > 0, got 0.0"),
        (
            {"speed": "gamma"},
            "speed must be one of 'lognormal', 'uniform', 'pareto', 'trace', got 'gamma'",
        ),
        ({"speed": "uniform", "sigma": 2.0}, "sigma and median apply to speed='lognormal'"),
        ({"speed": Pareto(), "median": 2.0}, "sigma and median apply to speed='lognormal'"),
        ({"speed": "trace"}, "speed='trace' needs trace="),
        ({"speed": "uniform", "trace": "x"}, "trace= sets the speed model"),
        ({"speed": 3}, "speed must be one of 'lognormal', .* or a LogNormal, .* got 3"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"seed": True}, "seed must be an integer >= 0, got True"),
        ({"jitter": -0.5}, "jitter must be a finite number >= 0, got -0.5"),
        (
            {"bandwidth_up": 0.0},
            r"bandwidth_up must be a number \(inf allowed\) > 0 or None, got 0.0",
        ),
        ({"latency": math.inf}, "latency must be a finite number >= 0, got inf"),
        ({"ranking": [1, 2, 1]}, r"each stable id once; repeated: \[1\]"),
        ({"ranking": [1, -2]}, "ranking entry must be an integer >= 0, got -2"),
    ],
)
def test_bad_clock_arguments_name_the_value(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        VirtualClock(**kwargs)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Uniform(low=2.0, high=1.0), "low <= high, got low=2.0 > high=1.0"),
        (lambda: Uniform(low=0.0), "Uniform low must be a finite number > 0, got 0.0"),
        (lambda: Pareto(shape=0.0), "Pareto shape must be a finite number > 0, got 0.0"),
        (lambda: Pareto(scale=-1.0), "Pareto scale .*got -1.0"),
        (lambda: LogNormal(sigma=float("nan")), "LogNormal sigma .*got nan"),
        (
            lambda: ranking_by_classes([[1, 2]], fast="slow"),
            "fast must be one of 'few', 'many', got 'slow'",
        ),
        (lambda: ranking_by_classes([1, 2]), r"partitions x classes matrix, got shape \(2,\)"),
        (lambda: ranking_by_classes([[1, -2]]), r"counts must be finite and >= 0 .*, got -2"),
        (
            lambda: ranking_by_labels([[1, 2]], [5]),
            r"labels entry must be an integer in \[0, 1\], got 5",
        ),
        (
            lambda: ranking_by_labels([[1, 2]], []),
            r"labels must list at least one class index, got \[\]",
        ),
    ],
)
def test_bad_model_arguments_name_the_value(make, match):
    with pytest.raises(InvalidArgument, match=match):
        make()


def test_bad_duration_arguments_name_the_value():
    clock = VirtualClock()
    with pytest.raises(InvalidArgument, match="examples must be an integer >= 0, got -3"):
        clock.duration(0, 0, examples=-3, bytes_down=0, bytes_up=0)
    with pytest.raises(InvalidArgument, match="bytes_up must be an integer >= 0, got 1.5"):
        clock.duration(0, 0, examples=1, bytes_down=0, bytes_up=1.5)
    with pytest.raises(InvalidArgument, match="task_index must be an integer >= 0, got -1"):
        clock.duration(0, -1, examples=1, bytes_down=0, bytes_up=0)
    with pytest.raises(InvalidArgument, match="stable_id must be an integer >= 0, got -4"):
        clock.profile(-4)
