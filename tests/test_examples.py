"""The examples run as documented."""

import json
from pathlib import Path

import pytest
import simapps

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def _stop_ray():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def test_a_standard_pytorch_app_runs_on_gsgm_after_a_one_line_change(tmp_path, monkeypatch):
    example = EXAMPLES / "pytorch-one-line"
    server_source = (example / "pytorchexample" / "server_app.py").read_text()
    assert "strategy = GSGM(min_nodes=min_nodes)  # was: strategy = FedAvg(" in server_source
    monkeypatch.syspath_prepend(str(example))
    monkeypatch.chdir(tmp_path)  # the ServerApp writes summary.json to its working directory
    from flwr.simulation import run_simulation
    from pytorchexample import client_app, server_app

    run_simulation(
        server_app.app,
        client_app.app,
        num_supernodes=3,
        backend_config=simapps.backend_config(),
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["updates"] >= 6
    assert summary["accuracy"] > 0.3  # ten classes: chance is 0.1


@pytest.mark.slow(seconds=30)
def test_strategy_comparison_prints_a_row_per_strategy(tmp_path, capsys):
    compare = _compare()
    code = compare.main(
        ["--strategies", "ssgd,asgd", "--rounds", "1", "--nodes", "3", "--out", str(tmp_path)]
        + ["--actors", "1"]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "| ssgd |" in table and "| asgd |" in table
    for name in ("ssgd", "asgd"):
        history = json.loads((tmp_path / name / "history.json").read_text())
        assert history["num-updates"] == 3


def test_strategy_comparison_refuses_a_bad_actor_count(capsys):
    with pytest.raises(SystemExit) as refused:
        _compare().main(["--strategies", "ssgd", "--actors", "0"])
    assert refused.value.code == 2
    assert "--actors must be an integer >= 1, got 0" in capsys.readouterr().err


def _compare():
    """examples/strategy-comparison/compare.py, loaded as a module."""
    import importlib.util

    path = EXAMPLES / "strategy-comparison" / "compare.py"
    spec = importlib.util.spec_from_file_location("compare", path)
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    return compare
