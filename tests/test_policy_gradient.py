"""The GRPO objective against a hand computation."""

import math

import pytest
import torch

from training_jobs.policy_gradient import group_advantages, grpo_loss

EPS = 1e-4
CLIP = 0.2
BETA = 0.04


def test_group_advantages_population_std_and_zero_variance():
    groups = group_advantages([1, 0, 0, 0, 1, 1], ["a", "a", "a", "a", "b", "b"], eps=EPS)
    mean, std = 0.25, math.sqrt(0.75 * 0.25)  # population std of [1, 0, 0, 0]
    assert groups.advantages[:4] == pytest.approx([(1 - mean) / (std + EPS)] + [(0 - mean) / (std + EPS)] * 3)
    assert groups.advantages[4:] == [0.0, 0.0]
    assert groups.informative == [True] * 4 + [False] * 2
    assert (groups.groups_total, groups.groups_skipped_zero_variance) == (2, 1)


def hand_token_loss(new, old, ref, adv):
    ratio = math.exp(new - old)
    surrogate = min(ratio * adv, min(max(ratio, 1 - CLIP), 1 + CLIP) * adv)
    kl = math.exp(ref - new) - (ref - new) - 1
    return -surrogate + BETA * kl, kl


def hand_batch():
    """Two groups, two rollouts each, three target positions per rollout.

    group g1: rewards [1, 0] -> A = +-0.5 / (0.5 + eps); group g2: rewards [1, 0] too
    but different log-probs. Row 0 token 1 has ratio e^0.5 > 1.2 with A > 0 (clipped);
    row 1 token 0 has ratio e^-0.5 < 0.8 with A < 0 (clipped). Column 0 of rows 2 and 3
    is an observation token (mask 0) holding extreme values that must not matter.
    """
    new = torch.tensor(
        [[-1.0, -0.5, -2.0], [-1.5, -0.7, -0.3], [50.0, -0.2, -1.1], [-90.0, -2.2, -0.4]], requires_grad=True
    )
    old = torch.tensor([[-1.1, -1.0, -2.0], [-1.0, -0.8, -0.3], [0.0, -0.25, -1.0], [0.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.2, -0.6, -1.9], [-1.4, -0.9, -0.2], [9.0, -0.3, -1.3], [-9.0, -2.1, -0.6]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    groups = group_advantages([1, 0, 1, 0], ["g1", "g1", "g2", "g2"], eps=EPS)
    return new, old, ref, mask, torch.tensor(groups.advantages)


def test_grpo_loss_matches_hand_computation_with_clipping_and_kl():
    new, old, ref, mask, adv = hand_batch()
    a = 0.5 / (0.5 + EPS)
    assert adv.tolist() == pytest.approx([a, -a, a, -a])

    expected, kls = 0.0, []
    for row in range(4):
        for col in range(3):
            if mask[row, col]:
                token_loss, kl = hand_token_loss(new[row, col].item(), old[row, col].item(), ref[row, col].item(), adv[row].item())
                expected += token_loss
                kls.append(kl)
    n_action = int(mask.sum().item())  # 10
    expected /= n_action
    # By hand: ratio e^0.5 (row 0, col 1) with A > 0 and e^-0.5 (row 1, col 0) with A < 0 are clipped.
    clipped = 2

    loss, stats = grpo_loss(new, old, ref, adv, mask, clip_epsilon=CLIP, beta=BETA, num_action_tokens=n_action)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert stats.action_tokens == n_action
    assert stats.kl_sum / n_action == pytest.approx(sum(kls) / n_action, rel=1e-5)
    assert stats.clipped_tokens == clipped

    # A clipped token gets no policy gradient, only the KL's.
    loss.backward()
    r, f = 0, 1
    kl_grad = BETA * (-math.exp(ref[r, f].item() - new[r, f].item()) + 1) / n_action
    assert new.grad[r, f].item() == pytest.approx(kl_grad, rel=1e-4)


def test_masked_tokens_get_zero_gradient():
    new, old, ref, mask, adv = hand_batch()
    loss, _ = grpo_loss(new, old, ref, adv, mask, clip_epsilon=CLIP, beta=BETA, num_action_tokens=int(mask.sum()))
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.all(new.grad[mask == 0] == 0)
    assert torch.all(new.grad[mask == 1] != 0)


def test_zero_variance_group_contributes_nothing():
    """Rollouts of an all-pass group are left out, so the loss and gradient are
    those of the informative group alone."""
    new, old, ref, mask, _ = hand_batch()
    groups = group_advantages([1, 0, 1, 1], ["g1", "g1", "g2", "g2"], eps=EPS)
    assert groups.informative == [True, True, False, False]
    keep = torch.tensor(groups.informative)
    adv = torch.tensor(groups.advantages)
    n_kept = int(mask[keep].sum())

    loss, _ = grpo_loss(new[keep], old[keep], ref[keep], adv[keep], mask[keep], clip_epsilon=CLIP, beta=BETA, num_action_tokens=n_kept)
    loss.backward()
    assert torch.all(new.grad[~keep] == 0)

    new_g1 = new.detach()[:2].clone().requires_grad_(True)
    loss_g1, _ = grpo_loss(new_g1, old[:2], ref[:2], adv[:2], mask[:2], clip_epsilon=CLIP, beta=BETA, num_action_tokens=n_kept)
    assert loss.item() == pytest.approx(loss_g1.item())


def test_split_forward_passes_add_up_to_the_whole_step():
    new, old, ref, mask, adv = hand_batch()
    n = int(mask.sum())
    whole, _ = grpo_loss(new, old, ref, adv, mask, clip_epsilon=CLIP, beta=BETA, num_action_tokens=n)
    parts = sum(
        grpo_loss(new[s], old[s], ref[s], adv[s], mask[s], clip_epsilon=CLIP, beta=BETA, num_action_tokens=n)[0]
        for s in (slice(0, 1), slice(1, 4))
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)
