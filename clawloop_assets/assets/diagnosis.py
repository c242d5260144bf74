"""Phase 3: held-out rollouts before and after training, the diagnosis report,
and the round summary."""

import json
from collections import Counter

import dagster as dg
import polars as pl

from clawloop_assets.assets.common import (
    ROLLOUTS_POOL,
    WAREHOUSE_WRITER_POOL,
    collect_rollouts,
    record_cost,
    rollout_metadata,
)
from clawloop_assets.assets.evaluation import evaluation
from clawloop_assets.assets.training import policy_checkpoint, training_gain
from clawloop_assets.assets.validation import task_splits
from clawloop_assets.cost import measure
from clawloop_assets.diagnosis import sentence_embeddings
from clawloop_assets.diagnosis.failures import (
    aggregate_patterns,
    rejection_kind,
    render_report,
    session_summarizer,
    summarize_failures,
    summarize_with_model,
    task_skill,
)
from clawloop_assets.evaluation.fixed_set import (
    ERROR_STATUSES,
    level_figures,
    own_task_levels,
    pass_at_1,
    pass_at_1_by_level,
    rollout_errors,
)
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import round_partitions
from clawloop_assets.reporting.lineage import pattern_lineage_table
from clawloop_assets.reporting.round_history import history_metadata, round_history, validation_effort
from clawloop_assets.round_state import (
    input_policy,
    load_bundles,
    require_rows,
    round_policy,
    split_task_ids,
)
from clawloop_assets.synthesis import catalogs
from resources import paths
from resources.policy import PolicyModel
from resources.sandbox import Sandbox
from resources.warehouse import Warehouse, table_frame

GROUP = "diagnosis"


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=ROLLOUTS_POOL, deps=[task_splits])
def heldout_baseline_rollouts(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox,
                              policy: PolicyModel, loop: LoopConfig) -> dg.MaterializeResult:
    """The round's input policy on E_k: the 'before' of the held-out pass rate."""
    key = context.partition_key
    ref = input_policy(warehouse, policy, key)
    rows, cost = collect_rollouts(context, warehouse, sandbox, policy, ref, split_task_ids(warehouse, key, "heldout"),
                                  loop.heldout_samples, "heldout_before", loop.round_seed(key, "heldout"), loop)
    return dg.MaterializeResult(metadata=rollout_metadata(rows, cost, ref))


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=ROLLOUTS_POOL, deps=[policy_checkpoint, heldout_baseline_rollouts])
def diagnosis_rollouts(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox,
                       policy: PolicyModel, loop: LoopConfig) -> dg.MaterializeResult:
    """The trained policy on E_k, with the same seeds and sample count as the baseline."""
    key = context.partition_key
    ref = round_policy(warehouse, key, "policy")
    rows, cost = collect_rollouts(context, warehouse, sandbox, policy, ref, split_task_ids(warehouse, key, "heldout"),
                                  loop.heldout_samples, "heldout_after", loop.round_seed(key, "heldout"), loop)
    return dg.MaterializeResult(metadata=rollout_metadata(rows, cost, ref))


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[diagnosis_rollouts])
def diagnosis_report(context: dg.AssetExecutionContext, warehouse: Warehouse, policy: PolicyModel,
                     loop: LoopConfig) -> dg.MaterializeResult:
    """Failure summaries of the trained policy on E_k (by the loop model where it
    writes valid ones, else by the evidence rules), clustered into patterns."""
    key = context.partition_key
    with measure("diagnosis_report") as cost:
        rollouts = warehouse.read("rollouts", {"round": key, "phase": "heldout_after"})
        tasks = warehouse.read("tasks", {"round": key})
        capability_of = dict(zip(tasks["task_id"], tasks["capability_id"]))
        # What each task asked for: the operation at a warm-up level, else the capability.
        skill_of = {row["task_id"]: task_skill(row["capability_id"], row["difficulty"], row["bundle_path"])
                    for row in tasks.iter_rows(named=True)}
        diagnosed = rollouts
        if loop.diagnose_unsolved_candidates:
            admissions = warehouse.read("admissions", {"round": key})
            unsolved = set(admissions.filter(pl.col("pass_count") == 0)["task_id"]) if admissions.height else set()
            validation = warehouse.read("rollouts", {"round": key, "phase": "validation"})
            diagnosed = pl.concat([rollouts, validation.filter(pl.col("task_id").is_in(sorted(unsolved)))])
        summaries = summarize_failures(diagnosed.iter_rows(named=True), capability_of, skill_of)
        model_stats = None
        if loop.model_failure_summaries and summaries:
            ref = round_policy(warehouse, key, "policy")
            bundles = load_bundles(warehouse, key, sorted({s.task_id for s in summaries}))
            instructions = {b.task_id: b.instruction for b in bundles}
            session = policy.load(ref.path)
            try:
                summaries, model_stats = summarize_with_model(
                    summaries, instructions, session_summarizer(session, loop.round_seed(key, "diagnosis")),
                    f"loop_model:{ref.checkpoint_id}", loop.summary_attempts, loop.summary_probe)
            finally:
                session.close()
            context.log.info(f"loop model summaries: {model_stats.valid} valid of {model_stats.asked} asked")
        patterns = aggregate_patterns(summaries, key, embed=sentence_embeddings.embed)
        scored = rollouts.filter(pl.col("status") == "scored").with_columns(
            skill=pl.col("task_id").replace_strict(skill_of))
        by_skill = {row["skill"]: (int(row["passed"]), int(row["total"])) for row in scored.group_by("skill").agg(
            passed=pl.col("reward").sum(), total=pl.len()).iter_rows(named=True)}
        report = render_report(key, patterns, by_skill, len(summaries), model_stats,
                               Counter(s.phase for s in summaries))
    summary_rows = [{"round": key, **{k: v for k, v in s.__dict__.items() if k != "evidence"}, "evidence": json.dumps(s.evidence)}
                    for s in summaries]
    pattern_rows = [{"round": key, **p.__dict__} for p in patterns]
    warehouse.replace("failure_summaries", table_frame("failure_summaries", summary_rows), {"round": key})
    warehouse.replace("diagnosis_patterns", table_frame("diagnosis_patterns", pattern_rows), {"round": key})
    record_cost(warehouse, key, cost)
    path = paths.round_dir(key) / "diagnosis_report.md"
    path.write_text(report)
    return dg.MaterializeResult(metadata={
        "report_id": f"{key}.diagnosis_report",
        "failures": len(summaries),
        "patterns": len(patterns),
        "root_causes": dict(Counter(s.root_cause for s in summaries)),
        "summaries_by": dict(Counter(s.produced_by for s in summaries)),
        "report": dg.MetadataValue.md(report),
        # Each pattern -> its summaries, trajectories, tasks, generators, capability and domains (joined on ids),
        # each level linked to this round's page of the asset holding it in the UI.
        "lineage": dg.MetadataValue.md(pattern_lineage_table(warehouse, key)),
        "path": dg.MetadataValue.path(str(path)),
    })


def _pass_rate(rollouts: pl.DataFrame, phase: str) -> float | None:
    scored = rollouts.filter((pl.col("phase") == phase) & (pl.col("status") == "scored"))
    return round(float(scored["reward"].mean()), 4) if scored.height else None


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[diagnosis_report, training_gain, evaluation])
def round_summary(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """The round in numbers: summary.json, the round_summaries row, and the cost table."""
    key = context.partition_key
    tasks = require_rows(warehouse, "tasks", key, "candidate_tasks")
    checks = warehouse.read("agent_free_validations", {"round": key})
    admissions = warehouse.read("admissions", {"round": key})
    splits = warehouse.read("task_splits", {"round": key})
    rollouts = warehouse.read("rollouts", {"round": key})
    runs = {r["job"]: r for r in warehouse.read("training_runs", {"round": key}).iter_rows(named=True)}
    checkpoints = {r["kind"]: r for r in warehouse.read("checkpoints", {"round": key}).iter_rows(named=True)}
    if "policy" not in checkpoints:
        raise RuntimeError(f"{key} has no policy checkpoint: materialize policy_checkpoint first")
    patterns = warehouse.read("diagnosis_patterns", {"round": key})
    ledger = warehouse.read("cost_ledger", {"round": key})
    admitted = int(admissions["admitted"].sum()) if admissions.height else 0
    temperature = warehouse.read("rollout_temperatures", {"round": key})
    round_temperature = float(temperature["temperature"][0]) if temperature.height else None
    # The fixed evaluation set's figures (clawloop_assets/evaluation/fixed_set.py): pooled over every task of the
    # set, and per level of our own set; None before any evaluation rollout.
    evaluation_rollouts = rollouts.filter(pl.col("phase") == "evaluation")
    evaluated = pass_at_1(evaluation_rollouts)
    evaluated_ids = set(evaluation_rollouts["task_id"])
    evaluated_levels = pass_at_1_by_level(
        evaluation_rollouts, {t: level for t, level in own_task_levels().items() if t in evaluated_ids})
    summary = {
        "round": key,
        "candidates": tasks.height,
        "agent_free_passed": int(checks["passed"].sum()) if checks.height else 0,
        "rollouts": int((rollouts["phase"] == "validation").sum()),
        "admitted": admitted,
        "admission_rate": round(admitted / tasks.height, 4) if tasks.height else 0.0,
        **validation_effort(rollouts, admitted, round_temperature),
        "train_tasks": int((splits["split"] == "train").sum()),
        "heldout_tasks": int((splits["split"] == "heldout").sum()),
        "sft_examples": runs.get("sft", {}).get("examples", 0),
        "grpo_groups": _grpo_groups(runs),
        "candidates_by_capability": _candidates_by_capability(tasks, checks, admissions),
        "candidates_by_route": _candidates_by_route(tasks, checks, admissions, rollouts),
        "rejections": _rejections(tasks, checks),
        "train_pass_rate_before": _pass_rate(rollouts, "train_before"),
        "train_pass_rate_after": _pass_rate(rollouts, "train_after"),
        "heldout_pass_rate_before": _pass_rate(rollouts, "heldout_before"),
        "heldout_pass_rate_after": _pass_rate(rollouts, "heldout_after"),
        "evaluation_pass_at_1": evaluated.pass_at_1,
        "evaluation_ci_low": evaluated.ci_low,
        "evaluation_ci_high": evaluated.ci_high,
        "evaluation_tasks": evaluated.tasks,
        "evaluation_by_level": level_figures(evaluated_levels),
        # Harness errors (never scores) per phase, and their share of every rollout of the round.
        "rollout_errors": _rollout_errors_by_phase(rollouts),
        "rollout_error_rate": round(float(rollouts["status"].is_in(list(ERROR_STATUSES)).mean()), 4)
        if rollouts.height else 0.0,
        "patterns": [{"pattern_id": p["pattern_id"], "description": p["description"], "count": p["count"],
                      "share": round(p["share"], 4)} for p in patterns.sort("count", descending=True).iter_rows(named=True)],
        "seconds": {r["phase"]: round(r["wall_seconds"], 2) for r in ledger.iter_rows(named=True)},
        "policy_checkpoint_id": checkpoints["policy"]["checkpoint_id"],
        "input_checkpoint_id": checkpoints["sft"]["parent_checkpoint_id"],
        "diagnosis_report_id": f"{key}.diagnosis_report",
        "training": {job: {"status": r["status"], "reason": r["reason"], "examples": r["examples"]} for job, r in runs.items()},
    }
    summary["seconds"]["total"] = round(sum(summary["seconds"].values()), 2)
    path = paths.round_dir(key) / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    warehouse.replace("round_summaries", table_frame("round_summaries", [{"round": key, "summary": json.dumps(summary)}]), {"round": key})
    # Read after the write above, so this round is in its own history.
    history = round_history(warehouse, key)
    return dg.MaterializeResult(metadata={
        **{k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and v is not None},
        "summary": dg.MetadataValue.json(summary),
        "cost_by_phase": markdown_table(["phase", "wall s", "cpu s", "rollouts", "tokens"], [
            (r["phase"], round(r["wall_seconds"], 1), round(r["cpu_seconds"], 1), r["rollouts"], r["tokens"])
            for r in ledger.iter_rows(named=True)]),
        "path": dg.MetadataValue.path(str(path)),
        **history_metadata(history, paths.round_dir(key) / "rounds_plot.png"),
    })


def _rollout_errors_by_phase(rollouts: pl.DataFrame) -> dict[str, dict[str, int]]:
    """{phase: {error status: count}} for the phases that had any error."""
    out = {}
    for (phase,), frame in rollouts.group_by("phase") if rollouts.height else ():
        errors = {status: n for status, n in rollout_errors(frame).items() if n}
        if errors:
            out[phase] = errors
    return dict(sorted(out.items()))


def _candidates_by_capability(tasks: pl.DataFrame, checks: pl.DataFrame, admissions: pl.DataFrame) -> dict:
    """Per capability: candidates, built, passed agent-free validation, admitted."""
    passed = set(checks.filter(pl.col("passed"))["task_id"]) if checks.height else set()
    admitted = set(admissions.filter(pl.col("admitted"))["task_id"]) if admissions.height else set()
    out = {}
    for row in tasks.iter_rows(named=True):
        counts = out.setdefault(row["capability_id"], {"candidates": 0, "built": 0, "agent_free_passed": 0, "admitted": 0})
        counts["candidates"] += 1
        counts["built"] += row["build_status"] == "built"
        counts["agent_free_passed"] += row["task_id"] in passed
        counts["admitted"] += row["task_id"] in admitted
    return dict(sorted(out.items()))


def _candidates_by_route(tasks: pl.DataFrame, checks: pl.DataFrame, admissions: pl.DataFrame,
                         rollouts: pl.DataFrame) -> dict:
    """Per synthesis route (the ablation's unit): candidates, agent-free
    passes, admitted tasks and the held-out pass rate before and after training."""
    by_capability = _candidates_by_capability(tasks, checks, admissions)
    route_of_task = {t: catalogs.route_of(c) for t, c in zip(tasks["task_id"], tasks["capability_id"])}
    out = {}
    for capability, counts in by_capability.items():
        route = out.setdefault(catalogs.route_of(capability), {"candidates": 0, "agent_free_passed": 0, "admitted": 0})
        for name in route:
            route[name] += counts[name]
    scored = rollouts.filter(pl.col("status") == "scored").with_columns(
        route=pl.col("task_id").replace_strict(route_of_task, default=None))
    for name, route in out.items():
        for phase in ("heldout_before", "heldout_after"):
            mine = scored.filter((pl.col("route") == name) & (pl.col("phase") == phase))
            route[phase.replace("heldout", "heldout_pass_rate")] = round(float(mine["reward"].mean()), 4) if mine.height else None
    return dict(sorted(out.items()))


def _rejections(tasks: pl.DataFrame, checks: pl.DataFrame) -> dict[str, int]:
    """Candidates rejected before any rollout, counted per kind of reason."""
    reasons = tasks.filter(pl.col("build_status") == "failed")["build_error"].to_list()
    reasons += checks.filter(~pl.col("passed"))["reason"].to_list() if checks.height else []
    counts: dict[str, int] = {}
    for reason in reasons:
        kind = rejection_kind(reason or "unknown")
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _grpo_groups(runs: dict) -> int:
    run = runs.get("grpo")
    if not run or run["status"] != "trained":
        return 0
    metrics = json.loads(run["metrics"])
    return int(metrics["groups_used"])
