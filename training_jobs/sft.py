"""Self-distillation SFT on the policy's own successful trajectories (reward 1):
cross-entropy on the action tokens only, observation tokens masked, sequences
padded and never truncated.

Run by Dagster Pipes (config in `extras`) or standalone:
    python -m training_jobs.sft --config sft.json

Why not TRL's SFTTrainer: it can take pre-tokenized `input_ids` with an
`assistant_masks` column and then builds labels without re-tokenizing (read in
trl 1.16 `SFTTrainer._prepare_dataset`), but its loss is cross-entropy on the
raw logits, while our trajectories were sampled at a recorded temperature and
the loss here is taken under softmax(logits / temperature), the same
distribution the GRPO job trains. It would also need a tokenizer object and a
`datasets` pipeline that truncate at `max_length` where we drop and count. The
loop below is the same padding, masking and micro-batching code the GRPO job
uses, in about thirty lines.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from training_jobs.configs import SFTJobConfig
from training_jobs.job_io import finish, run_job
from training_jobs.optimization import Log, autocast, prepare_model, resolve_device, run_steps, step_schedule
from training_jobs.policy_gradient import token_logprobs
from training_jobs.trajectories import drop_too_long, forward_chunks, load_trajectories, pad_batch


def train_sft(config: SFTJobConfig, log: Log = print) -> dict[str, Any]:
    started = time.monotonic()
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = resolve_device(config.device)
    model = prepare_model(config, device)

    trajectories = load_trajectories(config.examples)
    successes = [t for t in trajectories if t.reward == 1.0]
    examples, dropped = drop_too_long(successes, config.max_length)
    if not examples:
        raise ValueError(
            f"{config.examples}: no successful trajectory of at most max_length={config.max_length} tokens "
            f"({len(trajectories)} in the file, {len(successes)} with reward 1, {dropped} too long); nothing to train on"
        )
    log(f"sft: {len(examples)} successful trajectories ({dropped} dropped as longer than {config.max_length} tokens), on {device}")

    def step(batch) -> dict[str, Any]:
        num_action_tokens = sum(t.num_action_tokens for t in batch)
        step_loss = 0.0
        for chunk in forward_chunks(batch, config.max_tokens_per_forward):
            padded = pad_batch([batch[i] for i in chunk]).to(device)
            with autocast(config, device):
                logprobs = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
            # Mean over the step's action tokens, like the GRPO loss.
            loss = -(logprobs * padded.target_action_mask).sum() / num_action_tokens
            loss.backward()
            step_loss += loss.item()
        return {"loss": step_loss, "trajectories": len(batch), "action_tokens": num_action_tokens}

    history = run_steps("sft", model, config, step_schedule(examples, config), step, log)
    losses = [h["loss"] for h in history]
    result: dict[str, Any] = {
        "job": "sft",
        "base_checkpoint": str(config.base_checkpoint),
        "output_checkpoint": str(config.output_checkpoint),
        "device": str(device),
        "steps": len(history),
        "losses": losses,
        "final_loss": losses[-1],
        "examples_total": len(trajectories),
        "examples_successful": len(successes),
        "examples_used": len(examples),
        "examples_dropped_too_long": dropped,
        "action_tokens_trained": sum(h["action_tokens"] for h in history),
        "learning_rate": config.learning_rate,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "lora_rank": config.lora_rank,
        "seconds_per_step": sum(h["seconds"] for h in history) / len(history),
    }
    finish(model, config, result, log, started)
    return result


if __name__ == "__main__":
    run_job(train_sft, SFTJobConfig)
