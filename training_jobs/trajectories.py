"""Recorded trajectories as the trainer sees them: token ids exactly as sampled
(never re-tokenized), the action mask, and the sampling log-probs. Loading,
the length filter, batching and padding; no torch model code here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch

# Pad value for token ids. Padding is on the right, so no real token attends to
# it, and it is outside every mask, so its value never reaches the loss.
PAD_TOKEN_ID = 0


@dataclass(frozen=True)
class Trajectory:
    rollout_id: str
    group_id: str
    reward: float
    token_ids: list[int]
    action_mask: list[int]
    sampling_logprobs: list[float]
    temperature: float

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_action_tokens(self) -> int:
        return sum(self.action_mask)


def parse_trajectory(record: dict, where: str) -> Trajectory:
    missing = {"rollout_id", "group_id", "reward", "token_ids", "action_mask", "sampling_logprobs", "temperature"} - set(record)
    if missing:
        raise ValueError(f"{where}: trajectory lacks {sorted(missing)}")
    traj = Trajectory(
        rollout_id=str(record["rollout_id"]),
        group_id=str(record["group_id"]),
        reward=float(record["reward"]),
        token_ids=[int(t) for t in record["token_ids"]],
        action_mask=[int(m) for m in record["action_mask"]],
        sampling_logprobs=[float(x) for x in record["sampling_logprobs"]],
        temperature=float(record["temperature"]),
    )
    n = len(traj.token_ids)
    if not (len(traj.action_mask) == len(traj.sampling_logprobs) == n):
        raise ValueError(
            f"{where}: token_ids, action_mask and sampling_logprobs must have the same length, got "
            f"{n}, {len(traj.action_mask)}, {len(traj.sampling_logprobs)}"
        )
    if set(traj.action_mask) - {0, 1}:
        raise ValueError(f"{where}: action_mask must hold only 0 and 1")
    if traj.num_action_tokens == 0:
        raise ValueError(f"{where}: no action tokens (action_mask is all 0); the agent loop should not record it")
    if traj.action_mask[0] == 1:
        raise ValueError(f"{where}: the first token is marked as an action, but a sampled token always follows a prompt")
    if not traj.temperature > 0:
        raise ValueError(f"{where}: temperature must be > 0, got {traj.temperature}")
    if not all(math.isfinite(x) and x <= 0 for x in traj.sampling_logprobs):
        raise ValueError(f"{where}: sampling_logprobs must be finite and <= 0")
    return traj


def load_trajectories(path: str | Path) -> list[Trajectory]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"examples file {path} does not exist")
    trajectories = []
    with path.open() as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid JSON: {exc}") from exc
            trajectories.append(parse_trajectory(record, f"{path}:{line_no}"))
    return trajectories


def drop_too_long(trajectories: Sequence[Trajectory], max_length: int) -> tuple[list[Trajectory], int]:
    """Keep trajectories of at most `max_length` tokens; return them and how many were dropped."""
    kept = [t for t in trajectories if len(t) <= max_length]
    return kept, len(trajectories) - len(kept)


def shuffled_batches(items: Sequence, batch_size: int, generator: torch.Generator) -> Iterator[list]:
    order = torch.randperm(len(items), generator=generator).tolist()
    for start in range(0, len(order), batch_size):
        yield [items[i] for i in order[start : start + batch_size]]


def forward_chunks(batch: Sequence[Trajectory], max_tokens: int) -> Iterator[list[int]]:
    """Split a step's batch (indices into it) into forward passes of at most
    `max_tokens` padded tokens; a trajectory longer than that goes alone."""
    chunk: list[int] = []
    longest = 0
    for i, traj in enumerate(batch):
        new_longest = max(longest, len(traj))
        if chunk and new_longest * (len(chunk) + 1) > max_tokens:
            yield chunk
            chunk, new_longest = [], len(traj)
        chunk.append(i)
        longest = new_longest
    if chunk:
        yield chunk


@dataclass
class PaddedBatch:
    """Right-padded tensors. The `target_*` tensors are shifted by one: position t
    describes token t+1, the token predicted from the logits at position t."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    target_ids: torch.Tensor  # [B, T-1] long
    target_action_mask: torch.Tensor  # [B, T-1] float, 1 where the predicted token was sampled by the policy
    target_sampling_logprobs: torch.Tensor  # [B, T-1] float
    temperature: torch.Tensor  # [B] float

    def to(self, device: torch.device) -> "PaddedBatch":
        return PaddedBatch(**{name: tensor.to(device) for name, tensor in vars(self).items()})


def pad_batch(trajectories: Sequence[Trajectory]) -> PaddedBatch:
    width = max(len(t) for t in trajectories)
    n = len(trajectories)
    input_ids = torch.full((n, width), PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    action_mask = torch.zeros((n, width), dtype=torch.float32)
    sampling_logprobs = torch.zeros((n, width), dtype=torch.float32)
    for row, traj in enumerate(trajectories):
        length = len(traj)
        input_ids[row, :length] = torch.tensor(traj.token_ids, dtype=torch.long)
        attention_mask[row, :length] = 1
        action_mask[row, :length] = torch.tensor(traj.action_mask, dtype=torch.float32)
        sampling_logprobs[row, :length] = torch.tensor(traj.sampling_logprobs, dtype=torch.float32)
    return PaddedBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        target_ids=input_ids[:, 1:],
        target_action_mask=action_mask[:, 1:],
        target_sampling_logprobs=sampling_logprobs[:, 1:],
        temperature=torch.tensor([t.temperature for t in trajectories], dtype=torch.float32),
    )
