"""Gate checks: blocking, so a round stops at the gate that failed, saying why.
Partitioned checks are a Dagster preview feature; a round's gates need them."""

import warnings

import dagster as dg
import polars as pl

from clawloop_assets.assets.diagnosis import diagnosis_rollouts, heldout_baseline_rollouts
from clawloop_assets.assets.evaluation import evaluation
from clawloop_assets.assets.training import policy_checkpoint, training_gain
from clawloop_assets.assets.validation import (
    admitted_tasks,
    agent_free_validation,
    task_splits,
    validation_rollouts,
)
from clawloop_assets.evaluation.fixed_set import rollout_errors
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_partitions
from resources.checkpoints import CheckpointError, verify_checkpoint
from resources.warehouse import Warehouse

warnings.filterwarnings("ignore", category=dg.PreviewWarning, message=".*partitions_def on an AssetCheckSpec.*")


@dg.asset_check(asset=agent_free_validation, blocking=True, partitions_def=round_partitions)
def candidates_pass_agent_free_validation(context: dg.AssetCheckExecutionContext, warehouse: Warehouse) -> dg.AssetCheckResult:
    """At least one candidate survives the oracle, untouched-workspace and leakage checks."""
    rows = warehouse.read("agent_free_validations", {"round": context.partition_key})
    passed = int(rows["passed"].sum()) if rows.height else 0
    return dg.AssetCheckResult(passed=passed > 0, metadata={"passed": passed, "checked": rows.height})


@dg.asset_check(asset=admitted_tasks, blocking=True, partitions_def=round_partitions)
def admissions_within_band(context: dg.AssetCheckExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.AssetCheckResult:
    """Some task is admitted, and every admitted task's pass count lies in the band."""
    band = loop.admission_band()
    admitted = warehouse.read("admissions", {"round": context.partition_key}).filter(pl.col("admitted"))
    outside = admitted.filter((pl.col("pass_count") < band.low) | (pl.col("pass_count") > band.high))
    return dg.AssetCheckResult(
        passed=admitted.height > 0 and outside.is_empty(),
        metadata={"admitted": admitted.height, "outside_band": outside["task_id"].to_list(),
                  "why_not": "" if admitted.height else "no candidate fell in the admission band: nothing to train on"},
    )


@dg.asset_check(asset=task_splits, blocking=True, partitions_def=round_partitions)
def splits_are_disjoint_with_training_tasks(context: dg.AssetCheckExecutionContext, warehouse: Warehouse) -> dg.AssetCheckResult:
    """T_k and E_k share no task, and T_k is not empty."""
    rows = warehouse.read("task_splits", {"round": context.partition_key})
    train = set(rows.filter(pl.col("split") == "train")["task_id"])
    heldout = set(rows.filter(pl.col("split") == "heldout")["task_id"])
    return dg.AssetCheckResult(passed=bool(train) and not (train & heldout),
                               metadata={"train": len(train), "heldout": len(heldout), "overlap": sorted(train & heldout)})


@dg.asset_check(asset=policy_checkpoint, blocking=True, partitions_def=round_partitions)
def policy_checkpoint_is_verified(context: dg.AssetCheckExecutionContext, warehouse: Warehouse) -> dg.AssetCheckResult:
    """The checkpoint the next round will load is complete and matches its manifest."""
    rows = warehouse.read("checkpoints", {"round": context.partition_key, "kind": "policy"})
    if rows.is_empty():
        return dg.AssetCheckResult(passed=False, metadata={"error": "no policy checkpoint recorded"})
    try:
        verify_checkpoint(rows["path"][0])
    except CheckpointError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)})
    return dg.AssetCheckResult(passed=True, metadata={"checkpoint_id": rows["checkpoint_id"][0]})


def error_rate_result(rollouts: pl.DataFrame, max_error_rate: float) -> dg.AssetCheckResult:
    """Passed iff the rollouts that ended in a harness error (verifier, sandbox
    or policy) are at most `max_error_rate` of them. Errors are excluded from
    training and admission, so a round with many would be judged on the
    rollouts its harness happened not to lose, and an agent able to cause
    errors could hide its failures among them."""
    errors = rollout_errors(rollouts)
    total, errored = rollouts.height, sum(errors.values())
    rate = errored / total if total else 0.0
    return dg.AssetCheckResult(passed=rate <= max_error_rate, metadata={
        "rollouts": total, "error_rollouts": errored, "error_rate": round(rate, 4),
        "max_error_rate": max_error_rate, **{f"{status}s": count for status, count in errors.items()},
    })


def _error_rate_check(asset, phases: tuple[str, ...]):
    description = (f"At most loop.max_error_rate of this asset's rollouts ({', '.join(phases)}) ended in a "
                   "verifier, sandbox or policy error.")

    @dg.asset_check(asset=asset, name="rollout_errors_within_limit", description=description, blocking=True,
                    partitions_def=round_partitions)
    def check(context: dg.AssetCheckExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.AssetCheckResult:
        rollouts = warehouse.read("rollouts", {"round": context.partition_key})
        return error_rate_result(rollouts.filter(pl.col("phase").is_in(phases)), loop.max_error_rate)

    return check


# One blocking check on every asset that records a round's rollouts.
validation_rollout_errors = _error_rate_check(validation_rollouts, ("validation",))
training_gain_rollout_errors = _error_rate_check(training_gain, ("train_before", "train_after"))
heldout_baseline_rollout_errors = _error_rate_check(heldout_baseline_rollouts, ("heldout_before",))
diagnosis_rollout_errors = _error_rate_check(diagnosis_rollouts, ("heldout_after",))
evaluation_rollout_errors = _error_rate_check(evaluation, ("evaluation",))
