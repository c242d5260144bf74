"""The verifier runs as its own uid (VERIFIER_UID, not the agent's), on a
copy of the final workspace it can read whatever modes the agent set; a
workspace over the copy's limits is the agent's failure, a reward of 0 with
the reason. On each sandbox backend."""

from __future__ import annotations

import os

import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox
from test_reward_deliverable_failures import agent_workspace, make_bundle

from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.task_bundle import load_task_bundle


@pytest.fixture(params=SANDBOX_BACKENDS)
def sandbox(request):
    return make_sandbox(request.param)


@pytest.mark.parametrize("command, path", [
    ("echo 1 > out.txt && chmod 000 out.txt", "out.txt"),
    ("mkdir sub && echo 1 > sub/out.txt && chmod 000 sub", "sub/out.txt"),
    ("echo 1 > out.txt && chmod 000 out.txt . ", "out.txt"),
])
def test_the_verifier_reads_a_deliverable_whatever_its_modes(sandbox, tmp_path, command, path):
    # A right answer the agent made unreadable to itself is still a right answer.
    bundle = load_task_bundle(make_bundle(tmp_path / "bundle", [{"type": "number", "path": path, "expected": 1}]))
    verdict = run_verifier(sandbox, bundle, agent_workspace(sandbox, tmp_path, command))
    assert (verdict.status, verdict.reward) == ("scored", 1.0), (verdict.error, verdict.checks)


UID_VERIFIER = """import json, os, sys
result = sys.argv[sys.argv.index("--result") + 1]
json.dump({"reward": 0.0, "checks": [{"name": "uid", "passed": False, "detail": str(os.getuid())}]}, open(result, "w"))
"""


def test_the_verifier_runs_as_its_own_uid(sandbox, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("without root every sandbox runs as the caller's uid")
    from resources.sandbox import SANDBOX_UID, VERIFIER_UID

    root = make_bundle(tmp_path / "bundle", [{"type": "number", "path": "out.txt", "expected": 1}])
    (root / "tests" / "verify.py").write_text(UID_VERIFIER)
    workspace = agent_workspace(sandbox, tmp_path, "id -u > agent_uid")
    verdict = run_verifier(sandbox, load_task_bundle(root), workspace)
    assert verdict.status == "scored", verdict.error
    assert int(verdict.checks[0]["detail"]) == VERIFIER_UID != SANDBOX_UID
    assert int((workspace / "agent_uid").read_text()) == SANDBOX_UID


def test_a_workspace_over_the_copy_limits_scores_zero(sandbox, tmp_path):
    # Nested past the copy's depth limit, beside a right answer: the agent's failure, with the reason.
    bundle = load_task_bundle(make_bundle(tmp_path / "bundle", [{"type": "number", "path": "out.txt", "expected": 1}]))
    workspace = agent_workspace(sandbox, tmp_path, "echo 1 > out.txt && mkdir -p " + "/".join(["d"] * 80))
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), verdict.error
    assert "deeper" in verdict.checks[0]["detail"]
