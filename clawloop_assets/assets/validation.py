"""Phase 1b: agent-free validation, the admission rollouts, the admission band
and the train / held-out split."""

from collections import Counter

import dagster as dg
import polars as pl

from clawloop_assets.assets.common import (
    ROLLOUTS_POOL,
    WAREHOUSE_WRITER_POOL,
    collect_rollouts,
    histogram_table,
    record_cost,
    rollout_metadata,
)
from clawloop_assets.assets.synthesis import candidate_tasks
from clawloop_assets.cost import measure
from clawloop_assets.harness.agent_loop import judged_reward
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import round_partitions
from clawloop_assets.round_state import (
    input_policy,
    require_rows,
    workdir,
)
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.admission import admission_is_final, decide_admission, split_tasks
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.policy import PolicyModel
from resources.sandbox import Sandbox
from resources.warehouse import Warehouse, table_frame

GROUP = "validation"


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[candidate_tasks])
def agent_free_validation(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox) -> dg.MaterializeResult:
    """Oracle passes its verifier (three times alike); the untouched workspace,
    empty and perturbed deliverables fail; nothing leaks."""
    key = context.partition_key
    tasks = require_rows(warehouse, "tasks", key, "candidate_tasks").filter(pl.col("build_status") == "built")
    scratch = workdir(key, "agent_free")
    rows = []
    with measure("agent_free_validation") as cost:
        for path in tasks["bundle_path"].to_list():
            result = validate_without_agent(sandbox, load_task_bundle(path), scratch)
            rows.append({"round": key, "task_id": result.task_id, "passed": result.passed,
                         "oracle_passed": result.oracle_passed, "untouched_failed": result.untouched_failed,
                         "leak_free": result.leak_free, "wrong_deliverables_failed": result.wrong_deliverables_failed,
                         "verifier_deterministic": result.verifier_deterministic, "reason": result.reason})
    warehouse.replace("agent_free_validations", table_frame("agent_free_validations", rows), {"round": key})
    record_cost(warehouse, key, cost)
    failed = [r for r in rows if not r["passed"]]
    return dg.MaterializeResult(metadata={
        "checked": len(rows),
        "passed": len(rows) - len(failed),
        "failure_rate": round(len(failed) / len(rows), 3) if rows else 0.0,
        "failures": markdown_table(["task", "reason"], [(r["task_id"], r["reason"]) for r in failed[:20]]),
    })


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=ROLLOUTS_POOL, deps=[agent_free_validation])
def validation_rollouts(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox,
                        policy: PolicyModel, loop: LoopConfig) -> dg.MaterializeResult:
    """N rollouts of the current policy on every task that passed agent-free validation."""
    key = context.partition_key
    checked = require_rows(warehouse, "agent_free_validations", key, "agent_free_validation")
    task_ids = checked.filter(pl.col("passed"))["task_id"].to_list()
    ref = input_policy(warehouse, policy, key)
    band = loop.admission_band()
    is_decided = (lambda done: admission_is_final([judged_reward(r) for r in done], band)) if loop.sequential_rollouts else None
    rows, cost = collect_rollouts(context, warehouse, sandbox, policy, ref, task_ids, loop.rollouts_per_task,
                                  "validation", loop.round_seed(key, "validation"), loop, is_decided)
    saved = len(task_ids) * loop.rollouts_per_task - rows.height
    return dg.MaterializeResult(metadata={**rollout_metadata(rows, cost, ref), "sequential": loop.sequential_rollouts,
                                          "rollouts_saved": saved})


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[validation_rollouts])
def admitted_tasks(context: dg.AssetExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.MaterializeResult:
    """Tasks the current policy solves between N_l and N_h times out of N."""
    key = context.partition_key
    band = loop.admission_band()
    rollouts = require_rows(warehouse, "rollouts", key, "validation_rollouts", phase="validation")
    rows = []
    for task_id, group in sorted(rollouts.group_by("task_id"), key=lambda kv: kv[0][0]):
        # Rollouts lost to infrastructure or flagged by the canary are not judged.
        rewards = [r if s == "scored" and not c else None
                   for r, s, c in zip(group["reward"], group["status"], group["canary_seen"])]
        decision = decide_admission(rewards, band)
        rows.append({"round": key, "task_id": task_id[0], "pass_count": decision.pass_count,
                     "scored_rollouts": decision.scored_rollouts, "excluded_rollouts": decision.excluded_rollouts,
                     "admitted": decision.admitted, "decision": decision.decision})
    warehouse.replace("admissions", table_frame("admissions", rows), {"round": key})
    candidates = warehouse.read("tasks", {"round": key}).height
    admitted = sum(r["admitted"] for r in rows)
    return dg.MaterializeResult(metadata={
        "candidates": candidates,
        "admitted": admitted,
        "admission_rate": round(admitted / candidates, 4) if candidates else 0.0,
        "admission_band": f"[{band.low}, {band.high}] of {band.rollouts_per_task}",
        "decisions": dict(Counter(r["decision"] for r in rows)),
        "pass_count_histogram": histogram_table(Counter(r["pass_count"] for r in rows), "passes of N"),
    })


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[admitted_tasks])
def task_splits(context: dg.AssetExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.MaterializeResult:
    """Seeded split of the admitted tasks into T_k (train) and E_k (held-out)."""
    key = context.partition_key
    admitted = require_rows(warehouse, "admissions", key, "admitted_tasks").filter(pl.col("admitted"))
    tasks = warehouse.read("tasks", {"round": key})
    capability_of = dict(zip(tasks["task_id"], tasks["capability_id"]))
    split = split_tasks({t: capability_of[t] for t in admitted["task_id"]}, loop.heldout_fraction, loop.round_seed(key, "split"))
    rows = [{"round": key, "task_id": t, "split": s} for t, s in sorted(split.items())]
    warehouse.replace("task_splits", table_frame("task_splits", rows), {"round": key})
    counts = Counter(split.values())
    return dg.MaterializeResult(metadata={"train_tasks": counts["train"], "heldout_tasks": counts["heldout"],
                                          "splits": markdown_table(["task", "split"], [(r["task_id"], r["split"]) for r in rows])})
