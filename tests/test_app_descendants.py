"""MIFA, CA2FL and FADAS from the run config (``strategy='ca2fl'``, and mifa, fadas) through the
app's ServerApp and the real ClientApp on a few in-memory nodes: the run the main command makes,
without its processes, which are the same for every preset (``tests/test_app_simulation.py``
launches them)."""

import pytest
from fakegrid import task_identity
from memory_app import run_in_memory

NODES = 4
# num-rounds x nodes = 8 updates; "auto" buffers are min(10, 4) and min(5, 4) = 4: two steps.
RUN = {"num-rounds": 2, "max-updates": 0, "eval-every": 4, "local-steps": 2}
STEPS = {"mifa": 8, "ca2fl": 2, "fadas": 2}


@pytest.mark.parametrize("strategy", sorted(STEPS))
def test_the_app_runs_the_preset(strategy, tmp_path):
    with task_identity():
        history, _ = run_in_memory(tmp_path, "run", num_nodes=NODES, strategy=strategy, **RUN)
    assert history["config"]["strategy"] == strategy
    assert history["num-updates"] == 8 and history["server-steps"] == STEPS[strategy]
    assert history["faults"] == {} and history["rejected"] == {}
    assert {u["stable-id"] for u in history["updates"]} == set(range(NODES))
    assert history["final-accuracy"] is not None
