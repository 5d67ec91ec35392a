"""The Flower releases fl-async declares, and a run's record of the one it ran on."""

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from fl_async.app import server_run


def test_the_declared_flower_range_admits_1_41_to_1_43():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    (flwr,) = [Requirement(r) for r in project["dependencies"] if r.startswith("flwr")]
    admitted = [v for v in ("1.40.0", "1.41.0", "1.42.0", "1.43.0", "2.0.0") if v in flwr.specifier]
    assert admitted == ["1.41.0", "1.42.0", "1.43.0"]
    # flwr-nightly is another distribution: it is installed over flwr by hand (docs/running.md)
    assert flwr.specifier.contains("1.43.0.dev20261026", prereleases=True)


def test_a_run_records_flowers_version_also_from_flwr_nightly(monkeypatch):
    real = metadata.version

    def nightly_only(name):
        if name == "flwr":
            raise metadata.PackageNotFoundError(name)
        return "1.43.0.dev20261026" if name == "flwr-nightly" else real(name)

    monkeypatch.setattr(metadata, "version", nightly_only)
    versions = server_run._versions()
    assert versions["flwr"] == "1.43.0.dev20261026"
    assert versions["fl-async"] == real("fl-async")


def test_a_run_records_the_machine_it_ran_on_and_its_record_keeps_it(monkeypatch):
    import os
    import platform

    import torch

    from fl_async.bench.records import make_record

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    machine = server_run._machine()
    assert machine == {
        "arch": platform.machine(),
        "system": platform.system(),
        "cpus": os.cpu_count(),
        "cpu": server_run.cpu_model(),
        "cpu-capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": "NVIDIA H100 80GB HBM3",
    }
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    history = {
        "config": {},
        "machine": server_run._machine(),
        "evaluations": [],
        "updates": [],
        "virtual-time": 0.0,
        "wall-time": 0.0,
        "server-steps": 0,
        "stopped-by": "budget",
    }
    assert make_record(history)["run"]["machine"]["gpu"] is None


def test_the_cpu_model_is_read_from_cpuinfo_else_from_platform(tmp_path, monkeypatch):
    import platform

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon(R) 8480+\n")
    assert server_run.cpu_model(cpuinfo) == "Xeon(R) 8480+"
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert server_run.cpu_model(tmp_path / "none") == "arm"
    cpuinfo.write_text("processor\t: 0\nmodel name\t:\n")
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert server_run.cpu_model(cpuinfo) is None
