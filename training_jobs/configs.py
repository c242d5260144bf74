"""Configs of the two training jobs. One JSON object per run, from Dagster Pipes
`extras` or from `--config FILE.json`; every field says what it does.

Defaults are the CPU recipe measured with the embedded 135M model (see
DESIGN.md): full fine-tune, fp32, lr 1e-5, one epoch. The paper's GPU recipe
for a 27B model is SFT lr 2e-5 / batch 128 / 3 epochs and GRPO lr 5e-7,
beta 0.04; set those through the config on GPU nodes.
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
