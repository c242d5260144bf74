"""A run's rounds in one table, as issue 26's studies report them: the
admission rate, the warm-up temperature, the plan's candidates by level,
the capabilities planned at level 0 or above and those at the rung (-1)
with all or part of their candidates, the validation pass counts of
the rung (-1) and of level 0 and up, the held-out split before and after
training, and the evaluation set by level with its 95% intervals.

Not part of `make bench` (it reads a run, finished or still running):

    python -m benchmarks.run_rounds $CLAWLOOP_HOME [RUN_LOG]

RUN_LOG, `clawloop run`'s output, adds each round's wall time (its
"== round-000k finished in ... ==" line). The warehouse is read from a copy,
so a run that holds it open is not disturbed.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Sequence

import duckdb

from benchmarks import warehouse_copy

COLUMNS = ("round", "wall", "admitted / candidates", "T at -2", "candidates by level", "caps at >= 0",
           "caps at -1: whole, part", "validation -1", "validation >= 0", "E_k before -> after", "eval -2", "eval -1", "eval 0", "eval 1")
_FINISHED = re.compile(r"== (round-\d+) finished in (.+?) ==")


def _percent(value: float) -> str:
    return f"{100 * value:.1f}"


def round_walls(log: Path) -> dict[str, str]:
    """round key -> its wall time as the run log prints it (the last time a round finished)."""
    walls = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _FINISHED.search(line)
        if match:
            walls[match.group(1)] = match.group(2)
    return walls


def _warehouse_figures(home: Path) -> tuple[dict, dict, dict, dict]:
    with warehouse_copy(home) as copy:
        db = duckdb.connect(str(copy), read_only=True)
        try:
            planned: dict[str, dict[int, int]] = {}
            for key, level, count in db.sql("SELECT round, difficulty, sum(candidates) FROM synthesis_plans "
                                            "GROUP BY 1, 2 ORDER BY 1, 2").fetchall():
                planned.setdefault(key, {})[level] = int(count)
            climbed = dict(db.sql("SELECT round, count(DISTINCT capability_id) FROM synthesis_plans "
                                  "WHERE difficulty >= 0 AND candidates > 0 GROUP BY 1").fetchall())
            on_rung = {key: (int(whole), int(part)) for key, whole, part in db.sql(
                "SELECT round, count(*) FILTER (WHERE low = -1), count(*) FILTER (WHERE low < -1 AND high >= -1) "
                "FROM (SELECT round, capability_id, min(difficulty) AS low, max(difficulty) AS high "
                "FROM synthesis_plans WHERE candidates > 0 GROUP BY 1, 2) GROUP BY 1").fetchall()}
            validation: dict[str, dict[int, tuple[int, int]]] = {}
            for key, level, passes, scored in db.sql(
                    "SELECT a.round, t.difficulty, sum(a.pass_count), sum(a.scored_rollouts) FROM admissions a "
                    "JOIN tasks t USING (round, task_id) GROUP BY 1, 2").fetchall():
                validation.setdefault(key, {})[level] = (int(passes), int(scored))
        finally:
            db.close()
    return planned, climbed, on_rung, validation


def table(home: Path, log: Path | None = None) -> str:
    """The markdown table of the run at `home`, one row per round with a summary."""
    walls = round_walls(log) if log else {}
    planned, climbed, on_rung, validation = _warehouse_figures(home)
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for path in sorted((home / "rounds").glob("round-*/summary.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))
        key, by_level = summary["round"], summary["evaluation_by_level"]

        def evaluation(level: str) -> str:
            cell = by_level.get(level)  # a round's evaluation_levels may leave a level out
            if cell is None:
                return "-"
            return f"{_percent(cell['pass_at_1'])} [{_percent(cell['ci_low'])}, {_percent(cell['ci_high'])}]"

        counts = validation.get(key, {})
        above = [counts[level] for level in counts if level >= 0]
        rows.append("| " + " | ".join((
            key.removeprefix("round-").lstrip("0"), walls.get(key, "?"),
            f"{summary['admitted']} / {summary['candidates']} ({_percent(summary['admission_rate'])}%)",
            f"{summary['rollout_temperature']:.2f}",
            ", ".join(f"{level}: {count}" for level, count in sorted(planned.get(key, {}).items())),
            str(climbed.get(key, 0)), "%d, %d" % on_rung.get(key, (0, 0)),
            "%d/%d" % counts[-1] if -1 in counts else "-",
            "%d/%d" % (sum(p for p, _ in above), sum(n for _, n in above)) if above else "-",
            f"{_percent(summary['heldout_pass_rate_before'])} -> {_percent(summary['heldout_pass_rate_after'])}",
            evaluation("-2"), evaluation("-1"), evaluation("0"), evaluation("1"))) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="a run's CLAWLOOP_HOME")
    parser.add_argument("log", type=Path, nargs="?", help="the run's `clawloop run` output")
    args = parser.parse_args(argv)
    print(table(args.home, args.log))


if __name__ == "__main__":
    main()
