"""The real Dagster webserver serves the round's asset graph from workspace.yaml."""

import shutil

import pytest
from webserver_process import REPO, Webserver

from clawloop_assets.definitions import round_assets

pytestmark = pytest.mark.slow

# The round's assets as this checkout defines them, which the webserver must
# serve from workspace.yaml; the phases' assets named, so none goes missing unseen.
ROUND_ASSETS = {key.path[-1] for assets in round_assets for key in assets.keys}
PHASE_ASSETS = {
    "capability_catalog", "domain_catalog", "domain_skill_graphs", "synthesis_plan", "task_generators", "candidate_tasks",
    "agent_free_validation", "validation_rollouts", "admitted_tasks", "task_splits", "sft_checkpoint",
    "policy_checkpoint", "training_gain", "heldout_baseline_rollouts", "diagnosis_rollouts", "diagnosis_report",
    "round_summary",
}


def test_webserver_serves_the_round_asset_graph(tmp_path):
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(REPO / "dagster.yaml", dagster_home)
    with Webserver(dagster_home, tmp_path / "webserver.log", env={"CLAWLOOP_HOME": str(tmp_path / "home")}) as server:
        nodes = server.asset_nodes()
    by_name = {node["assetKey"]["path"][-1]: node for node in nodes}
    assert set(by_name) == ROUND_ASSETS and PHASE_ASSETS <= ROUND_ASSETS
    assert all(node["isPartitioned"] for node in nodes)
    assert by_name["diagnosis_report"]["groupName"] == "diagnosis"
    assert by_name["domain_skill_graphs"]["groupName"] == "domain_route"
    assert "round_job" in by_name["round_summary"]["jobNames"]
