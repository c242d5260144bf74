"""Step time and peak memory of our GRPO and SFT training steps beside TRL's
own GRPOTrainer and SFTTrainer, on the same model and the same batch.

One synthetic group of rollouts (seeded random token ids from the model's
vocabulary: a prompt of non-action tokens, then action tokens) is built once
and saved; each of the four sides (grpo_ours, grpo_trl, sft_ours, sft_trl)
then runs in its own process, so their peak RSS do not mix: one warm-up step,
then the median of a few timed optimizer steps. Ratios are ours / TRL's
(< 1: ours is faster or smaller).

The warm-up step of each side is also the correctness check: both start from
the same checkpoint and see the same batch, so their first losses and
pre-clipping gradient norms must agree; the TRL process asserts that before
it times anything.

Same math, different work. The differences the timings and peaks show:
  - Vocabulary head: ours runs it on the action positions only (token_logprobs
    with logits_to_keep as a mask); TRL 1.16's fused LM head computes
    log-probs in vocabulary tiles without the full logits, but on the CPU (no
    Triton) it scores every position, prompt included, and drops the masked
    ones afterwards. On CUDA it scores only the labelled positions.
  - TRL also computes the per-token entropy (a logged metric) in every step,
    and the SFT trainer whether each label is the argmax.
  - Optimizer: the same AdamW (lr 1e-5, no weight decay, clip 1.0), fused
    on both sides (ours: training_jobs.optimization.adamw; TRL: the Trainer's
    default adamw_torch_fused).

    python -m benchmarks.training_steps [--checkpoint DIR] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from training_jobs.optimization import adamw
from training_jobs.policy_gradient import group_advantages, grpo_loss, token_logprobs
from training_jobs.trajectories import Trajectory, pad_batch

SIDES = ("grpo_ours", "grpo_trl", "sft_ours", "sft_trl")
# The GRPO job's defaults (training_jobs.configs), and TRL configured to match.
CLIP_EPSILON = 0.2
BETA = 0.04
LEARNING_RATE = 1e-5
MAX_GRAD_NORM = 1.0
THREADS = 2
# Float32 both sides; what differs is only summation order (our vocab head
# runs on the action positions, TRL's on every position in vocabulary tiles).
# Measured on the 135M model: GRPO loss within 4e-6 relative, gradient norm
# within 5e-5; SFT equal to the printed digits.
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6
GRAD_NORM_RTOL = 1e-3


@dataclass(frozen=True)
class BatchSpec:
    """One GRPO group. Every prompt has the same length (TRL left-pads
    prompts, which would shift positions against our right padding); the
    action lengths vary so the token-level mean weighs rollouts unequally."""

    rollouts: int = 8
    # 192 + ~48 tokens a rollout keeps the whole benchmark (4 processes x 4
    # steps of ~1,900 tokens) to a few minutes on 2 cores; --prompt-tokens 300
    # is closer to a real first turn. Longer prefixes favour ours (TRL's vocab
    # head also runs on them, on the CPU).
    prompt_tokens: int = 192
    action_tokens: int = 48  # mean; each rollout gets action_tokens +- action_spread
    action_spread: int = 8
    # The recorded sampling and reference log-probs are the model's own plus
    # this much seeded noise: ratios stay about 1, but some tokens are clipped
    # and the KL term is not 0, so the agreement check covers every term.
    logprob_noise: float = 0.05
    seed: int = 0


class LossMismatch(AssertionError):
    pass


# --- the batch -------------------------------------------------------------


def make_batch(model, spec: BatchSpec) -> dict[str, Any]:
    """The batch both sides train on, as plain lists and tensors (saved with
    torch.save, loaded with weights_only). Temperature 1.0: our loss divides
    the logits by the recorded temperature, TRL's SFT loss does not."""
    g = torch.Generator().manual_seed(spec.seed)
    vocab = model.config.vocab_size
    rewards = torch.rand(spec.rollouts, generator=g, dtype=torch.float64).tolist()
    trajectories = []
    for i in range(spec.rollouts):
        actions = spec.action_tokens + int(
            torch.randint(-spec.action_spread, spec.action_spread + 1, (1,), generator=g)
        )
        length = spec.prompt_tokens + actions
        trajectories.append(
            Trajectory(
                rollout_id=f"r{i}",
                group_id="g0",
                reward=rewards[i],
                token_ids=torch.randint(0, vocab, (length,), generator=g).tolist(),
                action_mask=[0] * spec.prompt_tokens + [1] * actions,
                sampling_logprobs=[0.0] * length,
                temperature=1.0,
            )
        )
    padded = pad_batch(trajectories)
    with torch.no_grad():
        model_logprobs = token_logprobs(
            model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask
        )
    mask = padded.target_action_mask

    def perturbed() -> torch.Tensor:
        noise = spec.logprob_noise * torch.randn(model_logprobs.shape, generator=g)
        return ((model_logprobs + noise).clamp(max=0.0) * mask).float()

    sampling, ref = perturbed(), perturbed()
    records = []
    for row, t in enumerate(trajectories):
        # Trajectory layout: sampling_logprobs[k] is the log-prob of token k (0 for token 0).
        record = asdict(t)
        record["sampling_logprobs"] = [0.0] + sampling[row, : len(t) - 1].tolist()
        records.append(record)
    advantages = group_advantages(rewards, [t.group_id for t in trajectories])
    return {
        "spec": asdict(spec),
        "trajectories": records,
        "advantages": advantages.advantages,
        # [B, T-1], the layout of pad_batch's target_* tensors: position t is token t+1.
        "ref_logprobs": ref,
    }


def load_batch(path: Path) -> dict[str, Any]:
    batch = torch.load(path, weights_only=True)
    batch["trajectories"] = [Trajectory(**record) for record in batch["trajectories"]]
    return batch


def load_model(checkpoint: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, use_safetensors=True)


# --- our steps (the body of training_jobs.grpo / sft and optimization.run_steps) ---


def our_grpo_loss(model, batch: dict[str, Any]) -> torch.Tensor:
    trajectories = batch["trajectories"]
    padded = pad_batch(trajectories)
    logprobs = token_logprobs(
        model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask
    )
    loss, _ = grpo_loss(
        logprobs,
        padded.target_sampling_logprobs,
        batch["ref_logprobs"],
        torch.tensor(batch["advantages"], dtype=torch.float32),
        padded.target_action_mask,
        clip_epsilon=CLIP_EPSILON,
        beta=BETA,
        num_action_tokens=sum(t.num_action_tokens for t in trajectories),
    )
    return loss


def our_sft_loss(model, batch: dict[str, Any]) -> torch.Tensor:
    # The job trains on the reward-1 rollouts only; here every rollout of the
    # batch stands in for one, so both jobs time the same tokens.
    trajectories = batch["trajectories"]
    padded = pad_batch(trajectories)
    logprobs = token_logprobs(
        model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask
    )
    return -(logprobs * padded.target_action_mask).sum() / sum(t.num_action_tokens for t in trajectories)


def our_step(job: str, model, batch: dict[str, Any]) -> Callable[[], tuple[float, float]]:
    """One optimizer step as the jobs run it (zero, forward and backward,
    clip at 1.0, AdamW): the whole batch in one forward pass, as the job does
    at its default max_tokens_per_forward (2048) for the default spec and as
    TRL does with per_device_train_batch_size = the group."""
    model.eval()  # what prepare_model does: no dropout (SmolLM2 has none anyway)
    optimizer = adamw(list(model.parameters()), LEARNING_RATE)
    compute_loss = our_grpo_loss if job == "grpo" else our_sft_loss

    def step() -> tuple[float, float]:
        optimizer.zero_grad(set_to_none=True)
        loss = compute_loss(model, batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM).item()
        optimizer.step()
        return loss.item(), grad_norm

    return step


# --- TRL's steps -------------------------------------------------------------


def _zero_reward(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)


def trl_grpo_trainer(model, tokenizer, spec: BatchSpec, output_dir: str, **overrides):
    """A real GRPOTrainer configured as our job: token-level mean over every
    action token of the step ("dapo": divided by num_items_in_batch, the
    batch's completion tokens), token-level importance sampling, epsilon 0.2,
    beta 0.04 with the k3 estimator, fp32, no gradient checkpointing (TRL
    defaults to bf16 and checkpointing; our job to neither), one generation
    batch per optimizer step."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = dict(
        output_dir=output_dir,
        use_vllm=False,
        num_generations=spec.rollouts,
        per_device_train_batch_size=spec.rollouts,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=spec.action_tokens + spec.action_spread,
        temperature=1.0,
        beta=BETA,
        epsilon=CLIP_EPSILON,
        loss_type="dapo",
        importance_sampling_level="token",
        learning_rate=LEARNING_RATE,
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        use_cpu=True,  # ours runs on the CPU too
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    args = GRPOConfig(**(settings | overrides))
    dataset = Dataset.from_dict({"prompt": ["benchmark"] * spec.rollouts})
    return GRPOTrainer(
        model=model, reward_funcs=_zero_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )


def trl_grpo_inputs(trainer, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """What `_generate_and_score_completions` returns (trl 1.16), built from
    our batch. TRL's format is single-turn: prompt = the non-action prefix,
    completion = the action tokens, which is why the synthetic batch is one
    prompt then one action span (ours also takes multi-turn rollouts with
    observations between actions; TRL cannot). old_per_token_logps are the
    recorded sampling log-probs (TRL then uses them instead of a detached copy
    of the current ones), ref_per_token_logps the same reference log-probs
    ours gets, advantages ours (group_advantages; TRL's own differ only in
    using the unbiased std, and are bypassed here)."""
    trajectories = batch["trajectories"]
    prompt = batch["spec"]["prompt_tokens"]
    width = max(len(t) for t in trajectories) - prompt
    pad_id = trainer.processing_class.pad_token_id
    rows = len(trajectories)
    completion_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((rows, width), dtype=torch.long)
    old = torch.zeros((rows, width))
    ref = torch.zeros((rows, width))
    for row, t in enumerate(trajectories):
        n = len(t) - prompt
        completion_ids[row, :n] = torch.tensor(t.token_ids[prompt:])
        completion_mask[row, :n] = 1
        old[row, :n] = torch.tensor(t.sampling_logprobs[prompt:])
        # target position t predicts token t+1: completion token j is target prompt-1+j
        ref[row, :n] = batch["ref_logprobs"][row, prompt - 1 : prompt - 1 + n]
    return {
        "prompt_ids": torch.tensor([t.token_ids[:prompt] for t in trajectories], dtype=torch.long),
        "prompt_mask": torch.ones((rows, prompt), dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(batch["advantages"], dtype=torch.float32),
        "num_items_in_batch": completion_mask.sum(),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }


def trl_sft_trainer(model, tokenizer, batch: dict[str, Any], output_dir: str, **overrides):
    """A real SFTTrainer on the same pre-tokenized trajectories: `input_ids`
    plus `assistant_masks` (the action mask), from which it builds labels
    without re-tokenizing; no truncation (max_length None), no packing, fp32,
    no gradient checkpointing."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    trajectories = batch["trajectories"]
    settings = dict(
        output_dir=output_dir,
        per_device_train_batch_size=len(trajectories),
        gradient_accumulation_steps=1,
        max_length=None,
        packing=False,
        shuffle_dataset=False,
        learning_rate=LEARNING_RATE,
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        use_cpu=True,  # ours runs on the CPU too
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    args = SFTConfig(**(settings | overrides))
    dataset = Dataset.from_dict(
        {"input_ids": [t.token_ids for t in trajectories], "assistant_masks": [t.action_mask for t in trajectories]}
    )
    return SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


def trl_sft_inputs(trainer) -> dict[str, torch.Tensor]:
    """One batch exactly as the trainer's dataloader hands it over: its
    prepared dataset through its own collator."""
    dataset = trainer.train_dataset
    return trainer.data_collator([dataset[i] for i in range(len(dataset))])


def trl_step(trainer, inputs: dict[str, Any]) -> Callable[[], tuple[float, float]]:
    """What Trainer._inner_training_loop does per optimizer step with one
    micro-batch: training_step (compute_loss + backward), clip, step, zero.
    For GRPO, `_prepare_inputs` (which would sample completions and score
    them) is replaced by handing over the ready batch: generation is not what
    is compared."""
    trainer.create_optimizer()  # TrainingArguments' default: adamw_torch_fused
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    num_items = trainer._get_num_items_in_batch([inputs], trainer.args.device)
    trainer._prepare_inputs = lambda given: given
    model = trainer.model

    def step() -> tuple[float, float]:
        loss = trainer.training_step(model, inputs, num_items)
        grad_norm = trainer.accelerator.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm).item()
        trainer.optimizer.step()
        model.zero_grad()
        return loss.item(), grad_norm

    return step


def make_step(
    side: str, model, batch: dict[str, Any], checkpoint: Path, output_dir: str, trl_overrides: dict | None = None
):
    job, who = side.split("_")
    if who == "ours":
        return our_step(job, model, batch)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    overrides = trl_overrides or {}
    if job == "grpo":
        trainer = trl_grpo_trainer(model, tokenizer, BatchSpec(**batch["spec"]), output_dir, **overrides)
        return trl_step(trainer, trl_grpo_inputs(trainer, batch))
    trainer = trl_sft_trainer(model, tokenizer, batch, output_dir, **overrides)
    return trl_step(trainer, trl_sft_inputs(trainer))


# --- the agreement check -------------------------------------------------------


def check_agreement(job: str, ours: dict[str, float], trl: dict[str, float]) -> None:
    """First-step loss and pre-clipping gradient norm, same weights, same batch."""
    loss_ok = math.isclose(ours["loss"], trl["loss"], rel_tol=LOSS_RTOL, abs_tol=LOSS_ATOL)
    grad_ok = math.isclose(ours["grad_norm"], trl["grad_norm"], rel_tol=GRAD_NORM_RTOL)
    if not (loss_ok and grad_ok):
        raise LossMismatch(
            f"{job}: ours and TRL's do not compute the same step: loss {ours['loss']!r} vs {trl['loss']!r}, "
            f"gradient norm {ours['grad_norm']!r} vs {trl['grad_norm']!r}"
        )


# --- one side, in its own process -----------------------------------------------


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_side(
    side: str,
    checkpoint: Path,
    batch_path: Path,
    steps: int,
    expect: dict[str, float] | None = None,
    trl_overrides: dict | None = None,
) -> dict[str, Any]:
    """Warm-up step (checked against `expect`, the other side's first step),
    then `steps` timed steps. Peak RSS is the whole process's: imports, model,
    gradients, AdamW state, activations. GRPOTrainer also keeps a reference
    model (beta > 0), but its weights are memory-mapped from the checkpoint and
    no page of them is touched by these steps (the reference log-probs come
    with the batch), so it adds next to nothing here."""
    torch.manual_seed(0)
    model = load_model(checkpoint)
    batch = load_batch(batch_path)
    with tempfile.TemporaryDirectory() as output_dir:
        step = make_step(side, model, batch, checkpoint, output_dir, trl_overrides)
        setup_rss = peak_rss_mb()
        loss, grad_norm = step()
        first = {"loss": loss, "grad_norm": grad_norm}
        if expect is not None:
            check_agreement(side.split("_")[0], expect, first)
        seconds = []
        for _ in range(steps):
            started = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - started)
    return {
        "side": side,
        "first_step": first,
        "seconds": seconds,
        "median_seconds": statistics.median(seconds),
        "setup_rss_mb": setup_rss,
        "peak_rss_mb": peak_rss_mb(),
    }


def job_results(job: str, ours: dict[str, Any], trl: dict[str, Any]) -> dict[str, float]:
    """The bench keys of one job from the run_side results of its two sides."""
    return {
        f"training.{job}_step_seconds": ours["median_seconds"],
        f"training.{job}_step_seconds_trl": trl["median_seconds"],
        f"training.{job}_step_ratio_vs_trl": ours["median_seconds"] / trl["median_seconds"],
        f"training.{job}_peak_rss_mb": ours["peak_rss_mb"],
        f"training.{job}_peak_rss_mb_trl": trl["peak_rss_mb"],
        f"training.{job}_peak_memory_ratio_vs_trl": ours["peak_rss_mb"] / trl["peak_rss_mb"],
    }


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_WAIT_POLICY="PASSIVE", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(THREADS)
    )
    return env


def _child(args: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.training_steps", *args]
    repo = Path(__file__).resolve().parent.parent
    result = subprocess.run(command, cwd=repo, env=child_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(command)}` exited {result.returncode}:\n{(result.stdout + result.stderr)[-4000:]}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(checkpoint: Path | None = None, spec: BatchSpec = BatchSpec(), steps: int = 3) -> dict[str, float]:
    if checkpoint is None:
        from resources.embedded_model import ensure_base_model
        from resources.paths import model_cache_dir

        checkpoint = ensure_base_model(model_cache_dir())
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        batch_path = Path(tmp) / "batch.pt"
        _child(["--make-batch", str(batch_path), "--checkpoint", str(checkpoint), "--spec", json.dumps(asdict(spec))])
        common = ["--checkpoint", str(checkpoint), "--batch", str(batch_path), "--steps", str(steps)]
        for job in ("grpo", "sft"):
            ours = _child(["--one", f"{job}_ours", *common])
            trl = _child(["--one", f"{job}_trl", *common, "--expect", json.dumps(ours["first_step"])])
            print(
                f"training.{job}: first-step loss ours {ours['first_step']['loss']:.7g} vs TRL {trl['first_step']['loss']:.7g}, "
                f"grad norm {ours['first_step']['grad_norm']:.6g} vs {trl['first_step']['grad_norm']:.6g}; "
                f"RSS before the first step ours {ours['setup_rss_mb']:.0f} MB vs TRL {trl['setup_rss_mb']:.0f} MB",
                flush=True,
            )
            results.update(job_results(job, ours, trl))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="model checkpoint (default: the embedded model)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side, after one warm-up step")
    parser.add_argument(
        "--prompt-tokens", type=int, default=BatchSpec.prompt_tokens, help="non-action tokens a rollout"
    )
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--expect", help=argparse.SUPPRESS)
    parser.add_argument("--make-batch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.make_batch or args.one:
        torch.set_num_threads(THREADS)
    if args.make_batch:
        spec = BatchSpec(**json.loads(args.spec)) if args.spec else BatchSpec()
        torch.save(make_batch(load_model(args.checkpoint), spec), args.make_batch)
        print(json.dumps({"batch": str(args.make_batch)}))
        return
    if args.one:
        expect = json.loads(args.expect) if args.expect else None
        print(json.dumps(run_side(args.one, args.checkpoint, args.batch, args.steps, expect)))
        return
    print(
        f"timing GRPO and SFT steps, ours and TRL's, {args.steps} steps each after a warm-up (several minutes)",
        flush=True,
    )
    results = measure(args.checkpoint, BatchSpec(prompt_tokens=args.prompt_tokens), steps=args.steps)
    width = max(len(k) for k in results)
    for key, value in sorted(results.items()):
        print(f"{key:<{width}}  {value:.4g}")


if __name__ == "__main__":
    main()
