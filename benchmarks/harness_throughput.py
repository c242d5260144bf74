"""The harness alone: rollouts with a scripted policy that answers at once,
so that only what the harness spends around the model is timed (workspaces,
sandboxed commands, verifiers, the tokenizer's bookkeeping). On a GPU the
model gets fast and this is what is left of a round's rollout time.

Each rollout is one level-0 task of every capability in turn, with the same
recorded episode: two looks around, the task's oracle command, `submit`. The
oracle's commands make every reward 1, which the benchmark checks: a harness
that got faster by judging wrongly fails here. Reported per number of harness
threads (`AgentSettings.harness_workers`): rollouts a second, wall and CPU
milliseconds of harness per turn, and the CPU seconds of a whole episode
(the machine's, so run it on a quiet one); then the CPU of a verification
(in a task's batch, as the harness runs it, and alone) and of one command, from which docs/harness.md works out a paper-scale
round's core-hours.

    python -m benchmarks.harness_throughput
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from transformers import AutoTokenizer

from benchmarks.rollout_throughput import level0_tasks
from clawloop_assets.harness.agent_loop import FENCE_CLOSE, AgentSettings, run_rollouts, sample_stream
from clawloop_assets.harness.verification import run_verifier, run_verifiers
from clawloop_assets.task_bundle import TaskBundle
from resources.policy import Completion, PolicySession, SamplingParams
from resources.sandbox import BubblewrapSandbox, Sandbox

LOOKS = ("ls -la", "wc -c * | tail -n 1")
TURNS = len(LOOKS) + 2  # the looks, the oracle's command, submit


def oracle_command(task: TaskBundle) -> str:
    """The task's solve.sh as one command line (level 0: a shell one-liner)."""
    return "\n".join(line for line in task.solution_path.read_text().splitlines() if not line.startswith("#!"))


class ScriptedSession(PolicySession):
    """Replies at once from a recorded episode, with the real model's tokenizer
    and chat template, so the harness's token bookkeeping is the real one."""

    def __init__(self, tokenizer, tasks: Sequence[TaskBundle], samples: int):
        self.tokenizer = tokenizer
        # Each call's stream ids say whose turn it is (agent_loop.sample_stream).
        self.first_turn = {sample_stream(t.task_id): t for t in tasks}
        self.later_turn = {sample_stream(t.task_id, i): t for t in tasks for i in range(samples)}
        self.turn_of: dict[int, int] = {}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, token_ids) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def chat_text(self, messages, *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)

    def _reply(self, task: TaskBundle, turn: int) -> str:
        script = [*LOOKS, oracle_command(task), "submit"]
        return script[turn] + "\n" + FENCE_CLOSE

    def sample(self, prompts, n: int, params: SamplingParams) -> list[list[Completion]]:
        groups = []
        for position, _prompt in enumerate(prompts):
            stream = params.stream_ids[position]
            if stream in self.first_turn:
                task, turn = self.first_turn[stream], 0
            else:
                task = self.later_turn[stream]
                turn = self.turn_of[stream] = self.turn_of.get(stream, 0) + 1
            text = self._reply(task, turn)
            ids = self.encode(text)
            groups.append([Completion(ids, [0.0] * len(ids), text, "stop") for _ in range(n)])
        return groups


def cpu_seconds() -> float:
    """Busy CPU time of the whole machine (/proc/stat: every state but idle
    and iowait). A sandbox's cost is mostly the kernel's (namespaces, mounts,
    cgroups), much of it outside any process this one waits for, so its own
    and its children's rusage miss most of it; run on a quiet machine."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure(
    task_count: int = 24, samples_per_task: int = 8, workers: Sequence[int] = (1, 2, 4),
    sandbox: Sandbox | None = None, tokenizer_dir: Path | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, float]:
    """`task_count` level-0 tasks x `samples_per_task` scripted rollouts of
    TURNS turns, once per number of harness threads in `workers`."""
    sandbox = sandbox or BubblewrapSandbox()
    if tokenizer_dir is None:
        from resources.embedded_policy import EmbeddedPolicyModel

        tokenizer_dir = EmbeddedPolicyModel().base_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = level0_tasks(sandbox, root, task_count)
        for count in workers:
            settings = AgentSettings(max_turns=TURNS, harness_workers=count)
            session = ScriptedSession(tokenizer, tasks, samples_per_task)
            cpu, started = cpu_seconds(), time.perf_counter()
            rollouts = run_rollouts(session, sandbox, tasks, samples_per_task, settings, root / f"workers-{count}", 0,
                                    progress)
            wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
            wrong = [(r.task.task_id, r.status, r.reward, r.error) for r in rollouts if r.reward != 1.0]
            if wrong:
                raise RuntimeError(f"the oracle's episode did not score 1 in {len(wrong)} rollouts: {wrong[:3]}")
            turns = sum(r.turns for r in rollouts)
            key = f"harness.workers_{count}"
            results[f"{key}.rollouts_per_second"] = len(rollouts) / wall
            results[f"{key}.wall_ms_per_turn"] = 1000 * wall / turns
            results[f"{key}.cpu_ms_per_turn"] = 1000 * cpu / turns
            results[f"{key}.cpu_seconds_per_rollout"] = cpu / len(rollouts)
            progress(f"{count} harness threads: {len(rollouts)} rollouts in {wall:.1f}s ({cpu:.1f} CPU s)")
        # The verifier's part, on the final workspaces, so that an episode's
        # cost splits into commands and its verification: as the harness
        # verifies (a task's rollouts that end together in one batch), and
        # one at a time (what a rollout that ends alone costs).
        by_task: dict[str, list] = {}
        for rollout in rollouts:
            by_task.setdefault(rollout.task.task_id, []).append(rollout)
        cpu, started = cpu_seconds(), time.perf_counter()
        for group in by_task.values():
            run_verifiers(sandbox, group[0].task, [r.workspace for r in group])
        batch_wall, batch_cpu = (time.perf_counter() - started) / len(rollouts), (cpu_seconds() - cpu) / len(rollouts)
        cpu, started = cpu_seconds(), time.perf_counter()
        for rollout in rollouts:
            run_verifier(sandbox, rollout.task, rollout.workspace)
        verify_wall, verify_cpu = (time.perf_counter() - started) / len(rollouts), (cpu_seconds() - cpu) / len(rollouts)
        commands = sum(1 for r in rollouts for c in r.commands if c != "submit") / len(rollouts)
        per_rollout = results[f"harness.workers_{workers[-1]}.cpu_seconds_per_rollout"]
    results["harness.verifier_wall_ms"] = 1000 * verify_wall
    results["harness.verifier_cpu_ms"] = 1000 * verify_cpu
    results["harness.batched_verifier_wall_ms"] = 1000 * batch_wall
    results["harness.batched_verifier_cpu_ms"] = 1000 * batch_cpu
    # What is left of an episode's CPU is its commands' (and the bookkeeping of every turn).
    results["harness.command_cpu_ms"] = 1000 * max(0.0, per_rollout - batch_cpu) / commands
    results["harness.rollouts"] = float(task_count * samples_per_task)
    results["harness.turns_per_rollout"] = float(TURNS)
    return results


if __name__ == "__main__":
    for key, value in measure(progress=print).items():
        print(f"{key:<45} {value:.4g}")
