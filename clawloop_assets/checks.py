"""Gate checks: blocking, so a round stops at the gate that failed, saying why.
Partitioned checks are a Dagster preview feature; a round's gates need them."""

import warnings

import dagster as dg
import polars as pl

from clawloop_assets.assets.training import policy_checkpoint
from clawloop_assets.assets.validation import (
    admitted_tasks,
    agent_free_validation,
    task_splits,
)
from clawloop_assets.checkpoints import CheckpointError, verify_checkpoint
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_partitions
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
