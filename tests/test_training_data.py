"""What the trainers get from the recorded rollouts: rollouts lost to the
infrastructure leave their group smaller and never count as failures."""

import pytest

from clawloop_assets.training.examples import grpo_groups, sft_examples
from resources.warehouse import table_frame
from training_jobs.policy_gradient import group_advantages


def rollout(task_id: str, index: int, status: str = "scored", reward: float | None = None, canary: bool = False,
            phase: str = "validation") -> dict:
    return {
        "round": "round-0001", "rollout_id": f"{task_id}.{phase}.{index}", "task_id": task_id, "phase": phase,
        "checkpoint_id": "ckpt-base", "sample_index": index, "status": status,
        "reward": reward if status == "scored" else None, "error": None if status == "scored" else "lost",
        "turns": 1, "submitted": False, "canary_seen": canary, "commands": ["ls"], "exit_codes": [0],
        "last_output": "", "verifier_checks": "[]", "token_ids": [1, 2, 3], "action_mask": [0, 1, 1],
        "sampling_logprobs": [0.0, -0.5, -0.5], "temperature": 0.7, "prompt_tokens": 1, "generated_tokens": 2,
        "model_seconds": 0.1, "sandbox_seconds": 0.1,
    }


@pytest.fixture
def rollouts():
    rows = [
        # Task a: 8 rollouts, of which 2 lost to the sandbox, 1 to the policy
        # server, 1 saw the canary; 4 left: rewards 1, 0, 0, 1.
        rollout("a", 0, reward=1.0), rollout("a", 1, reward=0.0), rollout("a", 2, "sandbox_error"),
        rollout("a", 3, reward=0.0), rollout("a", 4, "policy_error"), rollout("a", 5, reward=1.0),
        rollout("a", 6, "verifier_error"), rollout("a", 7, reward=1.0, canary=True),
        # Task b is held out; task c's rollouts are from another phase.
        rollout("b", 0, reward=1.0), rollout("c", 0, reward=1.0, phase="heldout_after"),
    ]
    return table_frame("rollouts", rows)


def test_lost_rollouts_leave_the_group_smaller_and_are_never_failures(rollouts):
    groups = grpo_groups(rollouts, ["a", "c"])

    assert groups["rollout_id"].to_list() == ["a.validation.0", "a.validation.1", "a.validation.3", "a.validation.5"]
    assert groups["reward"].to_list() == [1.0, 0.0, 0.0, 1.0]
    advantages = group_advantages(groups["reward"].to_list(), groups["group_id"].to_list(), eps=0.0).advantages
    # Mean 0.5 and std 0.5 over the four scored rollouts, not over eight with the lost ones as zeros.
    assert advantages == pytest.approx([1.0, -1.0, -1.0, 1.0])


def test_sft_takes_only_scored_successes_of_the_training_tasks(rollouts):
    examples = sft_examples(rollouts, ["a"])
    assert examples["rollout_id"].to_list() == ["a.validation.0", "a.validation.5"]
