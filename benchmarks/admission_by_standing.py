"""What a round's admission rate can reach, from runs' own candidates:
admission per level, split by the capability's standing there (new: its
first round with candidates at that level; established: it had some in an
earlier round), with why the others were not admitted (passed 0 times,
passed too often, or never scored: a build or agent-free check failed),
and the most of a round that a level may take while the round still
admits the target rate, the rest admitting at the established warm-up
level's rate.

Issue 26 asks both for a climb (capabilities onto the rung and level 0)
and for a round admission rate of 70% or more; this says what the levels
a climb passes through admit. Round 1 is left out (nothing is established
in it). Not part of `make bench` (it reads finished runs):

    python -m benchmarks.admission_by_standing HOME [HOME ...] [--target 0.7]
    python -m benchmarks.admission_by_standing HOME [HOME ...] --variants LEVEL

`--variants` prints instead, for one level from -1 up, each capability's
candidates per level-0 variant (the seed's, generator_common.level0_variant),
rounds 2 on: whether the policy passes a family's task depends on which of
its variants it is.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import duckdb

from benchmarks import warehouse_copy
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.generators.generator_common import SHOWN_COMMAND_LEVEL, WARMUP_LEVELS, level0_variant

# The default round's candidates, the unit the ceiling is also given in.
ROUND_CANDIDATES = LoopConfig().candidates_per_round


@dataclass(frozen=True)
class Candidate:
    round_number: int
    capability: str
    level: int
    seed: int
    pass_count: int | None  # None: never scored (no admission row)
    admitted: bool


def candidates(home: Path) -> list[Candidate]:
    """The run at `home`'s synthesized candidates, every round, in round order."""
    with warehouse_copy(home) as copy:
        db = duckdb.connect(str(copy), read_only=True)
        try:
            rows = db.sql("SELECT t.round, t.capability_id, t.difficulty, t.seed, a.pass_count, "
                          "coalesce(a.admitted, false) "
                          "FROM tasks t LEFT JOIN admissions a USING (round, task_id) "
                          "ORDER BY t.round, t.task_id").fetchall()
        finally:
            db.close()
    return [Candidate(int(key.removeprefix("round-")), capability, int(level), int(seed),
                      None if passes is None else int(passes), bool(admitted))
            for key, capability, level, seed, passes, admitted in rows]


def by_standing(rows: Iterable[Candidate]) -> dict[tuple[int, str], Counter]:
    """(level, "new" | "established") -> counts of candidates, admitted,
    passed 0, passed too often, never scored; rounds 2 on. Standing is per
    run: call it once per run's candidates and add the counters."""
    rows = sorted(rows, key=lambda row: row.round_number)
    seen: set[tuple[str, int]] = set()
    this_round: set[tuple[str, int]] = set()
    current = None
    out: dict[tuple[int, str], Counter] = {}
    for row in rows:
        if row.round_number != current:
            seen |= this_round
            this_round, current = set(), row.round_number
        this_round.add((row.capability, row.level))
        if row.round_number == 1:
            continue
        standing = "established" if (row.capability, row.level) in seen else "new"
        counts = out.setdefault((row.level, standing), Counter())
        counts["candidates"] += 1
        if row.admitted:
            counts["admitted"] += 1
        elif row.pass_count is None:
            counts["never scored"] += 1
        elif row.pass_count == 0:
            counts["passed 0"] += 1
        else:
            counts["passed too often"] += 1
    return out


def share_ceiling(rate: float, rest_rate: float, target: float) -> float:
    """The largest share of a round's candidates that may admit at `rate`
    while the round admits `target`, the rest admitting at `rest_rate`: 1
    when `rate` reaches the target itself, 0 when the rest alone does not."""
    if rate >= target:
        return 1.0
    if rest_rate <= target:
        return 0.0
    return (rest_rate - target) / (rest_rate - rate)


def table(homes: Sequence[Path], target: float) -> str:
    counts: dict[tuple[int, str], Counter] = {}
    for home in homes:
        for key, counter in by_standing(candidates(home)).items():
            counts.setdefault(key, Counter()).update(counter)
    warmup = counts.get((WARMUP_LEVELS[0], "established"), Counter())
    if not warmup["candidates"]:
        raise SystemExit("no established warm-up candidates in rounds 2 on: nothing to set the rest of a round by")
    rest_rate = warmup["admitted"] / warmup["candidates"]
    lines = [f"| level | standing | admitted / candidates | passed 0 | passed too often | never scored "
             f"| most of a round at {target:.0%} |", "|---|---|---|---|---|---|---|"]
    for (level, standing), c in sorted(counts.items()):
        rate = c["admitted"] / c["candidates"]
        share = share_ceiling(rate, rest_rate, target)
        ceiling = "(the rest)" if (level, standing) == (WARMUP_LEVELS[0], "established") else \
            f"{share:.0%} ({share * ROUND_CANDIDATES:.0f} of {ROUND_CANDIDATES})"
        lines.append(f"| {level} | {standing} | {c['admitted']}/{c['candidates']} ({rate:.1%}) | {c['passed 0']} "
                     f"| {c['passed too often']} | {c['never scored']} | {ceiling} |")
    return "\n".join(lines)


def variant_table(homes: Sequence[Path], level: int) -> str:
    """Per capability and level-0 variant at `level` (-1 or up), rounds 2
    on: admitted / candidates and every candidate's pass count, sorted."""
    if level < SHOWN_COMMAND_LEVEL:
        raise SystemExit(f"level {level} has no level-0 variants: give {SHOWN_COMMAND_LEVEL} or above")
    cells: dict[tuple[str, int], list[Candidate]] = {}
    for home in homes:
        for row in candidates(home):
            if row.level == level and row.round_number > 1:
                cells.setdefault((row.capability, level0_variant(row.seed)), []).append(row)
    lines = ["| capability | variant | admitted / candidates | passes (of the rollouts; - never scored) |",
             "|---|---|---|---|"]
    for (capability, variant), rows in sorted(cells.items()):
        passes = [str(p) for p in sorted(row.pass_count for row in rows if row.pass_count is not None)]
        passes += ["-"] * sum(row.pass_count is None for row in rows)
        lines.append(f"| {capability} | {variant} | {sum(row.admitted for row in rows)}/{len(rows)} | "
                     f"{', '.join(passes)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("homes", nargs="+", type=Path, help="finished runs' homes ($CLAWLOOP_HOME)")
    parser.add_argument("--target", type=float, default=0.7, help="the round admission rate to keep (default 0.7)")
    parser.add_argument("--variants", type=int, metavar="LEVEL", help="per capability and level-0 variant at LEVEL")
    args = parser.parse_args(argv)
    print(table(args.homes, args.target) if args.variants is None else variant_table(args.homes, args.variants))


if __name__ == "__main__":
    main()
