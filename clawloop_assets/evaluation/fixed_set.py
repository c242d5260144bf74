"""The fixed evaluation set and its figures: pass@1 averaged over k samples per
task (the paper's Avg@k), with a confidence interval, over the whole set and
at each level of our own part apart (where the policy stands on the ladder).

The set is our own held-out families (every capability of both synthesis
routes at fixed levels, warm-up to level 1 by default, built by the same
generators from a seed range synthesis never draws) plus whatever task bundles were imported under
`$CLAWLOOP_HOME/evaluation/imported/`. It is built once, stored under
`$CLAWLOOP_HOME/evaluation/own/` with a manifest of content hashes, and reused
unchanged by every round: no round ever trains on it (rounds draw their own
candidates with their own seeds and task ids).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

import polars as pl

from clawloop_assets.synthesis import catalogs
from clawloop_assets.synthesis.candidates import (
    GeneratorSpec,
    build_candidate,
    domain_generator_spec,
    generator_spec,
    task_id_for,
    write_generator,
)
from clawloop_assets.synthesis.executable_domains import load_domains
from clawloop_assets.synthesis.plan import LEVELS
from clawloop_assets.task_bundle import TaskBundle, TaskBundleError, bundle_digest, load_task_bundle
from resources import paths
from resources.sandbox import Sandbox

# Synthesis draws seed `round_number * 1000 + j` (j < the plan's candidates
# plus 3, candidates.candidate_assignments), so its seeds stay below 10**7 +
# candidates_per_round + 3 for rounds 1..9999.
# Evaluation seeds live far above that and below 2**31 (every generator and
# sampler takes them): EVALUATION_SEED_BASE + 1000 * slot + index, the slot
# of level 0..5 being the level itself and the warm-up levels' slots coming
# after (so a set built before the warm-up levels existed keeps its seeds).
EVALUATION_SEED_BASE = 2_000_000_000
SEEDS_PER_LEVEL = 1000
# How many (generator, seed) draws a cell of the set tries before its build fails (planned_cells).
CELL_ALTERNATIVES = 8
# Task ids of the set are "evaluation.<generator>.s<seed>"; a round's are "round-NNNN.<...>".
EVALUATION_KEY = "evaluation"
MANIFEST = "manifest.json"
# 95% two-sided normal quantile for the interval.
Z_95 = 1.959963984540054


class EvaluationSetError(RuntimeError):
    """The evaluation set cannot be used as it is; the message names the bundle."""


@dataclass(frozen=True)
class EvaluationSetSpec:
    """Which tasks form the own part of the set. Empty capabilities: every
    capability of both synthesis routes (not only the routes a round has on:
    the set must not change with the ablation switch)."""

    capabilities: tuple[str, ...] = ()
    levels: tuple[int, ...] = (0,)
    seeds_per_cell: int = 1

    def __post_init__(self):
        if not self.levels or any(level not in LEVELS for level in self.levels):
            raise ValueError(f"evaluation levels must be a non-empty list within {LEVELS[0]}..{LEVELS[-1]}, "
                             f"got {list(self.levels)}")
        if not 1 <= self.seeds_per_cell <= SEEDS_PER_LEVEL:
            raise ValueError(f"evaluation seeds per cell must be in 1..{SEEDS_PER_LEVEL}, got {self.seeds_per_cell}")
        known = [c.id for c in catalogs.round_capabilities(catalogs.ROUTES)]
        unknown = sorted(set(self.capabilities) - set(known))
        if unknown:
            raise ValueError(f"evaluation capabilities {unknown} are unknown; choose from {known}")


@dataclass(frozen=True)
class EvaluationTask:
    source: str  # "own" or "imported"
    task_id: str
    capability: str
    bundle: TaskBundle
    # What pass@1 is reported by: "own" for our fixed set; for an imported
    # task, its benchmark (the directory its tasks were imported from).
    task_set: str = "own"


# Rollout statuses that are the harness's failure, not a score (agent_loop.Rollout.status).
ERROR_STATUSES = ("verifier_error", "sandbox_error", "policy_error")


def rollout_errors(rollouts: pl.DataFrame) -> dict[str, int]:
    """{status: count} of the rollouts that ended in a harness error, every
    error status listed (0 when none)."""
    counts = dict(rollouts.group_by("status").len().iter_rows()) if rollouts.height else {}
    return {status: int(counts.get(status, 0)) for status in ERROR_STATUSES}


@dataclass(frozen=True)
class PassAtOne:
    """pass@1 over every sample of each task (an errored sample is not a
    pass), then averaged over every task."""

    pass_at_1: float | None  # None only when there is no rollout at all
    ci_low: float | None
    ci_high: float | None
    tasks: int  # every task with a rollout (the n of the interval): none is dropped
    per_task: pl.DataFrame  # task_id, passes, scored, errors, samples, pass_rate
    errors: int = 0  # samples that ended in a harness error, counted as not passed


def evaluation_seed(level: int, index: int) -> int:
    slot = level if level >= 0 else LEVELS[-1] - level
    return EVALUATION_SEED_BASE + SEEDS_PER_LEVEL * slot + index


def is_evaluation_seed(seed: int) -> bool:
    return EVALUATION_SEED_BASE <= seed < EVALUATION_SEED_BASE + SEEDS_PER_LEVEL * len(LEVELS)


def own_dir() -> Path:
    return paths.clawloop_home() / "evaluation" / "own"


def planned_cells(spec: EvaluationSetSpec) -> list[list[tuple[GeneratorSpec, int]]]:
    """Each own task's cell (capability x level x seed index), in a fixed
    order, as its (generator, seed) alternatives: the task is the first that
    builds. Alternative k takes the seed index `index + k * seeds_per_cell`
    (no other cell's) and the domain that index picks, so a cell whose first
    draw cannot be built (a domain-route graph no tool of that domain
    grounds) takes the same next one in every home. Each capability's domain
    depends on its place in the full catalog, so a smaller set is a subset
    of the default one, never a reshuffle."""
    everything = catalogs.round_capabilities(catalogs.ROUTES)
    chosen = set(spec.capabilities) or {c.id for c in everything}
    domains = catalogs.load_domain_catalog()
    executable = load_domains() if catalogs.DOMAIN_WORKFLOW.id in chosen else []
    cells = []
    for position, capability in enumerate(everything):
        if capability.id not in chosen:
            continue
        for level in spec.levels:
            for index in range(spec.seeds_per_cell):
                cell = []
                for seed_index in range(index, min(SEEDS_PER_LEVEL, index + CELL_ALTERNATIVES * spec.seeds_per_cell),
                                        spec.seeds_per_cell):
                    if catalogs.route_of(capability.id) == "domain":
                        generator = domain_generator_spec(
                            capability, executable[(level + seed_index) % len(executable)], level)
                    else:
                        generator = generator_spec(
                            capability, domains[(11 * position + 3 * level + seed_index) % len(domains)], level)
                    cell.append((generator, evaluation_seed(level, seed_index)))
                cells.append(cell)
    return cells


def planned_tasks(spec: EvaluationSetSpec) -> list[tuple[GeneratorSpec, int]]:
    """(generator, seed) of every own task's first choice, in a fixed order (see planned_cells)."""
    return [cell[0] for cell in planned_cells(spec)]


def _spec_document(spec: EvaluationSetSpec) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}


def _build_one(sandbox: Sandbox, root: Path, generator: GeneratorSpec, seed: int) -> Path:
    directory = write_generator(generator, root / "generators" / generator.generator_id)
    build = build_candidate(sandbox, directory, generator, seed, EVALUATION_KEY, root / "tasks")
    if not build.ok:
        raise EvaluationSetError(f"evaluation task {build.task_id} could not be built: {build.error}")
    return build.bundle_dir


def _read_manifest(root: Path) -> dict | None:
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("tasks"), list) else None


def ensure_own_set(sandbox: Sandbox, spec: EvaluationSetSpec, log: Callable[[str], None] = lambda m: None) -> tuple[str, list[EvaluationTask]]:
    """The own part of the set as (set_id, tasks): built on first use (or when
    the spec changed, or the manifest is missing or unreadable), verified
    against the manifest's content hashes after that. A damaged bundle is
    rebuilt from its generator and seed (same seed, same bytes); one whose
    rebuild fails or differs from the manifest raises EvaluationSetError."""
    root = own_dir()
    root.mkdir(parents=True, exist_ok=True)
    # Two runs at once (the nightly schedule and a manual run) build the set once.
    with open(root.parent / ".own.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = _read_manifest(root)
        cells = planned_cells(spec)
        if manifest is None or manifest.get("spec") != _spec_document(spec):
            why = "none built yet" if not (root / MANIFEST).exists() else (
                "its manifest is unreadable" if manifest is None else "its spec changed")
            log(f"building the evaluation set ({len(cells)} tasks): {why}")
            manifest = _build_all(sandbox, root, spec, cells, log)
        else:
            by_id = {entry["task_id"]: entry for entry in manifest["tasks"]}
            for cell in cells:
                found = [(g, s) for g, s in cell if task_id_for(EVALUATION_KEY, g, s) in by_id]
                if not found:
                    raise EvaluationSetError(
                        f"{root / MANIFEST} lacks evaluation task {task_id_for(EVALUATION_KEY, *cell[0])} of its own "
                        f"spec (or any alternative of its cell): delete {root} to rebuild the set")
                [(generator, seed), *_] = found
                task_id = task_id_for(EVALUATION_KEY, generator, seed)
                entry = by_id[task_id]
                bundle = root / entry["bundle"]
                if bundle.is_dir() and bundle_digest(bundle) == entry["sha256"]:
                    continue
                log(f"evaluation task {task_id} is damaged or missing at {bundle}: rebuilding it")
                try:
                    rebuilt = _build_one(sandbox, root, generator, seed)
                except EvaluationSetError as exc:
                    raise EvaluationSetError(f"evaluation bundle {bundle} is damaged and cannot be rebuilt: {exc}") from exc
                if bundle_digest(rebuilt) != entry["sha256"]:
                    raise EvaluationSetError(
                        f"evaluation bundle {bundle} is damaged and its rebuild differs from the manifest's hash "
                        f"(its generator changed since the set was built): delete {root} to build a new set")
        tasks = []
        for entry in manifest["tasks"]:
            try:
                bundle = load_task_bundle(root / entry["bundle"])
            except TaskBundleError as exc:
                raise EvaluationSetError(f"evaluation bundle {entry['task_id']}: {exc}") from exc
            tasks.append(EvaluationTask("own", bundle.task_id, bundle.capability, bundle))
        return manifest["set_id"], tasks


def _build_all(sandbox: Sandbox, root: Path, spec: EvaluationSetSpec, cells, log: Callable[[str], None]) -> dict:
    for part in ("tasks", "generators", MANIFEST):
        target = root / part
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    entries = []
    for cell in cells:
        failures = []
        for generator, seed in cell:
            try:
                bundle = _build_one(sandbox, root, generator, seed)
                break
            except EvaluationSetError as exc:
                failures.append(str(exc))
        else:
            raise EvaluationSetError(f"no draw of an evaluation cell builds ({len(cell)} tried); the first: "
                                     f"{failures[0]}")
        if failures:
            # The error's head names the task, its tail (a traceback's last line) says why.
            first = failures[0]
            log(f"{first[:first.index(' could not be built')]} could not be built (...{first[-200:]}); "
                f"took the cell's next draw, {bundle.name}")
        entries.append({"task_id": bundle.name, "capability": generator.capability, "domain": generator.domain,
                        "difficulty": generator.difficulty, "seed": seed, "bundle": bundle.relative_to(root).as_posix(),
                        "sha256": bundle_digest(bundle)})
    set_id = hashlib.sha256(json.dumps([_spec_document(spec), entries], sort_keys=True).encode()).hexdigest()[:16]
    manifest = {"set_id": set_id, "spec": _spec_document(spec), "tasks": entries}
    # The manifest is written last: its presence means the set is complete.
    temporary = root / (MANIFEST + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    temporary.replace(root / MANIFEST)
    return manifest


def imported_tasks(directory: Path | None = None, sandbox: Sandbox | None = None) -> list[EvaluationTask]:
    """The validated task bundles under `directory` (default: the imports
    directory; none is fine): those `clawloop harbor-import` listed as runnable in its manifest,
    byte for byte as validated. A bundle directory it did not validate, or
    one changed since, raises naming it, never enters the set silently; so
    does one validated on another backend than `sandbox`'s (when given): a
    task validated in the harness image may lack a host tool, and the other
    way round. Hidden entries (an import in progress, the manifest) are
    skipped. Tasks validated only in their own image (`image_only_tasks`)
    have no bundle: on the Docker backend they are loaded too, to run in
    that image (`image_tasks`); on bubblewrap they are left out."""
    from clawloop_assets.harbor.task_format import HarborTaskError, _backend_name, read_import_manifest

    directory = Path(directory) if directory is not None else paths.evaluation_imports_dir()
    if not directory.is_dir():
        return []
    try:
        validated = {row["task_id"]: row for row in read_import_manifest(directory).get("runnable", [])}
    except (HarborTaskError, KeyError, TypeError) as exc:
        raise EvaluationSetError(f"the imports manifest in {directory} is malformed: {exc}") from exc
    tasks = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith("."):
            continue
        row = validated.get(path.name)
        if row is None:
            raise EvaluationSetError(f"imported evaluation task {path} was not validated by `clawloop harbor-import` "
                                     "(its manifest does not list it as runnable): import it again or remove it")
        if sandbox is not None and row.get("sandbox") not in (None, _backend_name(sandbox)):
            raise EvaluationSetError(f"imported evaluation task {path} was validated on the {row['sandbox']} backend "
                                     f"and this evaluation runs on {_backend_name(sandbox)}: import it again with "
                                     f"`clawloop harbor-import --sandbox {_backend_name(sandbox)}`")
        if row.get("sha256") != bundle_digest(path):
            raise EvaluationSetError(f"imported evaluation task {path} changed since `clawloop harbor-import` "
                                     "validated it: import it again")
        try:
            bundle = load_task_bundle(path)
        except TaskBundleError as exc:
            raise EvaluationSetError(f"imported evaluation task {path.name} is malformed: {exc}") from exc
        tasks.append(EvaluationTask("imported", bundle.task_id, bundle.capability, bundle, benchmark_name(row)))
    if sandbox is not None and _backend_name(sandbox) == "docker":
        tasks += image_tasks(directory)
    return tasks


def image_tasks(directory: Path | None = None) -> list[EvaluationTask]:
    """The tasks under `directory` validated only in their own image, as
    tasks our agent runs in that image (Docker backend only): each from
    its Harbor task directory as hashed when validated, its image built.
    One that changed or whose image is gone raises, naming it."""
    from clawloop_assets.harbor.image_task import load_image_task
    from clawloop_assets.harbor.task_format import HarborTaskError

    tasks = []
    for row in image_only_tasks(directory):
        try:
            bundle = load_image_task(row)
        except HarborTaskError as exc:
            raise EvaluationSetError(f"imported evaluation task {row.get('task_id')} (validated in its own image): "
                                     f"{exc}") from exc
        tasks.append(EvaluationTask("imported", bundle.task_id, bundle.capability, bundle, benchmark_name(row)))
    return tasks


def left_out_on(sandbox: Sandbox | None, directory: Path | None = None) -> list[dict]:
    """The manifest rows of the tasks under `directory` an evaluation on
    `sandbox`'s backend leaves out: those validated only in their own
    image, unless it runs on Docker (where they run in that image)."""
    from clawloop_assets.harbor.task_format import _backend_name

    if sandbox is not None and _backend_name(sandbox) == "docker":
        return []
    return image_only_tasks(directory)


def image_only_tasks(directory: Path | None = None) -> list[dict]:
    """The manifest rows of the tasks under `directory` that validate only
    in their own image on Docker (task id, source, image, why our sandbox
    cannot run them): listed so that a report names what it left out."""
    from clawloop_assets.harbor.task_format import HarborTaskError, read_import_manifest

    directory = Path(directory) if directory is not None else paths.evaluation_imports_dir()
    if not directory.is_dir():
        return []
    try:
        rows = read_import_manifest(directory).get("image_only", [])
    except HarborTaskError as exc:
        raise EvaluationSetError(f"the imports manifest in {directory} is malformed: {exc}") from exc
    return sorted(rows, key=lambda row: row["task_id"])


def benchmark_name(row: dict) -> str:
    """The benchmark an imported task belongs to: the directory of task
    directories it was imported from (`clawloop harbor-import DIR`)."""
    source = Path(str(row.get("source") or ""))
    return source.parent.name or "imported"


def pass_at_1_by_set(rollouts: pl.DataFrame, tasks: list[EvaluationTask]) -> dict[str, PassAtOne]:
    """pass@1 of each task set apart (our own set, each imported benchmark),
    own first: a benchmark's figure never mixes with another's."""
    sets: dict[str, list[str]] = {}
    for task in sorted(tasks, key=lambda t: (t.task_set != "own", t.task_set)):
        sets.setdefault(task.task_set, []).append(task.task_id)
    return {name: pass_at_1(rollouts.filter(pl.col("task_id").is_in(ids))) for name, ids in sets.items()}


def own_task_levels(root: Path | None = None) -> dict[str, int]:
    """{task id: level} of the own set as its manifest records it ({} before
    the set is built): what splits a round's evaluation rollouts by level."""
    manifest = _read_manifest(root or own_dir())
    return {entry["task_id"]: int(entry["difficulty"]) for entry in manifest["tasks"]} if manifest else {}


def pass_at_1_by_level(rollouts: pl.DataFrame, levels: Mapping[str, int]) -> dict[int, PassAtOne]:
    """pass@1 of the own set's tasks at each level apart (`levels`: task id ->
    level; rollouts of other tasks, the imported benchmarks', are left out),
    lowest level first, each with its own Wilson interval over that level's
    tasks: where the policy stands on the ladder."""
    by_level: dict[int, list[str]] = {}
    for task_id, level in levels.items():
        by_level.setdefault(level, []).append(task_id)
    return {level: pass_at_1(rollouts.filter(pl.col("task_id").is_in(sorted(ids))))
            for level, ids in sorted(by_level.items())}


@dataclass(frozen=True)
class PairedChange:
    """How one level's tasks moved between two rounds' policies, task by task."""

    tasks: int  # the level's tasks both rounds sampled
    rose: int  # tasks whose pass rate rose
    fell: int  # tasks whose pass rate fell
    p_value: float  # exact two-sided sign test of rose against fell (sign_test)


def sign_test(rose: int, fell: int) -> float:
    """Exact two-sided sign test: 2 P(X <= min(rose, fell)) for X ~
    Binomial(rose + fell, 1/2), at most 1; 1 when no task moved."""
    moved = rose + fell
    tail = sum(math.comb(moved, i) for i in range(min(rose, fell) + 1)) / 2 ** moved
    return min(1.0, 2 * tail)


def paired_change_by_level(before: pl.DataFrame, after: pl.DataFrame,
                           levels: Mapping[str, int]) -> dict[int, PairedChange]:
    """Per level of the own set (`levels`: task id -> level), the tasks whose
    pass rate rose and fell from the `before` rollouts to the `after` ones,
    over the tasks both sampled. Every round samples the same tasks with
    the same sample streams (evaluation_sampling_seed), so a task that
    moved moved with the policy. Why beside the intervals: a level's
    interval is over its tasks, about 25 points wide at 26, so two rounds'
    intervals overlap unless the level moves far; the same tasks compared
    one by one resolve a smaller rise
    (docs/experiments/2026-12-04-round-2s-admission.md)."""
    def rates(frame: pl.DataFrame) -> dict[str, float]:
        per_task = pass_at_1(frame).per_task
        return dict(zip(per_task["task_id"].to_list(), per_task["pass_rate"].to_list()))

    old, new = rates(before), rates(after)
    out = {}
    for level in sorted(set(levels.values())):
        both = [t for t, lv in levels.items() if lv == level and t in old and t in new]
        if both:
            rose = sum(new[t] > old[t] for t in both)
            fell = sum(new[t] < old[t] for t in both)
            out[level] = PairedChange(len(both), rose, fell, sign_test(rose, fell))
    return out


def level_figures(by_level: Mapping[int, PassAtOne]) -> dict[str, dict]:
    """The per-level figures as summary.json holds them: {"<level>": {pass_at_1,
    ci_low, ci_high, tasks}}, levels as strings (JSON keys), lowest first."""
    return {str(level): {"pass_at_1": part.pass_at_1, "ci_low": part.ci_low, "ci_high": part.ci_high,
                         "tasks": part.tasks} for level, part in sorted(by_level.items())}


def evaluation_tasks(sandbox: Sandbox, spec: EvaluationSetSpec,
                     log: Callable[[str], None] = lambda m: None) -> tuple[str, list[EvaluationTask]]:
    """The whole set (own, then imported) and the own part's set id."""
    set_id, own = ensure_own_set(sandbox, spec, log)
    tasks = own + imported_tasks(sandbox=sandbox)
    left_out = left_out_on(sandbox)
    if left_out:
        log(f"{len(left_out)} imported task(s) validate only in their own image and are not evaluated on this "
            f"backend (they run there on Docker): {', '.join(r['task_id'] for r in left_out)}")
    seen: dict[str, EvaluationTask] = {}
    for task in tasks:
        if task.task_id in seen:
            raise EvaluationSetError(f"evaluation task id {task.task_id} is used by both {seen[task.task_id].bundle.root} "
                                     f"and {task.bundle.root}")
        seen[task.task_id] = task
    return set_id, tasks


def wilson_interval(p: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a proportion p observed over n units."""
    if n < 1:
        raise ValueError(f"a confidence interval needs at least one task, got n={n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a pass rate lies in [0, 1], got {p}")
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def pass_at_1(rollouts: pl.DataFrame) -> PassAtOne:
    """pass@1 of evaluation rollouts: each task's passes over all its samples
    (the unbiased pass@1 estimate from k samples), averaged over tasks.

    A sample that ended in an error (verifier, sandbox or policy) counts as
    not passed, and a task whose samples all errored counts as 0, never left
    out: were errors dropped, a policy whose failures became errors would
    score as if it had only passed. Errors are counted and reported, and a
    round with too many fails its blocking check (checks.py).

    The interval is a Wilson score interval on that task-level mean with n =
    the number of tasks. Tasks, not samples, are the unit: the k samples of a
    task are correlated, so counting them as n independent trials would claim
    k times too much. With task rates p_t of mean p, the variance of one
    task's k-sample mean is Var(p_t) + E[p_t (1 - p_t)] / k, at most
    Var(p_t) + E[p_t (1 - p_t)] = p (1 - p), the Bernoulli variance Wilson
    assumes: the interval is conservative for both the choice of tasks and
    the sampling within them.
    Unlike a bootstrap over a dozen tasks, it is closed-form (the same figure
    every time), and it does not collapse to [0, 0] when a weak policy passes
    nothing, which the 135M policy often does."""
    is_scored = pl.col("status") == "scored"
    per_task = (rollouts.group_by("task_id")
                .agg(passes=(is_scored & (pl.col("reward") >= 1.0)).sum().cast(pl.Int64),
                     scored=is_scored.sum().cast(pl.Int64),
                     errors=pl.col("status").is_in(ERROR_STATUSES).sum().cast(pl.Int64),
                     samples=pl.len().cast(pl.Int64))
                .with_columns(pass_rate=pl.col("passes") / pl.col("samples"))
                .select("task_id", "passes", "scored", "errors", "samples", "pass_rate").sort("task_id"))
    errors = int(per_task["errors"].sum()) if per_task.height else 0
    if per_task.is_empty():
        return PassAtOne(None, None, None, 0, per_task, errors)
    rates = per_task["pass_rate"].to_list()
    mean = sum(rates) / len(rates)
    low, high = wilson_interval(mean, len(rates))
    return PassAtOne(round(mean, 4), round(low, 4), round(high, 4), len(rates), per_task, errors)
