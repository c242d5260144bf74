"""`make bench`: every benchmark, printed as a table of ratios and written to
benchmarks/results.json so a later run can be compared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping

from benchmarks import (
    harness_throughput,
    rollout_throughput,
    round_phases,
    sandbox_overhead,
    sequential_rollouts,
    shared_prefix,
    synthesis_throughput,
    training_steps,
)

RESULTS = Path(__file__).resolve().parent / "results.json"


def table_rows(results: Mapping[str, object]) -> list[tuple[str, str]]:
    """One (key, value) row per figure: an object's entries as `key.entry`,
    booleans as yes/no, numbers to four significant digits."""
    rows: list[tuple[str, str]] = []
    for key, value in sorted(results.items()):
        if isinstance(value, Mapping):
            rows += table_rows({f"{key}.{entry}": v for entry, v in value.items()})
        elif isinstance(value, bool):
            rows.append((key, "yes" if value else "no"))
        elif isinstance(value, (int, float)):
            rows.append((key, f"{value:.4g}"))
        else:
            raise TypeError(f"benchmark result {key!r} is a {type(value).__name__}, not a number, boolean or object")
    return rows


def format_table(results: Mapping[str, object]) -> str:
    rows = table_rows(results)
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def main() -> None:
    results: dict[str, object] = {}
    # Each benchmark's own wall time: `make bench` must stay under 30 minutes on two cores.
    seconds: dict[str, float] = {}

    def run(name: str, announce: str | None, measure: Callable[[], Mapping[str, object]]) -> None:
        if announce:
            print(announce, flush=True)
        started = time.perf_counter()
        results.update(measure())
        seconds[name] = time.perf_counter() - started
        print(f"  {name}: {seconds[name]:.0f} s", flush=True)

    run("sandbox_overhead", None, sandbox_overhead.measure)
    run("synthesis_throughput", "building and validating 1,024 candidate tasks (a few minutes)",
        lambda: synthesis_throughput.measure(1024))
    run("training_steps",
        "timing GRPO and SFT training steps on the embedded model, ours beside TRL's trainers (several minutes)",
        training_steps.measure)
    run("shared_prefix", "a training pass with the rows' shared prefix run once, against every row whole",
        shared_prefix.measure)
    run("sequential_rollouts",
        "validating 48 level-0 candidates with all 8 rollouts and in waves, on the embedded model",
        sequential_rollouts.measure)
    run("harness_throughput", "the harness alone: the oracle's episodes with a scripted policy, 1, 2 and 4 threads",
        harness_throughput.measure)
    run("rollout_throughput",
        "rolling out 48 level-0 tasks x 8 on the embedded model, 64 sequences a call, then each task's first "
        "sample one a call (several minutes)",
        rollout_throughput.measure)
    run("round_phases", "materializing one small round (24 candidates) and reading its cost ledger (several minutes)",
        round_phases.measure)
    results["bench.seconds_by_benchmark"] = seconds | {"total": sum(seconds.values())}
    print(format_table(results))
    print(round_phases.share_table(results))
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
