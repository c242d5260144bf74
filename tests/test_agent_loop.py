"""The agent loop's bookkeeping, with a scripted policy (a unit-test double)
and the real sandbox and verifier on a real generated task."""

import dataclasses
import shutil
import time

import pytest

from clawloop_assets.harness.agent_loop import (
    AgentSettings,
    parse_command,
    rollout_row,
    run_rollouts,
)
from clawloop_assets.synthesis import catalogs
from clawloop_assets.synthesis.candidates import (
    COMMAND_TIMEOUT_S,
    LARGE_WORKSPACE_COMMAND_TIMEOUT_S,
    build_candidate,
    generator_spec,
    write_generator,
)
from clawloop_assets.task_bundle import load_task_bundle
from resources.policy import Completion, PolicySession
from resources.sandbox import BubblewrapSandbox, SandboxError


class ScriptedSession(PolicySession):
    """Character-level tokens; replies come from a script, in call order."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, token_ids):
        return "".join(chr(t) for t in token_ids)

    def chat_text(self, messages, *, add_generation_prompt):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def sample(self, prompts, n, params):
        out = []
        for _ in prompts:
            group = []
            for _ in range(n):
                text = self.replies.pop(0)
                ids = self.encode(text)
                group.append(Completion(ids, [-0.5] * len(ids), text, "stop" if "```" in text else "length"))
            out.append(group)
        return out


@pytest.fixture(scope="module")
def level0_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("task")
    capability = next(c for c in catalogs.load_capability_catalog() if c.id == "file_reorganization")
    domain = catalogs.load_domain_catalog()[0]
    spec = generator_spec(capability, domain, 0)
    generator = write_generator(spec, root / "generator")
    build = build_candidate(BubblewrapSandbox(), generator, spec, 7, "round-0001", root / "tasks")
    assert build.error is None, build.error
    return load_task_bundle(build.bundle_dir)


def oracle_command(task) -> str:
    lines = [l for l in task.solution_path.read_text().splitlines() if l.strip() and not l.startswith(("#", "set "))]
    return " && ".join(lines)


@pytest.mark.parametrize("reply", ["", "ls -la", "no fence at all"])
def test_parse_command(reply):
    assert parse_command(reply + "\n```") == (reply.strip() or None)
    assert parse_command(reply) is None


def test_rollouts_record_tokens_masks_and_rewards(level0_task, tmp_path):
    settings = AgentSettings(max_turns=2)
    replies = [
        oracle_command(level0_task) + "\n```",  # sample 0: solves, then submits
        "echo nothing\n```",  # sample 1: wrong, then garbage with no closing fence
        "submit\n```",
        "I think the answer is",
    ]
    rollouts = run_rollouts(ScriptedSession(replies), BubblewrapSandbox(), [level0_task], 2, settings, tmp_path, seed=0)
    solved, failed = rollouts
    assert (solved.reward, solved.submitted, solved.status) == (1.0, True, "scored")
    assert (failed.reward, failed.submitted) == (0.0, False)
    assert failed.commands == ["echo nothing", ""]  # the reply with no command is recorded, not run
    for rollout in rollouts:
        assert len(rollout.token_ids) == len(rollout.action_mask) == len(rollout.sampling_logprobs)
        # Exactly the sampled characters are action tokens; prompts and observations are not.
        sampled = [t for t, m in zip(rollout.token_ids, rollout.action_mask) if m]
        assert "".join(map(chr, sampled)) in {replies[0] + replies[2], replies[1] + replies[3]}
    row = rollout_row(solved, round_key="round-0001", phase="validation", checkpoint_id="ckpt-x")
    assert row["rollout_id"] == f"{level0_task.task_id}.validation.0"
    # The observation of the first command was shown to the agent before it submitted.
    assert "exit code 0" in ScriptedSession([]).decode(solved.token_ids)


class GatedSession(ScriptedSession):
    """Streams its first `released` completions, then holds the rest back
    until `ready()` (or a timeout): a harness that only acts once the call
    returns never lets `ready()` come true in time."""

    def __init__(self, replies, ready, released=1, timeout=20.0):
        super().__init__(replies)
        self.ready, self.released, self.timeout = ready, released, timeout
        self.waited_out = False

    def sample_streaming(self, prompts, n, params, on_complete):
        groups = self.sample(prompts, n, params)
        flat = [(p, i, c) for p, group in enumerate(groups) for i, c in enumerate(group)]
        for item in flat[:self.released]:
            on_complete(*item)
        deadline = time.monotonic() + self.timeout
        while not self.ready():
            if time.monotonic() > deadline:
                self.waited_out = True
                break
            time.sleep(0.01)
        for item in flat[self.released:]:
            on_complete(*item)
        return groups


def other_task(task, suffix="b"):
    """The same bundle under another task id: a second task of the same call."""
    return dataclasses.replace(task, task_id=f"{task.task_id}-{suffix}")


class TemperatureRecordingSession(ScriptedSession):
    """Records each call's (temperature, prompts, samples per prompt)."""

    def __init__(self, replies):
        super().__init__(replies)
        self.calls = []

    def sample(self, prompts, n, params):
        self.calls.append((params.temperature, len(prompts), n))
        return super().sample(prompts, n, params)


def test_each_level_samples_at_its_own_temperature_one_call_per_temperature(level0_task, tmp_path):
    """Three tasks, two at level 0 and one at the warm-up level, which a
    round's temperature serves: every turn samples each temperature's
    rollouts in a call of their own, and each rollout records its temperature."""
    warmup = dataclasses.replace(other_task(level0_task, "warmup"), difficulty=-2)
    tasks = [level0_task, warmup, other_task(level0_task)]
    session = TemperatureRecordingSession(["ls\n```"] * 12)
    settings = AgentSettings(max_turns=2, temperature=0.7, level_temperatures={-2: 1.1})
    rollouts = run_rollouts(session, BubblewrapSandbox(), tasks, 2, settings, tmp_path, seed=0)
    # Turn 1: one call per temperature, every sample of a task in it; turn 2: one rollout per sequence.
    assert session.calls == [(0.7, 2, 2), (1.1, 1, 2), (0.7, 4, 1), (1.1, 2, 1)]
    assert [(r.task.task_id, r.temperature) for r in rollouts] == [
        (task.task_id, 1.1 if task is warmup else 0.7) for task in tasks for _ in range(2)]
    assert all(r.turns == 2 and r.status == "scored" for r in rollouts)
    rows = [rollout_row(r, round_key="round-0001", phase="validation", checkpoint_id="c") for r in rollouts]
    assert [row["temperature"] for row in rows] == [0.7, 0.7, 1.1, 1.1, 0.7, 0.7]


def test_two_tasks_of_one_id_are_refused_before_any_rollout(level0_task, tmp_path):
    # They would share a workspace directory: one's commands would score the other.
    with pytest.raises(ValueError, match=f"repeated: {level0_task.task_id}"):
        run_rollouts(ScriptedSession([]), BubblewrapSandbox(), [level0_task, level0_task], 1, AgentSettings(),
                     tmp_path, seed=0)
    assert not any(tmp_path.iterdir())


def test_commands_and_verifiers_run_while_the_policy_samples(level0_task, tmp_path):
    # Task A's two rollouts (one solves) end on turn 1 of 1: their commands
    # and their verifiers must all be done while the policy still holds back
    # task B's replies.
    replies = [oracle_command(level0_task) + "\n```", "ls\n```", "ls\n```", "ls\n```"]
    rollouts: list = []
    session = GatedSession(replies, released=2,
                           ready=lambda: len(rollouts) == 4 and None not in (rollouts[0].reward, rollouts[1].reward))
    import clawloop_assets.harness.agent_loop as agent_loop

    real_run_turns = agent_loop._run_turns

    def keep_rollouts(session_, sandbox, tasks, rs, *args):  # a spy: hands the test the rollouts in flight
        rollouts.extend(rs)
        return real_run_turns(session_, sandbox, tasks, rs, *args)

    agent_loop._run_turns = keep_rollouts
    try:
        run_rollouts(session, BubblewrapSandbox(), [level0_task, other_task(level0_task)], 2,
                     AgentSettings(max_turns=1), tmp_path, seed=0)
    finally:
        agent_loop._run_turns = real_run_turns
    assert not session.waited_out
    assert [r.reward for r in rollouts] == [1.0, 0.0, 0.0, 0.0]


class CountingSandbox:
    """The real sandbox, counting verifier runs (a single verification or a
    batch); it can make a batch's sandbox fail to start."""

    def __init__(self, fail_batches=False):
        self.inner = BubblewrapSandbox()
        self.verifier_runs, self.fail_batches = 0, fail_batches

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, argv, mounts, **kwargs):
        batch = list(argv[:3]) == ["python3", "-I", "-c"]
        if batch or "/tests/verify.py" in argv:
            self.verifier_runs += 1
        if batch and self.fail_batches:
            raise SandboxError("the batch's sandbox did not start (a test double)")
        return self.inner.run(argv, mounts, **kwargs)


def test_a_tasks_rollouts_that_end_together_are_verified_in_one_sandbox_run(level0_task, tmp_path):
    replies = [oracle_command(level0_task) + "\n```", "ls\n```", "echo x > y\n```", "no fence",
               oracle_command(level0_task) + "\n```", "ls\n```"]
    tasks = [level0_task, other_task(level0_task)]
    sandbox = CountingSandbox()
    rollouts = run_rollouts(ScriptedSession(replies), sandbox, tasks, 3, AgentSettings(max_turns=1), tmp_path / "a", seed=0)
    assert [r.reward for r in rollouts] == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert sandbox.verifier_runs == 2  # one a task, not one a rollout
    # Where a batch's sandbox fails, each rollout is verified on its own, to the same verdicts.
    failing = CountingSandbox(fail_batches=True)
    again = run_rollouts(ScriptedSession(replies), failing, tasks, 3, AgentSettings(max_turns=1), tmp_path / "b", seed=0)
    assert [(r.status, r.reward) for r in again] == [(r.status, r.reward) for r in rollouts]
    assert failing.verifier_runs == 2 + 6
    assert all(r.sandbox_seconds > 0 for r in rollouts)


def test_rollouts_that_leave_a_sqlite_file_are_verified_alone(level0_task, tmp_path):
    # SQLite's C parser is the verifier's one surface a crafted file could
    # subvert: such a verifier must not hold its siblings' verdicts.
    replies = ["sqlite3 crafted.db 'create table t(a)'\n```", oracle_command(level0_task) + "\n```"]
    sandbox = CountingSandbox()
    rollouts = run_rollouts(ScriptedSession(replies), sandbox, [level0_task], 2, AgentSettings(max_turns=1), tmp_path, seed=0)
    assert [r.reward for r in rollouts] == [0.0, 1.0]
    assert sandbox.verifier_runs == 2


def test_rollouts_do_not_depend_on_the_number_of_harness_threads(level0_task, tmp_path):
    replies = [
        oracle_command(level0_task) + "\n```", "echo nothing\n```", "ls -la\n```", "no fence",
        "submit\n```", "cat *\n```", "submit\n```", "wc -l *\n```",
    ]
    runs = []
    for workers in (1, 4):
        settings = AgentSettings(max_turns=2, harness_workers=workers)
        rollouts = run_rollouts(ScriptedSession(replies), BubblewrapSandbox(), [level0_task], 4, settings,
                                tmp_path / str(workers), seed=0)
        runs.append([(r.token_ids, r.action_mask, r.commands, r.exit_codes, r.status, r.reward) for r in rollouts])
    assert runs[0] == runs[1]
    assert [row[5] for row in runs[0]] == [1.0, 0.0, 0.0, 0.0]


def test_a_stuck_command_at_level_0_ends_at_its_short_limit_and_scores_0(level0_task, tmp_path):
    # vim with no terminal waits for keys that never come: the agent's doing, a 0, never an error.
    assert level0_task.command_timeout_s == COMMAND_TIMEOUT_S[0] < LARGE_WORKSPACE_COMMAND_TIMEOUT_S
    (rollout,) = run_rollouts(ScriptedSession(["vim notes.txt\n```"]), BubblewrapSandbox(), [level0_task], 1,
                              AgentSettings(max_turns=1), tmp_path, seed=0)
    assert (rollout.status, rollout.reward, rollout.exit_codes) == ("scored", 0.0, [None])
    assert rollout.sandbox_seconds < LARGE_WORKSPACE_COMMAND_TIMEOUT_S


def test_a_crashing_verifier_is_an_error_not_a_zero(level0_task, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(level0_task.root, broken)
    (broken / "answer" / "answer.json").write_text("{ not json")
    task = dataclasses.replace(level0_task, root=broken)  # the loader would refuse it; the verifier must too
    (rollout,) = run_rollouts(ScriptedSession(["ls\n```"]), BubblewrapSandbox(), [task], 1, AgentSettings(max_turns=1), tmp_path / "w", seed=0)
    assert rollout.status == "verifier_error" and rollout.reward is None and rollout.error


@pytest.mark.slow
def test_multi_turn_rollouts_with_the_real_model_keep_exact_tokens(level0_task, base_checkpoint_dir, tmp_path):
    from resources.embedded_policy import EmbeddedPolicyModel

    session = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent)).load(base_checkpoint_dir)
    try:
        rollouts = run_rollouts(session, BubblewrapSandbox(), [level0_task], 4, AgentSettings(max_turns=2), tmp_path, seed=3)
        for rollout in rollouts:
            assert len(rollout.token_ids) == len(rollout.action_mask) == len(rollout.sampling_logprobs)
            # The recorded tokens are exactly the conversation as the template renders it,
            # the replies being what was sampled after the forced fence.
            history, last = rollout.messages[:-1], rollout.messages[-1]
            assert last["role"] == "assistant"
            expected = session.chat_text(history, add_generation_prompt=True) + last["content"]
            # (A reply that ended on the end-of-turn token keeps it, though it is not text.)
            assert session.decode(rollout.token_ids) in (expected, expected + "<|im_end|>")
            assert rollout.status == "scored" and rollout.reward in (0.0, 1.0)
        assert any(r.turns == 2 for r in rollouts)  # the loop went past the first turn
    finally:
        session.close()


@pytest.mark.slow
def test_training_loss_reaches_exactly_the_sampled_tokens_of_a_recorded_multi_turn_rollout(
    level0_task, base_checkpoint_dir, tmp_path
):
    """Token by token: the SFT and GRPO losses of a recorded two-turn rollout of
    the real model depend on the logits of the tokens the policy sampled, and on
    no prompt, template or observation token."""
    import torch

    from resources.embedded_policy import EmbeddedPolicyModel
    from training_jobs.policy_gradient import grpo_loss, token_logprobs
    from training_jobs.trajectories import pad_batch, parse_trajectory

    session = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent)).load(base_checkpoint_dir)
    sampled: list[tuple[int, ...]] = []
    real_sample = session.sample_streaming

    def recording_sample(prompts, n, params, on_complete):  # a spy: the real model samples
        groups = real_sample(prompts, n, params, on_complete)
        sampled.extend(tuple(c.token_ids) for group in groups for c in group)
        return groups

    session.sample_streaming = recording_sample
    try:
        rollouts = run_rollouts(session, BubblewrapSandbox(), [level0_task], 4, AgentSettings(max_turns=2), tmp_path, seed=3)
        rollout = max(rollouts, key=lambda r: r.turns)
        unsampled_text = session.decode([t for t, m in zip(rollout.token_ids, rollout.action_mask) if not m])
    finally:
        session.close()
    assert rollout.turns == 2

    # The truth, from the sampler's side: each run of action tokens is one
    # completion the model returned, and there is one per turn.
    mask = rollout.action_mask
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    assert len(runs) == rollout.turns
    for a, b in runs:
        assert tuple(rollout.token_ids[a:b]) in sampled
    assert rollout.messages[0]["content"] in unsampled_text and level0_task.instruction in unsampled_text

    # Logits from a table we can differentiate position by position.
    record = {"rollout_id": "r", "group_id": "g", "reward": 1.0, "token_ids": rollout.token_ids, "action_mask": mask,
              "sampling_logprobs": rollout.sampling_logprobs, "temperature": 0.7}
    padded = pad_batch([parse_trajectory(record, "recorded rollout")])
    table = torch.randn(1, len(mask), max(rollout.token_ids) + 1, requires_grad=True)

    class LogitTable(torch.nn.Module):
        def forward(self, input_ids, attention_mask, logits_to_keep):
            return type("Out", (), {"logits": table[logits_to_keep]})()

    expected = torch.tensor(mask[1:], dtype=torch.bool)  # position t predicts token t+1
    for loss_name in ("sft", "grpo"):
        table.grad = None
        logprobs = token_logprobs(LogitTable(), padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
        if loss_name == "sft":
            loss = -(logprobs * padded.target_action_mask).sum()
        else:
            loss, _ = grpo_loss(logprobs, padded.target_sampling_logprobs, logprobs.detach() - 0.1, torch.tensor([1.0]),
                                padded.target_action_mask, clip_epsilon=0.2, beta=0.04, num_action_tokens=sum(mask))
        loss.backward()
        touched = table.grad[0, :-1].abs().sum(-1) > 0
        assert torch.equal(touched, expected), f"{loss_name}: loss reaches positions {torch.nonzero(touched != expected).flatten().tolist()} wrongly"


class FlakySandbox(BubblewrapSandbox):
    """Fails to start the first `failures` sandboxes, then works."""

    failures: int = 0

    def run(self, argv, mounts, **kwargs):
        if self.failures > 0:
            object.__setattr__(self, "failures", self.failures - 1)
            raise SandboxError("bwrap: simulated start failure")
        return super().run(argv, mounts, **kwargs)


def test_a_sandbox_that_fails_to_start_is_retried_then_excluded(level0_task, tmp_path):
    settings = AgentSettings(max_turns=1)
    (rollout,) = run_rollouts(ScriptedSession([oracle_command(level0_task) + "\n```"]), FlakySandbox(failures=2),
                              [level0_task], 1, settings, tmp_path / "a", seed=0)
    assert (rollout.status, rollout.reward) == ("scored", 1.0)  # two failures, then it ran

    (lost,) = run_rollouts(ScriptedSession(["ls\n```"]), FlakySandbox(failures=3), [level0_task], 1, settings,
                           tmp_path / "b", seed=0)
    assert lost.status == "sandbox_error" and lost.reward is None and "after 3 attempts" in lost.error


def test_the_canary_is_hidden_and_flags_a_trajectory_that_shows_it(level0_task, tmp_path):
    canary = level0_task.canary
    assert canary and (level0_task.tests_dir / "CANARY").read_text().strip() == canary
    visible = [level0_task.instruction] + [p.read_text() for p in level0_task.environment_dir.rglob("*") if p.is_file()]
    assert not any(canary in text for text in visible)
    # The agent cannot read the hidden files; a trajectory that shows the canary anyway is flagged.
    half = len(canary) // 2  # built from halves: the whole never appears in the command or its output
    replies = ["cat /answer/answer.json /tests/CANARY\n```", f"echo {canary}\n```",
               f"printf '%s%s' '{canary[:half]}' '{canary[half:]}' > notes.txt\n```"]
    honest, shown, written = run_rollouts(ScriptedSession(replies), BubblewrapSandbox(), [level0_task], 3,
                                          AgentSettings(max_turns=1), tmp_path, seed=0)
    assert "No such file or directory" in honest.last_output and not honest.canary_seen
    assert shown.canary_seen  # in the command and its output
    assert canary not in written.commands[0] and canary not in written.last_output
    assert written.canary_seen  # left in the final workspace


class DownServerSession(ScriptedSession):
    """A policy whose server stops answering after `answers` sample calls."""

    def __init__(self, replies, answers: int):
        super().__init__(replies)
        self.answers = answers

    def sample(self, prompts, n, params):
        if self.answers == 0:
            from resources.policy import PolicyServerError

            raise PolicyServerError("the policy server at http://127.0.0.1:9/v1 failed 3 times: ConnectionError")
        self.answers -= 1
        return super().sample(prompts, n, params)


def test_rollouts_lost_to_the_policy_server_are_excluded_not_scored(level0_task, tmp_path):
    # First turn answered, second turn lost: the rollouts are excluded with the
    # server's error, never given a reward of 0.
    session = DownServerSession(["ls\n```"] * 2, answers=1)
    rollouts = run_rollouts(session, BubblewrapSandbox(), [level0_task], 2, AgentSettings(max_turns=2), tmp_path, seed=0)
    for rollout in rollouts:
        assert rollout.status == "policy_error" and rollout.reward is None
        assert "127.0.0.1:9" in rollout.error
        assert rollout.commands == ["ls"]  # the answered turn ran
    lost_first = run_rollouts(DownServerSession([], answers=0), BubblewrapSandbox(), [level0_task], 2,
                              AgentSettings(max_turns=1), tmp_path / "first", seed=0)
    assert [(r.status, r.reward, r.commands) for r in lost_first] == [("policy_error", None, [])] * 2


def test_without_a_quota_filesystem_the_episode_ends_past_the_quota(level0_task, tmp_path, monkeypatch):
    # Unprivileged, no tmpfs can be mounted: the loop measures the workspace
    # after each command and ends the episode at the first one past the quota.
    import contextlib

    from clawloop_assets.harness import agent_loop

    monkeypatch.setattr(agent_loop, "disk_quota", lambda directory, size, **limits: contextlib.nullcontext(False))
    settings = AgentSettings(max_turns=3, workspace_bytes=1 << 20)
    session = ScriptedSession(["head -c 3M /dev/zero > fill\n```", "ls\n```"])
    (rollout,) = run_rollouts(session, BubblewrapSandbox(), [level0_task], 1, settings, tmp_path, seed=0)
    assert rollout.commands == ["head -c 3M /dev/zero > fill"]
    assert "disk quota" in rollout.last_output and rollout.status == "scored"


@pytest.mark.slow
def test_a_later_wave_gives_the_rollouts_one_call_would_have(level0_task, base_checkpoint_dir, tmp_path):
    """Sequential rollouts: samples 2-3 drawn in a second call are exactly
    samples 2-3 of a single call for 4 (the real model, two turns)."""
    from resources.embedded_policy import EmbeddedPolicyModel

    session = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent)).load(base_checkpoint_dir)
    settings = AgentSettings(max_turns=2)
    try:
        whole = run_rollouts(session, BubblewrapSandbox(), [level0_task], 4, settings, tmp_path / "whole", seed=5)
        first = run_rollouts(session, BubblewrapSandbox(), [level0_task], 2, settings, tmp_path / "w1", seed=5)
        second = run_rollouts(session, BubblewrapSandbox(), [level0_task], 2, settings, tmp_path / "w2", seed=5,
                              first_index=2)
    finally:
        session.close()
    assert [r.sample_index for r in first + second] == list(range(4))
    for one, waved in zip(whole, first + second):
        assert one.token_ids == waved.token_ids and one.reward == waved.reward


def test_a_reply_with_a_nul_byte_scores_0_and_the_others_go_on(level0_task, tmp_path):
    # Such a reply made subprocess raise "embedded null byte" out of run_rollouts,
    # losing every rollout of the call.
    replies = [oracle_command(level0_task) + "\n```", "echo a\x00b > out.txt\n```", oracle_command(level0_task) + "\n```"]
    solved, nul, also_solved = run_rollouts(ScriptedSession(replies), BubblewrapSandbox(), [level0_task], 3,
                                            AgentSettings(max_turns=1), tmp_path, seed=0)
    assert (nul.status, nul.reward) == ("scored", 0.0)
    assert "\x00" not in nul.commands[0] and nul.exit_codes == [None]
    assert [(r.status, r.reward) for r in (solved, also_solved)] == [("scored", 1.0)] * 2


def test_a_workspace_past_its_limits_scores_0_with_the_reason(level0_task, tmp_path):
    # Sparse files whose apparent size is past the quota, and a tree nested
    # past the copy-out's depth: the agent's failures, each a 0 with its reason.
    deep = "mkdir -p $(printf 'd/%.0s' $(seq 500))"
    replies = [oracle_command(level0_task) + " && truncate -s 60M sparse\n```",
               oracle_command(level0_task) + f" && {deep}\n```", oracle_command(level0_task) + "\n```"]
    sparse, nested, solved = run_rollouts(ScriptedSession(replies), BubblewrapSandbox(), [level0_task], 3,
                                          AgentSettings(max_turns=1, workspace_bytes=16 << 20), tmp_path, seed=0)
    assert (sparse.status, sparse.reward) == ("scored", 0.0) and "bytes" in sparse.error
    assert (nested.status, nested.reward) == ("scored", 0.0) and "deeper" in nested.error
    assert (solved.status, solved.reward) == ("scored", 1.0)


class ExplodingSandbox(BubblewrapSandbox):
    """A harness bug that shows on one command only."""

    def run(self, argv, mounts, **kwargs):
        if "explode" in argv[-1]:
            raise RuntimeError("harness bug")
        return super().run(argv, mounts, **kwargs)


def test_an_unexpected_failure_of_one_rollout_is_its_own_error(level0_task, tmp_path):
    replies = ["echo explode\n```", oracle_command(level0_task) + "\n```"]
    broken, solved = run_rollouts(ScriptedSession(replies), ExplodingSandbox(), [level0_task], 2,
                                  AgentSettings(max_turns=1), tmp_path, seed=0)
    assert broken.status == "sandbox_error" and broken.reward is None and "harness bug" in broken.error
    assert (solved.status, solved.reward) == ("scored", 1.0)
