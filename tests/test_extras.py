"""Modules that need the simulation extra name it when a package of it is missing."""

import subprocess
import sys

import pytest

HIDE = """
import importlib.machinery, sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            return importlib.machinery.ModuleSpec(name, None)  # as if not installed
sys.meta_path.insert(0, Hide())
"""


@pytest.mark.parametrize(
    ("module", "hidden"),
    [
        ("fl_async.data.hf", {"datasets"}),
        ("fl_async.partitioning.partitioners", {"flwr_datasets"}),
    ],
)
def test_a_missing_optional_package_names_the_extra(module, hidden):
    code = HIDE.format(hidden=hidden) + f"import {module}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError") and "pip install 'fl-async[simulation]'" in last


def test_partition_plot_without_matplotlib_is_one_line():
    code = HIDE.format(hidden={"matplotlib"}) + (
        "from fl_async.cli import main\n"
        "sys.exit(main(['partition', '--dataset', 'mnist', '--num-partitions', '4',"
        " '--plot', 'x.png']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert "--plot needs matplotlib (not installed): pip install 'fl-async[simulation]'" in (
        done.stderr
    )
