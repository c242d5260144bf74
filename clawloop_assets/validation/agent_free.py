"""Agent-free validation of a candidate task: the oracle solution passes its
own verifier, three times alike; the untouched initial workspace (a no-op
agent), empty deliverables and a perturbed (wrong) deliverable all fail it;
and no answer value leaks into what the agent reads (instruction.md,
CONTRACT.md, the contract). Generator determinism is checked when the
candidate is built (synthesis.build_candidate).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable, Iterable

from clawloop_assets.harness.verification import VerifierResult, memory_scratch, run_verifier, run_verifiers
from clawloop_assets.task_bundle import TaskBundle
from resources.sandbox import Mount, Sandbox, SandboxLimits, copy_tree_safely, disk_quota

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
    wrong_deliverables_failed: bool  # empty and perturbed deliverables both fail the verifier
    verifier_deterministic: bool  # three runs on the oracle's workspace agree
    reason: str | None  # one line, the first failure; None when passed


def validate_without_agent(sandbox: Sandbox, bundle: TaskBundle, scratch_dir: Path) -> AgentFreeResult:
    # Everything written here is thrown away at the end: in memory where the
    # host has room (memory_scratch), else under `scratch_dir`.
    memory = memory_scratch()
    if memory is not None:
        work = Path(tempfile.mkdtemp(prefix="clawloop-agent-free-", dir=memory))
    else:
        work = Path(scratch_dir) / bundle.task_id
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
    try:
        return _validate(sandbox, bundle, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _validate(sandbox: Sandbox, bundle: TaskBundle, work: Path) -> AgentFreeResult:
    reasons = []

    leak = leakage_audit(bundle)
    if leak:
        reasons.append(leak)

    # The untouched workspace is the bundle's environment itself: the verifier
    # only ever reads a copy of what it is given.
    oracle = _oracle_checks(sandbox, bundle, work / "oracle", bundle.environment_dir)
    reasons += oracle.reasons

    verdict = oracle.untouched_verdict
    untouched_failed = verdict.status == "scored" and verdict.reward == 0.0
    if verdict.status == "error":
        reasons.append(f"verifier error on the untouched workspace: {verdict.error}")
    elif not untouched_failed:
        reasons.append("the untouched workspace already passes the verifier")

    return AgentFreeResult(
        task_id=bundle.task_id,
        passed=not reasons,
        oracle_passed=oracle.passed,
        untouched_failed=untouched_failed,
        leak_free=leak is None,
        wrong_deliverables_failed=oracle.wrong_deliverables_failed,
        verifier_deterministic=oracle.verifier_deterministic,
        reason=reasons[0] if reasons else None,
    )


@dataclass
class _OracleChecks:
    passed: bool = False
    verifier_deterministic: bool = False
    wrong_deliverables_failed: bool = False
    reasons: list[str] = field(default_factory=list)
    untouched_verdict: VerifierResult | None = None  # the verifier on the untouched workspace


def _oracle_checks(sandbox: Sandbox, bundle: TaskBundle, directory: Path, untouched: Path) -> _OracleChecks:
    # The oracle is model-written code too: its workspace gets a disk quota.
    workspace = directory / "workspace"
    with disk_quota(workspace, ORACLE_WORKSPACE_BYTES):
        shutil.copytree(bundle.environment_dir, workspace, symlinks=True, dirs_exist_ok=True)
        os.chmod(workspace, 0o755)
        return _run_oracle(sandbox, bundle, directory, workspace, untouched)


def _run_oracle(sandbox: Sandbox, bundle: TaskBundle, directory: Path, workspace: Path, untouched: Path) -> _OracleChecks:
    """The oracle runs, then one batch (`run_verifiers`) verifies its workspace
    three times, the empty and perturbed deliverables and the untouched
    workspace. The wrong deliverables are made before the oracle's verdict is
    known; they are judged only when the oracle passes, as before, and made
    again in order (raising what they raised) if making them ahead failed."""
    result = _OracleChecks()
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
        result.reasons.append(f"oracle solution timed out after {ORACLE_LIMITS.wall_seconds:.0f}s")
        result.untouched_verdict = run_verifier(sandbox, bundle, untouched)
        return result
    if outcome.exit_code != 0:
        tail = (outcome.output.strip().splitlines() or ["no output"])[-1][:200]
        result.reasons.append(f"oracle solution exited with code {outcome.exit_code}: {tail}")
        result.untouched_verdict = run_verifier(sandbox, bundle, untouched)
        return result
    wrongs = _wrong_deliverables(sandbox, bundle, directory, workspace)
    judged = [(name, path, change) for name, path, change in wrongs or [] if change is not None]
    verdicts = run_verifiers(sandbox, bundle, [workspace] * 3 + [path for _, path, _ in judged] + [untouched])
    result.untouched_verdict = verdicts[-1]
    verdicts, wrong_verdicts = verdicts[:3], verdicts[3:-1]
    verdict = verdicts[0]
    if verdict.status == "error":
        result.reasons.append(f"verifier error on the oracle workspace: {verdict.error}")
        return result
    result.verifier_deterministic = all((v.status, v.reward, v.checks) == (verdict.status, verdict.reward, verdict.checks)
                                        for v in verdicts)
    if not result.verifier_deterministic:
        result.reasons.append("verifier is not deterministic: three runs on the oracle workspace disagree")
    if verdict.reward != 1.0:
        failed = next((c for c in verdict.checks if not c.get("passed")), {})
        result.reasons.append(f"oracle solution fails its verifier: {failed.get('detail', 'no detail')}")
        return result
    result.passed = True
    result.wrong_deliverables_failed = True
    if wrongs is None:  # making them ahead failed: make and judge them one by one, as before
        checks = bundle.answer()["checks"]
        judged, wrong_verdicts = [], []
        for name, make in _wrong_kinds():
            wrong = directory / name
            shutil.rmtree(wrong, ignore_errors=True)
            copy_tree_safely(workspace, wrong)
            change = make(wrong, checks, sandbox)
            if change is None:
                continue
            judged.append((name, wrong, change))
            wrong_verdicts.append(run_verifier(sandbox, bundle, wrong))
    for (name, _, change), wrong_verdict in zip(judged, wrong_verdicts):
        if wrong_verdict.status == "error":
            result.reasons.append(f"verifier error on a {name} deliverable ({change}): {wrong_verdict.error}")
            result.wrong_deliverables_failed = False
        elif wrong_verdict.reward != 0.0:
            result.reasons.append(f"the verifier passes a {name} deliverable: {change}")
            result.wrong_deliverables_failed = False
    return result


def _wrong_deliverables(sandbox: Sandbox, bundle: TaskBundle, directory: Path,
                        workspace: Path) -> list[tuple[str, Path, str | None]] | None:
    """(name, copy of the oracle's workspace made wrong, what changed or None
    when there was nothing of that kind to change) for the empty and the
    perturbed deliverables; None when making them failed."""
    made = []
    try:
        checks = bundle.answer()["checks"]
        for name, make in _wrong_kinds():
            wrong = directory / name
            copy_tree_safely(workspace, wrong)
            made.append((name, wrong, make(wrong, checks, sandbox)))
    except Exception:  # an answer key the verifier may yet reject; raised again if it passes the oracle
        return None
    return made


def _wrong_kinds() -> tuple[tuple[str, Callable[[Path, list[dict], Sandbox], str | None]], ...]:
    return (("empty", _empty_deliverables), ("perturbed", _perturb_deliverable))


def _empty_deliverables(workspace: Path, checks: list[dict], sandbox: Sandbox) -> str | None:
    """Every file deliverable present but empty."""
    paths = sorted({c["path"] for c in checks if c.get("path") and c.get("type") != "python_imports"})
    for path in paths:
        target = workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"")
    return f"{', '.join(paths)} empty" if paths else None


def _perturb_deliverable(workspace: Path, checks: list[dict], sandbox: Sandbox) -> str | None:
    """One value of the oracle's deliverable made wrong, the file otherwise
    intact: a verifier that only checks the deliverable exists, parses, or
    has the right shape passes this; a correct one does not."""
    for check in checks:
        kind, path = check.get("type"), check.get("path")
        if kind == "python_imports":
            for module in sorted(check.get("defines", {})):
                target = workspace / check.get("root", "") / (module.replace(".", "/") + ".py")
                if not target.is_file():
                    target = target.with_suffix("") / "__init__.py"
                if target.is_file() and not target.is_symlink():
                    with target.open("a", encoding="utf-8") as handle:
                        handle.write(f"\nimport {module.split('.')[0]}.clawloop_module_nobody_wrote\n")
                    return f"{module} imports a module that does not exist"
            continue
        if kind == "sqlite_records":
            change = _perturb_sqlite(sandbox, workspace, check)
            if change is not None:
                return change
            continue
        if kind == "tree":
            for rel in sorted(check.get("files", {})):
                target = workspace / rel
                if target.is_file() and not target.is_symlink():
                    target.write_bytes(target.read_bytes() + b"\n")
                    return f"{rel} gained a byte"
            continue
        target = workspace / path if path else None
        if target is None or not target.is_file() or target.is_symlink():
            continue
        text = target.read_text(encoding="utf-8", errors="replace")
        if kind == "number":
            wrong = Decimal(str(check["expected"])) + 1 + 2 * Decimal(str(check.get("tolerance", 0)))
            target.write_text(f"{wrong}\n", encoding="utf-8")
            return f"{path} holds {wrong}"
        if kind == "text":
            target.write_text(f"not {text}", encoding="utf-8")
            return f"{path} has words added"
        if kind == "lines":
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                target.write_text("\n".join(lines[:-1] + [lines[-1] + "_wrong"]) + "\n", encoding="utf-8")
                return f"{path}: its last line changed"
            continue
        if kind == "contains":
            for phrase in check["expected"]:
                match = re.search(re.escape(str(phrase)), text, re.IGNORECASE)
                if match:
                    target.write_text(text[: match.start()] + text[match.end():], encoding="utf-8")
                    return f"{path} no longer names {phrase}"
            continue
        if kind == "config_values" and check.get("format") == "json":
            change = _perturb_json_config(target, text, check["expected"])
            if change is not None:
                return f"{path}: {change} changed"
            continue
        if kind == "config_values":
            lines = text.splitlines(keepends=True)
            for key, value in sorted(check["expected"].items()):
                option = re.compile(r'^\s*"?' + re.escape(key.rsplit(".", 1)[-1]) + r'"?\s*[=:]')
                for index, line in enumerate(lines):
                    changed = _replace_value(line, value) if option.match(line) else None
                    if changed is not None:
                        lines[index] = changed
                        target.write_text("".join(lines), encoding="utf-8")
                        return f"{path}: {key} changed"
            continue
        if kind in ("csv_records", "json_records"):
            keys = set(check.get("key", []))
            for record in check["expected"]:
                for column, value in record.items():
                    changed = None if column in keys or value is None else _replace_value(text, value)
                    if changed is not None:
                        target.write_text(changed, encoding="utf-8")
                        return f"{path}: {column} of one record changed"
    return None


def _perturb_json_config(target: Path, text: str, expected: dict) -> str | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for key, value in sorted(expected.items()):
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            if isinstance(value, bool):
                node[last] = not value
            elif isinstance(value, (int, float)):
                node[last] = value + 7
            else:
                node[last] = f"{value}x"
            target.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            return key
    return None


_SQLITE_PERTURB = """
import sqlite3, sys
path, table, column, where, key_values = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
t, c = ['"' + name.replace('"', '""') + '"' for name in (table, column)]
sql = ("UPDATE %s SET %s = CASE WHEN typeof(%s) IN ('integer', 'real') THEN %s + 7 ELSE coalesce(%s, '') || 'x' END WHERE %s"
       % (t, c, c, c, c, where))
con = sqlite3.connect(path)
print(con.execute(sql, key_values).rowcount)
con.commit()
"""


def _perturb_sqlite(sandbox: Sandbox, workspace: Path, check: dict) -> str | None:
    """One cell of one keyed row changed, inside the sandbox (the database is
    the oracle's output, and SQLite parses it)."""
    target = workspace / check["path"]
    if not target.is_file() or target.is_symlink():
        return None
    keys = list(check.get("key", []))
    column = next((c for c in check["columns"] if c not in keys), None)
    if not check["expected"] or column is None:
        return None
    record = check["expected"][0]
    key_sql = " AND ".join('CAST("%s" AS TEXT) = ?' % k.replace('"', '""') for k in keys)
    outcome = sandbox.run(
        ["python3", "-I", "-c", _SQLITE_PERTURB, f"/workspace/{check['path']}", check["table"], column, key_sql,
         *[str(record[k]) for k in keys]],
        [Mount(workspace, "/workspace", writable=True)], cwd="/workspace", limits=ORACLE_LIMITS)
    if outcome.exit_code == 0 and outcome.output.strip().endswith("1"):
        return f"{check['path']}: {column} of one {check['table']} row changed"
    return None


def _replace_value(text: str, value: Any) -> str | None:
    """`text` with the first occurrence of `value` (a number as a number,
    whatever its formatting) replaced by a different value; None if absent."""
    number = _decimal(value) if isinstance(value, (int, float)) else None
    if number is not None:
        for match in _NUMBER_TOKEN.finditer(text):
            if _decimal(match.group()) == number:
                return text[: match.start()] + str(number + 7) + text[match.end():]
        return None
    pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(str(value)) + r"(?![A-Za-z0-9_])")
    match = pattern.search(text)
    return None if match is None else text[: match.start()] + f"{value}x" + text[match.end():]


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
    answer = bundle.answer()
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
        elif kind == "config_values":
            yield from check["expected"].values()
        elif kind in ("csv_records", "json_records", "sqlite_records"):
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
