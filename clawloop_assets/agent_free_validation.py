"""Agent-free validation of a candidate task: the oracle solution passes its
own verifier, the untouched initial workspace fails it, and no answer value
leaks into what the agent reads (instruction.md, CONTRACT.md, the contract).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable

from clawloop_assets.task_bundle import TaskBundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import Mount, Sandbox, SandboxLimits, disk_quota

ORACLE_LIMITS = SandboxLimits(wall_seconds=30.0, cpu_seconds=20)
ORACLE_WORKSPACE_BYTES = 64 << 20
_NUMBER_TOKEN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w]|\.\d)")


@dataclass(frozen=True)
class AgentFreeResult:
    task_id: str
    passed: bool
    oracle_passed: bool
    untouched_failed: bool
    leak_free: bool
    reason: str | None  # one line, the first failure; None when passed


def validate_without_agent(sandbox: Sandbox, bundle: TaskBundle, scratch_dir: Path) -> AgentFreeResult:
    work = Path(scratch_dir) / bundle.task_id
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    reasons = []

    leak = leakage_audit(bundle)
    if leak:
        reasons.append(leak)

    oracle_passed, oracle_reason = _oracle_passes(sandbox, bundle, work / "oracle")
    if oracle_reason:
        reasons.append(oracle_reason)

    untouched = _fresh_workspace(bundle, work / "untouched")
    verdict = run_verifier(sandbox, bundle, untouched)
    untouched_failed = verdict.status == "scored" and verdict.reward == 0.0
    if verdict.status == "error":
        reasons.append(f"verifier error on the untouched workspace: {verdict.error}")
    elif not untouched_failed:
        reasons.append("the untouched workspace already passes the verifier")

    shutil.rmtree(work, ignore_errors=True)
    return AgentFreeResult(
        task_id=bundle.task_id,
        passed=not reasons,
        oracle_passed=oracle_passed,
        untouched_failed=untouched_failed,
        leak_free=leak is None,
        reason=reasons[0] if reasons else None,
    )


def _fresh_workspace(bundle: TaskBundle, directory: Path) -> Path:
    directory.mkdir(parents=True)
    workspace = directory / "workspace"
    shutil.copytree(bundle.environment_dir, workspace, symlinks=True)
    os.chmod(workspace, 0o755)
    return workspace


def _oracle_passes(sandbox: Sandbox, bundle: TaskBundle, directory: Path) -> tuple[bool, str | None]:
    # The oracle is model-written code too: its workspace gets a disk quota.
    workspace = directory / "workspace"
    with disk_quota(workspace, ORACLE_WORKSPACE_BYTES):
        shutil.copytree(bundle.environment_dir, workspace, symlinks=True, dirs_exist_ok=True)
        os.chmod(workspace, 0o755)
        return _run_oracle(sandbox, bundle, directory, workspace)


def _run_oracle(sandbox: Sandbox, bundle: TaskBundle, directory: Path, workspace: Path) -> tuple[bool, str | None]:
    solution = directory / "solution"
    shutil.copytree(bundle.solution_path.parent, solution)
    os.chmod(solution, 0o755)
    outcome = sandbox.run(
        ["bash", "/solution/solve.sh"],
        [Mount(workspace, "/workspace", writable=True), Mount(solution, "/solution")],
        cwd="/workspace",
        limits=ORACLE_LIMITS,
    )
    if outcome.timed_out:
        return False, f"oracle solution timed out after {ORACLE_LIMITS.wall_seconds:.0f}s"
    if outcome.exit_code != 0:
        tail = (outcome.output.strip().splitlines() or ["no output"])[-1][:200]
        return False, f"oracle solution exited with code {outcome.exit_code}: {tail}"
    verdict = run_verifier(sandbox, bundle, workspace)
    if verdict.status == "error":
        return False, f"verifier error on the oracle workspace: {verdict.error}"
    if verdict.reward != 1.0:
        failed = next((c for c in verdict.checks if not c.get("passed")), {})
        return False, f"oracle solution fails its verifier: {failed.get('detail', 'no detail')}"
    return True, None


# ---- leakage audit

def leakage_audit(bundle: TaskBundle) -> str | None:
    """The first answer value found in the agent-visible text, or None.

    Values are matched as whole tokens: a number as a number (21.3 matches
    "21.30"), a string only when not part of a longer word or path.
    Exempt, because the contract must state them and stating them reveals no
    pairing of key and value: the contract's declared labels (the tier or
    status vocabulary) and its numeric parameters (a median may sit exactly on
    a threshold by design). Single-digit integers are exempt too: they occur
    in any prose ("one decimal", "2 decimals") and a one-digit guess is no
    leak worth rejecting a task for; generators keep counts at 10 or more
    where the count is the whole answer. Strings under three characters are
    skipped for the same reason.
    """
    answer = json.loads(bundle.answer_path.read_text(encoding="utf-8"))
    contract = bundle.contract
    labels = {str(label) for label in contract.get("labels", [])}
    parameters = {_decimal(v) for v in contract.get("parameters", {}).values()} - {None}
    texts = {
        "instruction.md": bundle.instruction,
        "CONTRACT.md": bundle.contract_path.read_text(encoding="utf-8"),
        "the contract": json.dumps(contract),
    }
    environment_files = {str(p.relative_to(bundle.environment_dir)) for p in bundle.environment_dir.rglob("*")}
    numbers_in = {name: {_decimal(t) for t in _NUMBER_TOKEN.findall(text)} for name, text in texts.items()}
    for value in _answer_values(answer["checks"], environment_files):
        number = _decimal(value) if isinstance(value, (int, float)) else None
        if number is not None:
            if number in parameters or (number == number.to_integral_value() and abs(number) < 10):
                continue
            for name, numbers in numbers_in.items():
                if number in numbers:
                    return f"leakage: answer value {value} appears in {name}"
        else:
            text_value = str(value).strip()
            if len(text_value) < 3 or text_value in labels:
                continue
            pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(text_value) + r"(?![A-Za-z0-9_])")
            for name, text in texts.items():
                if pattern.search(text):
                    return f"leakage: answer value {text_value!r} appears in {name}"
    return None


def _answer_values(checks: list[dict], environment_files: set[str]) -> Iterable[Any]:
    for check in checks:
        kind = check.get("type")
        if kind in ("number", "text"):
            yield check["expected"]
        elif kind == "lines":
            yield from check["expected"]
        elif kind in ("csv_records", "json_records"):
            keys = set(check.get("key", []))
            for record in check["expected"]:
                # Business keys (group names, ids) are in the data by design; the
                # computed fields are the answer.
                yield from (v for c, v in record.items() if c not in keys and v is not None)
        elif kind == "tree":
            # Where each file lands is the answer; a path at the top level is a
            # deliverable the instruction has to name ("Rename a.txt to a.md").
            yield from (p for p in check["files"] if "/" in p and p not in environment_files)


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
