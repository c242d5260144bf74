"""Agent-based validation: the admission band and the train / held-out split."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class AdmissionBand:
    """Keep a task iff the current policy solves it `low` to `high` times out of
    `rollouts_per_task`: all-pass and all-fail groups carry no GRPO signal."""

    rollouts_per_task: int = 8
    low: int = 1
    high: int = 5
    # A task with fewer scored rollouts (the rest lost to infrastructure) is not judged.
    min_scored: int = 6

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high <= self.rollouts_per_task:
            raise ValueError(
                f"admission band [{self.low}, {self.high}] must satisfy 0 <= low <= high <= rollouts_per_task "
                f"({self.rollouts_per_task})"
            )
        if not 1 <= self.min_scored <= self.rollouts_per_task:
            raise ValueError(f"min_scored ({self.min_scored}) must be between 1 and rollouts_per_task")


@dataclass(frozen=True)
class AdmissionDecision:
    pass_count: int
    scored_rollouts: int
    excluded_rollouts: int
    decision: str  # "admitted" | "all_failed" | "too_hard" | "too_easy" | "too_few_scored"

    @property
    def admitted(self) -> bool:
        return self.decision == "admitted"


def decide_admission(rewards: Sequence[float | None], band: AdmissionBand) -> AdmissionDecision:
    """`rewards` holds one entry per rollout; None marks one excluded for an
    infrastructure reason, which never counts as a failure."""
    scored = [r for r in rewards if r is not None]
    passes = sum(1 for r in scored if r == 1.0)
    excluded = len(rewards) - len(scored)
    if len(scored) < band.min_scored:
        decision = "too_few_scored"
    elif passes < band.low:
        decision = "all_failed" if passes == 0 else "too_hard"
    elif passes > band.high:
        decision = "too_easy"
    else:
        decision = "admitted"
    return AdmissionDecision(passes, len(scored), excluded, decision)


def admission_is_final(rewards: Sequence[float | None], band: AdmissionBand) -> bool:
    """True when no further rollout can change the decision: more than `high`
    passes among at least `min_scored` scored rollouts is too easy whatever
    follows. (Every other decision can still change, and an admitted task needs
    its whole group for GRPO.)"""
    scored = [r for r in rewards if r is not None]
    return len(scored) >= band.min_scored and sum(1 for r in scored if r == 1.0) > band.high


def sequential_waves(band: AdmissionBand) -> list[int]:
    """Rollouts per wave: the first wave is the fewest that can show more than
    `high` passes, the second the rest (two waves keep the batches large)."""
    first = max(band.high + 1, band.min_scored)
    if first >= band.rollouts_per_task:
        return [band.rollouts_per_task]
    return [first, band.rollouts_per_task - first]


def split_tasks(
    capability_of: Mapping[str, str], heldout_fraction: float, seed: int
) -> dict[str, str]:
    """Seeded split of admitted tasks into "train" (T_k) and "heldout" (E_k),
    stratified by capability so the held-out set covers what was admitted."""
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    rng = random.Random(seed)
    by_capability: dict[str, list[str]] = {}
    for task_id in sorted(capability_of):
        by_capability.setdefault(capability_of[task_id], []).append(task_id)
    split: dict[str, str] = {}
    for capability in sorted(by_capability):
        ids = by_capability[capability]
        rng.shuffle(ids)
        n_heldout = round(len(ids) * heldout_fraction)
        for i, task_id in enumerate(ids):
            split[task_id] = "heldout" if i < n_heldout else "train"
    # Small rounds: make sure both sides exist when there are two or more tasks.
    ids = sorted(split)
    if len(ids) >= 2:
        if all(s == "train" for s in split.values()):
            split[rng.choice(ids)] = "heldout"
        elif all(s == "heldout" for s in split.values()):
            split[rng.choice(ids)] = "train"
    return split
