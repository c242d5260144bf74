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

This module also holds the plumbing both jobs share: loading a verified
checkpoint, writing the trained one, and the Pipes / standalone entrypoint.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes
from transformers import AutoModelForCausalLM

from clawloop_assets.checkpoints import COMPLETE_MARKER, MANIFEST, verify_checkpoint, write_checkpoint
from training_jobs.configs import SFTJobConfig, TrainingJobConfig
from training_jobs.policy_gradient import token_logprobs
from training_jobs.trajectories import drop_too_long, forward_chunks, load_trajectories, pad_batch, shuffled_batches

Log = Callable[[str], None]

# Written by save_pretrained itself; everything else in the base checkpoint
# (tokenizer files, chat template) is copied unchanged.
_WEIGHT_FILE_SUFFIXES = (".safetensors", ".safetensors.index.json")


def load_verified_model(directory: str | Path):
    """A full-precision model from a checkpoint that passed verify_checkpoint (safetensors only)."""
    verify_checkpoint(Path(directory))
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, use_safetensors=True)


def save_trained_checkpoint(model, base_checkpoint: str | Path, output_checkpoint: str | Path, metadata: dict) -> list[str]:
    """Write `model` atomically as a verified checkpoint, with the base's
    non-weight files (the tokenizer does not change). Returns the copied names."""
    copied: list[str] = []

    def save(tmp: Path) -> None:
        # transformers 5 always writes safetensors (the safe_serialization flag
        # is gone); write_checkpoint refuses anything else anyway.
        model.save_pretrained(tmp)
        written = {p.name for p in tmp.iterdir()}
        for src in sorted(Path(base_checkpoint).iterdir()):
            if (
                src.is_file()
                and src.name not in written
                and src.name not in (MANIFEST, COMPLETE_MARKER)
                and not src.name.endswith(_WEIGHT_FILE_SUFFIXES)
            ):
                shutil.copy2(src, tmp / src.name)
                copied.append(src.name)

    write_checkpoint(save, Path(output_checkpoint), {**metadata, "tokenizer_files_copied": copied})
    return copied


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def clip_and_step(model, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float:
    grad_norm = 0.0
    if max_grad_norm > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm).item()
    optimizer.step()
    return grad_norm


def train_sft(config: SFTJobConfig, log: Log = print) -> dict[str, Any]:
    started = time.monotonic()
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)

    model = load_verified_model(config.base_checkpoint)
    # No dropout: the loss is the log-prob of the function that samples.
    model.eval()

    trajectories = load_trajectories(config.examples)
    successes = [t for t in trajectories if t.reward == 1.0]
    examples, dropped = drop_too_long(successes, config.max_length)
    if not examples:
        raise ValueError(
            f"{config.examples}: no successful trajectory of at most max_length={config.max_length} tokens "
            f"({len(trajectories)} in the file, {len(successes)} with reward 1, {dropped} too long); nothing to train on"
        )
    log(f"sft: {len(examples)} successful trajectories ({dropped} dropped as longer than {config.max_length} tokens)")

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    order = torch.Generator().manual_seed(config.seed)
    loop_started = time.monotonic()
    losses: list[float] = []
    action_tokens_trained = 0
    for epoch in range(config.epochs):
        for batch in shuffled_batches(examples, config.batch_size, order):
            step_started = time.monotonic()
            num_action_tokens = sum(t.num_action_tokens for t in batch)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for chunk in forward_chunks(batch, config.max_tokens_per_forward):
                padded = pad_batch([batch[i] for i in chunk])
                logprobs = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
                # Mean over the step's action tokens, like the GRPO loss.
                loss = -(logprobs * padded.target_action_mask).sum() / num_action_tokens
                loss.backward()
                step_loss += loss.item()
            grad_norm = clip_and_step(model, optimizer, config.max_grad_norm)
            losses.append(step_loss)
            action_tokens_trained += num_action_tokens
            log(
                f"sft step {len(losses)} (epoch {epoch + 1}): loss {step_loss:.4f}, grad norm {grad_norm:.3f}, "
                f"{len(batch)} trajectories, {num_action_tokens} action tokens, {time.monotonic() - step_started:.1f}s"
            )

    result: dict[str, Any] = {
        "job": "sft",
        "base_checkpoint": str(config.base_checkpoint),
        "output_checkpoint": str(config.output_checkpoint),
        "steps": len(losses),
        "losses": losses,
        "final_loss": losses[-1],
        "examples_total": len(trajectories),
        "examples_successful": len(successes),
        "examples_used": len(examples),
        "examples_dropped_too_long": dropped,
        "action_tokens_trained": action_tokens_trained,
        "learning_rate": config.learning_rate,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "seconds_per_step": (time.monotonic() - loop_started) / len(losses),
    }
    finish(model, config, result, log, started)
    return result


def finish(model, config: TrainingJobConfig, result: dict[str, Any], log: Log, started: float) -> None:
    """Save the checkpoint and complete `result` with the totals (in place)."""
    result["peak_rss_mb"] = peak_rss_mb()
    result["tokenizer_files_copied"] = save_trained_checkpoint(model, config.base_checkpoint, config.output_checkpoint, result)
    result["seconds"] = time.monotonic() - started
    log(f"{result['job']}: wrote {config.output_checkpoint} ({result['steps']} steps, {result['seconds']:.1f}s, peak RSS {result['peak_rss_mb']:.0f} MB)")


def standalone_result_path(output_checkpoint: str | Path) -> Path:
    """Next to the checkpoint, not inside it (a checkpoint holds only its manifest's files)."""
    output = Path(output_checkpoint)
    return output.with_name(f"{output.name}.result.json")


def run_job(train: Callable[..., dict], config_cls: type[TrainingJobConfig], argv: list[str] | None = None) -> None:
    """`--config FILE.json`: standalone, progress on stdout and a result JSON next
    to the checkpoint. No arguments: a Dagster Pipes process, config from extras."""
    parser = argparse.ArgumentParser(description=sys.modules[train.__module__].__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="JSON job config; omit when launched by Dagster Pipes")
    args = parser.parse_args(argv)
    if args.config is not None:
        config = config_cls.from_json_file(args.config)
        result = train(config, log=lambda message: print(message, flush=True))
        path = standalone_result_path(config.output_checkpoint)
        path.write_text(json.dumps(result, indent=2))
        print(f"result: {path}", flush=True)
        return
    if not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        parser.error("pass --config FILE.json, or launch through Dagster Pipes (DAGSTER_PIPES_CONTEXT is not set)")
    with open_dagster_pipes() as pipes:
        config = config_cls.from_dict(dict(pipes.extras))
        result = train(config, log=pipes.log.info)
        pipes.report_asset_materialization(metadata=pipes_metadata(result))


def pipes_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Numbers stay numbers; per-step lists go as JSON."""
    return {key: {"raw_value": value, "type": "json"} if isinstance(value, list) else value for key, value in result.items()}


if __name__ == "__main__":
    run_job(train_sft, SFTJobConfig)
