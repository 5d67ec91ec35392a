"""Test-wide settings: nothing is downloaded, Flower stays quiet, Ray sees no accelerator; and
fixtures shared by several test files."""

import importlib
import os
import sys

import pytest
from hypothesis import settings

# Property tests draw the same examples in every run, CI's included: a failure is reproducible,
# and no run fails on a draw the others never made.
settings.register_profile("fl-async", derandomize=True)
settings.load_profile("fl-async")

for _key, _value in {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "MPLBACKEND": "Agg",
}.items():
    os.environ.setdefault(_key, _value)

# Bytecode is cached here, whatever the machine says (this one sets PYTHONDONTWRITEBYTECODE):
# a test run starts a hundred or so processes that import the package (launchers, ServerApps,
# actors, Ray's head), and without the cache each compiled it again from source, about 0.2
# CPU-seconds a process on two cores. The cache lands in __pycache__ folders, which git ignores.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


FIRST_IMPORTS = {
    "gw0": ("torchvision",),
    "gw1": ("flwr_datasets", "datasets", "flwr.serverapp", "hypothesis.strategies"),
}
"""What each of the README's two workers imports first when it collects the whole suite."""


def pytest_collection(session: pytest.Session) -> None:
    """Each worker starts its collection with other packages (``FIRST_IMPORTS``), both of
    which every worker imports as it collects. On a fresh install nothing is compiled yet: the
    two workers compiled the same modules side by side, collection took 80 CPU-seconds and 42 s
    against 23 and 12 once compiled; started apart, each compiles what the other does not
    reach first, and later finds the other's bytecode. Nothing is imported that the collection
    would not import anyway."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker in FIRST_IMPORTS and session.config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        for name in FIRST_IMPORTS[worker]:
            importlib.import_module(name)


@pytest.fixture(autouse=True)
def _fast_polls(request, monkeypatch):
    """Strategies in fast tests poll every millisecond, not every 20 ms (the default), and so
    look at the grid every 10 ms, not every 200 ms, while they wait for nodes (``node_wait``).

    Those tests run the loop on in-memory grids that release a reply after a few pulls, so
    the default interval was most of their wall time (3 of the fast tests' 6 worker-minutes)
    with the CPU idle. Nothing computed depends on it: a virtual clock orders replies by
    virtual time, and the fake grid releases them by pull count. Slow tests keep the default:
    they run Flower's own grid beside actors that need the CPU.
    """
    if request.node.get_closest_marker("slow") is None:
        from fl_async.strategies.async_strategy import AsyncStrategy

        monkeypatch.setitem(AsyncStrategy.__init__.__kwdefaults__, "poll_interval", 0.001)


@pytest.fixture
def publishes(monkeypatch):
    """Count the aggregators' scratch-branch publications (none when every step runs in place)."""
    from fl_async.aggregators import Aggregator

    calls = []
    original = Aggregator._publish

    def spy(self, *args, **kwargs):
        calls.append(args[-1])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Aggregator, "_publish", spy)
    return calls


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first, the longest first (``slow(seconds=N)``: about N s on two workers; the
    others in their files' order): both workers share them from the start, and the many short
    tests fill in at the end, instead of one worker finishing a long test alone. Tests marked
    ``slow(waits=True)`` are spread apart (``_spread_waiting``)."""
    items.sort(key=_order)
    _spread_waiting(items)


def _spread_waiting(items: list[pytest.Item]) -> None:
    """Hold each ``slow(waits=True)`` test (the deployment tests: about one core, much of it
    Flower's processes waiting on each other) back until the other slow tests after the
    previous one add up to that one's seconds: while one worker runs a deployment, the other
    runs simulations, which keep both cores busy. The two deployments side by side left a core
    idle for about 30 s (a timeline of /proc/stat over a whole run)."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    placed: list[pytest.Item] = []
    held: list[pytest.Item] = []
    owed = 0.0  # seconds of other slow tests still due since the last waiting one
    for item in slow:
        if _marker(item).get("waits"):
            if owed > 0:
                held.append(item)
                continue
            owed = float(_marker(item).get("seconds", 0))
        else:
            owed -= float(_marker(item).get("seconds", 0))
        placed.append(item)
        while held and owed <= 0:
            placed.append(held.pop(0))
            owed = float(_marker(placed[-1]).get("seconds", 0))
    items[: len(slow)] = placed + held


def _marker(item: pytest.Item) -> dict:
    return item.get_closest_marker("slow").kwargs


def _order(item: pytest.Item) -> tuple[bool, float]:
    slow = item.get_closest_marker("slow")
    return slow is None, -float(slow.kwargs.get("seconds", 0)) if slow else 0.0
