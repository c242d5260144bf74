"""What the trainers read: SFT examples and GRPO groups, cut from the recorded
validation rollouts of T_k (one set of rollouts serves validation, SFT and GRPO)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import polars as pl

TRAINING_COLUMNS = ["rollout_id", "group_id", "reward", "token_ids", "action_mask", "sampling_logprobs", "temperature"]


def _train_rollouts(rollouts: pl.DataFrame, train_task_ids: Iterable[str]) -> pl.DataFrame:
    # Only scored rollouts: one lost to infrastructure leaves its group smaller,
    # never counts as a failure; one that saw the canary is never trained on.
    return rollouts.filter(
        (pl.col("phase") == "validation")
        & (pl.col("status") == "scored")
        & ~pl.col("canary_seen").fill_null(False)  # NULL: rows from before the canary existed
        & pl.col("task_id").is_in(list(train_task_ids))
    ).rename({"task_id": "group_id"})


def sft_examples(rollouts: pl.DataFrame, train_task_ids: Iterable[str]) -> pl.DataFrame:
    """Successful trajectories (reward 1) of the training tasks."""
    return _train_rollouts(rollouts, train_task_ids).filter(pl.col("reward") == 1.0).select(TRAINING_COLUMNS)


def grpo_groups(rollouts: pl.DataFrame, train_task_ids: Iterable[str]) -> pl.DataFrame:
    """Every scored rollout of the training tasks, grouped by task."""
    return _train_rollouts(rollouts, train_task_ids).select(TRAINING_COLUMNS).sort("group_id", "rollout_id")


def write_jsonl(frame: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in frame.iter_rows(named=True):
            f.write(json.dumps(row) + "\n")
    return path
