"""What a round reads from the warehouse: its own upstream rows, and the
previous round's outputs, which cross the round boundary by key (Dagster
forbids the cycle an asset dependency would make)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from clawloop_assets.partitions import previous_round
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from resources import paths
from resources.checkpoints import checkpoint_id, verify_checkpoint
from resources.policy import PolicyModel
from resources.warehouse import Warehouse


class MissingUpstreamError(RuntimeError):
    """A round's input (its own upstream asset or the previous round) is not there."""


@dataclass(frozen=True)
class PolicyRef:
    path: Path
    checkpoint_id: str
    upstream_round: str | None  # None: the base model


def require_rows(warehouse: Warehouse, table: str, round_key: str, asset: str, **where) -> pl.DataFrame:
    rows = warehouse.read(table, {"round": round_key, **where})
    if rows.is_empty():
        raise MissingUpstreamError(
            f"{round_key} has no rows in {table!r}{' for ' + str(where) if where else ''}: "
            f"materialize {asset} for {round_key} first"
        )
    return rows


def input_policy(warehouse: Warehouse, policy: PolicyModel, round_key: str) -> PolicyRef:
    """The policy a round starts from: round k-1's trained checkpoint, or the
    base model for round 1. Fails loudly when round k-1 has none."""
    upstream = previous_round(round_key)
    if upstream is None:
        base = policy.base_checkpoint()
        return PolicyRef(base, checkpoint_id(base), None)
    rows = warehouse.read("checkpoints", {"round": upstream, "kind": "policy"})
    if rows.is_empty():
        raise MissingUpstreamError(
            f"{round_key} starts from {upstream}'s policy_checkpoint, which does not exist: "
            f"finish {upstream} first"
        )
    path = Path(rows["path"][0])
    verify_checkpoint(path)
    return PolicyRef(path, rows["checkpoint_id"][0], upstream)


def round_policy(warehouse: Warehouse, round_key: str, kind: str) -> PolicyRef:
    rows = require_rows(warehouse, "checkpoints", round_key, f"the {kind} checkpoint", kind=kind)
    path = Path(rows["path"][0])
    verify_checkpoint(path)
    return PolicyRef(path, rows["checkpoint_id"][0], previous_round(round_key))


def rollout_temperature(warehouse: Warehouse, round_key: str, scheduled: float | None) -> float:
    """What `round_key`'s rollouts sample at: what its synthesis_plan decided
    (the rollout_temperatures table), or, for a round planned before that
    table existed, its `scheduled` one (LoopConfig.scheduled_temperature)."""
    rows = warehouse.read("rollout_temperatures", {"round": round_key})
    if not rows.is_empty():
        return float(rows["temperature"][0])
    if scheduled is None:
        raise MissingUpstreamError(f"{round_key} has no rollout temperature (the controller chooses it after the "
                                   f"schedule): materialize synthesis_plan for {round_key} first")
    return scheduled


def load_bundles(warehouse: Warehouse, round_key: str, task_ids: list[str]) -> list[TaskBundle]:
    tasks = warehouse.read("tasks", {"round": round_key})
    path_of = dict(zip(tasks["task_id"], tasks["bundle_path"]))
    missing = [t for t in task_ids if not path_of.get(t)]
    if missing:
        raise MissingUpstreamError(f"{round_key}: no built bundle for tasks {missing[:5]}")
    return [load_task_bundle(Path(path_of[t])) for t in sorted(task_ids)]


def split_task_ids(warehouse: Warehouse, round_key: str, split: str) -> list[str]:
    rows = require_rows(warehouse, "task_splits", round_key, "task_splits")
    return sorted(rows.filter(pl.col("split") == split)["task_id"].to_list())


def workdir(round_key: str, *parts: str) -> Path:
    path = paths.round_dir(round_key).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
