"""An agent's bad or hostile deliverable scores 0, never a verifier error it
could hide behind (an excluded rollout); only a fault of the harness (a
malformed answer.json, an unknown check type) is an error. Called directly on
the generic verifier, then end to end through run_verifier on each sandbox
backend, with the deliverable written by the agent's own uid."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.synthesis.catalogs import GENERATORS_DIR
from clawloop_assets.task_bundle import load_task_bundle, write_task_toml
from resources.sandbox import Mount

_spec = importlib.util.spec_from_file_location("verify", GENERATORS_DIR / "verify.py")
verify = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verify)

DEEP = 100_000
# Shell commands an agent could end with, each leaving a deliverable that a
# parser or the file system refuses; and the check that reads it.
SABOTAGE = {
    "unreadable_file": ("echo wrong > out.txt && chmod 000 out.txt",
                        {"type": "number", "path": "out.txt", "expected": 1}),
    "file_for_a_directory": ("echo wrong > out",
                             {"type": "number", "path": "out/result.txt", "expected": 1}),
    "csv_field_over_the_limit": (
        "python3 -c \"open('out.csv', 'w').write('id,total\\nA,' + 'x' * 200000 + '\\n')\"",
        {"type": "csv_records", "path": "out.csv", "key": ["id"], "columns": {"total": {"kind": "number"}},
         "expected": [{"id": "A", "total": 1}]}),
    "json_nested_too_deep": (
        f"python3 -c \"open('out.json', 'w').write('[' * {DEEP} + ']' * {DEEP})\"",
        {"type": "json_records", "path": "out.json", "key": ["id"], "columns": {"total": {"kind": "number"}},
         "expected": [{"id": "A", "total": 1}]}),
    "json_config_nested_too_deep": (
        f"python3 -c \"open('conf.json', 'w').write('[' * {DEEP} + ']' * {DEEP})\"",
        {"type": "config_values", "path": "conf.json", "format": "json", "expected": {"a": 1}}),
    "huge_python_expression": (
        f"mkdir pkg && python3 -c \"open('pkg/mod.py', 'w').write('x = ' + '1+' * {DEEP} + '1\\n')\"",
        {"type": "python_imports", "root": "", "defines": {"pkg.mod": ["x"]}}),
}


def make_workspace(root: Path, command: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", "-c", command], cwd=root, check=True)
    return root


# As root the direct call reads a mode-000 file: that case runs end to end only.
@pytest.mark.parametrize("case", sorted(set(SABOTAGE) - {"unreadable_file"}))
def test_a_broken_deliverable_fails_its_check(tmp_path, case):
    command, check = SABOTAGE[case]
    result = verify.run_check(str(make_workspace(tmp_path / "workspace", command)), check)
    assert result["passed"] is False, result
    assert result["detail"], result


@pytest.mark.parametrize("check, message", [
    ({"type": "no_such_type", "path": "out.txt"}, "unknown check type"),
    ({"type": "number", "path": "out.txt"}, "'expected'"),
    ({"type": "number", "path": "../out.txt", "expected": 1}, "'path'"),
    ({"type": "csv_records", "path": "out.csv", "key": "id", "columns": {}, "expected": []}, "'key'"),
    ({"type": "config_values", "path": "a.ini", "format": "yaml", "expected": {}}, "'format'"),
    ({"type": "tree", "files": {"/etc/passwd": "0" * 64}}, "'files'"),
])
def test_a_malformed_spec_stays_an_error_whatever_the_workspace(tmp_path, check, message):
    # Even with a deliverable that would fail, the spec's fault is raised, not scored.
    workspace = make_workspace(tmp_path / "workspace", "echo wrong > out")
    with pytest.raises(verify.SpecError, match=message):
        verify.run_check(str(workspace), check)


# ---- end to end: the agent's uid writes the deliverable, run_verifier judges it

def make_bundle(root: Path, checks: list[dict]) -> Path:
    files = {
        "instruction.md": "Write the deliverable.\n",
        "meta.json": json.dumps({"track": "analysis", "format": "number",
                                 "contract": {"rules": ["r"], "parameters": {}, "labels": []}}),
        "environment/CONTRACT.md": "# Answer contract\n",
        "solution/solve.sh": "echo 1 > out.txt\n",
        "answer/answer.json": json.dumps({"key": None, "checks": checks}),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "tests").mkdir()
    shutil.copyfile(GENERATORS_DIR / "verify.py", root / "tests" / "verify.py")
    write_task_toml(root / "task.toml", task_id="round-0001.sabotage.L0.s0", capability="grouped_statistics",
                    domain="apiary_hive_inventory", difficulty=0, track="analysis", format="number",
                    generator_id="sabotage.L0", seed=0, round_key="round-0001", max_turns=4, command_timeout_s=20.0)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return root


@pytest.fixture(params=SANDBOX_BACKENDS)
def sandbox(request):
    return make_sandbox(request.param)


def agent_workspace(sandbox, tmp_path: Path, command: str) -> Path:
    """A workspace the agent's sandbox uid wrote, as a rollout leaves it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chmod(workspace, 0o755)
    done = sandbox.run(["bash", "-c", command], [Mount(workspace, "/workspace", writable=True)])
    assert done.exit_code == 0, done.output
    return workspace


@pytest.mark.parametrize("case", sorted(SABOTAGE))
def test_a_broken_deliverable_scores_zero_end_to_end(sandbox, tmp_path, case):
    command, check = SABOTAGE[case]
    bundle = load_task_bundle(make_bundle(tmp_path / "bundle", [check]))
    verdict = run_verifier(sandbox, bundle, agent_workspace(sandbox, tmp_path, command))
    assert (verdict.status, verdict.reward) == ("scored", 0.0), verdict.error
    assert verdict.checks[0]["passed"] is False and verdict.checks[0]["detail"]


def test_a_malformed_spec_is_a_verifier_error_end_to_end(sandbox, tmp_path):
    bundle = load_task_bundle(make_bundle(tmp_path / "bundle", [{"type": "number", "path": "out.txt"}]))
    verdict = run_verifier(sandbox, bundle, agent_workspace(sandbox, tmp_path, "echo 1 > out.txt"))
    assert verdict.status == "error" and verdict.reward is None
    assert "'expected'" in verdict.error

