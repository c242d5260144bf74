"""A whole small round's wall time by phase, from its cost ledger, beside the
paper's phase shares (SPEC: one round on 32 H800s, validation rollouts about
41% of the wall time).

One round is materialized through Dagster as a scheduled run would, with the
real sandbox, embedded model, warehouse and training jobs, in a throwaway
$CLAWLOOP_HOME (the converted model stays in the real cache). Time the ledger
does not cover (Dagster itself, the unledgered assets: plans, generators,
splits, the summary) is its own phase, `outside_ledger`.

    python -m benchmarks.round_phases [--profile round_profile.txt|.html]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

# The paper's round (SPEC), wall hours by phase.
PAPER_WALL_HOURS = {"synthesis": 15.98, "validation_rollouts": 30.76, "sft": 8.03, "grpo": 18.52, "diagnosis": 0.94}
# Our ledger's phases under the paper's: agent-free validation is part of
# building a task there; the before/after rollouts on T_k and E_k and the
# failure summaries are the paper's diagnosis rollouts. Anything else (the
# fixed-set evaluation, time outside the ledger, a phase added later) is
# `other`, which the paper's round cost does not have.
PAPER_PHASE_OF = {
    "synthesis": "synthesis",
    "agent_free_validation": "synthesis",
    "validation": "validation_rollouts",
    "sft": "sft",
    "grpo": "grpo",
    "heldout_before": "diagnosis",
    "heldout_after": "diagnosis",
    "train_before": "diagnosis",
    "train_after": "diagnosis",
    "diagnosis_report": "diagnosis",
}
OUTSIDE_LEDGER = "outside_ledger"
OTHER = "other"
ROUND_KEY = "round-0001"


def bench_round():
    """The small round this benchmark times: 24 candidates, 8 rollouts each,
    and a small fixed evaluation set. The round tests run a smaller one
    built from it (tests/conftest.py, small_round)."""
    from clawloop_assets.loop_config import LoopConfig

    return LoopConfig(
        candidates_per_round=24,
        rollouts_per_task=8,
        # Wider than the default [1, 5] so that a small round admits tasks whatever
        # the sampled outcomes; the band itself is tested in test_admission.py.
        admission_low=1,
        admission_high=7,
        heldout_samples=4,
        train_eval_samples=4,
        max_turns=1,
        train_batch_size=4,
        # The evaluation set, small but graded: two families at levels -1 and 0,
        # one task and one sample each (4 rollouts, as many as before it was graded).
        evaluation_capabilities=["grouped_statistics", "entity_resolution"],
        evaluation_levels=[-1, 0],
        evaluation_seeds_per_cell=1,
        evaluation_samples=1,
    )


@contextmanager
def throwaway_home() -> Iterator[Path]:
    """A fresh $CLAWLOOP_HOME for one round, sharing the converted model cache."""
    from resources import paths
    from resources.environment import HOME, MODEL_CACHE

    model_cache = paths.model_cache_dir()  # resolved before $CLAWLOOP_HOME moves
    saved = {name: os.environ.get(name) for name in (HOME, MODEL_CACHE)}  # to put back as they were
    with tempfile.TemporaryDirectory(prefix="clawloop-bench-") as tmp:
        os.environ[HOME] = str(Path(tmp) / "home")
        os.environ[MODEL_CACHE] = str(model_cache)
        try:
            yield Path(tmp) / "home"
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def run_round(loop=None) -> tuple[dict[str, float], float]:
    """Materialize one round; its ledger's wall seconds by phase and the round's own wall time."""
    import dagster as dg

    from clawloop_assets.cli import why_stopped
    from clawloop_assets.definitions import gate_checks, round_assets
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.sandbox import BubblewrapSandbox
    from resources.training_launcher import SubprocessTrainingLauncher
    from resources.warehouse import DuckDBWarehouse

    resources = {
        "policy": EmbeddedPolicyModel(),
        "sandbox": BubblewrapSandbox(),
        "warehouse": DuckDBWarehouse(),
        "training_launcher": SubprocessTrainingLauncher(),
        "loop": loop or bench_round(),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [ROUND_KEY])
    started = time.perf_counter()
    result = dg.materialize([*round_assets, *gate_checks], partition_key=ROUND_KEY, instance=instance,
                            resources=resources, raise_on_error=False)
    wall = time.perf_counter() - started
    if not result.success:
        raise RuntimeError(f"the benchmark round failed: {why_stopped(result)}")
    return ledger_seconds(DuckDBWarehouse(), ROUND_KEY), wall


def ledger_seconds(warehouse, round_key: str) -> dict[str, float]:
    """A finished round's cost ledger: wall seconds by phase."""
    ledger = warehouse.read("cost_ledger", {"round": round_key})
    return {row["phase"]: float(row["wall_seconds"]) for row in ledger.iter_rows(named=True)}


def phase_results(ledger_seconds: Mapping[str, float], round_seconds: float) -> dict[str, object]:
    """Seconds by ledger phase (plus what the ledger does not cover), and
    shares of the round by the paper's phases beside the paper's own."""
    ledgered = sum(ledger_seconds.values())
    if round_seconds <= 0 or ledgered > round_seconds * 1.001:
        raise ValueError(f"the ledger holds {ledgered:.1f} s of a {round_seconds:.1f} s round")
    seconds = dict(ledger_seconds)
    seconds[OUTSIDE_LEDGER] = max(0.0, round_seconds - ledgered)
    ours = {phase: 0.0 for phase in PAPER_WALL_HOURS} | {OTHER: 0.0}
    for phase, value in seconds.items():
        ours[PAPER_PHASE_OF.get(phase, OTHER)] += value / round_seconds
    paper_total = sum(PAPER_WALL_HOURS.values())
    paper = {phase: hours / paper_total for phase, hours in PAPER_WALL_HOURS.items()} | {OTHER: 0.0}
    return {
        "round.seconds": round_seconds,
        "round.seconds_by_phase": seconds,
        "round.share_by_phase": ours,
        "round.paper_share_by_phase": paper,
        "round.validation_share_ratio_vs_paper": ours["validation_rollouts"] / paper["validation_rollouts"],
    }


def share_table(results: Mapping[str, object]) -> str:
    """Our share of the round beside the paper's, phase by phase."""
    ours, paper = results["round.share_by_phase"], results["round.paper_share_by_phase"]
    seconds: dict[str, float] = {}
    for phase, value in results["round.seconds_by_phase"].items():
        key = PAPER_PHASE_OF.get(phase, OTHER)
        seconds[key] = seconds.get(key, 0.0) + value
    lines = [f"{'phase':<22}{'seconds':>10}{'ours':>8}{'paper':>8}"]
    for phase in ours:
        lines.append(f"{phase:<22}{seconds.get(phase, 0.0):>10.1f}{ours[phase]:>8.1%}{paper[phase]:>8.1%}")
    lines.append(f"{'round':<22}{results['round.seconds']:>10.1f}{sum(ours.values()):>8.1%}{sum(paper.values()):>8.1%}")
    return "\n".join(lines)


def measure(loop=None, profile: Path | None = None) -> dict[str, object]:
    """One round in a throwaway home; with `profile`, under pyinstrument, its
    report written there (HTML for a .html name, else text)."""
    with throwaway_home():
        if profile is None:
            ledger, wall = run_round(loop)
        else:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.01)
            profiler.start()
            try:
                ledger, wall = run_round(loop)
            finally:
                profiler.stop()
                profile = Path(profile)
                profile.parent.mkdir(parents=True, exist_ok=True)
                if profile.suffix == ".html":
                    profile.write_text(profiler.output_html())
                else:
                    profile.write_text(profiler.output_text(unicode=True, color=False, show_all=False))
    return phase_results(ledger, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="profile the round with pyinstrument into this file (.txt or .html)")
    args = parser.parse_args()
    results = measure(profile=args.profile)
    for phase, seconds in sorted(results["round.seconds_by_phase"].items(), key=lambda kv: -kv[1]):
        print(f"{phase:<24}{seconds:>9.1f} s")
    print(share_table(results))
    if args.profile:
        print(f"profile written to {args.profile}")


if __name__ == "__main__":
    main()
