"""What the plan is made from: the evidence of the rounds so far, read from
the warehouse. Each past round's validated candidates (pass counts and
admissions per capability and level, and per warm-up operation), the last
round's diagnosed failures, and the rollouts the controller chooses the next
temperature from; the controller itself (plan.py) reads no table."""

from __future__ import annotations

from typing import Callable

import polars as pl

from clawloop_assets.partitions import previous_round, round_number
from clawloop_assets.partitions import round_key as round_key_for
from clawloop_assets.round_state import MissingUpstreamError, rollout_temperature
from clawloop_assets.synthesis.generators.generator_common import WARMUP_OPERATIONS
from clawloop_assets.synthesis.plan import (
    LEVELS,
    CellEvidence,
    Controller,
    TemperatureDecision,
    choose_temperature,
    estimate_drift,
)
from clawloop_assets.task_bundle import warmup_operation
from resources.warehouse import Warehouse


def controller_inputs(warehouse: Warehouse, round_key: str, recency: float,
                      at_round_temperature: Callable[[int], bool]):
    """What the controller plans round k+1 from: each capability's primary
    level last round, the evidence per (capability, level) of every round so
    far (validation pass counts and admissions, a round j rounds back weighing
    recency**j), each capability's share of last round's diagnosed failures,
    the drift of the pass rate between the last two rounds per level (the
    levels at the rounds' temperatures and the rest measured apart: a
    temperature change moves only the first), and the root causes of each
    capability's diagnosed failures (counts)."""
    upstream = previous_round(round_key)
    if warehouse.read("round_summaries", {"round": upstream}).is_empty():
        raise MissingUpstreamError(f"{upstream} has not completed (no round_summary): finish it before planning the next round")
    plan = warehouse.read("synthesis_plans", {"round": upstream})
    # The primary level: most candidates; on a tie (a hedged move) the higher one.
    levels = {}
    for row in plan.sort(["candidates", "difficulty"], descending=True).iter_rows(named=True):
        levels.setdefault(row["capability_id"], row["difficulty"])
    per_round: list[dict[tuple[str, int], CellEvidence]] = []
    for _, candidates in past_candidates(warehouse, round_key):
        cells: dict[tuple[str, int], CellEvidence] = {}
        for row in candidates.iter_rows(named=True):
            cell = cells.setdefault((row["capability_id"], row["difficulty"]), CellEvidence())
            cell.add(1.0, passes=row["pass_count"], rollouts=row["scored_rollouts"], admitted=int(row["admitted"]),
                     candidates=1)
        per_round.append(cells)
    evidence: dict[tuple[str, int], CellEvidence] = {}
    for age, cells in enumerate(reversed(per_round)):
        for key, cell in cells.items():
            evidence.setdefault(key, CellEvidence()).add(
                recency**age, cell.passes, cell.rollouts, cell.admitted, cell.candidates)
    summaries = warehouse.read("failure_summaries", {"round": upstream})
    failures = max(summaries.height, 1)
    failure_share = {c: summaries.filter(pl.col("capability_id") == c).height / failures
                     for c in set(plan["capability_id"])}
    failure_causes: dict[str, dict[str, int]] = {}
    for row in summaries.group_by("capability_id", "root_cause").len().iter_rows(named=True):
        failure_causes.setdefault(row["capability_id"], {})[row["root_cause"]] = row["len"]
    drift_at_round_temperature, drift_at_fixed_temperature = (
        estimate_drift([{cell: e for cell, e in cells.items() if at_round_temperature(cell[1]) == served}
                        for cells in per_round]) for served in (True, False))
    drift = {level: drift_at_round_temperature if at_round_temperature(level) else drift_at_fixed_temperature
             for level in LEVELS}
    return levels, evidence, failure_share, drift, failure_causes


def controller_temperature(warehouse: Warehouse, round_key: str, controller: Controller,
                           at_round_temperature: Callable[[int], bool]) -> TemperatureDecision:
    """The controller's rollout temperature for `round_key` (a round after
    the schedule's end): chosen from the last round's validation rollouts
    and its held-out split before and after training, on the levels the
    round's temperature serves (`at_round_temperature`)
    (TemperatureDecision.pass_rate_shift is the shift those levels then see)."""
    upstream = previous_round(round_key)
    levels = warehouse.read("tasks", {"round": upstream}).select("task_id", "difficulty")
    served = [level for level in LEVELS if at_round_temperature(level)]
    every_level = warehouse.read("rollouts", {"round": upstream})
    rollouts = every_level.join(levels, on="task_id").filter(pl.col("difficulty").is_in(served))
    validation = rollouts.filter(pl.col("phase") == "validation")
    if validation.is_empty():
        if (every_level["phase"] == "validation").sum() == 0:
            raise MissingUpstreamError(f"{upstream} has no validation rollouts to choose {round_key}'s temperature "
                                       f"from: materialize validation_rollouts for {upstream} first")
        # Every capability has left the levels it serves: nothing to aim with.
        previous = rollout_temperature(warehouse, upstream, None)
        return TemperatureDecision(previous, None, f"{previous:.2f} kept: no validation rollouts at levels "
                                                   f"{served} last round")
    previous = float(validation["temperature"].mode().sort()[0])
    return choose_temperature(
        previous, *(rollout_evidence(rollouts, phase) for phase in ("validation", "heldout_before", "heldout_after")),
        controller)


def rollout_evidence(rollouts: pl.DataFrame, phase: str) -> CellEvidence:
    """The judged rollouts of one phase as pass counts (lost or canary-flagged ones are not judged)."""
    judged = rollouts.filter((pl.col("phase") == phase) & (pl.col("status") == "scored") & ~pl.col("canary_seen"))
    return CellEvidence(passes=float(judged["reward"].sum()), rollouts=float(judged.height))


def past_candidates(warehouse: Warehouse, round_key: str) -> list[tuple[int, pl.DataFrame]]:
    """Every round before `round_key`, oldest first, as (age: 1 for the last
    round, its validated candidates: admissions joined with their tasks)."""
    number = round_number(round_key)
    out = []
    for past in range(1, number):
        past_key = round_key_for(past)
        tasks = warehouse.read("tasks", {"round": past_key}).select("task_id", "capability_id", "difficulty", "bundle_path")
        out.append((number - past, warehouse.read("admissions", {"round": past_key}).join(tasks, on="task_id")))
    return out


def warmup_operation_evidence(warehouse: Warehouse, round_key: str, recency: float
                              ) -> dict[tuple[int, str], CellEvidence]:
    """Per (warm-up level, operation), pooled over capabilities: the
    validation pass counts and admissions of every round before `round_key`,
    a round j rounds back weighing recency**j. A task's operation is in its
    bundle's meta.json; a bundle since removed is left out."""
    evidence: dict[tuple[int, str], CellEvidence] = {}
    for age, candidates in past_candidates(warehouse, round_key):
        warmup = candidates.filter(pl.col("difficulty").is_in(list(WARMUP_OPERATIONS)))
        for row in warmup.iter_rows(named=True):
            operation = warmup_operation(row["bundle_path"])
            if operation:
                evidence.setdefault((row["difficulty"], operation), CellEvidence()).add(
                    recency ** (age - 1), passes=row["pass_count"], rollouts=row["scored_rollouts"],
                    admitted=int(row["admitted"]), candidates=1)
    return evidence
