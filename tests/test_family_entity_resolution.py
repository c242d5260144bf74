"""The entity_resolution family: every level builds through the sandbox into
a bundle that passes agent-free validation, level 0 varies its single step,
the same seed gives the same bytes, and every contract rule read the other
way fails the real verifier."""

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
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "entity_resolution")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def build(sandbox, root, domain, level, seed, tasks="tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, Path(root) / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, Path(root) / tasks)


# Three or four domains per level (shifting with the level) and seeds 0-3:
# both level-1 variants and, at levels 2-5, all four deliverable formats.
CASES = [(DOMAINS[(level * 11 + seed * 5) % len(DOMAINS)], level, seed)
         for level in range(6) for seed in range(3 if level < 2 else 4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        CAPABILITY.id, domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == ("json", "csv", "files", "report")[seed]
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
        # Level-0 instructions state no number at all (file names aside).
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def test_level0_command_stays_short_in_the_longest_domain_names(tmp_path):
    # The level-0 command line holds the record file name: the longest one still fits.
    longest = max(DOMAINS, key=lambda d: len(d.record_file))
    for seed in range(4):
        out = run_generator(tmp_path / f"s{seed}", longest, 0, seed)
        assert len((out / "solution/solve.sh").read_text().strip().splitlines()[-1]) < 60


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    # build_candidate itself runs every generator twice and compares the bytes.
    first = build(sandbox, tmp_path, DOMAINS[5], 3, 7, tasks="a")
    second = build(sandbox, tmp_path, DOMAINS[5], 3, 7, tasks="b")
    other = build(sandbox, tmp_path, DOMAINS[5], 3, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


def run_generator(root: Path, domain, level, seed) -> Path:
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, root / "gen")
    subprocess.run([sys.executable, "-I", str(gen / spec.script_name), "--params", str(gen / "params.json"),
                    "--seed", str(seed), "--out", str(root / "out")], check=True)
    return root / "out"


def test_level5_is_large_but_small_and_fast(tmp_path):
    for seed in range(2):
        # CPU time, not wall time: the machine is shared.
        started = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = run_generator(tmp_path / f"s{seed}", DOMAINS[seed * 30], 5, seed)
        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert (ended.ru_utime + ended.ru_stime) - (started.ru_utime + started.ru_stime) < 1.0
        cards = [line for line in (out / "environment/index.csv").read_text().splitlines()[1:] if line]
        assert len(cards) >= 200  # hundreds of records
        assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1 << 20


# Each contract rule, read the other way: the oracle's solution with that one
# decision changed (exact replacements, each occurring once). The generator
# plants data where the two readings differ, so each must score 0.
LEVEL2_READINGS = {
    "ids compared as written": ("key = canonical(raw_id)", "key = raw_id.strip().upper()"),
    "leading zeros of the number kept": ("'%s-%04d' % (m.group(1).upper(), int(m.group(2)))",
                                         "'%s-%s' % (m.group(1).upper(), m.group(2))"),
    "group compared as written": ("g = raw_group.strip().lower()", "g = raw_group.strip()"),
    "swapped rows skipped": ("            raw_id, raw_group = raw_group, raw_id\n", "            continue\n"),
    "same id in another group is the same entity": ("ent = (key, g)", "ent = (key,)"),
    "a date tie goes to the earlier row": ("key=lambda r: (r[0], r[1])", "key=lambda r: (r[0], -r[1])"),
    "latest is the last row of the file": ("key=lambda r: (r[0], r[1])", "key=lambda r: r[1]"),
    "mean halves rounded to even": ("mean.quantize(Decimal('0.01'), ROUND_HALF_UP)", "mean.quantize(Decimal('0.01'))"),
    "entities entered once omitted": ("for ent, recs in sorted(entities.items()):\n",
                                      "for ent, recs in sorted(entities.items()):\n"
                                      "    if len(recs) < 2:\n"
                                      "        continue\n"),
}
# Levels 3-5 share one oracle and one data builder: the card layout rules ...
CARD_READINGS = {
    "renumbering ignored": ("        while key in renumbered:\n            key = renumbered[key]\n", ""),
    "ids compared as written": ("key = '%s-%04d' % (PREFIX, int(m.group(2)))", "key = row[ID].strip().upper()"),
    "group from the earliest card": ("latest = max(cards, key=lambda c: (c[0], c[1]))",
                                     "latest = min(cards, key=lambda c: (c[0], c[1]))"),
    "a date tie goes to the card listed earlier": ("key=lambda c: (c[0], c[1])", "key=lambda c: (c[0], -c[1])"),
    "group from the card listed last": ("key=lambda c: (c[0], c[1])", "key=lambda c: c[1]"),
    "group compared as written": ("card['group'].strip().lower()", "card['group'].strip()"),
    "entities with one card omitted": ("for key, cards in sorted(entities.items()):\n",
                                       "for key, cards in sorted(entities.items()):\n"
                                       "    if len(cards) < 2:\n"
                                       "        continue\n"),
}
# ... the dirty-data rules of levels 4 and 5 ...
DIRTY_READINGS = {
    "unit factor ignored": (" * FACTORS.get(card['source'], Decimal(1))", ""),
    "void cards counted": ("        if card['status'] == 'void':\n            continue\n", ""),
    "ids of another register kept": ("        if m.group(1).upper() != PREFIX:\n            continue\n", ""),
    "a card without an amount is not a record": ("        entities.setdefault(key, [])",
                                                 "        if amount is None:\n"
                                                 "            continue\n"
                                                 "        entities.setdefault(key, [])"),
}
# ... and the decisions level 5 adds.
LEVEL5_READINGS = {
    "renumbering followed one step only": ("while key in renumbered:", "if key in renumbered:"),
    "total halves rounded to even": ("total.quantize(PLACES, ROUND_HALF_UP)", "total.quantize(PLACES)"),
    "amounts rounded before summing": ("sum((c[3] for c in cards",
                                       "sum((c[3].quantize(PLACES, ROUND_HALF_UP) for c in cards"),
}
# Level 3 shares the card readings with level 5 (same oracle, same planting).
READINGS = {2: LEVEL2_READINGS, 4: DIRTY_READINGS, 5: {**CARD_READINGS, **DIRTY_READINGS, **LEVEL5_READINGS}}
# One bundle per level, each in another domain and deliverable format.
READING_BUNDLES = {2: ("tide_gauge_readings", 1), 4: ("apiary_hive_inventory", 3), 5: ("sawmill_log_scaling", 2)}
READING_CASES = [(level, reading, edits) for level, readings in sorted(READINGS.items())
                 for reading, edits in sorted(readings.items())]


@pytest.fixture(scope="module")
def reading_bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("reading_bundles")
    domains = {d.id: d for d in DOMAINS}
    built = {}
    for level, (domain, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root, domains[domain], level, seed)
        assert candidate.error is None
        built[level] = load_task_bundle(candidate.bundle_dir)
    return built


@pytest.mark.parametrize("level, reading, edits", READING_CASES, ids=[f"L{lv}-{r}" for lv, r, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, reading_bundles, tmp_path, level, reading, edits):
    bundle = reading_bundles[level]
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    # The changed solution runs beside the bundle; the bundle's answer key and verifier stay as built.
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solve.sh").write_text(solve)
    os.chmod(solution, 0o755)
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(solution, "/solution")])
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading


def test_contract_declares_no_answer_and_the_rules_it_plants(reading_bundles):
    bundle = reading_bundles[5]
    contract = bundle.contract
    assert contract["parameters"] == {"tolerance": 0.001} and contract["labels"] == []
    text = " ".join(contract["rules"])
    for phrase in ("halves rounded up", "listed later in index.csv", "follow renumbered.csv", "`void`", "factor",
                   "another prefix", "without an amount", "all void"):
        assert phrase in text, phrase
    checks = json.loads(bundle.answer_path.read_text())["checks"]
    assert "csv_records" in {check["type"] for check in checks}  # the files format: one CSV per group
