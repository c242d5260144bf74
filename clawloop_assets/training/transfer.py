"""Transfer: a round's admitted task pool, exported as a directory that any
base model can be trained on, and the paper's recipe for small models on it,
RL only: the new base's own rollouts on the pool's training tasks are the GRPO
groups (small models have too few successes for SFT), then the pass rate
before and after, with one seed, on the pool's training and held-out tasks.

A pool directory:
    pool.json           round, the policy that validated it, and per task:
                        split, capability, domain, difficulty, pass count
    tasks/<task_id>/    the task bundle, as the round built it
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import polars as pl

from clawloop_assets.harness.agent_loop import AgentSettings, rollout_row, run_rollouts
from clawloop_assets.round_state import require_rows
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.training.examples import TRAINING_COLUMNS, write_jsonl
from resources.checkpoints import checkpoint_id
from resources.paths import staged_directory
from resources.policy import PolicyModel
from resources.sandbox import Sandbox
from resources.warehouse import Warehouse, table_frame

POOL_MANIFEST = "pool.json"
POOL_FORMAT = 1
REPO_ROOT = Path(__file__).resolve().parents[2]


class PoolError(ValueError):
    """A pool directory that is missing, malformed, or disagrees with its manifest."""


def export_pool(warehouse: Warehouse, round_key: str, out_dir: Path) -> Path:
    """Copy the admitted tasks of `round_key`, with their splits, to `out_dir`
    (which must not exist yet). Written to a temporary directory and renamed,
    so a pool on disk is always complete."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise PoolError(f"{out_dir} already exists; export to a new directory")
    admissions = require_rows(warehouse, "admissions", round_key, "admitted_tasks").filter(pl.col("admitted"))
    if admissions.is_empty():
        raise PoolError(f"{round_key} admitted no task: there is no pool to export")
    splits = require_rows(warehouse, "task_splits", round_key, "task_splits")
    tasks = require_rows(warehouse, "tasks", round_key, "candidate_tasks")
    rows = admissions.join(splits, on="task_id").join(tasks, on="task_id", suffix="_task").sort("task_id")
    validation = warehouse.read("rollouts", {"round": round_key, "phase": "validation"})
    producers = sorted(set(validation["checkpoint_id"].to_list())) if validation.height else []
    with staged_directory(out_dir) as staging:
        entries = []
        for row in rows.iter_rows(named=True):
            shutil.copytree(row["bundle_path"], staging / "tasks" / row["task_id"], symlinks=True)
            entries.append({key: row[key] for key in ("task_id", "split", "capability_id", "domain_id", "difficulty",
                                                      "track", "pass_count", "scored_rollouts")})
        manifest = {"format": POOL_FORMAT, "round": round_key, "validated_by_checkpoint_ids": producers,
                    "created_at": time.time(), "tasks": entries}
        (staging / POOL_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out_dir


def load_pool(pool_dir: Path) -> tuple[dict, dict[str, list[TaskBundle]]]:
    """The manifest and the bundles of each split; every bundle is checked."""
    pool_dir = Path(pool_dir)
    try:
        manifest = json.loads((pool_dir / POOL_MANIFEST).read_text())
    except FileNotFoundError:
        raise PoolError(f"{pool_dir} is not a task pool: no {POOL_MANIFEST}") from None
    except json.JSONDecodeError as exc:
        raise PoolError(f"{pool_dir / POOL_MANIFEST}: not valid JSON: {exc}") from exc
    if manifest.get("format") != POOL_FORMAT or not isinstance(manifest.get("tasks"), list):
        raise PoolError(f"{pool_dir / POOL_MANIFEST}: expected format {POOL_FORMAT} with a list of tasks")
    by_split: dict[str, list[TaskBundle]] = {"train": [], "heldout": []}
    for entry in manifest["tasks"]:
        task_id, split = entry.get("task_id"), entry.get("split")
        if split not in by_split:
            raise PoolError(f"{pool_dir / POOL_MANIFEST}: task {task_id!r} has split {split!r}, not train or heldout")
        bundle = load_task_bundle(pool_dir / "tasks" / str(task_id))  # raises naming the bundle and the fault
        if bundle.task_id != task_id:
            raise PoolError(f"{pool_dir}/tasks/{task_id}: its task.toml says id {bundle.task_id!r}")
        by_split[split].append(bundle)
    if not by_split["train"]:
        raise PoolError(f"{pool_dir}: the pool has no training task")
    return manifest, by_split


def transfer_rl_only(
    pool_dir: Path,
    base_checkpoint: Path,
    out_dir: Path,
    policy: PolicyModel,
    sandbox: Sandbox,
    settings: AgentSettings,
    grpo_config: dict,
    seed: int,
    samples: int = 8,
    log: Callable[[str], None] = print,
) -> dict:
    """Train `base_checkpoint` on the pool with GRPO only; returns (and writes
    to `out_dir/transfer.json`) the pass rates before and after. The agent
    samples with `settings`, GRPO runs with the recipe's fields `grpo_config`
    (LoopConfig.training_job_config("grpo")), and the rollouts' seeds derive
    from `seed`."""
    manifest, bundles = load_pool(pool_dir)
    base_id = checkpoint_id(base_checkpoint)  # verifies it: raises before anything is written
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    label = f"transfer-{manifest['round']}"

    train_seed, heldout_seed = seed + 1, seed + 2

    def rollouts(checkpoint: Path, ckpt: str, when: str) -> dict[str, pl.DataFrame]:
        """`checkpoint`'s (id `ckpt`) rollouts on each split (phases
        train_<when> and heldout_<when>), in one session: the model is loaded once."""
        frames = {}
        session = policy.load(checkpoint)
        try:
            for split, split_seed in (("train", train_seed), ("heldout", heldout_seed)):
                phase = f"{split}_{when}"
                done = run_rollouts(session, sandbox, bundles[split], samples, settings, out_dir / "rollouts" / phase,
                                    split_seed, progress=log) if bundles[split] else []
                frames[split] = table_frame("rollouts", [
                    rollout_row(r, round_key=label, phase=phase, checkpoint_id=ckpt)
                    for r in done])
        finally:
            session.close()
        return frames

    log(f"transfer: {len(bundles['train'])} training and {len(bundles['heldout'])} held-out tasks from {pool_dir}")
    before = rollouts(base_checkpoint, base_id, "before")
    # The base's own rollouts are the groups, as in a round; infrastructure
    # failures leave a group smaller and the canary excludes a rollout.
    groups = before["train"].filter((pl.col("status") == "scored") & ~pl.col("canary_seen"))
    groups = groups.rename({"task_id": "group_id"}).select(TRAINING_COLUMNS).sort("group_id", "rollout_id")
    if groups.is_empty() or groups.group_by("group_id").agg(pl.col("reward").n_unique() > 1)["reward"].sum() == 0:
        raise PoolError(
            f"{base_checkpoint} passed every rollout or none on each training task of {pool_dir} "
            f"({groups.height} scored rollouts): no group has a reward variance, so GRPO has no signal; "
            "use more --samples or a pool nearer this model's level"
        )
    trained = out_dir / "policy"
    job = {**grpo_config, "base_checkpoint": str(base_checkpoint),
           "reference_checkpoint": str(base_checkpoint), "output_checkpoint": str(trained),
           "examples": str(write_jsonl(groups, out_dir / "grpo_examples.jsonl"))}
    config_file = out_dir / "grpo_config.json"
    config_file.write_text(json.dumps(job, indent=2))
    started = time.monotonic()
    # The same entrypoint the round's launcher runs, standalone.
    done = subprocess.run([sys.executable, "-m", "training_jobs.grpo", "--config", str(config_file)], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"GRPO on the pool failed (exit {done.returncode}); end of its stderr:\n{done.stderr[-3000:]}")
    grpo = json.loads((trained.parent / f"{trained.name}.result.json").read_text())
    trained_id = checkpoint_id(trained)
    after = rollouts(trained, trained_id, "after")

    def rate(frame: pl.DataFrame) -> float | None:
        scored = frame.filter(pl.col("status") == "scored")
        return round(float(scored["reward"].mean()), 4) if scored.height else None

    summary = {
        "pool": str(pool_dir), "pool_round": manifest["round"],
        "pool_validated_by": manifest["validated_by_checkpoint_ids"],
        "base_checkpoint": str(base_checkpoint), "base_checkpoint_id": base_id,
        "policy_checkpoint": str(trained), "policy_checkpoint_id": trained_id,
        "mode": "grpo_only", "samples_per_task": samples,
        "train_tasks": len(bundles["train"]), "heldout_tasks": len(bundles["heldout"]),
        "train_pass_rate_before": rate(before["train"]), "train_pass_rate_after": rate(after["train"]),
        "heldout_pass_rate_before": rate(before["heldout"]), "heldout_pass_rate_after": rate(after["heldout"]),
        "grpo_steps": grpo["steps"], "grpo_seconds_per_step": grpo["seconds_per_step"],
        "grpo_groups_used": grpo["groups_used"], "grpo_seconds": round(time.monotonic() - started, 1),
    }
    (out_dir / "transfer.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
