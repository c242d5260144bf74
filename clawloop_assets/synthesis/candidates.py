"""Task synthesis: a generator is a program on disk (a family script plus its
params.json); running it in the sandbox with a seed yields one candidate
task bundle, or a recorded failure with its reason.

The answer key is computed by the generator from the data it generated; the
host never trusts the generator's output beyond what `load_task_bundle`
validates.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from clawloop_assets.harness.verification import memory_scratch
from clawloop_assets.partitions import round_number
from clawloop_assets.round_state import require_rows
from clawloop_assets.synthesis import domain_graph, task_graphs
from clawloop_assets.synthesis.catalogs import (
    DOMAIN_WORKFLOW,
    GENERATORS_DIR,
    ROUTES,
    Capability,
    Domain,
    load_domain_catalog,
    round_capabilities,
    route_of,
)
from clawloop_assets.synthesis.executable_domains import TOOL_CLI, ExecutableDomain, load_domains
from clawloop_assets.synthesis.generators.generator_common import LEVEL0_VARIANTS
from clawloop_assets.task_bundle import (
    TaskBundleError,
    load_task_bundle,
    write_task_toml,
)
from resources.sandbox import Mount, Sandbox, SandboxLimits, disk_quota, release_quota, write_bytecode_cache
from resources.warehouse import Warehouse

VERIFIER_SCRIPT = GENERATORS_DIR / "verify.py"
# Shared by every family script; copied into each generator directory beside it.
GENERATOR_COMMON = GENERATORS_DIR / "generator_common.py"
# The oracle scripts a family fills in (oracles/<family>/*.py, and the shared
# oracles/common/*.py), copied along with it.
ORACLES_DIR = GENERATORS_DIR / "oracles"
COMMON_ORACLES = "common"
GENERATOR_LIMITS = SandboxLimits(wall_seconds=20.0, cpu_seconds=10, memory_bytes=512 << 20)
# Disk quota of what one generator run may write (a bundle is kilobytes to a few megabytes).
GENERATOR_OUTPUT_BYTES = 64 << 20
# Turn caps grow with the level; the embedded model works in one turn at the
# levels below 0 and at level 0.
MAX_TURNS = {-2: 4, -1: 4, 0: 4, 1: 8, 2: 16, 3: 24, 4: 32, 5: 40}
# A command's wall limit grows with the level, as the workspace does. Up to
# level 0 a workspace holds kilobytes: a command that finishes at all does so
# in a fraction of a second, and one still running after seconds is stuck (an
# editor waiting on a terminal, an endless loop, an install with no network).
# The last stuck command of a batch is wall time that no sampling hides
# (docs/harness.md).
COMMAND_TIMEOUT_S = {-2: 5.0, -1: 5.0, 0: 5.0}
LARGE_WORKSPACE_COMMAND_TIMEOUT_S = 20.0
OUTPUT_TAIL_CHARS = 600


@dataclass(frozen=True)
class GeneratorSpec:
    generator_id: str  # f"{capability}.{domain}.L{difficulty}"
    capability: str
    domain: str
    difficulty: int
    track: str
    params: dict[str, Any] = field(default_factory=dict)  # written to params.json for the script
    # More files the script needs beside it: (name, source path).
    files: tuple[tuple[str, str], ...] = ()

    @property
    def script_name(self) -> str:
        return f"{self.capability}.py"


@dataclass(frozen=True)
class CandidateBuild:
    task_id: str
    bundle_dir: Path | None  # None when the build failed
    error: str | None  # one-line reason when the build failed
    seconds: float

    @property
    def ok(self) -> bool:
        return self.bundle_dir is not None


def generator_spec(capability: Capability, domain: Domain, difficulty: int, knobs: Sequence[str] = (),
                   operation_weights: Mapping[str, float] | None = None) -> GeneratorSpec:
    """The spec of one capability family instantiated in one domain at one
    level, with the plan's generator knobs (none by default) and, at a
    warm-up level, its shares of the level's operations (an even draw by default)."""
    params = {"capability": capability.id, "track": capability.track, "difficulty": difficulty, "domain": domain.as_params()}
    _plan_params(params, knobs, operation_weights)
    return GeneratorSpec(
        generator_id=f"{capability.id}.{domain.id}.L{difficulty}",
        capability=capability.id,
        domain=domain.id,
        difficulty=difficulty,
        track=capability.track,
        params=params,
    )


def _plan_params(params: dict[str, Any], knobs: Sequence[str], operation_weights: Mapping[str, float] | None) -> None:
    """What the plan adds to a generator's params: its knobs and operation shares."""
    if knobs:
        params["knobs"] = sorted(knobs)
    if operation_weights:
        params["operation_weights"] = dict(sorted(operation_weights.items()))


def domain_generator_spec(capability: Capability, domain: ExecutableDomain, difficulty: int,
                          knobs: Sequence[str] = (), operation_weights: Mapping[str, float] | None = None) -> GeneratorSpec:
    """The domain route's generator for one executable domain at one level: the
    domain_workflow family with the domain's files beside it and its tool
    graph (read by AST here, on the host) in params.json."""
    graph = domain_graph.extract_graph(domain.id, domain.tools_source, str(domain.path("tools.py")))
    params = {
        "capability": capability.id, "track": capability.track, "difficulty": difficulty,
        "domain": {"id": domain.id, "title": domain.title, "business_keys": domain.business_keys},
        "graph": {"tools": [{"name": t.name, "description": t.description, "params": [p.__dict__ for p in t.params],
                             "returns": list(t.returns), "reads": list(t.reads), "writes": list(t.writes),
                             "refuses": t.refuses} for t in graph.tools]},
    }
    _plan_params(params, knobs, operation_weights)
    files = tuple((name, str(domain.path(name))) for name in ("schema.sql", "seed.py", "tools.py"))
    files += (("tool_cli.py", str(TOOL_CLI)), ("task_graphs.py", task_graphs.__file__))
    return GeneratorSpec(f"{capability.id}.{domain.id}.L{difficulty}", capability.id, domain.id, difficulty,
                         capability.track, params, files)


def candidate_assignments(warehouse: Warehouse, round_key: str) -> list[tuple[GeneratorSpec, int]]:
    """(generator, seed) for every candidate of `round_key`'s plan: capabilities
    rotate through the domains, and their level-0 variants through the seeds,
    offset by round so each round sees other domains and variants first."""
    plan = require_rows(warehouse, "synthesis_plans", round_key, "synthesis_plan")
    capabilities = {c.id: c for c in round_capabilities(ROUTES)}
    domains = load_domain_catalog()
    executable = load_domains() if DOMAIN_WORKFLOW.id in set(plan["capability_id"]) else []
    number = round_number(round_key)
    # Each entry's seeds start at a level-0 variant that moves with the
    # round (round 1 at variant 0): an entry of fewer candidates than a
    # family has variants, such as the one that probes the level above,
    # would otherwise build the same variants in every round, and the
    # evidence a level is climbed on would be theirs alone.
    first_seed = number * 1000 + (number - 1) % LEVEL0_VARIANTS
    assignments = []
    for entry in plan.sort("capability_id").iter_rows(named=True):
        capability, knobs = capabilities[entry["capability_id"]], entry["knobs"] or ()
        mix = json.loads(entry["operation_weights"]) if entry.get("operation_weights") else None
        for j in range(entry["candidates"]):
            if route_of(capability.id) == "domain":
                spec = domain_generator_spec(capability, executable[(number + j) % len(executable)], entry["difficulty"],
                                             knobs, mix)
            else:
                spec = generator_spec(capability, domains[(number * 5 + j) % len(domains)], entry["difficulty"], knobs, mix)
            assignments.append((spec, first_seed + j))
    return assignments


def write_generator(spec: GeneratorSpec, directory: Path, script: Path | None = None) -> Path:
    """Writes the generator program into `directory`: the family script, the
    shared module it imports (generator_common.py), the oracle scripts
    (oracles/common/ and the family's oracles/<family>/) and params.json. `script`
    overrides the family script (a model-written one)."""
    if spec.script_name == GENERATOR_COMMON.name:
        raise ValueError(f"a family script may not be named {GENERATOR_COMMON.name}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    source = script or GENERATORS_DIR / spec.script_name
    if not source.is_file():
        raise FileNotFoundError(f"no generator family script at {source}")
    shutil.copyfile(source, directory / spec.script_name)
    shutil.copyfile(GENERATOR_COMMON, directory / GENERATOR_COMMON.name)
    write_bytecode_cache(GENERATOR_COMMON, directory)  # two runs a candidate import it
    for folder in (COMMON_ORACLES, spec.capability):
        for oracle in sorted((ORACLES_DIR / folder).glob("*.py")):
            (directory / ORACLES_DIR.name / folder).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(oracle, directory / ORACLES_DIR.name / folder / oracle.name)
    for name, source_path in spec.files:
        shutil.copyfile(source_path, directory / name)
    (directory / "params.json").write_text(json.dumps(spec.params, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # The sandbox runs as an unprivileged uid and reads this directory read-only.
    os.chmod(directory, 0o755)
    for path in directory.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return directory


def task_id_for(round_key: str, spec: GeneratorSpec, seed: int) -> str:
    return f"{round_key}.{spec.generator_id}.s{seed}"


def build_candidate(
    sandbox: Sandbox,
    generator_dir: Path,
    spec: GeneratorSpec,
    seed: int,
    round_key: str,
    task_dir: Path,
    limits: SandboxLimits = GENERATOR_LIMITS,
) -> CandidateBuild:
    """Runs the generator once and lands the bundle at `task_dir / task_id`.

    `task_dir` is the directory that holds the round's bundles. The generator
    writes into a fresh staging directory of its own; only a bundle that loads
    is moved into place, so a failing candidate touches nothing else.
    SandboxError (the sandbox itself failed) propagates.
    """
    started = time.monotonic()
    task_id = task_id_for(round_key, spec, seed)
    task_dir = Path(task_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    staging = task_dir / f".staging-{task_id}"
    release_quota(staging)  # one a crashed run left mounted
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()

    def failure(reason: str) -> CandidateBuild:
        shutil.rmtree(staging, ignore_errors=True)
        return CandidateBuild(task_id, None, reason, time.monotonic() - started)

    def generate(out: Path):
        with disk_quota(out, GENERATOR_OUTPUT_BYTES):
            return sandbox.run(
                ["python3", "-I", f"/generator/{spec.script_name}", "--params", "/generator/params.json",
                 "--seed", str(seed), "--out", "/out"],
                [Mount(Path(generator_dir), "/generator"), Mount(out, "/out", writable=True)],
                cwd="/out",
                limits=limits,
            )

    outcome = generate(staging)
    if outcome.timed_out:
        return failure(f"generator did not finish within {limits.wall_seconds:.0f}s")
    if outcome.exit_code != 0:
        tail = outcome.output.strip()[-OUTPUT_TAIL_CHARS:].replace("\n", " | ")
        return failure(f"generator exited with code {outcome.exit_code}: {tail or 'no output'}")
    # Same seed, same bytes: a second run must rebuild the bundle exactly, or
    # the task a rollout saw cannot be rebuilt, audited or exported.
    # Thrown away after the comparison: in memory where the host has room.
    memory = memory_scratch()
    if memory is not None:
        rerun = Path(tempfile.mkdtemp(prefix="clawloop-rerun-", dir=memory))
    else:
        rerun = task_dir / f".rerun-{task_id}"
        release_quota(rerun)
        shutil.rmtree(rerun, ignore_errors=True)
    try:
        again = generate(rerun)
        difference = None if again.exit_code == 0 else f"the second run exited with code {again.exit_code}"
        difference = difference or first_difference(staging, rerun)
    finally:
        shutil.rmtree(rerun, ignore_errors=True)
    if difference:
        return failure(f"generator is not deterministic: same seed, {difference}")

    for reserved in ("tests", "task.toml"):
        if os.path.lexists(staging / reserved):
            return failure(f"malformed bundle: the generator wrote {reserved}, which the host provides")
    try:
        (staging / "tests").mkdir()
        shutil.copyfile(VERIFIER_SCRIPT, staging / "tests" / "verify.py")
        meta_format = _meta_format(staging / "meta.json")
        write_task_toml(
            staging / "task.toml",
            task_id=task_id,
            capability=spec.capability,
            domain=spec.domain,
            difficulty=spec.difficulty,
            track=spec.track,
            format=meta_format,
            generator_id=spec.generator_id,
            seed=seed,
            round_key=round_key,
            max_turns=MAX_TURNS.get(spec.difficulty, max(MAX_TURNS.values())),
            command_timeout_s=COMMAND_TIMEOUT_S.get(spec.difficulty, LARGE_WORKSPACE_COMMAND_TIMEOUT_S),
        )
        load_task_bundle(staging)  # the generator's output is a valid bundle ...
        plant_canary(staging, task_id)
        load_task_bundle(staging)  # ... and still is with its canary
    except TaskBundleError as exc:
        return failure(f"malformed bundle: {exc}".replace(str(staging), task_id))

    bundle_dir = task_dir / task_id
    if bundle_dir.exists():
        shutil.rmtree(bundle_dir)  # the same candidate rebuilt: replace it whole
    staging.rename(bundle_dir)
    return CandidateBuild(task_id, bundle_dir, None, time.monotonic() - started)


def first_difference(left: Path, right: Path) -> str | None:
    """The first path whose kind or bytes differ between two trees, described;
    None when they are identical. Links are compared as links."""

    def entries(root: Path) -> dict[str, tuple[str, bytes]]:
        found = {}
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path).encode())
            elif path.is_file():
                found[rel] = ("file", hashlib.sha256(path.read_bytes()).digest())
            else:
                found[rel] = ("dir", b"")
        return found

    a, b = entries(left), entries(right)
    for rel in sorted(a.keys() | b.keys()):
        if rel not in a or rel not in b:
            return f"{rel} is written by only one of two runs"
        if a[rel] != b[rel]:
            return f"{rel} differs between two runs"
    return None


def canary_for(task_id: str) -> str:
    """Deterministic per task (bundles rebuild byte-identically); the agent
    never learns its task id, so it cannot derive it."""
    return "CLAWLOOP-CANARY-" + hashlib.sha256(f"clawloop-canary/{task_id}".encode()).hexdigest()[:24]


def plant_canary(bundle_root: Path, task_id: str) -> str:
    """Put the task's canary in both hidden places: the answer key and tests/."""
    canary = canary_for(task_id)
    answer_path = bundle_root / "answer" / "answer.json"
    try:
        answer = json.loads(answer_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskBundleError(f"{answer_path}: unreadable answer key: {exc}") from exc
    if not isinstance(answer, dict):
        raise TaskBundleError(f"{answer_path}: the answer key must be a JSON object")
    answer["canary"] = canary
    answer_path.write_text(json.dumps(answer, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (bundle_root / "tests" / "CANARY").write_text(canary + "\n", encoding="utf-8")
    return canary


def _meta_format(meta_path: Path) -> str:
    # task.toml takes the deliverable format from the generator's meta.json;
    # load_task_bundle then validates both.
    if meta_path.is_symlink() or not meta_path.is_file():
        raise TaskBundleError(f"{meta_path}: missing file")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskBundleError(f"{meta_path}: not valid JSON ({exc})") from None
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if not isinstance(fmt, str) or not fmt.isascii() or not fmt.isprintable():
        raise TaskBundleError(f"{meta_path}: field 'format' must be a string")
    return fmt
