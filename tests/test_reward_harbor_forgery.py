"""A Harbor task whose tests run a program the agent wrote: that program
runs as the tests' uid and can write /logs/verifier/reward.txt itself. A
reward counts only when test.sh exits 0 within its timeout and the reward
file is a plain file the tests wrote; a forged, killed or hung test run
scores 0, never 1.0 and never an error that would exclude the rollout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from clawloop_assets.harbor.task_format import import_harbor_task
from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.task_bundle import load_task_bundle
from resources.sandbox import BubblewrapSandbox

RUNNABLE = Path(__file__).parent / "harbor_tasks" / "count-error-lines"
# The task's tests: run the agent's program, then write the verdict.
TEST_SH = """#!/bin/bash
cd /app
bash ./run.sh
if [ -s error_count.txt ] && [ "$(cat error_count.txt)" = 3 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
{tail}
"""
FORGE = "echo 1 > /logs/verifier/reward.txt\n"
# The agent's program (run.sh in its workspace), each a way to pass without the answer.
PROGRAMS = {
    "reward_made_read_only": (FORGE + "chmod 444 /logs/verifier/reward.txt\n", ""),
    "read_only_and_the_tests_go_on": (FORGE + "chmod 444 /logs/verifier/reward.txt\n", "true"),
    "tests_process_group_killed": (FORGE + "kill -9 0\n", ""),
    "every_process_killed": (FORGE + "kill -9 -1\n", ""),
    "reward_dir_locked": ("echo '{\"reward\": 1}' > /logs/verifier/reward.json\nchmod 555 /logs/verifier\n", "true"),
    "reward_hard_linked": ("echo 1 > /tmp/one\nln /tmp/one /logs/verifier/reward.txt 2>/dev/null "
                           "|| { echo 1 > /logs/verifier/k; ln /logs/verifier/k /logs/verifier/reward.txt; "
                           "chmod 444 /logs/verifier/k; }\n", "true"),
    "tests_hung": ("sleep 60\n", ""),
}


@pytest.fixture(params=SANDBOX_BACKENDS)
def sandbox(request):
    return make_sandbox(request.param)


def bundle_with(tmp_path: Path, tail: str):
    """The task with these tests, imported (its oracle writes the honest
    run.sh), then given `tail`: a tail such as `exit 3` fails every run,
    which no import would admit, but a verifier must still score."""
    src = Path(shutil.copytree(RUNNABLE, tmp_path / "src" / RUNNABLE.name))
    (src / "tests" / "test.sh").write_text(TEST_SH.format(tail=""))
    (src / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'echo 3 > error_count.txt' > run.sh\n")
    toml = src / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 30.0", "timeout_sec = 3.0"))
    result = import_harbor_task(src, tmp_path / "imported", BubblewrapSandbox())
    assert result.runnable, result.reasons
    bundle = load_task_bundle(result.bundle_dir)
    (bundle.tests_dir / "test.sh").write_text(TEST_SH.format(tail=tail))
    return bundle


def workspace_with(bundle, tmp_path: Path, program: str) -> Path:
    workspace = Path(shutil.copytree(bundle.environment_dir, tmp_path / "workspace"))
    (workspace / "run.sh").write_text(program)
    return workspace


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_a_forged_reward_scores_zero(sandbox, tmp_path, case):
    program, tail = PROGRAMS[case]
    bundle = bundle_with(tmp_path, tail)
    verdict = run_verifier(sandbox, bundle, workspace_with(bundle, tmp_path, program))
    assert (verdict.status, verdict.reward) == ("scored", 0.0), (verdict.error, verdict.checks)


def test_the_honest_program_still_passes_and_a_wrong_one_fails(sandbox, tmp_path):
    bundle = bundle_with(tmp_path, "")
    right = run_verifier(sandbox, bundle, workspace_with(bundle, tmp_path / "right", "echo 3 > error_count.txt\n"))
    assert (right.status, right.reward) == ("scored", 1.0), (right.error, right.checks)
    wrong = run_verifier(sandbox, bundle, workspace_with(bundle, tmp_path / "wrong", "echo 2 > error_count.txt\n"))
    assert (wrong.status, wrong.reward) == ("scored", 0.0), (wrong.error, wrong.checks)


def test_a_reward_with_a_failing_exit_does_not_count(sandbox, tmp_path):
    bundle = bundle_with(tmp_path, "exit 3")
    verdict = run_verifier(sandbox, bundle, workspace_with(bundle, tmp_path, "echo 3 > error_count.txt\n"))
    assert (verdict.status, verdict.reward) == ("scored", 0.0)
    assert "exited with code 3" in verdict.checks[0]["detail"]
