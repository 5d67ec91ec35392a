"""The launcher's checks run without torch: importing it costs a launch a second or two (and as
much CPU), and only a named accelerator needs it to be looked for."""

import importlib
from pathlib import Path

import pytest
from fresh_python import python_stdout

from fl_async.clients.device import PREFERENCES, check_device

ROOT = Path(__file__).resolve().parents[1]

_PREPARE = """
import sys
from fl_async.app import launch, preflight
for run_config in sys.argv[2:]:
    args = launch.build_parser().parse_args(["--app", sys.argv[1], "--run-config", run_config])
    args.actors = 2
    plan = preflight.prepare(args)
    print(plan.config.strategy, plan.nodes, plan.config.data.dataset)
print("torch imported:", "torch" in sys.modules)
"""


def test_the_checks_of_a_launch_import_no_torch(tmp_path: Path) -> None:
    """The default run, a Synthetic natural split and a checkpointed run are checked in full
    (labels read, split, clock and strategy built, checkpoint looked for) with no torch."""
    configs = [
        "",
        "dataset='synthetic' partition.scheme='natural' num-nodes=6",
        f"strategy='asgd' checkpoint-every=5 output-dir='{tmp_path / 'run'}'",
    ]
    lines = python_stdout(_PREPARE, str(ROOT), *configs).strip().splitlines()
    assert lines[:3] == ["gsgm 20 mnist", "gsgm 6 synthetic", "asgd 20 mnist"]
    assert lines[-1] == "torch imported: False"


_REFUSE = """
import sys
from fl_async.app import launch, preflight
args = launch.build_parser().parse_args(["--app", sys.argv[1], "--run-config", sys.argv[2]])
try:
    preflight.prepare(args)
except BaseException as refused:
    print("refused:", refused)
print("imported:", sorted(m for m in ("torch", "datasets") if m in sys.modules))
"""


def test_a_missing_dataset_is_refused_without_torch_or_datasets(tmp_path: Path) -> None:
    """Neither its torchvision files nor its Hugging Face snapshot: the refusal only looks."""
    config = f"dataset='fashion-mnist' data-root='{tmp_path}'"
    stdout = python_stdout(_REFUSE, str(ROOT), config)
    assert "fashion-mnist not found" in stdout, stdout
    assert stdout.strip().splitlines()[-1] == "imported: []"


@pytest.mark.parametrize("preference", ["auto", "cpu", " CPU "])
def test_check_device_accepts_what_always_works(preference: str) -> None:
    check_device(preference)


def test_check_device_refuses_an_unknown_device_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown device 'gpu'; choose one of") as refused:
        check_device("gpu")
    assert all(choice in str(refused.value) for choice in PREFERENCES)


def test_check_device_looks_for_a_named_gpu() -> None:
    import torch

    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(RuntimeError, match="'cuda:7' is not available"):
        check_device("cuda:7")


@pytest.mark.parametrize("package", ["fl_async.data", "fl_async.clients"])
def test_a_package_of_lazy_names_lists_them_and_refuses_others(package: str) -> None:
    """The names loaded on first use are exactly the public ones; each is listed and importable;
    an unknown one is an AttributeError."""
    module = importlib.import_module(package)
    assert set(module._MODULE_OF) == set(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    assert all(getattr(module, name) is not None for name in module.__all__)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        _ = module.nope
