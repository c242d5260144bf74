"""One level of the fixed evaluation set at more seeds a cell than a run
builds: how a run's policies read there, as the evaluation asset reads
them (one sample a task at the fixed temperature, the run's evaluation
sampling seed, pass@1 with its interval over tasks), beside the same
figure on the run's own draws only. The measurements behind
docs/experiments/2026-12-04-round-2s-admission.md ("The level -1
evaluation at four times the tasks").

Not part of `make bench` (it reads finished runs' checkpoints). The set
is built under $CLAWLOOP_HOME, a scratch home; each run is HOME:SEED:

    CLAWLOOP_HOME=/tmp/evbig python -m benchmarks.evaluation_size \\
        /tmp/wQ0:0,/tmp/wQ1:1 round-0001,round-0006 --seeds-per-cell 8 --level -1

"own draws" are the tasks of the bigger set that the run's own set holds
(its manifest; the cells draw their seeds in order, so all of them unless
a cell took an alternative), so it reproduces the run's figure. The last
line of each run compares its first and last checkpoint task by task
as the evaluation asset compares a round with round 1
(`fixed_set.paired_change_by_level`): the tasks whose pass rate rose and
fell, and the sign test of the two.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Sequence

import polars as pl

from clawloop_assets.assets.evaluation import evaluation_sampling_seed
from clawloop_assets.evaluation.fixed_set import (
    EvaluationSetSpec,
    ensure_own_set,
    own_task_levels,
    paired_change_by_level,
    pass_at_1,
)
from clawloop_assets.harness.agent_loop import rollout_row, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from resources.warehouse import table_frame


def measure(runs: Sequence[tuple[Path, int]], rounds: Sequence[str], seeds_per_cell: int, level: int,
            torch_threads: int = 2) -> list[dict]:
    """Per (run, round): pass@1 on the bigger set and on the run's own draws,
    and the rollouts themselves."""
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.sandbox import BubblewrapSandbox

    policy, sandbox = EmbeddedPolicyModel(torch_threads=torch_threads), BubblewrapSandbox()
    _, tasks = ensure_own_set(sandbox, EvaluationSetSpec((), (level,), seeds_per_cell), log=print)
    results = []
    for home, seed in runs:
        loop = LoopConfig(seed=seed)
        own = {task.task_id for task in tasks} & set(own_task_levels(home / "evaluation" / "own"))
        if not own:
            raise ValueError(f"{home}/evaluation/own: no level {level} task of this set (has the run evaluated a round?)")
        for round_key in rounds:
            checkpoint = home / "rounds" / round_key / "checkpoints" / "policy"
            if not checkpoint.is_dir():
                raise ValueError(f"{checkpoint}: no trained policy of {round_key} in {home}")
            started = time.perf_counter()
            session = policy.load(checkpoint)
            try:
                with tempfile.TemporaryDirectory() as work:
                    rollouts = run_rollouts(session, sandbox, [t.bundle for t in tasks], 1, loop.agent_settings(),
                                            Path(work), evaluation_sampling_seed(loop))
            finally:
                session.close()
            frame = table_frame("rollouts", [rollout_row(r, round_key=round_key, phase="evaluation",
                                                         checkpoint_id=round_key) for r in rollouts])
            every = pass_at_1(frame)
            results.append({"home": str(home), "seed": seed, "round": round_key,
                            "seconds": time.perf_counter() - started, "all": every,
                            "own": pass_at_1(frame.filter(pl.col("task_id").is_in(sorted(own)))),
                            "rollouts": frame})
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", help="comma-separated HOME:SEED, each a finished run and its loop.seed")
    parser.add_argument("rounds", help="comma-separated round keys whose trained policy to read")
    parser.add_argument("--seeds-per-cell", type=int, default=8)
    parser.add_argument("--level", type=int, default=-1)
    parser.add_argument("--torch-threads", type=int, default=2, help="1 beside other runs on the same cores")
    args = parser.parse_args(argv)
    runs = [(Path(home), int(seed)) for home, seed in (run.rsplit(":", 1) for run in args.runs.split(","))]
    results = measure(runs, args.rounds.split(","), args.seeds_per_cell, args.level, args.torch_threads)
    levels = {task_id: args.level for row in results for task_id in row["rollouts"]["task_id"].to_list()}
    for row in results:
        every, own = row["all"], row["own"]
        print(f"{row['home']} seed {row['seed']} {row['round']}: {every.pass_at_1:.1%} "
              f"[{every.ci_low:.1%}, {every.ci_high:.1%}] on {every.tasks} tasks; own draws {own.pass_at_1:.1%} "
              f"[{own.ci_low:.1%}, {own.ci_high:.1%}] on {own.tasks}; {every.errors} errors; {row['seconds']:.0f} s")
    for home, _ in runs:
        mine = [row for row in results if row["home"] == str(home)]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            change = paired_change_by_level(first["rollouts"], last["rollouts"], levels)[args.level]
            print(f"{home} {first['round']} -> {last['round']}: pass rate rose on {change.rose} tasks, fell on "
                  f"{change.fell} of {change.tasks} (sign test p {change.p_value:.2g})")


if __name__ == "__main__":
    main()
