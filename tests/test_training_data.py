"""What the trainers get from the recorded rollouts: rollouts lost to the
infrastructure leave their group smaller and never count as failures."""

import pytest
from family_tasks import CAPABILITIES, build_bundle

from clawloop_assets.harness.agent_loop import first_prompt
from clawloop_assets.synthesis.catalogs import load_domain_catalog
from clawloop_assets.synthesis.generators.generator_common import SHOWN_COMMAND_LEAD, in_words, shown_command, with_help
from clawloop_assets.training.examples import (
    COPIES_PER_TASK,
    IN_WORDS,
    TRAINING_COLUMNS,
    grpo_groups,
    in_words_examples,
    sft_examples,
)
from resources.policy import ChatTemplate
from resources.sandbox import BubblewrapSandbox
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


# ---- the successes of a task that shows its command, once more in words ----------------------------------------

WORDS = "Write the ids in loans.txt that are missing from schedule.txt to missing.txt, one per line."
COMMAND = "comm -23 loans.txt schedule.txt > missing.txt"


def test_in_words_takes_off_exactly_the_command_shown():
    one_line, paragraphs = WORDS, "Two files are sorted.\n" + WORDS
    for words in (one_line, paragraphs):
        assert in_words(with_help(words, SHOWN_COMMAND_LEAD + COMMAND), COMMAND) == words + "\n"
    # Nothing shown, another command shown, or the lead run into the words: as it is.
    assert in_words(WORDS + "\n", COMMAND) == WORDS + "\n"
    assert in_words(with_help(WORDS, SHOWN_COMMAND_LEAD + "ls"), COMMAND) == with_help(WORDS, SHOWN_COMMAND_LEAD + "ls")
    assert in_words(WORDS + "Run: " + COMMAND, COMMAND) == WORDS + "Run: " + COMMAND


@pytest.fixture(scope="module")
def rung_and_level_0(tmp_path_factory):
    """A family's level -1 task and its level 0, the same domain and seed."""
    root, domain = tmp_path_factory.mktemp("bundles"), load_domain_catalog()[0]
    return [build_bundle(BubblewrapSandbox(), CAPABILITIES["ledger_reconciliation"], root / str(level), domain, level, 0)
            for level in (-1, 0)]


def test_a_rung_task_in_words_is_its_level_0_task(rung_and_level_0):
    rung, level_0 = rung_and_level_0
    command = shown_command(rung.solution_path.read_text())
    assert rung.instruction != level_0.instruction
    assert in_words(rung.instruction, command) == level_0.instruction


def _sampled(task_id: str, index: int, prompt: list[int], reply: list[int], reward: float, canary=False) -> dict:
    row = rollout(task_id, index, reward=reward, canary=canary)
    observation = [7, 8, 9]
    return row | {"token_ids": prompt + reply + observation, "action_mask": [0] * len(prompt) + [1] * len(reply) + [0] * 3,
                  "sampling_logprobs": [0.0] * len(prompt) + [-0.25] * len(reply) + [0.0] * 3,
                  "prompt_tokens": len(prompt), "generated_tokens": len(reply)}


def test_a_shown_tasks_successes_are_copied_with_the_prompt_its_words_give(rung_and_level_0, base_checkpoint_dir):
    rung, level_0 = rung_and_level_0
    chat = ChatTemplate.of_checkpoint(base_checkpoint_dir)
    shown, level_0_prompt = first_prompt(chat, rung.instruction), first_prompt(chat, level_0.instruction)
    reply = chat.encode(shown_command(rung.solution_path.read_text()) + "\n```")
    other_template = [shown[0] + 1] + shown[1:]
    rows = [
        _sampled(rung.task_id, 0, shown, reply, 1.0),
        _sampled(rung.task_id, 1, shown, reply[:3], 0.0),  # a failure: no copy
        _sampled(rung.task_id, 2, other_template, reply, 1.0),  # sampled under another template: left out, counted
        _sampled(rung.task_id, 3, shown, reply, 1.0, canary=True),  # saw the canary: never trained on
        _sampled(level_0.task_id, 0, level_0_prompt, reply, 1.0),  # shows nothing: no copy
        _sampled(rung.task_id, 4, shown, reply, 1.0),  # the same trajectory as 0: copied once
    ]
    copies, unmatched = in_words_examples(table_frame("rollouts", rows), [rung, level_0], chat)

    assert unmatched == 1 and copies["rollout_id"].to_list() == [f"{rung.task_id}.validation.0{IN_WORDS}"]
    [copy] = copies.iter_rows(named=True)
    # The level-0 task's own prompt (the same words), then the same reply and observation.
    assert copy["token_ids"] == level_0_prompt + reply + [7, 8, 9]
    assert copy["action_mask"] == [0] * len(level_0_prompt) + [1] * len(reply) + [0] * 3
    assert copy["sampling_logprobs"][len(level_0_prompt):] == [-0.25] * len(reply) + [0.0] * 3
    assert copy["group_id"] == rung.task_id and copy["reward"] == 1.0 and copy["temperature"] == 0.7
    assert set(copies.columns) == set(TRAINING_COLUMNS)


def test_a_task_gives_at_most_its_share_of_copies_in_words(rung_and_level_0, base_checkpoint_dir):
    # A task passed 8 of 8 would otherwise weigh its one sentence 8 times.
    rung, _ = rung_and_level_0
    chat = ChatTemplate.of_checkpoint(base_checkpoint_dir)
    shown, reply = first_prompt(chat, rung.instruction), chat.encode("ls\n```")
    rows = [_sampled(rung.task_id, i, shown, reply + [i], 1.0) for i in range(COPIES_PER_TASK + 2)]
    copies, unmatched = in_words_examples(table_frame("rollouts", rows), [rung], chat)
    assert unmatched == 0
    assert copies["rollout_id"].to_list() == [f"{rung.task_id}.validation.{i}{IN_WORDS}" for i in range(COPIES_PER_TASK)]
