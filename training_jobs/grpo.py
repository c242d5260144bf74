"""GRPO on recorded groups: the N rollouts of one task, with the rewards the
verifier gave them, reused as the group. No value network, no new sampling.

Run by Dagster Pipes (config in `extras`) or standalone:
    python -m training_jobs.grpo --config grpo.json
"""

from __future__ import annotations

import gc
import time
from typing import Any

import torch

from training_jobs.configs import GRPOJobConfig
from training_jobs.job_io import finish, run_job
from training_jobs.optimization import (
    Log,
    autocast,
    load_verified_model,
    prepare_model,
    resolve_device,
    run_steps,
    step_schedule,
)
from training_jobs.policy_gradient import group_advantages, grpo_loss, token_logprobs
from training_jobs.trajectories import forward_chunks, load_trajectories, pad_batch


def train_grpo(config: GRPOJobConfig, log: Log = print) -> dict[str, Any]:
    started = time.monotonic()
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = resolve_device(config.device)

    trajectories = load_trajectories(config.examples)
    # Advantages come from every recorded rollout of a group, even one later
    # dropped for length: the group's baseline does not depend on token counts.
    groups = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories], config.advantage_eps)
    informative = [(t, a) for t, a, keep in zip(trajectories, groups.advantages, groups.informative) if keep]
    examples = [(t, a) for t, a in informative if len(t) <= config.max_length]
    dropped = len(informative) - len(examples)
    if not examples:
        raise ValueError(
            f"{config.examples}: nothing to train on: {groups.groups_total} groups, "
            f"{groups.groups_skipped_zero_variance} with zero reward variance, {dropped} informative rollouts longer "
            f"than max_length={config.max_length}"
        )
    log(
        f"grpo: {len(examples)} rollouts from {groups.groups_total - groups.groups_skipped_zero_variance} groups "
        f"({groups.groups_skipped_zero_variance} zero-variance groups skipped, {dropped} rollouts dropped as longer "
        f"than {config.max_length} tokens), on {device}"
    )

    # The steps to run, as indices into `examples`: with `max_steps` they may
    # cover only some of the examples, and only those need reference log-probs.
    schedule = step_schedule(range(len(examples)), config)
    scheduled = sorted({i for _, batch in schedule for i in batch})
    # The reference is fixed, so its log-probs are computed once, kept on the
    # CPU, and the model freed before the policy is loaded; when it sampled
    # the examples they were recorded with each token and are read instead.
    ref_logprobs: list[torch.Tensor | None] = [None] * len(examples)
    if config.beta > 0 and not config.reference_sampled:
        reference = load_verified_model(config.reference_checkpoint).to(device).eval()
        with torch.no_grad():
            for chunk in forward_chunks([examples[i][0] for i in scheduled], config.max_tokens_per_forward):
                rows = [scheduled[j] for j in chunk]
                padded = pad_batch([examples[i][0] for i in rows]).to(device)
                with autocast(config, device):
                    logprobs = token_logprobs(reference, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
                for row, i in enumerate(rows):
                    ref_logprobs[i] = logprobs[row, : len(examples[i][0]) - 1].cpu()
        del reference
        gc.collect()
    model = prepare_model(config, device)

    def step(batch) -> dict[str, Any]:
        num_action_tokens = sum(t.num_action_tokens for t, _, _ in batch)
        step_loss = kl_sum = clipped = 0.0
        for chunk in forward_chunks([t for t, _, _ in batch], config.max_tokens_per_forward):
            padded = pad_batch([batch[i][0] for i in chunk]).to(device)
            with autocast(config, device):
                logprobs = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
            ref = None
            if config.beta > 0 and config.reference_sampled:
                ref = padded.target_sampling_logprobs
            elif config.beta > 0:
                ref = torch.zeros_like(logprobs)
                for row, i in enumerate(chunk):
                    ref[row, : batch[i][2].shape[0]] = batch[i][2].to(device)
            loss, stats = grpo_loss(
                logprobs,
                padded.target_sampling_logprobs,
                ref,
                torch.tensor([batch[i][1] for i in chunk], dtype=torch.float32, device=device),
                padded.target_action_mask,
                clip_epsilon=config.clip_epsilon,
                beta=config.beta,
                num_action_tokens=num_action_tokens,
            )
            loss.backward()
            step_loss += loss.item()
            kl_sum += stats.kl_sum
            clipped += stats.clipped_tokens
        return {
            "loss": step_loss,
            "mean_kl": kl_sum / num_action_tokens,
            "clip_fraction": clipped / num_action_tokens,
            "rollouts": len(batch),
            "action_tokens": num_action_tokens,
        }

    steps = [(epoch, [(*examples[i], ref_logprobs[i]) for i in batch]) for epoch, batch in schedule]
    history = run_steps("grpo", model, config, steps, step, log)
    losses = [h["loss"] for h in history]
    mean_kls = [h["mean_kl"] for h in history]
    result: dict[str, Any] = {
        "job": "grpo",
        "base_checkpoint": str(config.base_checkpoint),
        "reference_checkpoint": config.reference_checkpoint,
        "output_checkpoint": str(config.output_checkpoint),
        "device": str(device),
        "steps": len(history),
        "losses": losses,
        "mean_kl": mean_kls,
        "clip_fraction": [h["clip_fraction"] for h in history],
        "final_loss": losses[-1],
        "final_mean_kl": mean_kls[-1],
        "examples_total": len(trajectories),
        "examples_used": len(examples),
        "examples_dropped_too_long": dropped,
        "groups_total": groups.groups_total,
        "groups_used": len({t.group_id for t, _ in examples}),
        "groups_skipped_zero_variance": groups.groups_skipped_zero_variance,
        "action_tokens_trained": sum(h["action_tokens"] for h in history),
        "learning_rate": config.learning_rate,
        "beta": config.beta,
        "reference_logprobs": "recorded at sampling" if config.reference_sampled else "reference forward pass",
        "clip_epsilon": config.clip_epsilon,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "lora_rank": config.lora_rank,
        "seconds_per_step": sum(h["seconds"] for h in history) / len(history),
    }
    finish(model, config, result, log, started)
    return result


if __name__ == "__main__":
    run_job(train_grpo, GRPOJobConfig)
