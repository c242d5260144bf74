"""Synthesis and agent-free validation throughput: build and validate many
candidates (every capability x domain x level, seeds rotating) in the real
sandbox, and report candidates per second and the rejection rate per kind of
reason."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from clawloop_assets.diagnosis.failures import rejection_kind
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis.plan import LEVELS
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox, Sandbox


def candidate_plan(count: int) -> list[tuple]:
    """`count` (capability, domain, level, seed): capability turns fastest,
    then level, then domain, so any prefix is spread across all of them; past
    one full cycle the same generators run with new seeds."""
    capabilities = load_capability_catalog()
    domains = load_domain_catalog()
    c, n = len(capabilities), len(LEVELS)
    return [(capabilities[i % c], domains[(i // (c * n)) % len(domains)], LEVELS[(i // c) % n], i)
            for i in range(count)]


def _build_and_validate(sandbox: Sandbox, root: Path, candidate: tuple) -> str | None:
    """The rejection reason of one candidate, or None when it passed."""
    capability, domain, level, seed = candidate
    spec = generator_spec(capability, domain, level)
    generator = root / "generators" / f"{spec.generator_id}.s{seed}"
    write_generator(spec, generator)
    build = build_candidate(sandbox, generator, spec, seed, "round-bench", root / "tasks")
    if build.error is not None:
        return build.error
    result = validate_without_agent(sandbox, load_task_bundle(build.bundle_dir), root / "scratch" / str(seed))
    return result.reason


def measure(count: int = 1024, workers: int | None = None, sandbox: Sandbox | None = None) -> dict[str, float]:
    """`workers` threads (default two per core: a thread spends much of a
    candidate waiting on its sandbox runs)."""
    sandbox = sandbox or BubblewrapSandbox()
    workers = workers or 2 * (os.cpu_count() or 1)
    plan = candidate_plan(count)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        reasons = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for reason in pool.map(lambda c: _build_and_validate(sandbox, Path(tmp), c), plan):
                reasons.append(reason)
                if len(reasons) % 128 == 0:
                    print(f"  {len(reasons)}/{count} candidates in {time.perf_counter() - started:.0f}s", flush=True)
        seconds = time.perf_counter() - started
    rejected = [rejection_kind(r) for r in reasons if r is not None]
    results = {
        "synthesis.candidates": float(count),
        "synthesis.candidates_per_second": count / seconds,
        "synthesis.rejection_rate": len(rejected) / count,
    }
    for kind in sorted(set(rejected)):
        results[f"synthesis.rejections.{kind}"] = rejected.count(kind) / count
    return results
