"""The GRPO objective on recorded groups, and the token log-probs both jobs train on.

TRL's GRPOTrainer samples its own completions and cannot consume recorded
multi-turn groups with an observation mask, so the loss is written here:
group-normalized advantages, a PPO-style clipped surrogate against the
sampling log-probs, and a k3 KL penalty to a reference model, per action token.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch
from transformers import DynamicCache


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: list[float]  # one per rollout; 0.0 in zero-variance groups
    informative: list[bool]  # False for rollouts of zero-variance groups: they carry no gradient
    groups_total: int
    groups_skipped_zero_variance: int


def group_advantages(rewards: Sequence[float], group_ids: Sequence[str], eps: float = 1e-4) -> GroupAdvantages:
    """A_i = (r_i - mean(r)) / (std(r) + eps) within each group, population std.

    >>> g = group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    >>> [round(a, 3) for a in g.advantages], g.informative, g.groups_skipped_zero_variance
    ([1.0, -1.0, 0.0, 0.0], [True, True, False, False], 1)
    """
    members: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(group_ids):
        members[group].append(i)
    advantages = [0.0] * len(rewards)
    informative = [False] * len(rewards)
    skipped = 0
    for indices in members.values():
        group_rewards = torch.tensor([float(rewards[i]) for i in indices], dtype=torch.float64)
        std = group_rewards.std(unbiased=False).item()
        if std == 0.0:
            # All pass or all fail: every advantage is 0 and the group teaches
            # nothing; training on it would only apply the KL pull.
            skipped += 1
            continue
        mean = group_rewards.mean().item()
        for i in indices:
            advantages[i] = (float(rewards[i]) - mean) / (std + eps)
            informative[i] = True
    return GroupAdvantages(advantages, informative, len(members), skipped)


# Below this many shared tokens a separate pass for them saves less than it costs.
MIN_SHARED_PREFIX_TOKENS = 32


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: torch.Tensor, target_mask: torch.Tensor
) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) under softmax(logits / temperature), the
    distribution the tokens were sampled from, at the positions where
    `target_mask` [B, T-1] is set; 0 elsewhere. Returns [B, T-1].

    Only those positions go through the vocabulary head (`logits_to_keep` as a
    boolean mask): observation tokens, often most of a trajectory, never get
    [vocab]-sized logits, which is most of the memory of a step.

    The tokens every row starts with, up to the first target of any row (the
    system prompt and worked examples every rollout opens with), go through
    the model once; the rows continue from their keys and values. It is the
    same function, up to float rounding, and its gradient reaches the shared
    tokens' activations from every row.
    """
    batch, length = input_ids.shape
    keep = torch.zeros((batch, length), dtype=torch.bool, device=input_ids.device)
    keep[:, :-1] = target_mask > 0
    shared = shared_prefix_length(input_ids, attention_mask, target_mask)
    if batch > 1 and shared >= MIN_SHARED_PREFIX_TOKENS and not getattr(model, "is_activation_checkpointing", False):
        cache = DynamicCache(config=model.config)
        model(input_ids=input_ids[:1, :shared], cache=cache, use_cache=True, logits_to_keep=1)
        for layer in cache.layers:  # views, not copies: one prefix for every row
            layer.keys = layer.keys.expand(batch, -1, -1, -1)
            layer.values = layer.values.expand(batch, -1, -1, -1)
        positions = torch.arange(shared, length, device=input_ids.device)[None].expand(batch, -1)
        logits = model(input_ids=input_ids[:, shared:], attention_mask=attention_mask, position_ids=positions,
                       cache=cache, use_cache=True, logits_to_keep=keep[:, shared:]).logits
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
    logits = logits.float()  # [N, V]
    logits = logits / temperature.to(logits)[:, None].expand(batch, length)[keep][:, None]
    targets = input_ids[:, 1:][keep[:, :-1]]
    # gather - logsumexp rather than a full log_softmax: one fewer [N, V] tensor.
    picked = torch.gather(logits, -1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.zeros((batch, length - 1), dtype=picked.dtype, device=picked.device).masked_scatter(keep[:, :-1], picked)


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor) -> int:
    """How many leading tokens every row has in common and needs no logits
    for: the common prefix of the rows' real tokens, cut at the first position
    whose logits any row's `target_mask` [B, T-1] asks for.

    >>> ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0]])
    >>> shared_prefix_length(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), torch.zeros(2, 3))
    2
    >>> targets = torch.tensor([[0, 1, 0], [0, 0, 1]])
    >>> shared_prefix_length(ids, torch.ones(2, 4, dtype=torch.long), targets)
    1
    """
    same = ((input_ids == input_ids[:1]) & (attention_mask > 0)).all(0)
    common = int(same.long().cumprod(0).sum())
    targeted = (target_mask > 0).any(0).nonzero()
    return min(common, int(targeted[0])) if len(targeted) else common


@dataclass(frozen=True)
class GRPOTokenStats:
    """Sums over action tokens, so forward passes of one step add up exactly."""

    action_tokens: float
    kl_sum: float
    clipped_tokens: float


def grpo_loss(
    logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_epsilon: float,
    beta: float,
    num_action_tokens: int,
) -> tuple[torch.Tensor, GRPOTokenStats]:
    """Clipped surrogate plus beta * k3 KL, summed over action tokens and
    divided by `num_action_tokens`.

    Normalization: one mean over all action tokens of the optimizer step (the
    "token-level" mean of DAPO, not GRPO's mean of per-sequence means), so
    every sampled token weighs the same whatever the length of its trajectory:
    long multi-turn rollouts are not down-weighted per token and there is no
    length bias toward long failing answers. Pass the step's total as
    `num_action_tokens` when a step is split into several forward passes, and
    the sum of their losses is exactly the loss of the whole step.

    Shapes: token tensors [B, T'], advantages [B]; masked positions may hold
    anything (they get no gradient).
    """
    mask = action_mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)[:, None]
    # Masked positions are zeroed before exp so garbage there cannot overflow.
    log_ratio = torch.where(mask > 0, logprobs - sampling_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_epsilon, 1 + clip_epsilon) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(logprobs)
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs")
        ref_minus_new = torch.where(mask > 0, ref_logprobs - logprobs, torch.zeros_like(logprobs))
        kl = torch.exp(ref_minus_new) - ref_minus_new - 1
        per_token = per_token + beta * kl
    loss = (per_token * mask).sum() / num_action_tokens
    # Clipped: the clipped branch is the smaller one, so the token gets no policy gradient.
    is_clipped = ((ratio < 1 - clip_epsilon) & (adv < 0)) | ((ratio > 1 + clip_epsilon) & (adv > 0))
    stats = GRPOTokenStats(
        action_tokens=mask.sum().item(),
        kl_sum=(kl.detach() * mask).sum().item(),
        clipped_tokens=(is_clipped.to(mask.dtype) * mask).sum().item(),
    )
    return loss, stats
