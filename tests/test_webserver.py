"""The real Dagster webserver serves the round's asset graph from workspace.yaml."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ROUND_ASSETS = {
    "capability_catalog", "domain_catalog", "domain_skill_graphs", "synthesis_plan", "task_generators", "candidate_tasks",
    "agent_free_validation", "validation_rollouts", "admitted_tasks", "task_splits", "sft_checkpoint",
    "policy_checkpoint", "training_gain", "heldout_baseline_rollouts", "diagnosis_rollouts", "diagnosis_report",
    "round_summary",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_webserver_serves_the_round_asset_graph(tmp_path):
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(REPO / "dagster.yaml", dagster_home)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "CLAWLOOP_HOME": str(tmp_path / "home")}
    port = free_port()
    log = (tmp_path / "webserver.log").open("w")

    def default_signals():
        # Started from a non-interactive shell the webserver inherits ignored
        # SIGINT; reset it so SIGINT to the group stops it cleanly.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "webserver did not answer within 90 s"
                time.sleep(0.5)
        nodes = []
        while time.monotonic() < deadline and not nodes:  # the code location loads after the server answers
            result = graphql(port, "{ assetNodes { assetKey { path } groupName isPartitioned jobNames } }")
            nodes = result.get("data", {}).get("assetNodes") or []
            time.sleep(0.5)
        by_name = {node["assetKey"]["path"][-1]: node for node in nodes}
        assert set(by_name) == ROUND_ASSETS
        assert all(node["isPartitioned"] for node in nodes)
        assert by_name["diagnosis_report"]["groupName"] == "diagnosis"
        assert by_name["domain_skill_graphs"]["groupName"] == "domain_route"
        assert "round_job" in by_name["round_summary"]["jobNames"]
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
