"""Phase 2: SFT on the successes of T_k, then GRPO on its recorded groups,
each a Pipes job launched by the training-launcher resource."""

import json

import dagster as dg
import polars as pl

from clawloop_assets.assets.common import ROLLOUTS_POOL, WAREHOUSE_WRITER_POOL, collect_rollouts, record_cost
from clawloop_assets.assets.validation import task_splits
from clawloop_assets.cost import measure
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import round_partitions
from clawloop_assets.round_state import (
    PolicyRef,
    input_policy,
    load_bundles,
    require_rows,
    round_policy,
    split_task_ids,
    workdir,
)
from clawloop_assets.training.examples import grpo_groups, in_words_examples, sft_examples, write_jsonl
from resources.checkpoints import checkpoint_id
from resources.policy import ChatTemplate, PolicyModel
from resources.sandbox import Sandbox
from resources.training_launcher import TrainingLauncher
from resources.warehouse import Warehouse, table_frame

GROUP = "training"


def _register(warehouse: Warehouse, key: str, kind: str, ref_path, parent: PolicyRef) -> str:
    ckpt = checkpoint_id(ref_path)
    row = {"round": key, "checkpoint_id": ckpt, "kind": kind, "path": str(ref_path), "parent_checkpoint_id": parent.checkpoint_id}
    warehouse.replace("checkpoints", table_frame("checkpoints", [row]), {"round": key, "kind": kind})
    return ckpt


def _record_run(warehouse, key, job, parent: PolicyRef, output_id, examples, status, reason, metrics, seconds) -> None:
    row = {"round": key, "run_id": f"{key}.{job}", "job": job, "base_checkpoint_id": parent.checkpoint_id,
           "output_checkpoint_id": output_id, "examples": examples, "status": status, "reason": reason,
           "metrics": json.dumps(metrics, default=str), "seconds": seconds}
    warehouse.replace("training_runs", table_frame("training_runs", [row]), {"round": key, "job": job})


def _train(context, warehouse, launcher, loop, job, frame, start: PolicyRef, reference: PolicyRef, kind,
           reference_sampled: bool = False) -> dg.MaterializeResult:
    """Run one training job on `frame`, or pass `start` through (recorded as
    skipped, with the reason) when the mode or the data leave nothing to train."""
    key = context.partition_key
    mode_skips = (job == "sft" and loop.training_mode == "grpo_only") or (job == "grpo" and loop.training_mode == "sft_only")
    reason = f"training_mode={loop.training_mode}" if mode_skips else None
    if reason is None and frame.is_empty():
        reason = "no successful trajectories in T_k" if job == "sft" else "no scored groups in T_k"
    if reason is None and job == "grpo" and frame.group_by("group_id").agg(pl.col("reward").n_unique() > 1)["reward"].sum() == 0:
        reason = "every group of T_k has zero reward variance (no GRPO signal)"
    with measure(job) as cost:
        if reason:
            output, metrics, examples = start.path, {}, 0
        else:
            examples = frame.height
            directory = workdir(key, "training")
            output = workdir(key, "checkpoints") / kind
            config = loop.training_job_config(job) | {
                "base_checkpoint": str(start.path),
                "examples": str(write_jsonl(frame, directory / f"{job}_examples.jsonl")),
                "output_checkpoint": str(output),
            }
            if job == "grpo":
                config["reference_checkpoint"] = str(reference.path)
                config["reference_sampled"] = reference_sampled
            metrics = launcher.launch(context, job, config)
            cost.tokens = int(sum(len(t) for t in frame["token_ids"]))
    output_id = _register(warehouse, key, kind, output, start)
    _record_run(warehouse, key, job, start, None if reason else output_id, examples,
                "skipped" if reason else "trained", reason, metrics, cost.wall_seconds)
    record_cost(warehouse, key, cost)
    scalar = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
    return dg.MaterializeResult(metadata={
        **{f"job_{k}": v for k, v in scalar.items()},
        "checkpoint_id": output_id, "parent_checkpoint_id": start.checkpoint_id, "path": dg.MetadataValue.path(str(output)),
        "status": "skipped: " + reason if reason else "trained", "examples": examples,
        "seconds": round(cost.wall_seconds, 2),
    })


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[task_splits])
def sft_checkpoint(context: dg.AssetExecutionContext, warehouse: Warehouse, policy: PolicyModel,
                   training_launcher: TrainingLauncher, loop: LoopConfig) -> dg.MaterializeResult:
    """Self-distillation: SFT on the successful trajectories of T_k, loss on action tokens only; with
    `sft_in_words`, also the successes of every shown task outside the held-out split, as the task in words."""
    key = context.partition_key
    start = input_policy(warehouse, policy, key)
    rollouts = require_rows(warehouse, "rollouts", key, "validation_rollouts", phase="validation")
    train_ids = split_task_ids(warehouse, key, "train")
    frame, in_words, unmatched = sft_examples(rollouts, train_ids), 0, 0
    if loop.sft_in_words:
        # Every validated task but the held-out ones, admitted or not: a
        # task too easy to admit shown is still a success in words, and the
        # held-out tasks measure the training, so none of theirs is in it.
        solved = set(rollouts.filter(pl.col("reward") == 1.0)["task_id"])
        copied_ids = sorted(solved - set(split_task_ids(warehouse, key, "heldout")))
        copies, unmatched = in_words_examples(rollouts, load_bundles(warehouse, key, copied_ids),
                                              ChatTemplate.of_checkpoint(start.path))
        frame, in_words = pl.concat([frame, copies]), copies.height
    result = _train(context, warehouse, training_launcher, loop, "sft", frame, start, start, "sft")
    result.metadata["upstream_round"] = start.upstream_round or "none (base model)"
    result.metadata["examples_in_words"] = in_words
    if unmatched:
        context.log.warning(f"{unmatched} successes not copied in words: their recorded prompt is not the one "
                            "the checkpoint's chat template gives")
        result.metadata["in_words_unmatched"] = unmatched
    return result


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[sft_checkpoint])
def policy_checkpoint(context: dg.AssetExecutionContext, warehouse: Warehouse, policy: PolicyModel,
                      training_launcher: TrainingLauncher, loop: LoopConfig) -> dg.MaterializeResult:
    """GRPO on the recorded groups of T_k, from the SFT checkpoint, KL to the round's input policy."""
    key = context.partition_key
    reference = input_policy(warehouse, policy, key)
    start = round_policy(warehouse, key, "sft")
    rollouts = require_rows(warehouse, "rollouts", key, "validation_rollouts", phase="validation")
    frame = grpo_groups(rollouts, split_task_ids(warehouse, key, "train"))
    # The KL anchor sampled these groups itself: the job reads its log-probs
    # from the rollouts rather than running it again.
    reference_sampled = set(rollouts["checkpoint_id"]) == {reference.checkpoint_id}
    return _train(context, warehouse, training_launcher, loop, "grpo", frame, start, reference, "policy",
                  reference_sampled)


def _task_pass_rates(rows: pl.DataFrame) -> pl.DataFrame:
    return (rows.filter(pl.col("status") == "scored").group_by("task_id")
            .agg(pl.col("reward").mean().alias("pass_rate"), pl.len().alias("samples")))


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=ROLLOUTS_POOL, deps=[policy_checkpoint])
def training_gain(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox, policy: PolicyModel,
                  loop: LoopConfig) -> dg.MaterializeResult:
    """Did training help on what it trained on? The round's input policy and the
    trained policy on T_k, fresh rollouts with the same seed for both."""
    key = context.partition_key
    before_ref, after_ref = input_policy(warehouse, policy, key), round_policy(warehouse, key, "policy")
    task_ids = split_task_ids(warehouse, key, "train")
    if loop.train_eval_samples == 0 or not task_ids:
        reason = "train_eval_samples=0" if loop.train_eval_samples == 0 else "T_k is empty"
        return dg.MaterializeResult(metadata={"status": f"skipped: {reason}"})
    seed = loop.round_seed(key, "train_eval")
    before, _ = collect_rollouts(context, warehouse, sandbox, policy, before_ref, task_ids, loop.train_eval_samples,
                                 "train_before", seed, loop)
    if after_ref.checkpoint_id == before_ref.checkpoint_id:
        # Training skipped both jobs: the same weights with the same seeds give the same rollouts.
        after = before.with_columns(pl.lit("train_after").alias("phase"),
                                    pl.col("rollout_id").str.replace(".train_before.", ".train_after.", literal=True))
        warehouse.replace("rollouts", after, {"round": key, "phase": "train_after"})
    else:
        after, _ = collect_rollouts(context, warehouse, sandbox, policy, after_ref, task_ids, loop.train_eval_samples,
                                    "train_after", seed, loop)
    rates = {phase: rows.filter(pl.col("status") == "scored")["reward"].mean() for phase, rows in
             (("before", before), ("after", after))}
    per_task = _task_pass_rates(before).join(_task_pass_rates(after), on="task_id", suffix="_after").sort("task_id")
    return dg.MaterializeResult(metadata={
        "train_pass_rate_before": round(float(rates["before"] or 0.0), 4),
        "train_pass_rate_after": round(float(rates["after"] or 0.0), 4),
        "train_tasks": len(task_ids),
        "samples_per_task": loop.train_eval_samples,
        "seed": seed,
        "input_checkpoint_id": before_ref.checkpoint_id,
        "policy_checkpoint_id": after_ref.checkpoint_id,
        "per_task": markdown_table(["task", "before", "after", "samples"], [
            (r["task_id"], round(r["pass_rate"], 3), round(r["pass_rate_after"], 3), r["samples"])
            for r in per_task.iter_rows(named=True)]),
    })
