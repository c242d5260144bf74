"""The log_analysis family builds through the sandbox into bundles that pass
agent-free validation at every level, varies its level-0 step, rebuilds
byte-identically, and plants data where every contract rule matters: the
oracle with one rule read the other way fails the real verifier."""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis import build_candidate, generator_spec, write_generator
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "log_analysis")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def build(sandbox, tmp_path, domain, level, seed, tasks="tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, tmp_path / tasks)


# One bundle per level 2-5 for the rule readings below, each in its own domain and format.
READING_BUNDLES = {2: (DOMAINS[7], 1), 3: (DOMAINS[19], 2), 4: (DOMAINS[33], 3), 5: (DOMAINS[51], 0)}
# Every level on three more domains; from level 2 up the seeds cover the three
# deliverable formats the reading bundle of the level does not (format = seed % 4).
CASES = [(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, seed)
         for level in range(6)
         for k, seed in enumerate([s for s in range(4) if level < 2 or s != READING_BUNDLES[level][1]][:3])]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        "log_analysis", domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == ("json", "csv", "files", "report")[seed % 4]
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed


def test_level0_varies_its_single_step_across_seeds(sandbox, tmp_path):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = load_task_bundle(build(sandbox, tmp_path, DOMAINS[0], 0, seed).bundle_dir)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution
        solutions.add(re.sub(r"\S+\.(csv|txt|log)\b", "FILE", solution))
        instructions.add(bundle.instruction)
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def test_level0_command_stays_short_with_the_longest_names(tmp_path):
    longest = {max(DOMAINS, key=lambda d: len(d.record_file)), max(DOMAINS, key=lambda d: len(d.group_field))}
    for domain in sorted(longest, key=lambda d: d.id):
        for seed in range(4):
            out = run_script(tmp_path / f"{domain.id}-{seed}", domain, 0, seed)
            assert len((out / "solution" / "solve.sh").read_text().strip().splitlines()[-1]) < 60


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, domain, 5, 7, tasks="a")
    second = build(sandbox, tmp_path, domain, 5, 7, tasks="b")
    other = build(sandbox, tmp_path, domain, 5, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


def run_script(out: Path, domain, level, seed) -> Path:
    params = out.parent / f"{out.name}.params.json"
    params.parent.mkdir(parents=True, exist_ok=True)
    params.write_text(json.dumps({"capability": CAPABILITY.id, "track": CAPABILITY.track, "difficulty": level,
                                  "domain": domain.as_params()}))
    subprocess.run([sys.executable, "-I", str(CAPABILITY.generator_script), "--params", str(params),
                    "--seed", str(seed), "--out", str(out)], check=True)
    return out


@pytest.mark.parametrize("domain", [DOMAINS[2], DOMAINS[40]], ids=lambda d: d.id)
def test_level5_is_large_but_small_and_fast(tmp_path, domain):
    # CPU time, not wall time: the machine is shared.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run_script(tmp_path / "out", domain, 5, 3)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 1.0
    logs = [p for p in (out / "environment" / "logs").iterdir()]
    entries = sum(1 for p in logs for line in p.read_text().splitlines() if not line[:1].isspace())
    assert entries >= 300
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1 << 20


# ---- every contract rule, read the other way, fails the real verifier
#
# Each reading is the oracle's solve.sh with exact replacements (old, new, ...).
# The generator plants data where the two readings differ, for every seed.

LEVEL2_READINGS = {
    "window start exclusive": ("if not START <= t < END:", "if not START < t < END:"),
    "window end inclusive": ("if not START <= t < END:", "if not START <= t <= END:"),
    "malformed lines counted": (r"([A-Z]{2,4}-\d{4}) (.+) ", r"(\S+) (.+?)(?: ",
                                r"=(\d+\.\d+)$')", r"=(\d+\.\d+))?$')"),
    "repeated lines counted twice": ("if line in seen:", "if False:"),
    "first error by file order": ("key=lambda e: (e[0], e[1])", "key=lambda e: e[0]"),
    "mean halves to even": ("from decimal import Decimal, ROUND_HALF_UP",
                            "from decimal import Decimal, ROUND_HALF_UP, ROUND_HALF_EVEN",
                            "ROUND_HALF_UP) if s['values']", "ROUND_HALF_EVEN) if s['values']"),
    "exactly the threshold is ok": ("n >= THRESHOLD", "n > THRESHOLD"),
    "components with no entry in the window listed": (
        "            if not START <= t < END:\n                continue\n"
        "            s = stats.setdefault(m.group(3), {'errors': [], 'values': []})\n",
        "            s = stats.setdefault(m.group(3), {'errors': [], 'values': []})\n"
        "            if not START <= t < END:\n                continue\n"),
    "components without errors omitted": ("for comp in sorted(stats):",
                                          "for comp in sorted(c for c in stats if stats[c]['errors']):"),
}
# Levels 3 to 5: pairing, repeats across the rotation, limits, ties, omitted components.
RUN_READINGS = {
    "the earliest open start pairs": ("open_starts[ident, task] = t", "open_starts.setdefault((ident, task), t)"),
    "unpaired starts are runs": ("\nresult = []\n",
                                 "\nruns += [(dict((e[1], e[3]) for e in entries)[i], i, t, t, None)"
                                 " for (i, task), t in open_starts.items()]\nresult = []\n"),
    "repeated entries counted twice": ("entries = set()", "entries = []", "entries.add((", "entries.append(("),
    "a run of exactly the limit overruns": ("s > limits[comp] * 60", "s >= limits[comp] * 60"),
    "ties go to the larger id": ("min(mine, key=lambda r: (r[2] - r[3], r[1]))",
                                 "max(mine, key=lambda r: (r[3] - r[2], r[1]))"),
    "every component of the limits table listed": ("for comp in sorted(comps):", "for comp in sorted(limits):"),
    "components without runs omitted": ("for comp in sorted(comps):",
                                        "for comp in sorted(c for c in comps if any(r[0] == c for r in runs)):"),
}
# Levels 4 and 5: the dirty data.
DIRTY_READINGS = {
    "unlisted files read": ("files = [row['log_file'] for row in csv.DictReader(handle)]",
                            "files = sorted('logs/' + name for name in __import__('os').listdir('logs'))"),
    "local times read as UTC": ("datetime.strptime(ts, '%Y-%m-%d %H:%M:%S %z').astimezone(timezone.utc)",
                                "datetime.strptime(ts[:19], '%Y-%m-%d %H:%M:%S').replace(tzinfo=timezone.utc)"),
    "epoch read as microseconds": ("timedelta(milliseconds=int(ts))", "timedelta(microseconds=int(ts))"),
    "continuation lines are entries": ("            if raw[:1].isspace():\n                continue\n",
                                       "            raw = raw.strip()\n"),
    "a line without its id belongs to its file": (
        "            m = LINE.match(raw)\n",
        "            m = LINE.match(raw) or LINE.match(re.sub(r' (DEBUG|INFO|WARN|ERROR) ([a-z]+) ',"
        " lambda g: g.group(0) + path.split('/')[-1].split('.')[0] + ' ', raw, count=1))\n"),
}
# Level 5: the window on run starts, missing values, the mean's rounding, the threshold.
WINDOW_READINGS = {
    "run window start exclusive": ("START <= r[2] < END", "START < r[2] < END"),
    "run window end inclusive": ("START <= r[2] < END", "START <= r[2] <= END"),
    "runs counted by their finish": ("START <= r[2] < END", "START <= r[3] < END"),
    "errors outside the window counted": ("if level == 'ERROR' and START <= t < END:", "if level == 'ERROR':"),
    "a missing value counts as zero": ("values = [r[4] for r in mine if r[4] is not None]",
                                       "values = [r[4] or 0 for r in mine]"),
    "mean halves to even": ("from decimal import Decimal, ROUND_HALF_UP",
                            "from decimal import Decimal, ROUND_HALF_UP, ROUND_HALF_EVEN",
                            "ROUND_HALF_UP) if values", "ROUND_HALF_EVEN) if values"),
    "exactly the threshold is ok": ("row['errors'] >= THRESHOLD", "row['errors'] > THRESHOLD"),
}
READINGS = {2: LEVEL2_READINGS, 3: RUN_READINGS, 4: DIRTY_READINGS,
            5: {**RUN_READINGS, **DIRTY_READINGS, **WINDOW_READINGS}}
READING_CASES = [(level, reading) for level in sorted(READINGS) for reading in sorted(READINGS[level])]


@pytest.fixture(scope="module")
def bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("log_bundles")
    built = {}
    for level, (domain, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root, domain, level, seed)
        assert candidate.error is None
        built[level] = load_task_bundle(candidate.bundle_dir)
    return built


@pytest.mark.parametrize("level", sorted(READING_BUNDLES))
def test_reading_bundles_pass_agent_free_validation(sandbox, bundles, tmp_path, level):
    assert bundles[level].format == ("json", "csv", "files", "report")[READING_BUNDLES[level][1] % 4]
    result = validate_without_agent(sandbox, bundles[level], tmp_path / "scratch")
    assert result.passed, result.reason


def copy_bundle(bundle: TaskBundle, tmp_path: Path) -> TaskBundle:
    return load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))


@pytest.mark.parametrize("level, reading", READING_CASES, ids=[f"L{lv}-{r}" for lv, r in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, bundles, tmp_path, level, reading):
    edits = READINGS[level][reading]
    bundle = copy_bundle(bundles[level], tmp_path)
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    mounts = [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")]
    solved = sandbox.run(["bash", "/solution/solve.sh"], mounts)
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
