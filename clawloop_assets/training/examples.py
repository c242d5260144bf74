"""What the trainers read: SFT examples and GRPO groups, cut from the recorded
validation rollouts of T_k (one set of rollouts serves validation, SFT and GRPO)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl

from clawloop_assets.harness.agent_loop import first_prompt
from clawloop_assets.synthesis.generators.generator_common import in_words, shown_command
from clawloop_assets.task_bundle import TaskBundle
from resources.policy import ChatTemplate

TRAINING_COLUMNS = ["rollout_id", "group_id", "reward", "token_ids", "action_mask", "sampling_logprobs", "temperature"]
# The suffix of a success's rollout id in its copy as the task in words.
IN_WORDS = ".in_words"
# Copies in words of one task at most: each teaches the same sentence, and a
# task passed 8 of 8 should not outweigh the sentences of tasks passed once.
COPIES_PER_TASK = 4


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


def in_words_examples(rollouts: pl.DataFrame, bundles: Sequence[TaskBundle],
                      chat: ChatTemplate) -> tuple[pl.DataFrame, int]:
    """The successes of those of `bundles` that show their command (levels
    -2 and -1: " Run: <command>") once more as the same task in words: the
    prompt its words give, then the same replies and observations, the loss
    still on the agent's own tokens only. Each distinct trajectory of a task
    is copied once, and at most COPIES_PER_TASK of them.

    The copy is a success of the task in words: the same replies in the
    same workspace pass the same verifier, whatever the instruction said.
    It trains what level 0 asks and copying a shown command never does,
    the command from the words alone. So a task too easy to admit (passed
    6 of 8 shown) still gives copies: in words it is not easy. Returns the
    copies and how many successes were left out because their recorded
    prompt is not the one `chat` gives the shown instruction (sampled
    under another template): only a prompt known token for token can be
    swapped."""
    words_of: dict[str, tuple[list[int], list[int]]] = {}
    for bundle in bundles:
        try:
            command = shown_command(bundle.solution_path.read_text(encoding="utf-8"))
        except ValueError:
            continue  # no short command: the task shows none
        instruction = bundle.instruction
        words = in_words(instruction, command)
        if words != instruction:
            words_of[bundle.task_id] = (first_prompt(chat, instruction), first_prompt(chat, words))
    successes = _train_rollouts(rollouts, words_of).filter(pl.col("reward") == 1.0).sort("rollout_id")
    copies, unmatched, copied = [], 0, {task: set() for task in words_of}
    for row in successes.iter_rows(named=True):
        shown, words = words_of[row["group_id"]]
        cut = row["prompt_tokens"]
        if cut != len(shown) or list(row["token_ids"][:cut]) != shown:
            unmatched += 1
            continue
        trajectory, seen = tuple(row["token_ids"][cut:]), copied[row["group_id"]]
        if trajectory in seen or len(seen) >= COPIES_PER_TASK:
            continue
        seen.add(trajectory)
        copies.append({
            **{column: row[column] for column in TRAINING_COLUMNS},
            "rollout_id": row["rollout_id"] + IN_WORDS,
            "token_ids": words + list(row["token_ids"][cut:]),
            "action_mask": [0] * len(words) + list(row["action_mask"][cut:]),
            "sampling_logprobs": [0.0] * len(words) + list(row["sampling_logprobs"][cut:]),
        })
    schema = successes.select(TRAINING_COLUMNS).schema
    return pl.DataFrame(copies, schema=schema), unmatched


def grpo_groups(rollouts: pl.DataFrame, train_task_ids: Iterable[str]) -> pl.DataFrame:
    """Every scored rollout of the training tasks, grouped by task."""
    return _train_rollouts(rollouts, train_task_ids).select(TRAINING_COLUMNS).sort("group_id", "rollout_id")


def write_jsonl(frame: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in frame.iter_rows(named=True):
            f.write(json.dumps(row) + "\n")
    return path
