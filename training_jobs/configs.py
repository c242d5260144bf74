"""Configs of the two training jobs. One JSON object per run, from Dagster Pipes
`extras` or from `--config FILE.json`; every field says what it does.

Field defaults are the CPU recipe for the embedded 135M model
(docs/training.md): full fine-tune, fp32, lr 1e-5, one epoch. `RECIPES` names the
two recipes a round can pick (`LoopConfig.training_recipe`): "cpu" and the
paper's GPU recipe, "paper" (SFT lr 2e-5 / batch 128 / 3 epochs, GRPO lr 5e-7,
beta 0.04, trajectories up to 65,536 tokens).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(kw_only=True)
class TrainingJobConfig:
    """Fields both jobs share."""

    base_checkpoint: str = field(
        metadata={"help": "Directory of the verified checkpoint (safetensors + manifest) that training starts from."}
    )
    examples: str = field(
        metadata={
            "help": "JSONL of recorded trajectories, one per line: rollout_id, group_id, reward, token_ids, "
            "action_mask, sampling_logprobs, temperature."
        }
    )
    output_checkpoint: str = field(
        metadata={"help": "Directory to write the trained checkpoint to; written atomically, replaced if present."}
    )
    learning_rate: float = field(
        default=1e-5,
        metadata={"help": "AdamW learning rate, constant (no warmup or decay)."},
    )
    epochs: int = field(default=1, metadata={"help": "Passes over the examples."})
    max_steps: int = field(
        default=0,
        metadata={"help": "Stop after this many optimizer steps of the epochs' schedule (a budget for a quick "
                          "round); 0: every step."},
    )
    batch_size: int = field(
        default=8,
        metadata={"help": "Trajectories per optimizer step (the loss is averaged over all their action tokens)."},
    )
    max_tokens_per_forward: int = field(
        default=2048,
        metadata={
            "help": "Memory bound: a step's batch is split into forward passes of at most this many padded tokens "
            "(gradients accumulate, so the update is the same). Measured with the 135M model: about 1.2 MB of "
            "activations per token on top of about 2.5 GB for weights, gradients and AdamW state."
        },
    )
    max_length: int = field(
        default=4096,
        metadata={
            "help": "Longest trajectory kept, in tokens. Longer ones are dropped and counted, never truncated: "
            "truncation would cut the final verification turns."
        },
    )
    max_grad_norm: float = field(default=1.0, metadata={"help": "Clip the gradient norm to this value; 0 disables."})
    seed: int = field(default=0, metadata={"help": "Seeds torch and the example order."})
    torch_threads: int = field(default=2, metadata={"help": "torch.set_num_threads for this process."})
    device: str = field(
        default="auto",
        metadata={"help": "torch device to train on: 'auto' (the first CUDA GPU if there is one, else the CPU), 'cpu', 'cuda', 'cuda:N'."},
    )
    mixed_precision: str = field(
        default="no",
        metadata={
            "help": "'bf16': forward and backward under bfloat16 autocast, fp32 master weights and optimizer state "
            "(GPU recipe); 'no': fp32 throughout (the recorded sampling log-probs of the embedded model are fp32)."
        },
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={"help": "Recompute activations in the backward pass: the memory of 65,536-token trajectories on GPU."},
    )
    lora_rank: int = field(
        default=0,
        metadata={
            "help": "0: full fine-tune. >0: train rank-r LoRA adapters on lora_target_modules and merge them into "
            "the saved checkpoint, so every checkpoint is a plain full model."
        },
    )
    lora_alpha: float = field(default=32.0, metadata={"help": "LoRA scaling numerator (scale = alpha / rank)."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "Module names that get LoRA adapters (Llama-family projection names by default)."},
    )
    save_every_steps: int = field(
        default=0,
        metadata={
            "help": "Write resumable training state (weights, AdamW state, step) every this many optimizer steps to "
            "`<output_checkpoint>.state`; a rerun of the same job resumes from the last complete one. 0: never."
        },
    )

    def __post_init__(self) -> None:
        for name in ("base_checkpoint", "examples", "output_checkpoint"):
            if not getattr(self, name):
                raise ValueError(f"{name} is required: set it to a path in the job config")
        if Path(self.output_checkpoint).resolve() == Path(self.base_checkpoint).resolve():
            raise ValueError(
                f"output_checkpoint equals base_checkpoint ({self.output_checkpoint}); write to a new directory "
                "so the base stays intact for evaluation and as a KL reference"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate} (CPU default 1e-5)")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0 (0: every step of the epochs), got {self.max_steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 tokens (one to condition on, one to predict), got {self.max_length}")
        if self.max_tokens_per_forward < 2:
            raise ValueError(f"max_tokens_per_forward must be >= 2, got {self.max_tokens_per_forward}")
        if self.max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")
        if self.torch_threads < 1:
            raise ValueError(f"torch_threads must be >= 1, got {self.torch_threads}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if self.mixed_precision not in ("no", "bf16"):
            raise ValueError(f"mixed_precision must be 'no' or 'bf16', got {self.mixed_precision!r}")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must be >= 0 (0 is a full fine-tune), got {self.lora_rank}")
        if self.lora_rank and not self.lora_target_modules:
            raise ValueError("lora_rank > 0 needs lora_target_modules (the module names that get adapters)")
        if self.save_every_steps < 0:
            raise ValueError(f"save_every_steps must be >= 0 (0: only the final checkpoint), got {self.save_every_steps}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown config keys {unknown}; known keys are {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: str | Path):
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class SFTJobConfig(TrainingJobConfig):
    """Self-distillation SFT on the successful (reward 1) trajectories, loss on action tokens only."""


@dataclass(kw_only=True)
class GRPOJobConfig(TrainingJobConfig):
    """GRPO on recorded groups: one group is the rollouts of one task."""

    learning_rate: float = field(
        default=1e-5,
        metadata={
            "help": "AdamW learning rate, constant. 1e-5 is the CPU default measured on the 135M model "
            "(one epoch); the paper's GPU recipe for 27B is 5e-7."
        },
    )
    reference_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "Verified checkpoint the KL penalty anchors to (usually the round's base_checkpoint). "
            "Required when beta > 0."
        },
    )
    reference_sampled: bool = field(
        default=False,
        metadata={
            "help": "The reference checkpoint sampled every example, at its recorded temperature (the loop's case: "
            "the KL anchors to the round's input policy, whose rollouts these are). Its log-probs are then the "
            "recorded sampling log-probs, and no reference forward pass is run."
        },
    )
    beta: float = field(default=0.04, metadata={"help": "KL coefficient (k3 estimator, per action token)."})
    clip_epsilon: float = field(
        default=0.2,
        metadata={"help": "PPO clip range: the ratio new/sampling is clipped to [1 - eps, 1 + eps]."},
    )
    advantage_eps: float = field(
        default=1e-4,
        metadata={"help": "Added to the group's reward std: A = (r - mean) / (std + eps)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta} (default 0.04)")
        if self.beta > 0 and not self.reference_checkpoint:
            raise ValueError(
                f"beta={self.beta} needs reference_checkpoint: set it to the checkpoint the KL anchors to "
                "(usually the same as base_checkpoint), or set beta=0 to train without a KL penalty"
            )
        if not 0 < self.clip_epsilon < 1:
            raise ValueError(f"clip_epsilon must be in (0, 1), got {self.clip_epsilon} (default 0.2)")
        if not self.advantage_eps > 0:
            raise ValueError(f"advantage_eps must be > 0, got {self.advantage_eps}")


# The recipes a round picks by name; a job config is the recipe's fields for
# that job plus the round's paths. "cpu" is measured on the embedded model
# (DESIGN.md). It stays a full fine-tune because LoRA does not pay at 135M on
# CPU: an SFT step of 8 trajectories of 350 tokens took 27-36 s full and 35 s
# with rank-16 LoRA (two runs each, shared cores), peak RSS 5.3 GB vs 5.0 GB;
# the backward pass still runs through every layer. LoRA (`lora_rank`) is for
# models whose AdamW state does not fit.
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "sft": {"learning_rate": 1e-5, "epochs": 1, "batch_size": 8, "max_length": 4096, "max_tokens_per_forward": 2048},
        "grpo": {"learning_rate": 1e-5, "epochs": 1, "batch_size": 8, "max_length": 4096, "max_tokens_per_forward": 2048,
                 "beta": 0.04},
    },
    "paper": {
        "sft": {"learning_rate": 2e-5, "epochs": 3, "batch_size": 128, "max_length": 65536,
                "max_tokens_per_forward": 65536, "mixed_precision": "bf16", "gradient_checkpointing": True,
                "save_every_steps": 50},
        "grpo": {"learning_rate": 5e-7, "epochs": 1, "batch_size": 128, "max_length": 65536,
                 "max_tokens_per_forward": 65536, "mixed_precision": "bf16", "gradient_checkpointing": True,
                 "beta": 0.04, "save_every_steps": 50},
    },
}


def recipe_config(recipe: str, job: str) -> dict[str, Any]:
    """The fields recipe `recipe` sets for `job` ("sft" or "grpo")."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown training recipe {recipe!r}; choose one of {sorted(RECIPES)}")
    if job not in RECIPES[recipe]:
        raise ValueError(f"unknown training job {job!r}; choose one of {sorted(RECIPES[recipe])}")
    return dict(RECIPES[recipe][job])
