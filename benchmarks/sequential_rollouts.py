"""Sequential rollouts against a fixed N: the same candidates at the lowest
level (the warm-up level the base model solves now and then, so some tasks
are too easy early), the same seed and the embedded model, validated once
with all N rollouts and once in waves (a task already too easy gets no more).
Reports the rollouts saved and whether every admission decision is the same.

    python -m benchmarks.sequential_rollouts
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from clawloop_assets.harness.agent_loop import judged_reward, run_in_waves, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis.plan import MIN_LEVEL
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.admission import AdmissionBand, admission_is_final, decide_admission, sequential_waves
from resources.sandbox import BubblewrapSandbox


def decisions(rollouts, band: AdmissionBand = AdmissionBand()) -> dict[str, str]:
    """The admission decision per task id of `rollouts` (a task's group of them)."""
    by_task: dict[str, list] = {}
    for rollout in rollouts:
        by_task.setdefault(rollout.task.task_id, []).append(judged_reward(rollout))
    return {task: decide_admission(rewards, band).decision for task, rewards in by_task.items()}


def measure(tasks_per_capability: int = 4, seed: int = 11, capabilities: int | None = None) -> dict[str, float | bool]:
    """On the first `capabilities` of the catalog (all if None), each in its
    first `tasks_per_capability` domains."""
    from resources.embedded_policy import EmbeddedPolicyModel

    # The loop's own agent settings (one turn, round 1's temperature), as round 1's validation runs the base model.
    loop = LoopConfig()
    sandbox, band, settings = BubblewrapSandbox(), AdmissionBand(), loop.agent_settings(loop.scheduled_temperature("round-0001"))
    policy = EmbeddedPolicyModel()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bundles = []
        for capability in load_capability_catalog()[:capabilities]:
            for j, domain in enumerate(load_domain_catalog()[:tasks_per_capability]):
                spec = generator_spec(capability, domain, MIN_LEVEL)
                generator = write_generator(spec, root / "generators" / spec.generator_id)
                build = build_candidate(sandbox, generator, spec, 100 + j, "round-bench", root / "tasks")
                if build.error is None:
                    bundles.append(load_task_bundle(build.bundle_dir))
        session = policy.load(policy.base_checkpoint())
        try:
            started = time.perf_counter()
            fixed = run_rollouts(session, sandbox, bundles, band.rollouts_per_task, settings, root / "fixed", seed)
            fixed_seconds = time.perf_counter() - started
            started = time.perf_counter()
            waved = run_in_waves(session, sandbox, bundles, sequential_waves(band), settings, root / "waves", seed,
                                 lambda done: admission_is_final([judged_reward(r) for r in done], band))
            waved_seconds = time.perf_counter() - started
        finally:
            session.close()
    same = decisions(fixed) == decisions(waved)
    return {
        "sequential_rollouts.tasks": float(len(bundles)),
        "sequential_rollouts.rollouts_fixed": float(len(fixed)),
        "sequential_rollouts.rollouts_sequential": float(len(waved)),
        "sequential_rollouts.rollouts_saved_fraction": 1 - len(waved) / len(fixed),
        "sequential_rollouts.same_decisions": same,
        "sequential_rollouts.seconds_ratio": waved_seconds / fixed_seconds,
    }


if __name__ == "__main__":
    for key, value in measure().items():
        print(f"{key:<48} {value:.4g}")
