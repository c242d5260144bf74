"""Diagnosis: why did the trained policy fail its held-out tasks?

Each failed trajectory gets a structured summary (failure point, root cause
from a fixed taxonomy, missing capability in a sentence) grounded in evidence
the harness extracts deterministically: the commands and their exit codes,
the last output, which verifier checks failed, whether the deliverable
exists. The loop model itself is asked for each summary as JSON, validated
against the schema and the evidence, retried when invalid; where it cannot
produce valid ones (the embedded 135M model cannot), the evidence rules
classify on their own. Every summary records what produced it.

Summaries are then grouped by skill and root cause, and clustered by
meaning within a group (sentence embeddings of the failing command, its
error and the failed check, with file names and values abstracted away).
The skill is what the task asked for: at a warm-up level the operation
(copying a file, counting characters, ...), which every family hosts on its
own files, so that one habit failing across families is one pattern; at
level 0 and up the capability (the family) itself.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from clawloop_assets.synthesis.generators.generator_common import WARMUP_OPERATIONS
from clawloop_assets.task_bundle import warmup_operation
from resources.schemas import ROOT_CAUSES

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
# The warm-up operations (generator_common.OPERATIONS) as a plan line names them.
OPERATION_PHRASE = {
    "append_word": "appending a word to a file",
    "count_characters": "counting a file's characters",
    "copy_file": "copying a file",
}


def task_skill(capability_id: str, difficulty: int, bundle_path: str | None) -> str:
    """What a task asks for: at a warm-up level the operation its meta.json
    names (one_step_task writes it), else its capability. The meta.json is a
    generator's output: an operation the level does not have (or none, or a
    bundle since removed) falls back to the capability, so nothing but a
    known operation name reaches a pattern id or the report."""
    if difficulty in WARMUP_OPERATIONS:
        try:
            operation = warmup_operation(bundle_path)
        except (OSError, ValueError, AttributeError):
            operation = None
        if operation in WARMUP_OPERATIONS[difficulty]:
            return operation
    return capability_id


def skill_phrase(skill: str) -> str:
    """A skill as the report and the plan read it: an operation in words, a capability by its id."""
    return OPERATION_PHRASE.get(skill, skill)


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
    phase: str = "heldout_after"  # the rollouts it summarizes (see diagnosis_report)
    skill: str = ""  # what the task asked for (task_skill), the group of its pattern; summarize_failures sets it


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


def summarize_failures(rollouts: Iterable[Mapping[str, Any]], capability_of: Mapping[str, str],
                       skill_of: Mapping[str, str] | None = None) -> list[FailureSummary]:
    """One summary per scored rollout with reward 0, with its task's
    capability and skill (`skill_of`, task id -> task_skill; the capability
    where not given)."""
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
                phase=rollout.get("phase", "heldout_after"),
                skill=(skill_of or {}).get(rollout["task_id"], capability_of[rollout["task_id"]]),
            )
        )
    return summaries


# --- Summaries by the loop model ---------------------------------------------

SUMMARY_KEYS = ("failure_turn", "failure_action", "root_cause", "missing_capability")
SUMMARY_PROMPT = (
    "You review a shell agent's failed attempt at a task. Answer with one JSON object and nothing else, with "
    'the keys "failure_turn" (the number of the turn where it went wrong), "failure_action" (the command of '
    'that turn, copied exactly), "root_cause" (one of: ' + ", ".join(ROOT_CAUSES) + ') and "missing_capability" '
    "(one sentence: what the agent could not do)."
)
# The reply is pre-filled with this, so the model starts inside the object.
SUMMARY_PREFIX = '{"failure_turn": '


class InvalidSummary(ValueError):
    """A model's summary that is not valid JSON, breaks the schema, or
    contradicts the evidence."""


def summary_messages(instruction: str, evidence: Mapping[str, Any]) -> list[dict[str, str]]:
    turns = [f"turn {i}: `{command or '(no command)'}` exit code {code}"
             for i, (command, code) in enumerate(zip(evidence["commands"], evidence["exit_codes"]))]
    checks = [f"{c['name']}: {c['detail']}" for c in evidence["failed_checks"]] or ["(none)"]
    facts = "\n".join([
        f"Task: {instruction.strip()[:800]}", "Turns:", *turns,
        f"Last output: {evidence['last_output'].strip()[-300:] or '(empty)'}",
        "Failed checks: " + "; ".join(checks),
        f"Deliverable exists: {'no' if evidence['deliverable_missing'] else 'yes'}",
    ])
    return [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": facts}]


def parse_model_summary(text: str, evidence: Mapping[str, Any]) -> dict[str, Any]:
    """The summary in `text` (the reply, prefix included), checked against the
    schema and grounded in the evidence, or InvalidSummary naming what is wrong."""
    start = text.find("{")
    if start < 0:
        raise InvalidSummary("no JSON object in the reply")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise InvalidSummary(f"not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict) or set(value) != set(SUMMARY_KEYS):
        raise InvalidSummary(f"keys must be exactly {list(SUMMARY_KEYS)}")
    turn, action, cause, missing = (value[k] for k in SUMMARY_KEYS)
    commands = evidence["commands"]
    if not isinstance(turn, int) or isinstance(turn, bool) or not 0 <= turn < max(len(commands), 1):
        raise InvalidSummary(f"failure_turn {turn!r} is not a turn of this trajectory (0..{max(len(commands), 1) - 1})")
    actual = commands[turn] if commands and commands[turn] else "(no command)"
    if not isinstance(action, str) or action.strip() != actual.strip():
        raise InvalidSummary(f"failure_action is not the command of turn {turn}")
    if cause not in ROOT_CAUSES:
        raise InvalidSummary(f"root_cause {cause!r} is not in the taxonomy")
    # Causes the evidence rules out: a deliverable that was never written cannot
    # hold a wrong computation, and one that exists was not skipped.
    if cause == "computation_error" and evidence["deliverable_missing"]:
        raise InvalidSummary("computation_error, but the deliverable does not exist")
    if cause == "premature_termination" and not evidence["deliverable_missing"]:
        raise InvalidSummary("premature_termination, but the deliverable exists")
    if not isinstance(missing, str) or not 10 <= len(missing.strip()) <= 300 or "\n" in missing.strip():
        raise InvalidSummary("missing_capability must be one sentence of 10 to 300 characters")
    return {"failure_turn": turn, "failure_action": actual[:300], "root_cause": cause,
            "missing_capability": missing.strip()}


# (instructions, evidences, attempt) -> one reply text per failure
Summarizer = Callable[[Sequence[str], Sequence[Mapping[str, Any]], int], list[str]]


@dataclass
class ModelSummaryStats:
    """How the loop model did: shown in the report."""

    producer: str
    asked: int = 0
    valid: int = 0
    probe_only: bool = False
    rejections: Counter = field(default_factory=Counter)


def summarize_with_model(
    summaries: list[FailureSummary],
    instructions: Mapping[str, str],
    summarizer: Summarizer,
    producer: str,
    attempts: int = 2,
    probe: int = 4,
) -> tuple[list[FailureSummary], ModelSummaryStats]:
    """Replace evidence-rule summaries with the loop model's where it writes
    valid ones. A probe of the first `probe` failures goes first: a model that
    gets none of them right is not asked about the rest (the embedded one
    never does, and asking costs minutes of CPU)."""
    stats = ModelSummaryStats(producer)
    out = list(summaries)

    def ask(indices: list[int]) -> None:
        pending = list(indices)
        for attempt in range(attempts):
            if not pending:
                return
            replies = summarizer([instructions[out[i].task_id] for i in pending],
                                 [out[i].evidence for i in pending], attempt)
            still = []
            for i, reply in zip(pending, replies):
                try:
                    fields = parse_model_summary(reply, out[i].evidence)
                except InvalidSummary as exc:
                    stats.rejections[str(exc).split(":")[0][:80]] += 1
                    still.append(i)
                    continue
                out[i] = replace(out[i], produced_by=producer, **fields)
                stats.valid += 1
            pending = still

    head = list(range(min(probe, len(out))))
    ask(head)
    stats.asked = len(head)
    if stats.valid == 0:
        stats.probe_only = True
        return out, stats
    rest = list(range(len(head), len(out)))
    ask(rest)
    stats.asked += len(rest)
    return out, stats


def session_summarizer(session, seed: int, max_new_tokens: int = 160, batch: int = 32) -> Summarizer:
    """A Summarizer backed by a loaded policy session (the round's trained policy)."""
    from resources.policy import SamplingParams

    def summarize(instructions, evidences, attempt):
        prompts = [session.chat_tokens(summary_messages(i, e), add_generation_prompt=True) + session.encode(SUMMARY_PREFIX)
                   for i, e in zip(instructions, evidences)]
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.7, stop=("}",), seed=seed + attempt)
        replies = []
        for start in range(0, len(prompts), batch):
            replies += [SUMMARY_PREFIX + samples[0].text for samples in session.sample(prompts[start:start + batch], 1, params)]
        return replies

    return summarize


# --- Patterns -------------------------------------------------------------------


@dataclass
class DiagnosisPattern:
    pattern_id: str
    # The capability of its tasks; None for a warm-up skill whose failures span families.
    capability_id: str | None
    root_cause: str
    count: int
    share: float
    description: str
    evidence: str  # the most central member's command, error and failed check
    produced_by: str  # "evidence_rules: 12, loop_model:<id>: 3"
    summary_ids: list[str] = field(default_factory=list)
    example_rollout_ids: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    skill: str = ""  # what its tasks asked for (task_skill): the group it was clustered in


def _abstract(text: str) -> str:
    """Text with quoted strings, file names, ids and numbers replaced by
    placeholders: two failures mean the same when they do the same thing,
    whatever the domain's file names and values."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "TEXT", text)
    text = re.sub(r"[\w./-]*\.(csv|txt|json|md|db|ini|env|py|log|sh|yaml|toml)\b", "FILE", text)
    text = re.sub(r"\b[A-Z]+-\d+\b|\b\d[\d.,]*\b", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:160]


def meaning_text(summary: FailureSummary) -> str:
    """What a failure did, in words that embed well for clustering."""
    evidence = summary.evidence
    error = (evidence["last_output"].strip().splitlines() or [""])[-1]
    check = evidence["failed_checks"][0]["detail"] if evidence["failed_checks"] else ""
    action = summary.failure_action.splitlines()[0] if summary.failure_action else ""
    # Plain parts, no field labels: shared labels pull every text together.
    parts = [summary.missing_capability] if summary.produced_by != PRODUCED_BY_EVIDENCE else []
    parts += [_abstract(part) for part in (action, error, check)]
    return ". ".join(part for part in parts if part)


# texts -> unit vectors (clawloop_assets.diagnosis.sentence_embeddings.embed)
Embedder = Callable[[Sequence[str]], Any]
# Cosine similarity to join a cluster. Measured on 1,016 failed validation
# rollouts of the embedded model (68 capability x cause groups): 0.6 gave 255
# clusters, 88 of them with 3 or more members (0.5: 162 and 77, merging a
# copied input with an off-by-some count; 0.7: 401 and 87, splitting the
# same mistake on different files). tests/test_diagnosis.py pins the split.
CLUSTER_THRESHOLD = 0.6


def aggregate_patterns(
    summaries: list[FailureSummary],
    round_key: str,
    embed: Embedder | None = None,
    threshold: float = CLUSTER_THRESHOLD,
    examples: int = 3,
) -> list[DiagnosisPattern]:
    """Group by skill (what the tasks asked for: the operation at a warm-up
    level, else the capability), then by root cause, then by meaning (with
    `embed`); most frequent first."""
    from clawloop_assets.diagnosis.sentence_embeddings import cluster

    groups: dict[tuple[str, str], list[FailureSummary]] = {}
    for summary in summaries:
        groups.setdefault((summary.skill, summary.root_cause), []).append(summary)
    total = len(summaries)
    patterns = []
    for (skill, cause), members in groups.items():
        texts = [meaning_text(m) for m in members]
        if embed is None:
            clusters = {0: list(range(len(members)))}
            central = {0: Counter(texts).most_common(1)[0][0]}
        else:
            vectors = embed(texts)
            clusters = {}
            for index, label in enumerate(cluster(vectors, threshold)):
                clusters.setdefault(label, []).append(index)
            central = {}
            for label, indices in clusters.items():
                centroid = vectors[indices].mean(0)
                central[label] = texts[max(indices, key=lambda i: float(vectors[i] @ centroid))]
        ranked = sorted(clusters.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        for rank, (label, indices) in enumerate(ranked):
            group = [members[i] for i in indices]
            example = next(m for m in group if meaning_text(m) == central[label])
            producers = Counter(m.produced_by for m in group)
            capabilities = {m.capability_id for m in group}
            command = example.failure_action.splitlines()[0][:80] if example.failure_action else ""
            patterns.append(DiagnosisPattern(
                pattern_id=f"{round_key}.{skill}.{cause}.{rank}",
                capability_id=capabilities.pop() if len(capabilities) == 1 else None,
                skill=skill,
                root_cause=cause,
                count=len(group),
                share=len(group) / total,
                description=f"{skill_phrase(skill)} fails: {ROOT_CAUSE_PHRASE[cause]}, e.g. `{command}`",
                evidence=central[label],
                produced_by=", ".join(f"{p}: {n}" for p, n in sorted(producers.items())),
                summary_ids=[m.summary_id for m in group],
                example_rollout_ids=[m.rollout_id for m in group[:examples]],
                task_ids=sorted({m.task_id for m in group}),
            ))
    return sorted(patterns, key=lambda p: (-p.count, p.pattern_id))


PHASE_MEANING = {
    "heldout_after": "the trained policy on the held-out split E_k",
    "validation": "validation rollouts of candidates the input policy never solved",
}


def render_report(
    round_key: str,
    patterns: list[DiagnosisPattern],
    pass_rate_by_skill: Mapping[str, tuple[int, int]],
    failures: int,
    model_stats: ModelSummaryStats | None = None,
    sources: Mapping[str, int] | None = None,
) -> str:
    """The diagnosis report as markdown, for people (shown in the Dagster UI)."""
    lines = [f"# Diagnosis report, {round_key}", ""]
    if sources:
        lines += ["Failures diagnosed: " + "; ".join(f"{n} from {PHASE_MEANING.get(p, p)}" for p, n in sorted(sources.items())), ""]
    lines += ["## Who wrote the failure summaries", ""]
    if model_stats is None:
        lines.append(f"All {failures} by the evidence rules (the loop model was not asked).")
    elif model_stats.probe_only:
        reasons = "; ".join(f"{r} ({n})" for r, n in model_stats.rejections.most_common(3)) or "none"
        lines.append(f"The loop model ({model_stats.producer}) wrote no valid summary for the {model_stats.asked} "
                     f"failures of the probe (rejected: {reasons}), so the evidence rules wrote all {failures}.")
    else:
        lines.append(f"The loop model ({model_stats.producer}) wrote {model_stats.valid} valid summaries of "
                     f"{model_stats.asked} asked; the evidence rules wrote the other {failures - model_stats.valid}.")
    lines.append("")
    lines += ["## Held-out pass rate after training, by skill", "",
              "The skill is what a task asked for: the operation at a warm-up level, else the capability.", "",
              "| skill | passed | rollouts | rate |", "|---|---|---|---|"]
    for skill, (passed, total) in sorted(pass_rate_by_skill.items()):
        rate = f"{passed / total:.1%}" if total else "n/a"
        lines.append(f"| {skill_phrase(skill)} | {passed} | {total} | {rate} |")
    lines += ["", f"## Failure patterns ({failures} failed trajectories)", ""]
    if not patterns:
        lines.append("No failed trajectories on the held-out split.")
    else:
        lines += ["| pattern | count | share | evidence | summaries by | example trajectories | tasks |",
                  "|---|---|---|---|---|---|---|"]
        for p in patterns:
            evidence = p.evidence.replace("|", "\\|").replace("`", "'")
            tasks = ", ".join(p.task_ids[:3]) + (f" (+{len(p.task_ids) - 3})" if len(p.task_ids) > 3 else "")
            lines.append(f"| {p.description} | {p.count} | {p.share:.0%} | {evidence} | {p.produced_by} | "
                         f"{', '.join(p.example_rollout_ids)} | {tasks} |")
    return "\n".join(lines) + "\n"


def rejection_kind(reason: str) -> str:
    """A rejection reason without its particulars: "leakage: answer value 12
    appears in instruction.md" -> "leakage"."""
    return reason.split(":", 1)[0].strip()
