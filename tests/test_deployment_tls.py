"""The edge-deployment set-up on 127.0.0.1: TLS and SuperNode authentication both on.

``examples/edge-deployment/generate_certs.sh`` makes the CA, the SuperLink's certificate and
three SuperNode key pairs; the SuperLink (HTTPS, ``--enable-supernode-auth``) learns two public
keys through ``flwr supernode register``; two SuperNodes with those keys run
``tests/deploy_app`` (ASGD) through a TLS connection, while a SuperNode with an unregistered key
is turned away. Every process is stopped by PID afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from flower_deployment import FlowerDeployment, TLSFiles

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "tests" / "deploy_app"
SCRIPT = ROOT / "examples" / "edge-deployment" / "generate_certs.sh"


def make_certificates(directory: Path, num_keys: int) -> None:
    subprocess.run(
        ["bash", str(SCRIPT), "-d", str(directory), "-n", str(num_keys), "-H", "superlink.test"],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.slow(seconds=60)
@pytest.mark.skipif(
    not (shutil.which("openssl") and shutil.which("ssh-keygen")),
    reason="generate_certs.sh needs openssl and ssh-keygen",
)
def test_tls_and_supernode_auth(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    make_certificates(certs, num_keys=3)
    keys = certs / "keys"
    result_path = tmp_path / "result.json"
    deployment = FlowerDeployment(tmp_path / "flower", tls=TLSFiles.in_dir(certs), auth=True)
    try:
        deployment.start_superlink()  # waits for GET https://127.0.0.1:<port>/health
        with pytest.raises(OSError):  # no plain HTTP on the TLS port
            urllib.request.urlopen(f"http://{deployment.address}/health", timeout=5)

        registered = {deployment.register_supernode(keys / f"supernode-{k}.pub") for k in (1, 2)}
        for partition, k in enumerate((1, 2)):
            deployment.start_supernode(partition, 2, private_key=keys / f"supernode-{k}")
        # supernode-3's key was never registered: the SuperLink must turn it away.
        rogue = deployment.start_supernode(2, 2, private_key=keys / "supernode-3")
        online = deployment.wait_for_nodes(2)
        assert {int(n["node-id"]) for n in online} == registered

        # A 60-s TTL: a task's ClientApp process took over 10 s to start in a loaded fresh-clone
        # CI, and an expired task here is a fault, which this test allows none of.
        run = deployment.start_run(
            APP,
            {"min-nodes": 2, "num-updates": 6, "timeout": 60.0, "result-path": str(result_path)},
        )
        status = deployment.wait_run(run, timeout=120)
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        context = f"\nresult: {result}\n{deployment.logs()}"
        assert status == 0, context
        assert result is not None and "error" not in result, context
        assert [r["status"] for r in deployment.runs_status()] == ["finished:completed"]
        assert result["stopped-by"] == "budget" and result["num-updates"] == 6, context
        assert result["finite"] and result["final-loss"] < result["initial-loss"], context
        assert result["faults"] == {}, context

        deadline = time.monotonic() + 30
        while rogue.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not rogue.running(), rogue.log()
        assert "Failed to activate SuperNode" in rogue.log(), rogue.log()
        assert {int(n["node-id"]) for n in deployment.online_nodes()} == registered
    finally:
        stopping = time.monotonic()
        deployment.stop_all()
        print(f"\nstopped every process in {time.monotonic() - stopping:.1f} s")
    assert deployment.leftovers() == [], "processes left running"
