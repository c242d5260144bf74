"""The agent loop, mini-swe-agent style: each assistant turn is one fenced bash
command, run in the rollout's sandbox episode on its own workspace; the
episode ends on `submit` or at the turn limit; then the verifier scores the
final workspace in a sandbox of its own.

Rollouts of many tasks and samples are batched through the policy, and every
token is recorded as sampled (token-in/token-out) with an action mask, so
training never re-tokenizes and observation tokens are never trained on. The
harness's work (workspaces, commands, verifiers) runs on threads beside the
sampler, each rollout's as soon as its reply is final (docs/harness.md).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from clawloop_assets.harbor.image_task import ImageEpisode, is_image_task
from clawloop_assets.harbor.task_format import task_memory_bytes
from clawloop_assets.harness.verification import VerifierResult, run_verifier, run_verifiers
from clawloop_assets.task_bundle import TaskBundle
from resources.policy import ChatTemplate, Completion, PolicyServerError, PolicySession, SamplingParams
from resources.sandbox import (
    CopyReport,
    EpisodeRunner,
    Mount,
    Sandbox,
    SandboxError,
    SandboxLimits,
    disk_quota,
    iter_tree,
    release_quota,
    tree_usage,
)

T = TypeVar("T")

SUBMIT_COMMAND = "submit"
FENCE_OPEN = "```bash\n"
FENCE_CLOSE = "```"
# DESIGN's measured setup: this prompt, two worked examples and the reply
# forced to open a bash fence. A command reference added to the prompt (wc,
# grep -c, comm, mkdir/mv, ...) measured within noise on 24 level-0 tasks x 8
# (5.2% vs 4.2% pass, 5 vs 4 tasks in the band) while it made every prompt
# twice as long (about 360 vs 160 tokens), and so every prefill and training
# step: left out.
SYSTEM_PROMPT = (
    "You are a shell agent working in /workspace. Reply with exactly one bash command "
    "inside a ```bash fenced block, and nothing else. When the task is done, reply with "
    f"the command {SUBMIT_COMMAND}."
)
# Two short worked examples: the measured difference between a 135M model that
# never emits a command and one that almost always does.
WORKED_EXAMPLES: list[dict[str, str]] = [
    {"role": "user", "content": "Write the number of characters in input.txt to chars.txt."},
    {"role": "assistant", "content": "```bash\nwc -c < input.txt > chars.txt\n```"},
    {"role": "user", "content": "Append the word done to status.txt."},
    {"role": "assistant", "content": "```bash\necho done >> status.txt\n```"},
]
OBSERVATION_CHARS = 1200
# What a workspace may hold, beyond its disk quota: past these the episode is
# the agent's failure (a score of 0), and the copy-out stops there.
WORKSPACE_MAX_FILES = 10_000
WORKSPACE_MAX_DEPTH = 64
SANDBOX_ATTEMPTS = 3  # tries of a sandbox call that fails to start before the rollout is excluded
# Sequences per call to the policy: one batch, and one progress line per call.
SEQUENCES_PER_CALL = 64  # head and tail of a command's output shown to the agent


@dataclass(frozen=True)
class AgentSettings:
    max_turns: int = 2
    max_new_tokens: int = 48
    temperature: float = 0.7
    # Levels that sample at another temperature than `temperature` (level ->
    # temperature): a round's temperature serves its warm-up level only
    # (LoopConfig.round_temperature_levels).
    level_temperatures: Mapping[int, float] = field(default_factory=dict)
    output_bytes: int = 16 << 10
    # Disk quota of one rollout's workspace, and of all a call's workspaces
    # together (each gets the smaller of the two shares): task workspaces
    # hold kilobytes, and the quota lives in memory (see disk_quota).
    workspace_bytes: int = 16 << 20
    workspace_budget_bytes: int = 2 << 30
    # Threads that run the episodes' commands and verifiers while the policy
    # samples: the harness mostly waits on sandbox processes, so more threads
    # than cores keep the policy from waiting on it.
    harness_workers: int = 4

    def temperature_for(self, level: int) -> float:
        return self.level_temperatures.get(level, self.temperature)

    def sampling(self, seed: int, stream_ids: Sequence[int] = (), first_index: int = 0,
                 temperature: float | None = None) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature if temperature is None else temperature,
            stop=(FENCE_CLOSE,), seed=seed, stream_ids=tuple(stream_ids), first_index=first_index,
        )


def sample_stream(*parts: object) -> int:
    """A stable stream id for a task (first turn) or a rollout (later turns)."""
    return zlib.crc32("|".join(map(str, parts)).encode())


@dataclass
class Rollout:
    """One episode of the policy on one task, and everything needed to train on it."""

    task: TaskBundle
    sample_index: int
    workspace: Path
    temperature: float  # what its every turn samples at (AgentSettings.temperature_for)
    token_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)
    last_output: str = ""
    done: bool = False
    submitted: bool = False
    canary_seen: bool = False  # the task's canary showed up: the agent reached hidden files
    status: str = "scored"  # or "verifier_error" / "sandbox_error" / "policy_error": excluded, never scored
    reward: float | None = None
    error: str | None = None  # why it was excluded, or why a scored rollout got 0 without its verifier
    verifier_checks: list[dict] = field(default_factory=list)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    model_seconds: float = 0.0
    sandbox_seconds: float = 0.0
    quota_bytes: int = 0
    quota_enforced: bool = False  # a quota filesystem of its own; else checked after each command

    @property
    def turns(self) -> int:
        return len(self.commands)

    def extend(self, token_ids: Sequence[int], *, sampled: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids += token_ids
        self.action_mask += [1 if sampled else 0] * len(token_ids)
        self.sampling_logprobs += list(logprobs) if sampled else [0.0] * len(token_ids)


def initial_messages(instruction: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, *WORKED_EXAMPLES, {"role": "user", "content": instruction}]


def first_prompt(chat: ChatTemplate | PolicySession, instruction: str) -> list[int]:
    """The tokens every rollout of a task starts from: the chat up to the
    agent's turn, then the fence its reply continues."""
    return chat.chat_tokens(initial_messages(instruction), add_generation_prompt=True) + chat.encode(FENCE_OPEN)


def parse_command(reply: str) -> str | None:
    """The command in a reply that opened with the forced fence, or None when
    the fence was never closed or holds nothing."""
    if FENCE_CLOSE not in reply:
        return None
    command = reply.split(FENCE_CLOSE, 1)[0].strip()
    return command or None


def format_observation(exit_code: int | None, output: str, timed_out: bool) -> str:
    if len(output) > OBSERVATION_CHARS:
        half = OBSERVATION_CHARS // 2
        output = output[:half] + "\n[... output truncated ...]\n" + output[-half:]
    status = "timed out" if timed_out else f"exit code {exit_code}"
    return f"{status}\n{output.strip() or '(no output)'}"


def run_rollouts(
    session: PolicySession,
    sandbox: Sandbox,
    tasks: Sequence[TaskBundle],
    samples_per_task: int,
    settings: AgentSettings,
    workdir: Path,
    seed: int,
    progress: Callable[[str], None] = lambda message: None,
    first_index: int = 0,
) -> list[Rollout]:
    """`samples_per_task` rollouts of every task, batched through the policy
    turn by turn, with sample indices from `first_index`. Each rollout's
    randomness depends on its task, its index and the seed, never on which
    other tasks share the call: a later wave of indices 6-7 gives the rollouts
    a single run of 8 would have. Task ids must differ: a rollout's
    workspace is named by its task id and sample index, so two tasks of one
    id would act and be verified in the same directory."""
    repeated = sorted(task_id for task_id, count in Counter(task.task_id for task in tasks).items() if count > 1)
    if repeated:
        raise ValueError(f"run_rollouts: task ids must be unique in one call; repeated: {', '.join(repeated)}")
    quota = min(settings.workspace_bytes, settings.workspace_budget_bytes // max(1, len(tasks) * samples_per_task))
    rollouts = [
        Rollout(task=task, sample_index=index, workspace=workdir / task.task_id / f"sample-{index}", quota_bytes=quota,
                temperature=settings.temperature_for(task.difficulty))
        for task in tasks
        for index in range(first_index, first_index + samples_per_task)
    ]
    _run_turns(session, sandbox, tasks, rollouts, samples_per_task, settings, seed, progress, first_index)
    return rollouts


def _prepare_workspace(rollout: Rollout, quotas: ExitStack) -> None:
    """A fresh copy of the task's environment under the rollout's disk quota,
    which `quotas` holds until the rollout is verified."""
    release_quota(rollout.workspace)  # one a crashed run left mounted
    if rollout.workspace.exists():
        shutil.rmtree(rollout.workspace)
    quotas.enter_context(_workspace_quota(rollout))
    shutil.copytree(rollout.task.environment_dir, rollout.workspace, symlinks=True, dirs_exist_ok=True)


@contextmanager
def _workspace_quota(rollout: Rollout) -> Iterator[None]:
    """The rollout's workspace under its disk quota; at the end it is copied
    out, and what goes wrong there stays with this rollout: a workspace past
    the copy-out's limits is the agent's 0, a failure of the copy itself the
    harness's error."""
    quota = disk_quota(rollout.workspace, rollout.quota_bytes, max_files=WORKSPACE_MAX_FILES,
                       max_depth=WORKSPACE_MAX_DEPTH, on_copy=lambda report: _copied_out(rollout, report))
    rollout.quota_enforced = quota.__enter__()
    try:
        yield
    finally:
        try:
            quota.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001 - one rollout's failure, recorded on it
            _harness_failure(rollout, f"copying the workspace out failed: {exc!r}")


def _copied_out(rollout: Rollout, report: CopyReport) -> None:
    if report.over_limit and rollout.status == "scored":
        _agent_failure(rollout, f"workspace refused at copy-out: {report.over_limit}")


def _agent_failure(rollout: Rollout, reason: str) -> None:
    """The agent's own doing broke the episode: it scores 0, with the reason."""
    rollout.status, rollout.reward, rollout.error, rollout.done = "scored", 0.0, reason, True


def _harness_failure(rollout: Rollout, reason: str) -> None:
    """The harness failed this rollout: excluded with the reason, never scored."""
    rollout.status, rollout.reward, rollout.error, rollout.done = "sandbox_error", None, reason, True


def run_in_waves(
    session: PolicySession,
    sandbox: Sandbox,
    tasks: Sequence[TaskBundle],
    waves: Sequence[int],
    settings: AgentSettings,
    workdir: Path,
    seed: int,
    is_decided: Callable[[list[Rollout]], bool],
    progress: Callable[[str], None] = lambda message: None,
) -> list[Rollout]:
    """Rollouts of every task in waves of sample indices (e.g. 6 then 2); after
    a wave, a task for which `is_decided(its rollouts so far)` gets no more.
    Streams are keyed by task and index, so the rollouts drawn are those one
    call for all of them would have drawn."""
    done: list[Rollout] = []
    pending, first_index = list(tasks), 0
    for size in waves:
        if not pending:
            break
        done += run_rollouts(session, sandbox, pending, size, settings, workdir, seed, progress, first_index)
        first_index += size
        by_task: dict[str, list[Rollout]] = {}
        for rollout in done:
            by_task.setdefault(rollout.task.task_id, []).append(rollout)
        pending = [t for t in pending if not is_decided(by_task[t.task_id])]
        progress(f"{len(tasks) - len(pending)} of {len(tasks)} tasks decided after {first_index} rollouts each")
    return done


def judged_reward(rollout: Rollout) -> float | None:
    """A rollout's reward for the admission decision; None when it was lost to
    the infrastructure or saw the canary (not judged, never a failure)."""
    return rollout.reward if rollout.status == "scored" and not rollout.canary_seen else None


def _run_turns(session, sandbox, tasks, rollouts, samples_per_task, settings, seed, progress, first_index) -> None:
    """Each turn samples the active rollouts. A rollout's command runs on the
    harness's threads as soon as its reply is final, while the policy samples
    the others, and the rollouts of a task that end in a turn are verified
    there together once the task's last command of the turn has run. The
    observations are appended on this thread once the turn's commands are
    done (the tokenizer is not shared between threads). Nothing a rollout
    records depends on which thread ran it or when."""
    with _Harness(sandbox, settings) as harness:
        harness.prepare(rollouts)  # on the harness's threads, while the first call samples
        for turn in range(settings.max_turns):
            active = [r for r in rollouts if not r.done]
            if not active:
                break
            progress(f"turn {turn + 1}/{settings.max_turns}: sampling {len(active)} rollouts")
            act = harness.act_on(turn, active)
            if turn == 0:
                _first_turn(session, tasks, rollouts, samples_per_task, settings, seed, progress, first_index, act)
            else:
                _next_turn(session, active, settings, seed + 7919 * turn, progress, act)
            for rollout, observation in harness.wait_for_commands():
                _append_observation(session, rollout, observation)
        progress(f"verifying {len(rollouts)} rollouts")
        harness.verify_the_rest(rollouts)


class _Harness:
    """The rollouts' workspaces, commands and verifiers, on a pool of threads.
    Each rollout's workspace is prepared first; its episode
    (`Sandbox.episode`) is opened at its first command and closed before its
    verifier runs; after the verifier its workspace is copied out of its
    quota. Only one thread at a time works on a rollout: its next step is
    submitted after the last one was waited for.

    The rollouts of one task that end in the same turn are verified together
    (`run_verifiers`: one sandbox and one interpreter for the group where the
    task's verifier is the canonical one, each verdict the one a run of its
    own gives), by the thread that ran the group's last step of the turn."""

    def __init__(self, sandbox: Sandbox, settings: AgentSettings):
        self.sandbox, self.settings = sandbox, settings
        self.pool = ThreadPoolExecutor(max_workers=settings.harness_workers, thread_name_prefix="harness")
        self.workspaces: dict[int, Future] = {}
        self.quotas: dict[int, ExitStack] = {}
        self.episodes: dict[int, tuple[ExitStack, EpisodeRunner | ImageEpisode]] = {}
        self.steps: list[tuple[Rollout, Future]] = []
        self.verified: set[int] = set()
        # Per task, this turn's steps still to run and the rollouts they ended.
        self.ending: dict[str, tuple[int, list[Rollout]]] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> _Harness:
        return self

    def __exit__(self, *exc_info) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for stack, _runner in self.episodes.values():
            stack.close()
        for quotas in self.quotas.values():
            quotas.close()

    def prepare(self, rollouts: Sequence[Rollout]) -> None:
        """Prepare every rollout's workspace; the pool takes work in order, so
        these run before any command."""
        for rollout in rollouts:
            self.quotas[id(rollout)] = ExitStack()
            if is_image_task(rollout.task):
                # Its workspace is the container's (made at its first command): nothing on the host.
                rollout.quota_enforced = True  # the container holds what the agent writes
                self.workspaces[id(rollout)] = self.pool.submit(lambda: None)
                continue
            self.workspaces[id(rollout)] = self.pool.submit(_prepare_workspace, rollout, self.quotas[id(rollout)])

    def act_on(self, turn: int, active: Sequence[Rollout]) -> Callable[[Rollout], None]:
        """What to do with a rollout of `active` whose reply for `turn` was just recorded."""
        with self.lock:
            self.ending = {}
            for rollout in active:
                steps, ended = self.ending.get(rollout.task.task_id, (0, []))
                self.ending[rollout.task.task_id] = (steps + 1, ended)

        def act(rollout: Rollout) -> None:
            future = self.pool.submit(self._step, rollout, turn)
            with self.lock:
                self.steps.append((rollout, future))

        return act

    def _step(self, rollout: Rollout, turn: int) -> str | None:
        """Run the rollout's command; its observation, or None when it is done
        (and then verified with its task's others that ended this turn, once
        the last of the task's steps this turn has run)."""
        # The bundle's own turn limit holds when it is tighter than the configured one.
        last = min(self.settings.max_turns, rollout.task.max_turns) - 1
        try:
            self.workspaces[id(rollout)].result()  # what preparing it raised, if anything
            observation = _act(rollout, lambda: self._episode(rollout, only_command=turn == 0 and turn >= last),
                               self.settings, is_last_turn=turn >= last)
        except Exception as exc:  # noqa: BLE001 - one rollout's failure must not end the others
            _harness_failure(rollout, f"the harness failed on this rollout's command: {exc!r}")
            observation = None
        with self.lock:
            steps, ended = self.ending[rollout.task.task_id]
            if rollout.done:
                ended.append(rollout)
            self.ending[rollout.task.task_id] = (steps - 1, ended)
            group = ended if steps == 1 else []
        if group:
            self._verify(group)
        return None if rollout.done else observation

    def _episode(self, rollout: Rollout, only_command: bool) -> EpisodeRunner:
        """The rollout's episode, opened (with retries) when first asked for.
        An episode of one command is one fresh sandbox, which `run` gives at
        less cost on every backend (no episode to keep)."""
        if is_image_task(rollout.task):
            return EpisodeRunner(self._image_episode(rollout).run)
        mounts = [Mount(rollout.workspace, "/workspace", writable=True)]
        if only_command:
            return EpisodeRunner(lambda argv, limits: self.sandbox.run(argv, mounts, limits=limits))
        if id(rollout) not in self.episodes:
            stack = ExitStack()
            runner = with_sandbox_retries(lambda: stack.enter_context(self.sandbox.episode(mounts)))
            with self.lock:
                self.episodes[id(rollout)] = (stack, runner)
        return self.episodes[id(rollout)][1]

    def _image_episode(self, rollout: Rollout) -> ImageEpisode:
        """The container of a task-image rollout, started (with retries)
        when first asked for: at its first command, or at its verification
        when it ran none. Its commands and its tests run in it."""
        if id(rollout) not in self.episodes:
            episode = ImageEpisode(rollout.task, cpu_shares=getattr(self.sandbox, "cpu_shares", None))
            with_sandbox_retries(episode.start)
            stack = ExitStack()
            stack.callback(episode.close)
            with self.lock:
                self.episodes[id(rollout)] = (stack, episode)
        return self.episodes[id(rollout)][1]

    def _verify(self, group: Sequence[Rollout]) -> None:
        """Score rollouts of one task: each episode closed first (from there
        on nothing the agent left running touches its workspace), the
        verifiers of those still to be judged run together, then each
        workspace copied out of its quota. A failure of the harness is the
        rollout's exclusion, never a score."""
        judged: list[Rollout] = []
        for rollout in group:
            if is_image_task(rollout.task):
                self._verify_in_image(rollout)
                continue
            with self.lock:
                self.verified.add(id(rollout))
                stack, _runner = self.episodes.pop(id(rollout), (None, None))
            try:
                try:
                    self.workspaces[id(rollout)].result()
                except Exception as exc:  # noqa: BLE001 - the host's failure, this rollout's exclusion
                    _harness_failure(rollout, f"the harness failed preparing this rollout's workspace: {exc!r}")
                    continue
                if stack is not None:
                    stack.close()
                if _ready_to_verify(rollout):
                    judged.append(rollout)
            except Exception as exc:  # noqa: BLE001 - likewise
                _harness_failure(rollout, f"the harness failed scoring this rollout: {exc!r}")
        try:
            for rollout, verdict in zip(judged, _verdicts(self.sandbox, judged)):
                if isinstance(verdict, SandboxError):
                    rollout.status, rollout.error = "sandbox_error", str(verdict)
                elif isinstance(verdict, Exception):
                    _harness_failure(rollout, f"the harness failed scoring this rollout: {verdict!r}")
                else:
                    _record_verdict(rollout, verdict)
        finally:
            for rollout in group:
                if not is_image_task(rollout.task):
                    self.quotas.pop(id(rollout)).close()  # copied out; what goes wrong there is recorded on the rollout

    def _verify_in_image(self, rollout: Rollout) -> None:
        """A task-image rollout's tests, in its container as the agent left
        it (as Harbor verifies), then the container removed."""
        with self.lock:
            self.verified.add(id(rollout))
        try:
            if rollout.status in ("sandbox_error", "policy_error"):
                return
            episode = self._image_episode(rollout)
            verdict = episode.verify()
            _record_verdict(rollout, verdict)
        except Exception as exc:  # noqa: BLE001 - the harness's failure, this rollout's exclusion
            _harness_failure(rollout, f"the harness failed verifying this rollout in its task image: {exc!r}")
        finally:
            with self.lock:
                stack, _episode = self.episodes.pop(id(rollout), (None, None))
            if stack is not None:
                stack.close()
            self.quotas.pop(id(rollout)).close()

    def wait_for_commands(self) -> list[tuple[Rollout, str]]:
        """Wait for the turn's commands; (rollout, observation) of each rollout
        that goes on, in the order they were asked for."""
        with self.lock:
            steps, self.steps = self.steps, []
        return [(rollout, observation) for rollout, future in steps if (observation := future.result()) is not None]

    def verify_the_rest(self, rollouts: Sequence[Rollout]) -> None:
        """Verify the rollouts no step ended (lost to the policy server, or out
        of turns) and wait until every rollout is verified."""
        by_task: dict[str, list[Rollout]] = {}
        for rollout in rollouts:
            if id(rollout) not in self.verified:
                by_task.setdefault(rollout.task.task_id, []).append(rollout)
        pending = [self.pool.submit(self._verify, group) for group in by_task.values()]
        for future in pending:
            future.result()


def _first_turn(session, tasks, rollouts, n, settings, seed, progress, first_index, act) -> None:
    # All samples of a task share the first prompt: one prefill, n samples.
    # The sampler takes one temperature per call: one group of calls per temperature.
    per_chunk = max(1, SEQUENCES_PER_CALL // n)
    sampled = 0
    for group in _by_temperature(range(len(tasks)), lambda position: rollouts[position * n].temperature):
        for start in range(0, len(group), per_chunk):
            chunk = group[start : start + per_chunk]
            prompts = [first_prompt(session, tasks[position].instruction) for position in chunk]
            for offset, position in enumerate(chunk):
                for index in range(n):
                    rollout = rollouts[position * n + index]
                    rollout.messages = initial_messages(tasks[position].instruction)
                    rollout.extend(prompts[offset], sampled=False)
                    rollout.prompt_tokens = len(prompts[offset])

            def replied(offset: int, index: int, completion: Completion) -> None:
                rollout = rollouts[chunk[offset] * n + index]
                _record_reply(rollout, completion)
                act(rollout)

            started = time.monotonic()
            streams = [sample_stream(tasks[position].task_id) for position in chunk]
            temperature = rollouts[chunk[0] * n].temperature
            error = _sample(session, prompts, n, settings.sampling(seed, streams, first_index, temperature), replied)
            elapsed = time.monotonic() - started
            for position in chunk:
                for rollout in rollouts[position * n : (position + 1) * n]:
                    rollout.model_seconds += elapsed / (len(chunk) * n)
                    if error and not rollout.generated_tokens:
                        rollout.status, rollout.error, rollout.done = "policy_error", error, True
            sampled += len(chunk)
            progress(f"sampled {sampled}/{len(tasks)} tasks x {n} at temperature {temperature:g} in {elapsed:.1f}s")


def _next_turn(session, active: list[Rollout], settings, seed, progress, act) -> None:
    sampled = 0
    for group in _by_temperature(active, lambda rollout: rollout.temperature):
        for start in range(0, len(group), SEQUENCES_PER_CALL):
            chunk = group[start : start + SEQUENCES_PER_CALL]
            replied_to: set[int] = set()

            def replied(offset: int, index: int, completion: Completion) -> None:
                replied_to.add(offset)
                _record_reply(chunk[offset], completion)
                act(chunk[offset])

            started = time.monotonic()
            streams = [sample_stream(r.task.task_id, r.sample_index) for r in chunk]
            params = settings.sampling(seed, streams, temperature=chunk[0].temperature)
            error = _sample(session, [r.token_ids for r in chunk], 1, params, replied)
            elapsed = time.monotonic() - started
            for offset, rollout in enumerate(chunk):
                rollout.model_seconds += elapsed / len(chunk)
                if error and offset not in replied_to:
                    rollout.status, rollout.error, rollout.done = "policy_error", error, True
            sampled += len(chunk)
            progress(f"sampled {sampled}/{len(active)} rollouts in {elapsed:.1f}s")


def _by_temperature(items: Iterable[T], temperature_of: Callable[[T], float]) -> list[list[T]]:
    """`items` grouped by the temperature they sample at, each group in the
    given order. A stream's randomness does not depend on its call's other
    streams, so the grouping changes no sample."""
    groups: dict[float, list[T]] = {}
    for item in items:
        groups.setdefault(temperature_of(item), []).append(item)
    return [groups[temperature] for temperature in sorted(groups)]


def _sample(session: PolicySession, prompts, n: int, params: SamplingParams, replied) -> str | None:
    """Sample, handing each completion to `replied` as it is final; the error
    that lost the rest, or None. The server client has already retried; a
    rollout whose reply is lost is excluded from its group, never scored."""
    try:
        session.sample_streaming(prompts, n, params, on_complete=replied)
        return None
    except PolicyServerError as exc:
        return str(exc)


def _record_reply(rollout: Rollout, completion: Completion) -> None:
    rollout.extend(completion.token_ids, sampled=True, logprobs=completion.logprobs)
    rollout.generated_tokens += len(completion.token_ids)
    rollout.messages.append({"role": "assistant", "content": FENCE_OPEN + completion.text})


def _act(rollout: Rollout, episode: Callable[[], EpisodeRunner], settings: AgentSettings, *,
         is_last_turn: bool) -> str | None:
    """Run the rollout's last reply in its episode; the observation to show
    the agent next, or None when the episode is over."""
    command = parse_command(rollout.messages[-1]["content"][len(FENCE_OPEN):])
    if command is None:
        rollout.commands.append("")
        rollout.exit_codes.append(None)
        observation = "Your reply held no complete command. Reply with one bash command in a ```bash block."
    elif "\x00" in command:
        # No command line can hold a NUL byte (exec takes C strings): the
        # agent's error, refused like any other bad command, never run.
        rollout.commands.append(command.replace("\x00", "\\x00"))
        rollout.exit_codes.append(None)
        observation = "Your command held a NUL byte and was not run. Reply with one bash command in a ```bash block."
    elif command == SUBMIT_COMMAND:
        rollout.commands.append(command)
        rollout.exit_codes.append(0)
        rollout.submitted = True
        rollout.done = True
        return None
    else:
        rollout.commands.append(command)
        limits = SandboxLimits(
            wall_seconds=rollout.task.command_timeout_s,
            cpu_seconds=max(1, int(rollout.task.command_timeout_s)),
            output_bytes=settings.output_bytes,
            memory_bytes=task_memory_bytes(rollout.task, SandboxLimits.memory_bytes),
        )
        try:
            runner = episode()
            result = with_sandbox_retries(lambda: runner.run(["bash", "-c", command], limits))
        except SandboxError as exc:
            rollout.status, rollout.error, rollout.done = "sandbox_error", str(exc), True
            return None
        rollout.sandbox_seconds += result.seconds
        canary = rollout.task.canary
        if canary and (canary in command or canary in result.output):
            rollout.canary_seen = True
        rollout.exit_codes.append(result.exit_code)
        rollout.last_output = result.output[-2000:]
        observation = format_observation(result.exit_code, result.output, result.timed_out)
        if not rollout.quota_enforced:
            # No quota filesystem here (not root): the episode ends at the first
            # command past the quota, and the verifier scores what is there.
            usage = _workspace_usage(rollout)
            if usage.over_limit:
                rollout.last_output += f"\n[workspace over its disk quota ({usage.over_limit}): episode ended]"
                rollout.done = True
                return None
    if is_last_turn:
        rollout.done = True
        return None
    return observation


def _append_observation(session: PolicySession, rollout: Rollout, observation: str) -> None:
    """Append the end of the assistant turn, the observation and the next
    assistant header (with the forced fence) as non-action tokens."""
    history = rollout.messages[:-1]
    reply = rollout.messages[-1]["content"]
    through_reply = session.chat_text(history, add_generation_prompt=True) + reply
    rollout.messages.append({"role": "user", "content": observation})
    following = session.chat_text(rollout.messages, add_generation_prompt=True)
    recorded = session.decode(rollout.token_ids)
    if not (following.startswith(through_reply) and recorded.startswith(through_reply)):
        raise ValueError("the chat template does not render a conversation as a prefix of its continuation")
    # A reply that ended on the end-of-turn token already holds the start of the suffix.
    already = recorded[len(through_reply):]
    suffix = following[len(through_reply):]
    if not suffix.startswith(already):
        raise ValueError(f"sampled tokens after the reply ({already!r}) do not match the template's turn end")
    rollout.extend(session.encode(suffix[len(already):] + FENCE_OPEN), sampled=False)


def _workspace_usage(rollout: Rollout) -> CopyReport:
    """What copying the workspace out would take, against its limits:
    apparent bytes (a sparse file counts in full), entries and depth."""
    return tree_usage(rollout.workspace, max_files=WORKSPACE_MAX_FILES, max_depth=WORKSPACE_MAX_DEPTH,
                      max_bytes=rollout.quota_bytes)


def _ready_to_verify(rollout: Rollout) -> bool:
    """Whether the rollout's workspace goes to its verifier: not when it was
    lost to the harness or the policy, nor when the agent left it past its
    limits (a 0). Its canary is looked for here."""
    if rollout.status in ("sandbox_error", "policy_error"):
        return False
    usage = _workspace_usage(rollout)
    if usage.over_limit:
        _agent_failure(rollout, f"workspace refused: {usage.over_limit}")
        return False
    if rollout.task.canary and workspace_contains(rollout.workspace, rollout.task.canary):
        rollout.canary_seen = True
    return True


def _verdicts(sandbox: Sandbox, rollouts: Sequence[Rollout]) -> list[VerifierResult | Exception]:
    """The verdicts on rollouts of one task, in order, from one batch; where
    the batch's sandbox fails, each is run again on its own, so one failure
    excludes no rollout but its own. Each verification's time is its share
    of the batch's."""
    if not rollouts:
        return []

    def each_alone() -> list[VerifierResult | Exception]:
        verdicts: list[VerifierResult | Exception] = []
        for rollout in rollouts:
            try:
                verdicts.append(with_sandbox_retries(lambda: run_verifier(sandbox, rollout.task, rollout.workspace)))
            except Exception as exc:  # noqa: BLE001 - this rollout's, recorded on it
                verdicts.append(exc)
        return verdicts

    # The verifier reads a SQLite file with SQLite's C parser, the one part
    # of it a crafted file could subvert; a batch would hand such a subverted
    # verifier its siblings' verdicts too, so those rollouts go alone.
    if len(rollouts) > 1 and any(workspace_holds_sqlite(r.workspace) for r in rollouts):
        return each_alone()
    started = time.monotonic()
    try:
        verdicts: list[VerifierResult | Exception] = list(
            run_verifiers(sandbox, rollouts[0].task, [r.workspace for r in rollouts]))
    except Exception:  # noqa: BLE001 - each rollout gets its own run, and its own error
        return each_alone()
    share = (time.monotonic() - started) / len(rollouts)
    return [replace(v, seconds=share) if isinstance(v, VerifierResult) else v for v in verdicts]


def _record_verdict(rollout: Rollout, verdict) -> None:
    """A verifier's verdict on the rollout: its reward, or a verifier error (never a score)."""
    rollout.sandbox_seconds += verdict.seconds
    rollout.verifier_checks = verdict.checks
    if verdict.status == "scored":
        rollout.reward = verdict.reward
    else:
        rollout.status, rollout.error = "verifier_error", verdict.error


def workspace_contains(workspace: Path, needle: str, max_bytes: int = 1 << 20) -> bool:
    """Whether any regular file the agent left holds `needle` in its first `max_bytes`."""
    data = needle.encode()
    return any(data in head for head in _file_heads(workspace, max_bytes))


def workspace_holds_sqlite(workspace: Path) -> bool:
    """Whether any regular file the agent left opens with SQLite's header."""
    return any(head == SQLITE_HEADER for head in _file_heads(workspace, len(SQLITE_HEADER)))


def _file_heads(workspace: Path, max_bytes: int) -> Iterator[bytes]:
    """The first `max_bytes` of each regular file under `workspace`. Links
    are never followed: they may point anywhere on the host."""
    for entry in iter_tree(workspace):
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with open(fd, "rb") as f:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                yield f.read(max_bytes)


SQLITE_HEADER = b"SQLite format 3\x00"


def with_sandbox_retries(call: Callable[[], T], attempts: int = SANDBOX_ATTEMPTS) -> T:
    """Retry a sandbox call that failed to start. SandboxError means the
    sandbox itself failed before the command ran, so a retry is safe; after
    `attempts` the error propagates and the rollout is excluded, never scored."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except SandboxError as exc:
            if attempt == attempts:
                raise SandboxError(f"{exc} (after {attempts} attempts)") from exc
    raise AssertionError("unreachable")


def rollout_row(rollout: Rollout, *, round_key: str, phase: str, checkpoint_id: str) -> dict:
    return {
        "round": round_key,
        "rollout_id": f"{rollout.task.task_id}.{phase}.{rollout.sample_index}",
        "task_id": rollout.task.task_id,
        "phase": phase,
        "checkpoint_id": checkpoint_id,
        "sample_index": rollout.sample_index,
        "status": rollout.status,
        "reward": rollout.reward,
        "error": rollout.error,
        "turns": rollout.turns,
        "submitted": rollout.submitted,
        "canary_seen": rollout.canary_seen,
        "commands": rollout.commands,
        "exit_codes": rollout.exit_codes,
        "last_output": rollout.last_output,
        "verifier_checks": json.dumps(rollout.verifier_checks),
        "token_ids": rollout.token_ids,
        "action_mask": rollout.action_mask,
        "sampling_logprobs": rollout.sampling_logprobs,
        "temperature": rollout.temperature,
        "prompt_tokens": rollout.prompt_tokens,
        "generated_tokens": rollout.generated_tokens,
        "model_seconds": rollout.model_seconds,
        "sandbox_seconds": rollout.sandbox_seconds,
    }
