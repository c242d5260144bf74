"""Diagnosis: why did the trained policy fail its held-out tasks?

Each failed trajectory gets a structured summary (failure point, root cause,
missing capability) grounded in evidence the harness extracts
deterministically: the commands and their exit codes, the last output, and
which verifier checks failed. The embedded 135M model cannot write valid
summaries of its own, so the evidence rules classify; each summary records
what produced it, leaving room for a capable loop model to summarize later.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

PRODUCED_BY_EVIDENCE = "evidence_rules"

MISSING_CAPABILITY = {
    "format_violation": "reply with exactly one complete command in a ```bash block",
    "wrong_tool": "pick a command that exists in the sandbox and terminates on its own",
    "misread_task": "use the exact file names and deliverable path the instruction gives",
    "edit_error": "write a command that runs without errors before relying on its result",
    "premature_termination": "produce the deliverable before ending the episode",
    "computation_error": "compute the requested value under the contract's rules and check it before writing",
    "environment_error": "none: the environment failed, not the agent",
}
ROOT_CAUSE_PHRASE = {
    "format_violation": "replied without a complete command",
    "wrong_tool": "used a command that is missing or never finished",
    "misread_task": "referred to files or paths that do not exist",
    "edit_error": "ran a command that failed",
    "premature_termination": "ended without writing the deliverable",
    "computation_error": "wrote a deliverable with wrong content",
    "environment_error": "hit an environment failure",
}
_MISSING_WORDS = ("missing", "not found", "does not exist", "no such file", "absent")


@dataclass(frozen=True)
class FailureSummary:
    summary_id: str
    rollout_id: str
    task_id: str
    capability_id: str
    failure_turn: int
    failure_action: str
    root_cause: str
    missing_capability: str
    evidence: dict[str, Any]
    produced_by: str = PRODUCED_BY_EVIDENCE


def extract_evidence(rollout: Mapping[str, Any]) -> dict[str, Any]:
    """The facts about a failed rollout that a summary may rest on."""
    checks = json.loads(rollout["verifier_checks"]) if isinstance(rollout["verifier_checks"], str) else rollout["verifier_checks"]
    failed = [c for c in checks if not c.get("passed")]
    deliverable_missing = any(any(w in str(c.get("detail", "")).lower() for w in _MISSING_WORDS) for c in failed)
    return {
        "commands": list(rollout["commands"]),
        "exit_codes": list(rollout["exit_codes"]),
        "last_output": str(rollout["last_output"])[-400:],
        "submitted": bool(rollout["submitted"]),
        "failed_checks": [{"name": c.get("name"), "detail": str(c.get("detail", ""))[:200]} for c in failed],
        "deliverable_missing": deliverable_missing,
    }


def classify_failure(evidence: Mapping[str, Any]) -> tuple[str, int, str]:
    """(root cause, failure turn, failure action) from the evidence alone."""
    commands, exit_codes = evidence["commands"], evidence["exit_codes"]
    if not commands or all(c == "" for c in commands):
        return "format_violation", 0, "(no command)"
    for turn, (command, code) in enumerate(zip(commands, exit_codes)):
        if command == "":
            continue
        if code is None:
            return "wrong_tool", turn, command
        if code == 127:
            return "wrong_tool", turn, command
        if code != 0:
            lowered = evidence["last_output"].lower() if turn == len(commands) - 1 else ""
            if "no such file" in lowered:
                return "misread_task", turn, command
            return "edit_error", turn, command
    last_turn = max(i for i, c in enumerate(commands) if c != "")
    if evidence["deliverable_missing"]:
        cause = "premature_termination" if evidence["submitted"] or len(commands) == 1 else "misread_task"
        return cause, last_turn, commands[last_turn]
    return "computation_error", last_turn, commands[last_turn]


def summarize_failures(rollouts: Iterable[Mapping[str, Any]], capability_of: Mapping[str, str]) -> list[FailureSummary]:
    """One summary per scored rollout with reward 0."""
    summaries = []
    for rollout in rollouts:
        if rollout["status"] != "scored" or rollout["reward"] != 0.0:
            continue
        evidence = extract_evidence(rollout)
        cause, turn, action = classify_failure(evidence)
        summaries.append(
            FailureSummary(
                summary_id=f"{rollout['rollout_id']}.summary",
                rollout_id=rollout["rollout_id"],
                task_id=rollout["task_id"],
                capability_id=capability_of[rollout["task_id"]],
                failure_turn=turn,
                failure_action=action[:300],
                root_cause=cause,
                missing_capability=MISSING_CAPABILITY[cause],
                evidence=evidence,
            )
        )
    return summaries


@dataclass
class DiagnosisPattern:
    pattern_id: str
    capability_id: str
    root_cause: str
    count: int
    share: float
    description: str
    summary_ids: list[str] = field(default_factory=list)
    example_rollout_ids: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)


def aggregate_patterns(summaries: list[FailureSummary], round_key: str, examples: int = 3) -> list[DiagnosisPattern]:
    """Group by capability (skill category), then by root cause; most frequent first."""
    groups: dict[tuple[str, str], list[FailureSummary]] = {}
    for summary in summaries:
        groups.setdefault((summary.capability_id, summary.root_cause), []).append(summary)
    total = len(summaries)
    patterns = []
    for (capability, cause), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        action, _ = Counter(m.failure_action for m in members).most_common(1)[0]
        patterns.append(
            DiagnosisPattern(
                pattern_id=f"{round_key}.{capability}.{cause}",
                capability_id=capability,
                root_cause=cause,
                count=len(members),
                share=len(members) / total,
                description=f"{capability}: {ROOT_CAUSE_PHRASE[cause]} (most common action: `{action}`)",
                summary_ids=[m.summary_id for m in members],
                example_rollout_ids=[m.rollout_id for m in members[:examples]],
                task_ids=sorted({m.task_id for m in members}),
            )
        )
    return patterns


def render_report(
    round_key: str,
    patterns: list[DiagnosisPattern],
    pass_rate_by_capability: Mapping[str, tuple[int, int]],
    failures: int,
) -> str:
    """The diagnosis report as markdown, for people (shown in the Dagster UI)."""
    lines = [f"# Diagnosis report, {round_key}", ""]
    lines += ["## Held-out pass rate after training, by capability", "", "| capability | passed | rollouts | rate |", "|---|---|---|---|"]
    for capability, (passed, total) in sorted(pass_rate_by_capability.items()):
        rate = f"{passed / total:.1%}" if total else "n/a"
        lines.append(f"| {capability} | {passed} | {total} | {rate} |")
    lines += ["", f"## Failure patterns ({failures} failed trajectories)", ""]
    if not patterns:
        lines.append("No failed trajectories on the held-out split.")
    else:
        lines += ["| pattern | count | share | example trajectories |", "|---|---|---|---|"]
        for p in patterns:
            lines.append(f"| {p.description} | {p.count} | {p.share:.0%} | {', '.join(p.example_rollout_ids)} |")
    return "\n".join(lines) + "\n"
