"""Rollout throughput at the validation batch size against batch 1, and the
harness's share of rollout wall time.

The same level-0 tasks, seed and agent settings (the round's defaults) run
once as the validation asset runs a wave (every sample of every task,
SEQUENCES_PER_CALL sequences per policy call, commands and verifiers running
while the policy samples the next call) and once one rollout per call (the
first sample of each task). A sample depends on its task, index and seed
alone, so both sides draw the same rollouts up to float rounding. Model time
is the time spent inside the policy session's sampling calls (a timing
wrapper, nothing else changed); the rest of the wall time (workspaces,
sandboxed commands and verifiers not hidden behind sampling, tokenizer,
bookkeeping) is the harness's share.

    python -m benchmarks.rollout_throughput
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from clawloop_assets.harness.agent_loop import SEQUENCES_PER_CALL, Rollout, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from resources.policy import PolicySession, SamplingParams
from resources.sandbox import BubblewrapSandbox, Sandbox


class TimedSession(PolicySession):
    """A policy session that times its calls and passes them through unchanged:
    `sample` is model time, the tokenizer calls are the harness's."""

    def __init__(self, inner: PolicySession):
        self.inner = inner
        self.sample_seconds = 0.0
        self.tokenizer_seconds = 0.0
        self.sample_calls = 0
        self.sequences = 0  # sequences asked for, over all sample calls

    def _tokenizer(self, call, *args, **kwargs):
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.tokenizer_seconds += time.perf_counter() - started

    def encode(self, text: str) -> list[int]:
        return self._tokenizer(self.inner.encode, text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer(self.inner.decode, token_ids)

    def chat_text(self, messages, *, add_generation_prompt: bool) -> str:
        return self._tokenizer(self.inner.chat_text, messages, add_generation_prompt=add_generation_prompt)

    def chat_tokens(self, messages, *, add_generation_prompt: bool) -> list[int]:
        return self._tokenizer(self.inner.chat_tokens, messages, add_generation_prompt=add_generation_prompt)

    def sample(self, prompts, n: int, params: SamplingParams):
        return self.sample_streaming(prompts, n, params, on_complete=lambda position, index, completion: None)

    def sample_streaming(self, prompts, n: int, params: SamplingParams, on_complete):
        started = time.perf_counter()
        try:
            return self.inner.sample_streaming(prompts, n, params, on_complete)
        finally:
            self.sample_seconds += time.perf_counter() - started
            self.sample_calls += 1
            self.sequences += len(prompts) * n

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class RolloutRun:
    """What one side measured."""

    rollouts: int
    generated_tokens: int
    wall_seconds: float
    model_seconds: float
    tokenizer_seconds: float
    sample_calls: int
    sequences: int


def level0_tasks(sandbox: Sandbox, root: Path, count: int) -> list[TaskBundle]:
    """`count` level-0 tasks, one capability after another, each in its own domain."""
    capabilities, domains = load_capability_catalog(), load_domain_catalog()
    bundles: list[TaskBundle] = []
    for j in range(count):
        spec = generator_spec(capabilities[j % len(capabilities)], domains[j % len(domains)], 0)
        generator = write_generator(spec, root / "generators" / f"{j}-{spec.generator_id}")
        build = build_candidate(sandbox, generator, spec, 100 + j, "round-bench", root / "tasks" / str(j))
        if build.error is not None:
            raise RuntimeError(f"level-0 task {spec.generator_id} (seed {100 + j}) did not build: {build.error}")
        bundles.append(load_task_bundle(build.bundle_dir))
    return bundles


def timed_rollouts(session: PolicySession, call: Callable[[TimedSession], list[Rollout]]) -> tuple[RolloutRun, list]:
    timed = TimedSession(session)
    started = time.perf_counter()
    rollouts = call(timed)
    wall = time.perf_counter() - started
    run = RolloutRun(
        rollouts=len(rollouts),
        generated_tokens=sum(r.generated_tokens for r in rollouts),
        wall_seconds=wall,
        model_seconds=timed.sample_seconds,
        tokenizer_seconds=timed.tokenizer_seconds,
        sample_calls=timed.sample_calls,
        sequences=timed.sequences,
    )
    return run, rollouts


def throughput_results(batched: RolloutRun, single: RolloutRun, identical_fraction: float) -> dict[str, float]:
    results: dict[str, float] = {}
    for name, run in (("batched", batched), ("batch1", single)):
        if run.wall_seconds <= 0 or run.rollouts == 0:
            raise ValueError(f"the {name} side measured nothing: {run}")
        results[f"rollout.{name}_rollouts_per_second"] = run.rollouts / run.wall_seconds
        results[f"rollout.{name}_tokens_per_second"] = run.generated_tokens / run.wall_seconds
        results[f"rollout.{name}_sequences_per_call"] = run.sequences / run.sample_calls
        # Outside the model: sandboxed commands, verifier, workspaces, tokenizer, bookkeeping.
        results[f"rollout.{name}_harness_share"] = 1 - run.model_seconds / run.wall_seconds
        results[f"rollout.{name}_tokenizer_share"] = run.tokenizer_seconds / run.wall_seconds
    results["rollout.rollouts"] = float(batched.rollouts)
    results["rollout.batch1_rollouts"] = float(single.rollouts)
    results["rollout.batched_speedup"] = (
        results["rollout.batched_rollouts_per_second"] / results["rollout.batch1_rollouts_per_second"]
    )
    # The validation asset's batching is the one a round runs: its share is the headline.
    results["rollout.harness_share"] = results["rollout.batched_harness_share"]
    results["rollout.identical_fraction"] = identical_fraction
    return results


def warm_up(session: PolicySession) -> None:
    """First-call costs (thread pools, allocator) kept out of the timing."""
    session.sample([session.encode("warm up")], 1, SamplingParams(max_new_tokens=2, stop=()))


def measure(
    task_count: int = 6 * SEQUENCES_PER_CALL // LoopConfig().rollouts_per_task,
    samples_per_task: int | None = None,
    seed: int = 5,
    open_session: Callable[[], PolicySession] | None = None,
    sandbox: Sandbox | None = None,
) -> dict[str, float]:
    """Default: 48 tasks x 8 samples, a validation wave of six calls of 64
    sequences, then the first sample of each task one per call. Each side gets
    a freshly loaded session, so neither finds the other's prompts in the
    prefix cache."""
    loop = LoopConfig()
    settings = loop.agent_settings()
    samples = samples_per_task or loop.rollouts_per_task
    sandbox = sandbox or BubblewrapSandbox()
    if open_session is None:
        from resources.embedded_policy import EmbeddedPolicyModel

        policy = EmbeddedPolicyModel()

        def open_session() -> PolicySession:
            return policy.load(policy.base_checkpoint())

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bundles = level0_tasks(sandbox, root, task_count)

        def side(call):
            session = open_session()
            try:
                warm_up(session)
                return timed_rollouts(session, call)
            finally:
                session.close()

        batched, batched_rollouts = side(
            lambda s: run_rollouts(s, sandbox, bundles, samples, settings, root / "batched", seed)
        )
        single, single_rollouts = side(
            lambda s: [
                rollout
                for task in bundles
                for rollout in run_rollouts(s, sandbox, [task], 1, settings, root / "batch1", seed)
            ]
        )
    first_samples = [r for r in batched_rollouts if r.sample_index == 0]
    same = sum(a.token_ids == b.token_ids for a, b in zip(first_samples, single_rollouts))
    return throughput_results(batched, single, same / len(single_rollouts))


if __name__ == "__main__":
    for key, value in measure().items():
        print(f"{key:<40} {value:.4g}")
