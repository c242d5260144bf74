"""The synthesis plan: which capabilities, at which difficulty, how many
candidates. Round 1 starts every capability at level 0; round k+1 reads round
k's diagnosis and pass rates, shifts weight toward weak capabilities, and moves
each difficulty by at most one level (sharper jumps overshot in the paper)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

# Every generator family implements levels 0 to MAX_LEVEL (the scale in
# generators/generator_common.py).
MAX_LEVEL = 5
LEVELS = tuple(range(MAX_LEVEL + 1))


@dataclass(frozen=True)
class PlanEntry:
    capability_id: str
    difficulty: int
    weight: float
    candidates: int
    reason: str


@dataclass(frozen=True)
class CapabilityOutcome:
    """What round k learned about one capability, for round k+1's plan."""

    difficulty: int
    pass_rate: float | None  # the policy's pass rate on this capability's rollouts, None if unseen
    failure_share: float  # share of the round's diagnosed failures on this capability


def first_plan(capabilities: Sequence[str], candidates_per_round: int) -> list[PlanEntry]:
    weight = 1.0 / len(capabilities)
    counts = _apportion(candidates_per_round, {c: weight for c in capabilities})
    return [PlanEntry(c, 0, weight, counts[c], "round 1: every capability starts at level 0") for c in capabilities]


def next_plan(
    capabilities: Sequence[str],
    outcomes: Mapping[str, CapabilityOutcome],
    candidates_per_round: int,
    admission_rate_bounds: tuple[float, float],
) -> list[PlanEntry]:
    """`admission_rate_bounds` = (low, high) pass rates of the admission band
    (e.g. 1/8 and 5/8): above it the policy has outgrown the level, below it the
    level is out of reach."""
    low, high = admission_rate_bounds
    raw_weights, levels, reasons = {}, {}, {}
    for capability in capabilities:
        outcome = outcomes.get(capability)
        if outcome is None or outcome.pass_rate is None:
            level = outcome.difficulty if outcome else 0
            levels[capability], reasons[capability] = level, "no rollouts last round: level kept"
            raw_weights[capability] = 1.0
            continue
        level, rate = outcome.difficulty, outcome.pass_rate
        if rate > high and level < MAX_LEVEL:
            level, why = level + 1, f"pass rate {rate:.0%} above the band: level +1"
        elif rate < low and level > 0:
            level, why = level - 1, f"pass rate {rate:.0%} below the band: level -1"
        else:
            why = f"pass rate {rate:.0%}: level kept"
        levels[capability] = level
        # Weak capabilities (many diagnosed failures) get more of next round's budget.
        raw_weights[capability] = 1.0 + 2.0 * outcome.failure_share
        reasons[capability] = f"{why}; {outcome.failure_share:.0%} of diagnosed failures"
    total = sum(raw_weights.values())
    weights = {c: w / total for c, w in raw_weights.items()}
    counts = _apportion(candidates_per_round, weights)
    return [PlanEntry(c, levels[c], weights[c], counts[c], reasons[c]) for c in capabilities]


def _apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Integer candidate counts proportional to weights (largest remainder),
    at least one per capability so none drops out of sight."""
    names = sorted(weights)
    budget = max(total, len(names))
    exact = {n: weights[n] * budget for n in names}
    counts = {n: max(1, int(exact[n])) for n in names}
    leftover = budget - sum(counts.values())
    for n in sorted(names, key=lambda n: exact[n] - int(exact[n]), reverse=True)[: max(leftover, 0)]:
        counts[n] += 1
    return counts
