"""`make bench`: every benchmark, printed as a table of ratios and written to
benchmarks/results.json so a later run can be compared."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import sandbox_overhead, sequential_rollouts, synthesis_throughput, training_steps

RESULTS = Path(__file__).resolve().parent / "results.json"


def main() -> None:
    results = {}
    results.update(sandbox_overhead.measure())
    print("building and validating 1,024 candidate tasks (a few minutes)", flush=True)
    results.update(synthesis_throughput.measure(1024))
    print(
        "timing GRPO and SFT training steps on the embedded model, ours beside TRL's trainers (several minutes)",
        flush=True,
    )
    results.update(training_steps.measure())
    print("validating 48 level-0 candidates with all 8 rollouts and in waves, on the embedded model", flush=True)
    results.update(sequential_rollouts.measure())
    width = max(len(k) for k in results)
    for key, value in sorted(results.items()):
        print(f"{key:<{width}}  {value:.4g}")
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
