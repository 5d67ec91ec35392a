"""MIFA, CA2FL and FADAS through the main command: ``python -m fl_async.app --run-config
"strategy='ca2fl'"`` (and mifa, fadas) runs end to end on a few virtual nodes."""

import pytest
from simapps import run_app

pytestmark = pytest.mark.slow

NODES = 4
# num-rounds x nodes = 8 updates; "auto" buffers are min(10, 4) and min(5, 4) = 4: two steps.
RUN = {"num-rounds": 2, "eval-every": 4, "local-steps": 2}
STEPS = {"mifa": 8, "ca2fl": 2, "fadas": 2}


@pytest.fixture(autouse=True)
def _stop_ray():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.mark.parametrize("strategy", sorted(STEPS))
def test_python_m_fl_async_app_runs_the_preset(strategy, tmp_path):
    history = run_app({**RUN, "strategy": strategy}, tmp_path / "run", nodes=NODES, actors=1)
    assert history["config"]["strategy"] == strategy
    assert history["num-updates"] == 8 and history["server-steps"] == STEPS[strategy]
    assert history["faults"] == {} and history["rejected"] == {}
    assert {u["stable-id"] for u in history["updates"]} == set(range(NODES))
    assert history["final-accuracy"] is not None
