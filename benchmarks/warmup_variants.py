"""How a run's warm-up variants moved from round to round, and what any mix
of them could have admitted: the measurements behind
docs/experiments/2026-11-30-warmup-variant-mix.md.

Not part of `make bench` (it reads finished runs):

    python -m benchmarks.warmup_variants HOME [HOME ...]

For each run (a $CLAWLOOP_HOME) and round it prints, per warm-up variant
(level, operation, from each task bundle's meta.json):
- candidates, admitted, the validation pass rate (the round's input policy
  on fresh tasks);
- on the round's admitted tasks, the pass rate before and after the round's
  training (the T_k and E_k rollouts together);
- the ceiling: the best admission rate any mix of the variants could have
  reached had it known each one's admission rate in that round (every
  variant with 3 candidates or more keeps a 3% floor, none gets more than
  the cap; the rest goes to the best).
And over all runs, how far four predictors of a variant's next-round
validation pass rate missed, in logits (variants with 16 scored rollouts or
more in every figure a predictor uses and in the outcome).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl

from clawloop_assets.synthesis.plan import CellEvidence
from clawloop_assets.task_bundle import warmup_operation
from resources.paths import WAREHOUSE_FILE
from resources.warehouse import DuckDBWarehouse, Warehouse

Variant = tuple[int, str]  # (level, operation)
# Which of a variant's figures a rollout phase counts toward: validation is
# the round's input policy on fresh tasks; the others run on the round's
# admitted tasks, before or after its training.
SIDE_OF_PHASE = {"validation": "validation", "train_before": "before", "heldout_before": "before",
                 "train_after": "after", "heldout_after": "after"}
MIN_ROLLOUTS = 16
CAPS = (0.25, 0.4, 0.5, 1.0)


@dataclass
class VariantRound:
    round: str
    variant: Variant
    candidates: int = 0
    admitted: int = 0
    validation: CellEvidence = field(default_factory=CellEvidence)
    before: CellEvidence = field(default_factory=CellEvidence)  # admitted tasks, the round's input policy
    after: CellEvidence = field(default_factory=CellEvidence)  # admitted tasks, the policy it trained

    @property
    def admission_rate(self) -> float:
        return self.admitted / self.candidates if self.candidates else 0.0


def read_run(warehouse: Warehouse) -> tuple[list[VariantRound], dict[str, float]]:
    """Every warm-up variant of every round of one run, and per round the
    drift its training caused on its held-out split (logits)."""
    tasks = warehouse.read("tasks").filter(pl.col("difficulty") < 0)
    variant_of: dict[str, Variant] = {}
    for row in tasks.iter_rows(named=True):
        operation = warmup_operation(row["bundle_path"])
        if operation:  # None: a bundle since removed, its operation unknown
            variant_of[row["task_id"]] = (row["difficulty"], operation)
    cells: dict[tuple[str, Variant], VariantRound] = {}

    def cell(round_key: str, variant: Variant) -> VariantRound:
        return cells.setdefault((round_key, variant), VariantRound(round_key, variant))

    for row in warehouse.read("admissions").iter_rows(named=True):
        if row["task_id"] in variant_of:
            found = cell(row["round"], variant_of[row["task_id"]])
            found.candidates += 1
            found.admitted += int(row["admitted"])
    heldout: dict[tuple[str, str], CellEvidence] = defaultdict(CellEvidence)
    scored = warehouse.read("rollouts").filter(pl.col("status") == "scored")
    for row in scored.select("round", "task_id", "phase", "reward").iter_rows(named=True):
        if row["phase"] in ("heldout_before", "heldout_after"):
            heldout[(row["round"], row["phase"])].add(1.0, passes=int(row["reward"]), rollouts=1)
        if row["task_id"] not in variant_of:
            continue
        side = SIDE_OF_PHASE.get(row["phase"])
        if side:
            getattr(cell(row["round"], variant_of[row["task_id"]]), side).add(1.0, passes=int(row["reward"]), rollouts=1)
    # A round measured on one side only (stopped before its training ended) has no drift.
    drift = {r: heldout[(r, "heldout_after")].smoothed_logit - heldout[(r, "heldout_before")].smoothed_logit
             for r, phase in list(heldout) if phase == "heldout_after" and (r, "heldout_before") in heldout}
    return sorted(cells.values(), key=lambda v: (v.round, v.variant)), drift


def best_mix_admission(rates: Sequence[float], cap: float, floor: float = 0.03) -> float:
    """The highest admission rate a mix over variants admitting `rates` can
    reach with every variant at `floor` or more and none above `cap`: the
    floors first, then the best variant up to the cap, then the next."""
    if not rates or floor * len(rates) > 1 or cap * len(rates) < 1 or cap < floor:
        raise ValueError(f"no mix of {len(rates)} variants has a {floor} floor and a {cap} cap")
    left, total = 1 - floor * len(rates), floor * sum(rates)
    for rate in sorted(rates, reverse=True):
        take = min(cap - floor, left)
        total, left = total + take * rate, left - take
    return total


def ceilings(variants: Iterable[VariantRound], caps: Sequence[float] = CAPS, min_candidates: int = 3) -> dict[str, dict[float, float]]:
    """Per round, best_mix_admission at each cap over its variants with
    `min_candidates` or more (fewer say nothing of a variant's rate)."""
    by_round: dict[str, list[float]] = defaultdict(list)
    for v in variants:
        if v.candidates >= min_candidates:
            by_round[v.round].append(v.admission_rate)
    return {r: {cap: best_mix_admission(rates, max(cap, 1 / len(rates))) for cap in caps}
            for r, rates in sorted(by_round.items())}


# Each predictor of a variant's next-round validation pass rate (logits),
# from this round's variant figures and the held-out drift.
PREDICTORS = {
    "this round's validation + held-out drift": lambda v, drift: v.validation.smoothed_logit + drift,
    "after training, on the round's admitted tasks": lambda v, drift: v.after.smoothed_logit,
    "this round's validation + the variant's own change in training":
        lambda v, drift: v.validation.smoothed_logit + v.after.smoothed_logit - v.before.smoothed_logit,
    "mean of the first two": lambda v, drift: (v.validation.smoothed_logit + drift + v.after.smoothed_logit) / 2,
}


def predictor_errors(runs: Iterable[tuple[list[VariantRound], dict[str, float]]],
                     min_rollouts: float = MIN_ROLLOUTS) -> dict[str, list[float]]:
    """For each predictor, its absolute error (logits) on every (round,
    variant) whose next round measured it again, all figures with
    `min_rollouts` or more."""
    errors: dict[str, list[float]] = {name: [] for name in PREDICTORS}
    for variants, drift in runs:
        rounds = sorted({v.round for v in variants})
        index = {(v.round, v.variant): v for v in variants}
        for this, following in zip(rounds, rounds[1:]):
            for v in (v for v in variants if v.round == this and this in drift):
                nxt = index.get((following, v.variant))
                figures = (v.validation, v.before, v.after) + ((nxt.validation,) if nxt else ())
                if nxt is None or min(c.rollouts for c in figures) < min_rollouts:
                    continue
                for name, predict in PREDICTORS.items():
                    errors[name].append(abs(predict(v, drift[this]) - nxt.validation.smoothed_logit))
    return errors


def _rate(cell: CellEvidence) -> str:
    return f"{cell.passes:.0f}/{cell.rollouts:.0f} ({cell.pass_rate:.0%})" if cell.rollouts else "-"


def report(homes: Sequence[Path]) -> str:
    lines, runs = [], []
    for home in homes:
        variants, drift = read_run(DuckDBWarehouse(path=str(home / WAREHOUSE_FILE)))
        runs.append((variants, drift))
        lines += [f"## {home}", "", "| round | level | operation | admitted | validation pass | admitted tasks before -> after training |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {v.round} | {v.variant[0]} | {v.variant[1]} | {v.admitted}/{v.candidates} ({v.admission_rate:.0%}) "
                  f"| {_rate(v.validation)} | {_rate(v.before)} -> {_rate(v.after)} |" for v in variants]
        lines += ["", "| round | held-out drift | " + " | ".join(f"best mix, cap {c:.0%}" for c in CAPS) + " |",
                  "|---|---|" + "---|" * len(CAPS)]
        for r, best in ceilings(variants).items():
            shown = f"{drift[r]:+.2f}" if r in drift else "-"
            lines.append(f"| {r} | {shown} | " + " | ".join(f"{best[c]:.0%}" for c in CAPS) + " |")
        lines.append("")
    lines += ["## Predicting a variant's next-round validation pass rate", "", "| predictor | mean error (logits) | pairs |",
              "|---|---|---|"]
    for name, errors in predictor_errors(runs).items():
        lines.append(f"| {name} | {sum(errors) / len(errors):.2f} | {len(errors)} |" if errors else f"| {name} | - | 0 |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("homes", nargs="+", type=Path, help="finished runs' $CLAWLOOP_HOME directories")
    print(report(parser.parse_args(argv).homes), end="")


if __name__ == "__main__":
    main()
