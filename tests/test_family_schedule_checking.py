"""The schedule_checking family: every level builds through the sandbox and
passes agent-free validation in several domains and every deliverable format;
level 0 varies its single step; the generator is deterministic; and each rule
of the level-2, level-4 and level-5 contracts, read the other way, fails the
real verifier (the generator plants a case where the two readings differ)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis import build_candidate, generator_spec, write_generator
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "schedule_checking")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def build(sandbox, tmp_path, domain, level, seed, tasks="tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, tmp_path / tasks)


# Levels 0 and 1 on three domains, levels 2-5 on four, where seeds 0-3 rotate
# through the four deliverable formats (JSON, CSV, one CSV per violation,
# report + sidecar).
CASES = [(DOMAINS[(level * 7 + seed * 11) % len(DOMAINS)], level, seed)
         for level in range(6) for seed in range(3 if level < 2 else 4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        "schedule_checking", domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == ("json", "csv", "files", "report")[seed % 4]
    if level == 5:
        # hundreds of slots, the bundle well under a megabyte
        rows = sum(len(p.read_text().splitlines()) - 1 for p in bundle.environment_dir.rglob("*.csv"))
        assert rows >= 200
        assert sum(p.stat().st_size for p in bundle.root.rglob("*") if p.is_file()) < 1 << 20
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed


def test_level0_varies_its_single_step_across_seeds(sandbox, tmp_path):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = load_task_bundle(build(sandbox, tmp_path, DOMAINS[0], 0, seed).bundle_dir)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(re.sub(r"\S+\.(csv|txt)\b", "FILE", solution))
        instructions.add(bundle.instruction)
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, domain, 5, 7, tasks="a")
    second = build(sandbox, tmp_path, domain, 5, 7, tasks="b")
    other = build(sandbox, tmp_path, domain, 5, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


# ---- each contract rule read the other way

NOT_NEIGHBOURS = ("elif -shared < a['gap'] and not any(c['resource'] == a['resource'] and min(a['end'], b['end']) "
                  "<= c['start'] and c['end'] <= max(a['start'], b['start']) for c in slots):")
# Rules shared by levels 2 to 5: boundaries, pair naming, midnight, the daily total.
TIME_READINGS = {
    "touching slots overlap": ("        elif shared > 0:\n", "        elif shared >= 0:\n"),
    "a gap exactly at the minimum is too short": ("elif -shared < a['gap']:", "elif -shared <= a['gap']:"),
    "short gaps only between neighbouring slots": ("elif -shared < a['gap']:", NOT_NEIGHBOURS),
    "a pair named larger id first": ("first, second = a['id'], b['id']", "first, second = b['id'], a['id']"),
    "a pair named in start order": ("first, second = a['id'], b['id']",
                                    "first, second = (a['id'], b['id']) if a['start'] <= b['start'] else (b['id'], a['id'])"),
    "duplicates reported as overlaps": ("report('duplicate', first, second, shared)",
                                        "report('overlap', first, second, shared)"),
    "opening hours exclude their ends": (
        "    if outside > 0:\n",
        "    if outside > 0 or s['start'] % 1440 == s['open'] or s['end'] % 1440 == s['close']:\n"),
    "an end before the start is on the same day": ("end += 1440  # crosses midnight: ends on the next day", "pass"),
    "outside minutes of the start day only": (
        "outside = s['end'] - s['start'] - inside",
        "outside = min(s['end'], s['start'] // 1440 * 1440 + 1440) - s['start'] - inside"),
    "a total at the maximum is a violation": ("if total > DAILY_MAX:", "if total >= DAILY_MAX:"),
    "daily totals by the end date": ("key = (s['entity'], s['start'] // 1440)", "key = (s['entity'], s['end'] // 1440)"),
}
# The dirty-data rules of levels 4 and 5.
DIRTY_READINGS = {
    "cancelled rows counted": ("if row.get('status', 'booked').strip() != 'booked':", "if False:"),
    "a file without status holds no booked slot": ("row.get('status', 'booked')", "row.get('status', 'cancelled')"),
    "stale files read too": (
        "for path in sorted(files):",
        "for path in sorted(set(files) | set(__import__('glob').glob(__import__('os').path.dirname(next(iter(files)))"
        " + '/*.csv'))):",
        "entity = files[path]", "entity = files.get(path, path)"),
    "a repeated row is another slot": ("if row['slot_id'] in seen:", "if False:"),
    "hundredths read as whole units": ("Decimal(text) / SCALE if text", "Decimal(text) if text"),
    "an empty value drops the slot": ("value = Decimal(0)  # an empty value adds nothing to the daily total", "continue"),
    "resource names compared as written": ("resource = norm(row[GF])", "resource = row[GF]"),
}
# The capacity rules of level 5.
CAPACITY_READINGS = {
    "ties at one start go to the larger id first": (
        "key=lambda s: (s['start'], s['id'])", "key=lambda s: (s['start'], [-ord(c) for c in s['id']])"),
    "a slot ending at the start still runs": ("if t['end'] > s['start']", "if t['end'] >= s['start']"),
    "capacity one everywhere": ("if running >= s['capacity']:", "if running >= 1:"),
    "a duplicate does not count toward capacity": (
        "    lines.setdefault(s['resource'], []).append(s)\n",
        "    if not any((t['entity'], t['start'], t['end']) == (s['entity'], s['start'], s['end'])\n"
        "               for t in lines.get(s['resource'], [])):\n"
        "        lines.setdefault(s['resource'], []).append(s)\n"),
    "overlapping pairs reported too": ("pass  # overlaps are judged by capacity below",
                                       "report('overlap', first, second, shared)"),
}
# (level, domain index, seed): a different format and domain for each level.
READING_BUNDLES = {2: (12, 2), 4: (31, 1), 5: (44, 3)}
# Level 5 repeats the time rules whose reading meets the capacity rules (to keep
# this file quick; the generator plants every case at every level from 2 on).
LEVEL5_TIME = ("touching slots overlap", "a gap exactly at the minimum is too short",
               "short gaps only between neighbouring slots", "a pair named in start order",
               "duplicates reported as overlaps", "an end before the start is on the same day")
READING_CASES = (
    [(2, reading, edits) for reading, edits in sorted(TIME_READINGS.items())]
    + [(4, reading, edits) for reading, edits in sorted(DIRTY_READINGS.items())]
    + [(5, reading, TIME_READINGS[reading]) for reading in LEVEL5_TIME]
    + [(5, reading, edits) for reading, edits in sorted(CAPACITY_READINGS.items())]
)


@pytest.fixture(scope="module")
def reading_bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("reading_bundles")
    built = {}
    for level, (domain_index, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root, DOMAINS[domain_index], level, seed)
        assert candidate.error is None
        built[level] = load_task_bundle(candidate.bundle_dir)
    return built


@pytest.mark.parametrize("level, reading, edits", READING_CASES, ids=[f"L{lv}-{r}" for lv, r, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, reading_bundles, tmp_path, level, reading, edits):
    bundle = load_task_bundle(Path(shutil.copytree(reading_bundles[level].root, tmp_path / "bundle")))
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")],
                         cwd="/workspace")
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
