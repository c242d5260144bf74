"""One round of a finished run replayed, as it was or with a change.

A round starts from what its home holds of the rounds before it, and its
sampling and training draw from seeds the round fixes, so on one machine a
round replayed from a copy of its run's home reproduces it (every task's
pass count, the training, the evaluation), and one replayed on a tree with
a controller rule switched off differs only where that rule acted: an
ablation of the rule, task for task, in the rounds where it acts
(docs/experiments/2026-12-04-four-rules-replayed.md). Only nearly: a task
sampled beside other tasks than before may, rarely, draw a token
otherwise, since the batch changes float rounding. Not part of
`make bench` (each replay is a whole round):

    python -m benchmarks.replay_round prepare SRC_HOME DST_HOME ROUND
    cd TREE && CLAWLOOP_HOME=DST_HOME clawloop run --rounds 1 --config THE_RUNS_CONFIG
    python -m benchmarks.replay_round compare SRC_HOME DST_HOME ROUND

`prepare` makes DST_HOME the finished run SRC_HOME as it stood before
ROUND: its rounds before ROUND (their checkpoints hard-linked, since a
round only reads earlier rounds' weights, and copied otherwise) and its
warehouse less every row of ROUND and after, so that the next round is
ROUND. `compare` prints both homes' ROUND per level (and operation, at a
warm-up level) and the tasks they share, with how many pass as often in
both.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Sequence

import duckdb

from benchmarks import warehouse_copy
from clawloop_assets.partitions import round_after
from clawloop_assets.synthesis.generators.generator_common import WARMUP_OPERATIONS
from clawloop_assets.task_bundle import warmup_operation
from resources.paths import WAREHOUSE_FILE
from resources.run_lock import RunLockHeld, acquire_run_lock

# A home's parts that are not rounds: the Dagster instance and the fixed evaluation set.
HOME_PARTS = ("dagster", "evaluation")


def prepare(source: Path, destination: Path, round_key: str) -> list[str]:
    """Make `destination` the run at `source` as it stood before `round_key`;
    returns the rounds it holds."""
    if destination.exists():
        raise SystemExit(f"replay_round: {destination} exists; give a new home to replay into")
    if not (source / "rounds" / round_key).is_dir():
        raise SystemExit(f"replay_round: {source} has no {round_key} to replay (no {source / 'rounds' / round_key})")
    try:
        # Held while copying: no run may write the warehouse under the copy.
        lock = acquire_run_lock(source / WAREHOUSE_FILE, "replay_round prepare", None)
    except RunLockHeld as exc:
        raise SystemExit(f"replay_round: {exc}; replay a finished run") from None
    try:
        return _copy_before(source, destination, round_key)
    finally:
        lock.release()


def _copy_before(source: Path, destination: Path, round_key: str) -> list[str]:
    kept = sorted(path.name for path in (source / "rounds").glob("round-*") if path.name < round_key)
    db = duckdb.connect(str(source / WAREHOUSE_FILE), read_only=True)
    try:
        finished = [key for (key,) in db.execute("SELECT round FROM round_summaries WHERE round < ? ORDER BY 1",
                                                 [round_key]).fetchall()]
    finally:
        db.close()
    if finished != kept or round_after(finished) != round_key:
        raise SystemExit(f"replay_round: {source}'s finished rounds before {round_key} are {finished}, its round "
                         f"folders {kept}: they do not lead to {round_key}")
    destination.mkdir(parents=True)
    for part in HOME_PARTS:
        if (source / part).exists():
            shutil.copytree(source / part, destination / part, symlinks=True)
    for key in kept:
        for item in (source / "rounds" / key).iterdir():
            target = destination / "rounds" / key / item.name
            if item.name == "checkpoints":
                shutil.copytree(item, target, copy_function=_link)
            elif item.is_dir():
                shutil.copytree(item, target, symlinks=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(item, target)
    shutil.copyfile(source / WAREHOUSE_FILE, destination / WAREHOUSE_FILE)
    db = duckdb.connect(str(destination / WAREHOUSE_FILE))
    try:
        for (table,) in db.sql("SELECT DISTINCT table_name FROM information_schema.columns "
                               "WHERE column_name = 'round'").fetchall():
            db.execute(f'DELETE FROM "{table}" WHERE round >= ?', [round_key])
    finally:
        db.close()
    return kept


def _link(source: str, destination: str) -> None:
    Path(destination).hardlink_to(source)


def round_rows(home: Path, round_key: str) -> dict[str, tuple[str, tuple[int, str], int, bool]]:
    """task id -> (capability, cell, pass count, admitted) of `round_key`'s
    candidates at `home`, read from a copy of the warehouse. The cell is
    (level, operation): at a warm-up level the operation the task asks (its
    bundle's meta.json), since there the operation is the skill and a rule
    may move candidates between operations; "" above."""
    with warehouse_copy(home) as copy:
        db = duckdb.connect(str(copy), read_only=True)
        try:
            rows = db.execute("SELECT t.task_id, t.capability_id, t.difficulty, t.bundle_path, a.pass_count, "
                              "a.admitted FROM tasks t JOIN admissions a USING (round, task_id) WHERE t.round = ?",
                              [round_key]).fetchall()
        finally:
            db.close()
    return {task: (capability, _cell(int(level), bundle), int(passes), bool(admitted))
            for task, capability, level, bundle, passes, admitted in rows}


def _cell(level: int, bundle: str | None) -> tuple[int, str]:
    if level not in WARMUP_OPERATIONS:
        return level, ""
    operation = warmup_operation(bundle)
    if operation is None:
        raise SystemExit(f"replay_round: a level-{level} task's bundle has no meta.json to name its operation "
                         f"({bundle})")
    return level, operation


def _named(cell: tuple[int, str]) -> str:
    level, operation = cell
    return f"level {level} {operation}" if operation else f"level {level}"


def compare(first: Path, second: Path, round_key: str) -> str:
    """Both homes' `round_key`: admitted / candidates per cell (level, and
    operation at a warm-up level), the tasks in both with how many pass
    equally often, and the tasks in one only."""
    rows = {home: round_rows(home, round_key) for home in (first, second)}
    for home, tasks in rows.items():
        if not tasks:
            raise SystemExit(f"replay_round: {home} has no admissions for {round_key}")
    cells = sorted({cell for tasks in rows.values() for _, cell, _, _ in tasks.values()})

    def at(tasks: dict, cell: tuple[int, str]) -> str:
        admitted = [row[3] for row in tasks.values() if row[1] == cell]
        return f"{sum(admitted)}/{len(admitted)}"

    lines = [f"| {round_key} | " + " | ".join(map(_named, cells)) + " | admitted |",
             "|---|" + "---|" * (len(cells) + 1)]
    for home, tasks in rows.items():
        admitted = sum(row[3] for row in tasks.values())
        lines.append(f"| {home} | " + " | ".join(at(tasks, cell) for cell in cells)
                     + f" | {admitted}/{len(tasks)} ({100 * admitted / len(tasks):.1f}%) |")
    # A task id names the capability, level and seed; at a warm-up level
    # the same id may ask another operation, so only same-cell tasks pair.
    shared = [task for task in rows[first].keys() & rows[second].keys()
              if rows[first][task][1] == rows[second][task][1]]
    same = sum(rows[first][task][2] == rows[second][task][2] for task in shared)
    lines.append(f"\ntasks in both: {len(shared)}, passed as often in both: {same}")
    for home, tasks in rows.items():
        for task in sorted(tasks.keys() - set(shared)):
            capability, cell, passes, admitted = tasks[task]
            lines.append(f"only in {home}: {capability} {_named(cell)} passed {passes}"
                         f"{', admitted' if admitted else ''}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help in (("prepare", "make DST_HOME the run at SRC_HOME as it stood before ROUND"),
                       ("compare", "ROUND of both homes, per level and task by task")):
        command = commands.add_parser(name, help=help)
        command.add_argument("first", type=Path, metavar="SRC_HOME")
        command.add_argument("second", type=Path, metavar="DST_HOME")
        command.add_argument("round", metavar="ROUND", help="e.g. round-0006")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        kept = prepare(args.first, args.second, args.round)
        print(f"{args.second}: rounds {', '.join(kept) or 'none'}; `CLAWLOOP_HOME={args.second} "
              f"clawloop run --rounds 1` replays {args.round}")
    else:
        print(compare(args.first, args.second, args.round))


if __name__ == "__main__":
    main()
