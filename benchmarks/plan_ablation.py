"""What a controller feature changes in a run's plans, without running the
loop again: each round's plan replayed from the evidence its round started
from, as the run's config made it and with one feature switched off.

A round is a function of its plan (the candidates, their levels and
operations, seeded by the round): where the plan with a feature off is the
plan the run made, the round with it off is the round the run had, so the
feature did nothing there. Where the plans differ, the figure is how many
candidates the feature moved (to another capability, level or operation),
and only a run of the loop says what that was worth. Each round's replay of
the run's own config is checked against the plan the run stored: a replay
that differs reads other evidence, and its figures would mean nothing.

Not part of `make bench` (it reads a run, finished or still running):

    python -m benchmarks.plan_ablation $CLAWLOOP_HOME [--config RUN_CONFIG]

RUN_CONFIG is the run config the run was started with (`clawloop run
--config`); without it, the defaults. The warehouse is read from a copy,
so a run that holds it open is not disturbed.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Mapping

from benchmarks import warehouse_copy
from clawloop_assets.assets.synthesis import plan_round
from clawloop_assets.loop_config import LoopConfig
from resources.warehouse import DuckDBWarehouse, Warehouse

# Each feature and the LoopConfig fields that switch it off (docs/round.md,
# "Synthesis"; the ledger in docs/experiments/).
ABLATIONS: dict[str, dict[str, float]] = {
    "weakness tilt off": {"weakness_tilt": 0.0},
    "pool always even": {"target_admission_rate": 1e-6},
    "no least share": {"min_capability_share": 0.0},
    "no rung probe": {"rung_probe_share": 0.0},
}

# (capability, level, knobs, operation mix) -> candidates.
PlanCounts = Counter


def replayed_plan(warehouse: Warehouse, round_key: str, loop: LoopConfig) -> PlanCounts:
    """Round `round_key`'s plan as synthesis_plan makes it under `loop`, from
    the rounds before it (the controller reads only those)."""
    capabilities = warehouse.read("capabilities", {"round": round_key})["capability_id"].to_list()
    plan, _, _ = plan_round(warehouse, round_key, capabilities, loop)
    return _counts((e.capability_id, e.difficulty, e.knobs, e.operation_weights, e.candidates) for e in plan)


def stored_plan(warehouse: Warehouse, round_key: str) -> PlanCounts:
    rows = warehouse.read("synthesis_plans", {"round": round_key})
    return _counts((r["capability_id"], r["difficulty"], r["knobs"] or (),
                    json.loads(r["operation_weights"]) if r["operation_weights"] else None, r["candidates"])
                   for r in rows.iter_rows(named=True))


def _counts(entries) -> PlanCounts:
    counts: PlanCounts = Counter()
    for capability, level, knobs, mix, candidates in entries:
        # The knobs and a warm-up level's operation mix are part of what its candidates are.
        mix_key = ",".join(f"{op}={share:.3f}" for op, share in sorted((mix or {}).items()))
        counts[(capability, level, ",".join(sorted(knobs)), mix_key)] += int(candidates)
    return counts


def moved(base: PlanCounts, other: PlanCounts) -> int:
    """Candidates `other` puts somewhere `base` does not (the plans' distance)."""
    return sum((other - base).values())


def ablate(warehouse: Warehouse, loop: LoopConfig,
           ablations: Mapping[str, Mapping[str, float]] = ABLATIONS) -> list[dict]:
    """One row per round of the run: whether the replay of the run's config
    reproduces its stored plan, and the candidates each ablation moves."""
    rows = []
    rounds = warehouse.query("SELECT DISTINCT round FROM synthesis_plans ORDER BY round")["round"].to_list()
    for key in rounds:
        base = replayed_plan(warehouse, key, loop)
        row = {"round": key, "candidates": sum(base.values()), "replay matches": base == stored_plan(warehouse, key)}
        for name, fields in ablations.items():
            ablated = LoopConfig(**{**loop.model_dump(), **fields})
            row[name] = moved(base, replayed_plan(warehouse, key, ablated))
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    columns = list(rows[0]) if rows else ["round"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(("yes" if v else "NO") if isinstance(v, bool) else str(v)
                                       for v in row.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="the run's $CLAWLOOP_HOME")
    parser.add_argument("--config", type=Path, help="the run config the run was started with")
    args = parser.parse_args(argv)
    loop = LoopConfig()
    if args.config:
        from clawloop_assets.cli import load_run_config

        fields = load_run_config(args.config).get("resources", {}).get("loop", {}).get("config", {})
        loop = LoopConfig(**fields)
    with warehouse_copy(args.home) as copy:
        print(table(ablate(DuckDBWarehouse(path=str(copy)), loop)))


if __name__ == "__main__":
    main()
