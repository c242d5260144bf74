"""How the rollouts' sampling temperature moves the admission rate: one
finished round's candidates, run 8 times each by the policy that validated
them, at each temperature given, judged by the real admission band.

Not part of `make bench` (it needs a finished run); it is how the loop's
temperature (LoopConfig.temperature) was chosen:

    python -m benchmarks.sampling_temperature $CLAWLOOP_HOME 2 0.7,0.85,0.9,1.0
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

import duckdb

from clawloop_assets.admission import decide_admission
from clawloop_assets.agent_loop import judged_reward, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_key
from clawloop_assets.task_bundle import load_task_bundle
from resources.sandbox import BubblewrapSandbox


def round_inputs(home: Path, number: int) -> tuple[list[Path], Path | None]:
    """Round `number`'s validated candidates (bundle paths) and its input
    policy: round number-1's trained checkpoint, None (the base model) for round 1."""
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        bundles = [Path(p) for (p,) in con.execute(
            "select t.bundle_path from tasks t join admissions a using (round, task_id) "
            "where t.round = ? order by t.task_id", [round_key(number)]).fetchall()]
        checkpoint = None
        if number > 1:
            row = con.execute("select path from checkpoints where round = ? and kind = 'policy'",
                              [round_key(number - 1)]).fetchone()
            if row is None:
                raise SystemExit(f"{round_key(number - 1)} has no policy checkpoint in {home}")
            checkpoint = Path(row[0])
    if not bundles:
        raise SystemExit(f"{round_key(number)} has no validated candidates in {home}")
    return bundles, checkpoint


def measure(home: Path, number: int, temperatures: list[float], seed: int = 7,
            loop: LoopConfig | None = None) -> list[dict[str, float]]:
    """Per temperature: the admission rate and pass rate of round `number`'s
    candidates, with `loop`'s band and agent settings (the defaults if None)."""
    from resources.embedded_policy import EmbeddedPolicyModel

    loop = loop or LoopConfig()
    bundles, checkpoint = round_inputs(home, number)
    tasks = [load_task_bundle(path) for path in bundles]
    policy, sandbox, band = EmbeddedPolicyModel(), BubblewrapSandbox(), loop.admission_band()
    session = policy.load(checkpoint or policy.base_checkpoint())
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for temperature in temperatures:
                settings = loop.model_copy(update={"temperature": temperature}).agent_settings()
                started = time.perf_counter()
                rollouts = run_rollouts(session, sandbox, tasks, band.rollouts_per_task, settings,
                                        Path(tmp) / str(temperature), seed)
                rewards: dict[str, list] = {}
                for rollout in rollouts:
                    rewards.setdefault(rollout.task.task_id, []).append(judged_reward(rollout))
                decisions = Counter(decide_admission(r, band).decision for r in rewards.values())
                scored = [r for rs in rewards.values() for r in rs if r is not None]
                results.append({
                    "temperature": temperature,
                    "tasks": len(tasks),
                    "admitted": decisions["admitted"],
                    "admission_rate": decisions["admitted"] / len(tasks),
                    "pass_rate": sum(scored) / max(len(scored), 1),
                    "all_failed": decisions["all_failed"] / len(tasks),
                    "too_easy": decisions["too_easy"] / len(tasks),
                    "seconds": time.perf_counter() - started,
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


if __name__ == "__main__":
    main()
