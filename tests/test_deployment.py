"""fl_async on Flower's deployment engine, set up as docs/deployment.md's edge deployment: real
SuperLink and SuperNode processes on 127.0.0.1 with TLS and SuperNode authentication both on.

``examples/edge-deployment/generate_certs.sh`` makes the CA, the SuperLink's certificate and
four SuperNode key pairs; the SuperLink (HTTPS, ``--enable-supernode-auth``) learns three public
keys through ``flwr supernode register``; three SuperNodes with those keys run
``tests/deploy_app`` (ASGD in real-time mode) through TLS, while a SuperNode with an
unregistered key is turned away. One SuperNode is killed (SIGKILL, by PID, with what it
started) after the first updates: the run must count the lost task as a fault within about one
TTL and go on with the other two; it stops ``UPDATES_AFTER_FAULT`` server steps after that fault
(the app's ``watch-path``), with a finite, trained model. Every process is stopped by PID
afterwards, even when the test fails. One deployment for both checks: each Flower process costs
a second or two of CPU to start (every task starts a ClientApp process), most of this test's
cost.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from flower_deployment import FlowerDeployment, TLSFiles
from flower_processes import FlowerProcess, read_json, wait_until

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "tests" / "deploy_app"
SCRIPT = ROOT / "examples" / "edge-deployment" / "generate_certs.sh"
NUM_NODES = 3
TIMEOUT = 30.0
"""Each task's TTL: the killed node's task is dropped after this long. Every task starts a
ClientApp process; on a loaded machine (a fresh-clone CI) that took over 10 s, a 10-s TTL expired
every node's tasks, and all three left the run before its first update."""
NUM_UPDATES = 100
UPDATES_AFTER_FAULT = 3
"""The run stops this many server steps after the killed node's fault: the run went on without it
(it ran on to a 150-s wall time before, most of this test's time)."""
TASK_PAUSE = 3.0
"""Seconds each ClientApp waits before it trains, as a device's task takes seconds. The run
must outlast the killed node's TTL while the others keep training; each of their tasks starts
a ClientApp process (a second or two of CPU), and the pause means fewer of them meanwhile."""
MAX_WALL_TIME = 240.0
"""Only a safety net: the kill comes within STEP_WAIT s, its fault TIMEOUT s later."""
STEP_WAIT = 110.0
KILL_AFTER_STEP = 3


def victim_names(victim: str) -> list[str]:
    """How the strategy's fault lines name the killed node (``victim``: its SuperNode's log).
    On a loaded machine (CI) the victim may not answer the identify query in time, and is then
    keyed by its node id, not its partition."""
    node_id = re.search(r"SuperNode ID: (\d+)", victim)
    return [f"(stable id {NUM_NODES - 1})", f"node {node_id.group(1) if node_id else '-'} "]


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` atomically: the ServerApp never reads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload), encoding="utf-8")
    tmp.replace(path)


def check_survived(result: dict | None, killed_at: float, victim: str, context: str) -> float:
    """The run stopped ``UPDATES_AFTER_FAULT`` server steps after the killed node's fault (its
    ``should_stop``, the only one it has) with a finite, trained model, that node's task given
    up as a fault within about one task timeout (its TTL); how long after the kill.
    ``victim``: the killed SuperNode's log, which names its node id."""
    assert result is not None and "error" not in result, context
    assert result["stopped-by"] == "should-stop", context
    assert result["finite"], context
    assert result["final-loss"] < result["initial-loss"], context
    assert result["num-updates"] > KILL_AFTER_STEP, context
    assert result["faults"].keys() <= {"timeout", "lost", "node-left", "error"}, context
    # Faults before the kill are not the kill's: on a loaded machine (CI) every node's first
    # tasks can expire while the SuperNodes still start up.
    names = victim_names(victim)
    victim_faults = [
        f["time"] - killed_at
        for f in result["fault-log"]
        if any(name in f["message"] for name in names) and f["time"] > killed_at
    ]
    assert victim_faults, context
    assert victim_faults[0] < TIMEOUT + 15, context
    return victim_faults[0]


def make_certificates(directory: Path, num_keys: int) -> None:
    """The CA, the SuperLink's certificate and ``num_keys`` SuperNode key pairs."""
    subprocess.run(
        ["bash", str(SCRIPT), "-d", str(directory), "-n", str(num_keys), "-H", "superlink.test"],
        check=True,
        capture_output=True,
        timeout=120,
    )


def start_nodes(deployment: FlowerDeployment, keys: Path) -> tuple[set[int], FlowerProcess]:
    """Register keys 1 to ``NUM_NODES``, start a SuperNode with each, wait for them; then start
    one with key ``NUM_NODES + 1``, never registered. The registered node ids and that rogue."""
    registered = {
        deployment.register_supernode(keys / f"supernode-{k}.pub") for k in range(1, NUM_NODES + 1)
    }
    for partition in range(NUM_NODES):
        deployment.start_supernode(
            partition, NUM_NODES, private_key=keys / f"supernode-{partition + 1}"
        )
    online = deployment.wait_for_nodes(NUM_NODES)
    assert {int(n["node-id"]) for n in online} == registered
    # started after the wait, which fails on a SuperNode that exited (as the rogue will)
    rogue = deployment.start_supernode(
        NUM_NODES, NUM_NODES, private_key=keys / f"supernode-{NUM_NODES + 1}"
    )
    return registered, rogue


def check_rogue_turned_away(
    deployment: FlowerDeployment, rogue: FlowerProcess, registered: set[int]
) -> None:
    """The SuperNode with the unregistered key gave up, refused, and never came online."""
    deadline = time.monotonic() + 30
    while rogue.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not rogue.running(), rogue.log()
    assert "Failed to activate SuperNode" in rogue.log(), rogue.log()
    assert {int(n["node-id"]) for n in deployment.online_nodes()} <= registered


def kill_a_node_mid_run(
    deployment: FlowerDeployment, run: FlowerProcess, progress_path: Path, watch_path: Path
) -> tuple[FlowerProcess, float]:
    """SIGKILL the last SuperNode once the run reached ``KILL_AFTER_STEP``, and tell the run
    (its ``watch-path``) when and whom; that SuperNode and when (``time.time``)."""
    wait_until(
        lambda: (read_json(progress_path) or {}).get("server-step", 0) >= KILL_AFTER_STEP,
        timeout=STEP_WAIT,
        what=f"server step {KILL_AFTER_STEP}",
        alive=run,
        context=lambda: f"progress {read_json(progress_path)}\n{deployment.logs()}",
    )
    victim = deployment.supernodes[NUM_NODES - 1]  # partition-id = the strategy's stable id
    killed_at = time.time()
    deployment.kill_supernode(NUM_NODES - 1)
    assert not victim.running() and victim.leftovers() == []
    write_json(watch_path, {"after": killed_at, "names": victim_names(victim.log())})
    return victim, killed_at


@pytest.mark.slow(seconds=90, waits=True)
@pytest.mark.skipif(
    not (shutil.which("openssl") and shutil.which("ssh-keygen")),
    reason="generate_certs.sh needs openssl and ssh-keygen",
)
def test_tls_auth_and_a_run_that_survives_a_killed_supernode(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    make_certificates(certs, num_keys=NUM_NODES + 1)
    result_path, progress_path = tmp_path / "result.json", tmp_path / "progress.json"
    watch_path = tmp_path / "watch.json"
    deployment = FlowerDeployment(tmp_path / "flower", tls=TLSFiles.in_dir(certs), auth=True)
    try:
        deployment.start_superlink()  # waits for GET https://127.0.0.1:<port>/health
        with pytest.raises(OSError):  # no plain HTTP on the TLS port
            urllib.request.urlopen(f"http://{deployment.address}/health", timeout=5)
        registered, rogue = start_nodes(deployment, certs / "keys")
        run_config = {
            "strategy": "asgd",
            "min-nodes": NUM_NODES,
            "num-updates": NUM_UPDATES,
            "timeout": TIMEOUT,
            "task-pause": TASK_PAUSE,
            "max-wall-time": MAX_WALL_TIME,
            "result-path": str(result_path),
            "progress-path": str(progress_path),
            "watch-path": str(watch_path),
            "updates-after-fault": UPDATES_AFTER_FAULT,
        }
        run = deployment.start_run(APP, run_config)
        victim, killed_at = kill_a_node_mid_run(deployment, run, progress_path, watch_path)
        status = deployment.wait_run(run, timeout=240)
        result = read_json(result_path)
        context = f"\nresult: {json.dumps(result, indent=1)}\n{deployment.logs()}"
        # `flwr run` exits 0 even when the ServerApp raises: check its status and our file.
        assert status == 0, context
        runs = deployment.runs_status()
        assert [r["status"] for r in runs] == ["finished:completed"], runs
        dropped_after = check_survived(result, killed_at, victim.log(), context)
        check_rogue_turned_away(deployment, rogue, registered)
        print(
            f"\nkilled a SuperNode at {killed_at - result['started']:.1f} s; its task dropped "
            f"{dropped_after:.1f} s later; faults {result['faults']}; "
            f"{result['num-updates']} updates in {result['wall-time']:.1f} s "
            f"({result['stopped-by']})"
        )
        for fault in result["fault-log"]:
            print(f"  +{fault['time'] - killed_at:5.1f} s  {fault['message']}")
    finally:
        stopping = time.monotonic()
        deployment.stop_all()
        print(f"stopped every process in {time.monotonic() - stopping:.1f} s")
    assert deployment.leftovers() == [], "processes left running"
