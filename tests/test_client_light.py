"""A device needs only ``pip install fl-async``: importing the ClientApp loads no server code and
none of the simulation extra's packages, and the run-config schema is a low layer.

Each import runs in a fresh interpreter, so that nothing another test loaded counts. Flower 1.41's
``import flwr`` itself loads ``flwr.serverapp`` (``flwr/__init__.py`` imports it), so the ClientApp
is held to load nothing of it beyond what ``import flwr.clientapp`` alone does.
"""

import json
import subprocess
import sys

SERVER_CODE = (
    "fl_async.strategies",
    "fl_async.aggregators",
    "fl_async.scheduling",
    "fl_async.bench",
    "fl_async.app.config",
    "fl_async.app.server_app",
    "fl_async.app.server_run",
    "fl_async.app.launch",
    "fl_async.app.preflight",
    "fl_async.app.results",
)
SIMULATION_EXTRA = (
    "ray",
    "matplotlib",
    "mlxtend",
    "datasets",
    "huggingface_hub",
    "flwr_datasets",
    "pandas",
)
FLOWER_SERVER = ("flwr.serverapp", "flwr.simulation", "flwr.server")


def modules_after(before: str, target: str) -> tuple[set[str], set[str]]:
    """The modules loaded after ``before`` (statements) and those ``target`` added to them."""
    probe = (
        f"import json, sys\n{before}\nfirst = set(sys.modules)\nimport {target}\n"
        "print(json.dumps([sorted(first), sorted(sys.modules)]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, after = (set(names) for names in json.loads(done.stdout))
    return after, after - first


def under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_the_client_app_imports_no_server_code_and_no_optional_package():
    # The handlers too, which the ClientApp imports on its first message
    target = "fl_async.app.client_app, fl_async.clients.client_app"
    loaded, added = modules_after("import flwr.clientapp", target)
    assert {"fl_async.app.client_app", "fl_async.clients.client_app", "torch"} <= loaded
    assert under(loaded, SERVER_CODE) == []
    assert under(loaded, SIMULATION_EXTRA) == []
    assert under(added, FLOWER_SERVER) == []


def test_loading_the_apps_imports_no_torch_until_they_run():
    """Flower's simulation loads the ServerApp and the ClientApp under one lock before it
    starts Ray: those loads must not hold Ray's start up for torch's import (seconds)."""
    loaded, _ = modules_after(
        "import flwr.clientapp, flwr.serverapp", "fl_async.app.server_app, fl_async.app.client_app"
    )
    assert {"fl_async.app.server_app", "fl_async.app.client_app"} <= loaded
    heavy = ("torch", "fl_async.clients", "fl_async.data", "fl_async.strategies")
    assert under(loaded, heavy) == []


def test_the_run_config_schema_needs_neither_torch_nor_flower():
    loaded, _ = modules_after("", "fl_async.config")
    assert under(loaded, (*SERVER_CODE, *SIMULATION_EXTRA, "torch", "flwr", "fl_async.app")) == []
