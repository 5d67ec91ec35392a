"""The strategies in Flower's simulation engine (Ray): ordering, reproducibility, faults, resume.

Every run on 4 nodes goes in one simulation (``_four_nodes``, ``simapps.run_many``), one run
after another, and each check asserts on its own runs' results, by name; the faults test's run
on 6 nodes has a simulation of its own.
"""

from pathlib import Path

import numpy as np
import pytest
import simapps
from flwr.serverapp.strategy import FedAvg
from strategy_loop import history, records

from fl_async.scheduling import VirtualClock
from fl_async.strategies import ASGD, ASP, GSGM, ODSGD, SSGD

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _one_ray_for_the_module(tmp_path_factory):
    """Each simulation joins one Ray head rather than starting one: a Ray's start and stop
    cost about 4 CPU-seconds, and what these tests check does not depend on it."""
    with simapps.shared_ray(tmp_path_factory.mktemp("ray")):
        yield


@pytest.fixture(autouse=True)
def _stop_ray():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def final(result):
    return result.arrays.to_numpy_ndarrays()[0]


def _asgd():
    return ASGD(clock=VirtualClock(seed=4, sigma=1.0), min_nodes=4, seed=2)


def _gsgm_checkpointed(directory=None):
    return lambda: GSGM(
        clock=VirtualClock(seed=6),
        min_nodes=4,
        seed=1,
        checkpoint_dir=directory,
        checkpoint_every=3 if directory else None,
    )


def _four_nodes(checkpoints: Path) -> dict:
    """Every run on 4 nodes, in one simulation: a simulation costs a few CPU-seconds of Ray
    actors and Flower's engine, a run here a fraction of one; the runs stay independent
    (``simapps.run_many``). "part" (stopped at 7 updates) goes before "resumed", which picks
    up from its checkpoint; "first" and "second" are two runs of two strategies made alike."""
    run = simapps.scenario
    return simapps.run_many(
        {
            "first": run(_asgd, num_rounds=4),
            "second": run(_asgd, num_rounds=4),
            "fedavg": run(
                lambda: FedAvg(fraction_evaluate=0.0, min_available_nodes=4, min_train_nodes=4),
                num_rounds=3,
                noise=False,
            ),
            "ssgd": run(
                lambda: SSGD(lr=1.0, clock=VirtualClock(seed=0), min_nodes=4),
                num_rounds=3,
                noise=False,
            ),
            "gsgm": run(
                lambda: GSGM(clock=VirtualClock(seed=1, sigma=1.5), min_nodes=4, slack=0),
                num_rounds=3,
            ),
            "odsgd": run(lambda: ODSGD(clock=VirtualClock(seed=1), min_nodes=4), num_rounds=3),
            "asp": run(lambda: ASP(clock=VirtualClock(seed=1), min_nodes=4), num_rounds=3),
            "full": run(_gsgm_checkpointed(), num_rounds=4),
            "part": run(_gsgm_checkpointed(checkpoints), num_rounds=4, max_updates=7),
            "resumed": run(_gsgm_checkpointed(checkpoints), num_rounds=4),
        }
    )


def _out_of_order_and_two_seeded_runs_are_identical(four_nodes: dict) -> None:
    first, second = four_nodes["first"], four_nodes["second"]
    assert first.num_updates == 16 and first.faults == {}
    staleness = [r["staleness"] for r in records(first)]
    assert max(staleness) > 0
    # virtual order differs from a round-robin: some node reported twice in a row
    ids = [r["stable-id"] for r in records(first)]
    assert ids != sorted(ids) and len(set(ids)) == 4
    np.testing.assert_array_equal(final(first), final(second))
    assert history(first) == history(second)
    assert np.isfinite(final(first)).all() and np.abs(final(first)).sum() > 0


def test_every_fault_is_counted_and_the_model_stays_finite():
    faults = {1: "raise", 2: "nan", 3: "shape", 4: "error"}
    result = simapps.run(
        lambda: GSGM(clock=VirtualClock(seed=0), min_nodes=6),
        num_nodes=6,
        faults=faults,
        num_rounds=3,
    )
    assert np.isfinite(final(result)).all()
    assert result.faults.get("error", 0) >= 2  # the raising ClientApp and the error reply
    assert result.rejected.get("non-finite", 0) >= 1
    assert result.rejected.get("bad-shape", 0) >= 1
    assert result.num_updates == 18  # the healthy nodes fill the budget
    assert result.stopped_by == "budget"


def _ssgd_with_lr_one_equals_flowers_fedavg(four_nodes: dict) -> None:
    fedavg, ssgd = four_nodes["fedavg"], four_nodes["ssgd"]
    assert ssgd.server_steps == 3
    # FedAvg sums in reply order, SSGD in node order: equal up to float32 rounding.
    np.testing.assert_allclose(final(ssgd), final(fedavg), rtol=1e-6, atol=1e-6)
    assert not np.array_equal(final(ssgd), np.zeros_like(final(ssgd)))


def _gsgm_white_list_and_presets_odsgd_asp(four_nodes: dict) -> None:
    counts: dict[int, int] = {}
    for r in records(four_nodes["gsgm"]):
        counts[r["stable-id"]] = counts.get(r["stable-id"], 0) + 1
        assert max(counts.values()) - min(counts.get(k, 0) for k in range(4)) <= 1
    odsgd = four_nodes["odsgd"]
    assert odsgd.server_steps >= 2 and all(r["staleness"] <= 1 for r in records(odsgd))
    asp = four_nodes["asp"]
    assert asp.num_updates == 12 and np.isfinite(final(asp)).all()


def _resume_equals_an_uninterrupted_run(four_nodes: dict) -> None:
    full, part, resumed = four_nodes["full"], four_nodes["part"], four_nodes["resumed"]
    assert part.num_updates == 7
    assert resumed.num_updates == full.num_updates == 16
    np.testing.assert_array_equal(final(full), final(resumed))
    assert history(full) == history(resumed)


@pytest.mark.slow(seconds=40)
def test_ten_runs_on_four_nodes_in_one_simulation(tmp_path: Path) -> None:
    """Every check on 4 nodes, each on its own runs: one test, so that their simulation runs
    once (a module fixture ran once on each pytest-xdist worker that took one of its tests)."""
    four_nodes = _four_nodes(tmp_path)
    _out_of_order_and_two_seeded_runs_are_identical(four_nodes)
    _ssgd_with_lr_one_equals_flowers_fedavg(four_nodes)
    _gsgm_white_list_and_presets_odsgd_asp(four_nodes)
    _resume_equals_an_uninterrupted_run(four_nodes)
