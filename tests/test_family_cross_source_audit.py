"""The `cross_source_audit` family: every level builds through the sandbox into
a bundle that passes agent-free validation, level 0 varies its one step,
the generator is deterministic, and each contract rule read the other way
(the oracle's solution with that one decision changed) fails the verifier."""

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

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "cross_source_audit")
DOMAINS = load_domain_catalog()
BY_ID = {d.id: d for d in DOMAINS}
ROUND = "round-0001"
FORMATS = ("json", "csv", "files", "report")


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def build(sandbox, tmp_path, domain, level, seed, tasks="tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, tmp_path / tasks)


# Levels 0 and 1 in three domains; levels 2 to 5 in four, seeds 0-3 giving the
# four deliverable formats. The domains shift with the level.
CASES = [(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, k)
         for level in range(6) for k in range(3 if level < 2 else 4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        CAPABILITY.id, domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == FORMATS[seed % 4]
        assert set(bundle.contract["labels"]) == {
            "group_conflict", "missing_approval", "missing_log", "unregistered", "value_mismatch"}
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free


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


@pytest.mark.parametrize("level", [2, 5])
def test_same_seed_gives_identical_bytes(sandbox, tmp_path, level):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, domain, level, 7, tasks="a")
    second = build(sandbox, tmp_path, domain, level, 7, tasks="b")
    other = build(sandbox, tmp_path, domain, level, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


def test_level5_is_large_but_small_on_disk(sandbox, tmp_path):
    bundle = load_task_bundle(build(sandbox, tmp_path, DOMAINS[7], 5, 1).bundle_dir)
    index = next(bundle.environment_dir.glob("*_index.csv")).read_text().splitlines()
    assert len(index) - 1 >= 200  # hundreds of register records
    size = sum(p.stat().st_size for p in bundle.environment_dir.rglob("*") if p.is_file())
    assert size < 200_000


# ---- each contract rule read the other way

# Edits of the oracle's solve.sh, pairs of (exact text, replacement). The
# generator plants, for every seed, data where the two readings differ: a
# difference exactly at the tolerance, a value exactly on the threshold, values
# on either side of the threshold in register and log, an approval under
# another group for a record that needs one, records with several findings,
# lower-case and padded ids, ids only a secondary source names, a record
# without a log row.
RULES = {
    "ids compared as written": ("    return raw.strip().upper()", "    return raw"),
    "a difference at the tolerance is a mismatch": ("abs(logged[key] - value) > tol",
                                                    "abs(logged[key] - value) >= tol"),
    "a value on the threshold needs no approval": ("if value >= threshold and", "if value > threshold and"),
    "the logged value decides approval": ("if value >= threshold and", "if logged.get(key, value) >= threshold and"),
    "an approval under another group counts": ("group not in groups", "not groups"),
    "a record without a log row is no finding": ("issues.append('missing_log')", "pass"),
    "ids absent from the register are not reported": ("found[key] = ['unregistered']", "pass"),
    "one row per record": ("for issue in found[key]:", "for issue in found[key][:1]:"),
    "difference taken the other way": ("logged[key] - reg[1]", "reg[1] - logged[key]"),
    "logged value only on mismatch rows": ("LOG_COL: logged.get(key),",
                                           "LOG_COL: logged.get(key) if issue == 'value_mismatch' else None,"),
}
# Level 3 reads the tolerance and threshold of each record's group from the limits table.
LAYOUT_RULES = {name: RULES[name] for name in (
    "a difference at the tolerance is a mismatch", "a value on the threshold needs no approval",
    "the logged value decides approval", "an approval under another group counts")}
LAYOUT_RULES["limits of the approval's group"] = ("tol, threshold = limits_for(group)",
                                                  "tol, threshold = limits_for(approved.get(key, [group])[0])")
# Level 4's dirty data: drafts, hyphenless ids, the second log file with its
# columns and units, empty readings, group names in another letter case.
DIRTY_RULES = {
    "draft dossiers counted": ("files = [row['file'] for row in csv.DictReader(f)]",
                               "files = sorted(glob.glob('*/*.txt'))"),
    "ids without their hyphen not matched": ("    if '-' not in key:\n", "    if False:\n"),
    "ids compared as written": ("    key = raw.strip().upper()", "    key = raw"),
    "the second log file ignored": ("        reading(row['id'], row['reading'], row['unit'], row.get('date', ''))",
                                    "        pass"),
    "hundredths read as the unit": ("        value = value / 100", "        pass"),
    "an empty reading counts as zero": ("    if not raw_value.strip():\n        return\n",
                                        "    if not raw_value.strip():\n        raw_value = '0'\n"),
    "group names compared with their case": ("row[GROUP].strip().lower()", "row[GROUP].strip()"),
    "one row per record": RULES["one row per record"],
}
# Level 5: dated readings, the `*` limits row, log-only ids, one row per
# record by priority, plus level 4's dirt and level 2's ties.
LARGE_RULES = {
    "the earliest reading counts": ("max(rows)[1]", "min(rows)[1]"),
    "the latest row counts even when empty": ("    if not raw_value.strip():\n        return\n",
                                              "    if not raw_value.strip():\n        raw_value = '0'\n"),
    "an unlisted group has no limits": ("limits.get(group, limits['*'])",
                                        "limits.get(group, (Decimal(0), Decimal('Infinity')))"),
    "log-only ids reported": ("for key in sorted(approved):", "for key in sorted(set(logged) | set(approved)):"),
    "priority order reversed": ("key=PRIORITY.index", "key=lambda issue: -PRIORITY.index(issue)"),
    "priority order alphabetical": ("min(found[key], key=PRIORITY.index)", "min(found[key])"),
    "findings counts the reported issue only": ("'findings': len(found[key])", "'findings': 1"),
    "draft dossiers counted": DIRTY_RULES["draft dossiers counted"],
    "ids without their hyphen not matched": DIRTY_RULES["ids without their hyphen not matched"],
    "hundredths read as the unit": DIRTY_RULES["hundredths read as the unit"],
    "group names compared with their case": DIRTY_RULES["group names compared with their case"],
    "a difference at the tolerance is a mismatch": RULES["a difference at the tolerance is a mismatch"],
    "a value on the threshold needs no approval": RULES["a value on the threshold needs no approval"],
    "the logged value decides approval": RULES["the logged value decides approval"],
    "limits of the approval's group": LAYOUT_RULES["limits of the approval's group"],
}
# (name, domain, level, seed): formats differ across the four bundles.
READING_BUNDLES = {
    "L2-json": ("apiary_hive_inventory", 2, 0),
    "L3-csv": ("tide_gauge_readings", 3, 1),
    "L4-files": ("film_archive_reels", 4, 2),
    "L5-report": ("lighthouse_lamp_inspections", 5, 3),
}
READING_CASES = ([("L2-json", r, e) for r, e in sorted(RULES.items())]
                 + [("L3-csv", r, e) for r, e in sorted(LAYOUT_RULES.items())]
                 + [("L4-files", r, e) for r, e in sorted(DIRTY_RULES.items())]
                 + [("L5-report", r, e) for r, e in sorted(LARGE_RULES.items())])


@pytest.fixture(scope="module")
def reading_bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("bundles")
    built = {}
    for name, (domain, level, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root, BY_ID[domain], level, seed)
        assert candidate.error is None
        built[name] = load_task_bundle(candidate.bundle_dir)
    return built


def other_reading(solve: str, edits: tuple[str, ...]) -> str:
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, correct
        solve = solve.replace(correct, other)
    return solve


@pytest.mark.parametrize("name, reading, edits", READING_CASES, ids=[f"{n}-{r}" for n, r, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, reading_bundles, tmp_path, name, reading, edits):
    bundle = load_task_bundle(Path(shutil.copytree(reading_bundles[name].root, tmp_path / "bundle")))
    bundle.solution_path.write_text(other_reading(bundle.solution_path.read_text(), edits))
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    mounts = [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")]
    solved = sandbox.run(["bash", "/solution/solve.sh"], mounts)
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading


# ---- every domain
