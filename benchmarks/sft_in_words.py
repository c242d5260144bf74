"""The shown tasks in words, apart from the loop: one SFT pass from a
finished run's policy on the successes of its shown tasks (levels -2 and
-1, every round's validation), either as sampled or as the same tasks in
words (`clawloop_assets.training.examples.in_words_examples`, what the
loop's SFT adds: each distinct trajectory once, at most four a task),
then the run's level-0 evaluation tasks in words and with their command
shown (`benchmarks.rung_forms`). The measurements behind
docs/experiments/2026-12-04-the-shown-tasks-in-words.md, taken before
that rule, when every success was copied.

Not part of `make bench` (it reads a finished run and trains):

    python -m benchmarks.sft_in_words $CLAWLOOP_HOME round-0006 --levels -1 --copies sampled,words
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import duckdb
import polars as pl

from benchmarks import warehouse_copy
from benchmarks.rung_forms import measure
from clawloop_assets.evaluation.task_dir import resolve_checkpoint
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.training.examples import in_words_examples, sft_examples, write_jsonl
from resources.paths import WAREHOUSE_FILE
from resources.policy import ChatTemplate
from resources.warehouse import DuckDBWarehouse
from training_jobs.configs import SFTJobConfig
from training_jobs.sft import train_sft

COPIES = ("sampled", "words")


def shown_successes(home: Path, levels: Sequence[int], copies: str, chat: ChatTemplate) -> pl.DataFrame:
    """Every validation success of the run's tasks at `levels`, as sampled
    or in words (a level that shows no command gives no copy in words)."""
    with warehouse_copy(home) as copy:
        with duckdb.connect(str(copy), read_only=True) as db:
            rollouts = db.sql("SELECT * FROM rollouts WHERE phase = 'validation'").pl()
            tasks = db.sql("SELECT task_id, bundle_path FROM tasks WHERE difficulty IN "
                           f"({', '.join(str(int(level)) for level in levels)})").pl()
    if copies == "sampled":
        return sft_examples(rollouts, tasks["task_id"].to_list())
    solved = set(rollouts.filter(pl.col("reward") == 1.0)["task_id"])
    bundles = [load_task_bundle(Path(path)) for task, path in tasks.iter_rows() if task in solved]
    examples, unmatched = in_words_examples(rollouts, bundles, chat)
    if unmatched:
        raise ValueError(f"{home}: {unmatched} successes sampled under another chat template")
    return examples


def run(home: Path, checkpoint: str, levels: Sequence[int], copies: Sequence[str], samples: int) -> list[dict]:
    from resources.embedded_policy import EmbeddedPolicyModel

    start = resolve_checkpoint(checkpoint, EmbeddedPolicyModel(),
                               lambda: DuckDBWarehouse(path=str(home / WAREHOUSE_FILE)))
    chat = ChatTemplate.of_checkpoint(start)
    results, trained = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in copies:
            examples = shown_successes(home, levels, kind, chat)
            output = Path(tmp) / kind
            config = SFTJobConfig(**LoopConfig().training_job_config("sft"), base_checkpoint=str(start),
                                  examples=str(write_jsonl(examples, Path(tmp) / f"{kind}.jsonl")),
                                  output_checkpoint=str(output))
            metrics = train_sft(config, log=lambda message: print(f"{kind}: {message}", file=sys.stderr, flush=True))
            results.append({"copies": kind, "examples": examples.height, "final_loss": metrics["final_loss"]})
            trained.append(str(output))
        for row, measured in zip(results, _by_checkpoint(measure(home, trained, ["words", "shown"], samples))):
            row |= measured
    return results


def _by_checkpoint(rows: list[dict]) -> list[dict]:
    merged: dict[str, dict] = {}
    for row in rows:
        merged.setdefault(row["checkpoint"], {})[row["form"]] = (row["passes"], row["scored"], row["by_capability"])
    return list(merged.values())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="a finished run's CLAWLOOP_HOME")
    parser.add_argument("checkpoint", help="the policy SFT starts from: base, a round key, a checkpoint directory")
    parser.add_argument("--levels", default="-2,-1", help="comma-separated levels whose successes are trained on")
    parser.add_argument("--copies", default="sampled,words", help="comma-separated, of " + ", ".join(COPIES))
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args(argv)
    copies = args.copies.split(",")
    if set(copies) - set(COPIES):
        parser.error(f"--copies: {sorted(set(copies) - set(COPIES))} are none of {COPIES}")
    for row in run(args.home, args.checkpoint, [int(x) for x in args.levels.split(",")], copies, args.samples):
        print(f"{args.checkpoint} + SFT on {row['examples']} successes {row['copies']} (final loss "
              f"{row['final_loss']:.3f}): " + "; ".join(
                  f"{form} {passes}/{scored} (" + " ".join(f"{c}:{p}/{n}" for c, (p, n) in by.items() if p) + ")"
                  for form, (passes, scored, by) in ((f, row[f]) for f in ("words", "shown"))), flush=True)


if __name__ == "__main__":
    main()
