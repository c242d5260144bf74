"""How the rollouts' sampling temperature moves the admission rate: one
finished round's candidates, run 8 times each by the policy that validated
them, at each temperature given, judged by the real admission band.

Not part of `make bench` (it needs a finished run);
docs/experiments/2026-11-30-sampling-temperature.md reports what it measured:

    python -m benchmarks.sampling_temperature $CLAWLOOP_HOME 2 0.7,0.85,0.9,1.0

Each temperature's line is followed by one per kind of task (a warm-up
task's operation, else its level): operations answer a temperature apart.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from benchmarks.sequential_rollouts import decisions
from clawloop_assets.harness.agent_loop import judged_reward, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_key
from clawloop_assets.round_state import PolicyRef, input_policy, load_bundles, require_rows
from clawloop_assets.task_bundle import TaskBundle, warmup_operation
from resources.paths import WAREHOUSE_FILE
from resources.policy import PolicyModel
from resources.sandbox import BubblewrapSandbox
from resources.warehouse import DuckDBWarehouse


def round_inputs(home: Path, number: int, policy: PolicyModel) -> tuple[list[TaskBundle], PolicyRef]:
    """Round `number`'s validated candidates and its input policy (round
    number-1's trained checkpoint, the base model for round 1), read from the
    warehouse of the run at `home` as the round itself reads them."""
    warehouse, key = DuckDBWarehouse(path=str(home / WAREHOUSE_FILE)), round_key(number)
    validated = require_rows(warehouse, "admissions", key, "admitted_tasks")["task_id"].to_list()
    return load_bundles(warehouse, key, validated), input_policy(warehouse, policy, key)


def task_kind(task: TaskBundle) -> str:
    """A warm-up task's operation, else its level."""
    return warmup_operation(task.root) or f"level {task.difficulty}"


def measure(home: Path, number: int, temperatures: list[float], seed: int = 7,
            loop: LoopConfig | None = None, task_ids: Collection[str] | None = None) -> list[dict]:
    """Per temperature: the admission rate and pass rate of round `number`'s
    candidates (only those in `task_ids` if given), with `loop`'s band and
    agent settings (the defaults if None), the same per kind of task
    (`by_kind`), and each task's decision (`decisions`). A rollout's sampling
    does not depend on the other tasks in its call, so a subset is decided as
    in the whole."""
    from resources.embedded_policy import EmbeddedPolicyModel

    loop, policy = loop or LoopConfig(), EmbeddedPolicyModel()
    tasks, ref = round_inputs(home, number, policy)
    if task_ids is not None:
        tasks = [task for task in tasks if task.task_id in task_ids]
    sandbox, band = BubblewrapSandbox(), loop.admission_band()
    session = policy.load(ref.path)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for temperature in temperatures:
                # Every level at this temperature: what the benchmark compares.
                settings = replace(loop.agent_settings(), temperature=temperature)
                started = time.perf_counter()
                rollouts = run_rollouts(session, sandbox, tasks, band.rollouts_per_task, settings,
                                        Path(tmp) / str(temperature), seed)
                decided_by_task = decisions(rollouts, band)
                decided = Counter(decided_by_task.values())
                scored = [reward for reward in map(judged_reward, rollouts) if reward is not None]
                kinds: dict[str, dict] = defaultdict(lambda: {"tasks": 0, "admitted": 0, "passes": 0.0, "scored": 0})
                for task in tasks:
                    kind = kinds[task_kind(task)]
                    kind["tasks"] += 1
                    kind["admitted"] += decided_by_task[task.task_id] == "admitted"
                for rollout in rollouts:
                    reward = judged_reward(rollout)
                    if reward is not None:
                        kind = kinds[task_kind(rollout.task)]
                        kind["passes"] += reward
                        kind["scored"] += 1
                results.append({
                    "temperature": temperature,
                    "tasks": len(tasks),
                    "admitted": decided["admitted"],
                    "admission_rate": decided["admitted"] / len(tasks),
                    "pass_rate": sum(scored) / max(len(scored), 1),
                    "all_failed": decided["all_failed"] / len(tasks),
                    "too_easy": decided["too_easy"] / len(tasks),
                    "seconds": time.perf_counter() - started,
                    "decisions": decided_by_task,
                    "by_kind": {kind: {"tasks": k["tasks"], "admitted": k["admitted"],
                                       "pass_rate": k["passes"] / max(k["scored"], 1)} for kind, k in sorted(kinds.items())},
                })
    finally:
        session.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="a run's CLAWLOOP_HOME")
    parser.add_argument("round", type=int, help="the round whose candidates to run")
    parser.add_argument("temperatures", help="comma-separated, e.g. 0.7,0.9")
    args = parser.parse_args()
    rows = measure(args.home, args.round, [float(t) for t in args.temperatures.split(",")])
    print("temperature  admission  pass rate  never solved  too easy  seconds")
    for row in rows:
        print(f"{row['temperature']:>11}  {row['admission_rate']:>9.1%}  {row['pass_rate']:>9.1%}  "
              f"{row['all_failed']:>12.1%}  {row['too_easy']:>8.1%}  {row['seconds']:>7.0f}")
        for kind, k in row["by_kind"].items():
            print(f"    {kind}: {k['admitted']} / {k['tasks']} admitted, pass rate {k['pass_rate']:.0%}")


if __name__ == "__main__":
    main()
