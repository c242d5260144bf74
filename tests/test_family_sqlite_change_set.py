"""The sqlite_change_set family: every level builds through the sandbox into a
bundle that passes agent-free validation, level 0 is one short sqlite3 step
that varies with the seed, the database bytes are a function of the seed, and
every contract rule read the other way ends in a database the verifier
rejects."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import GENERATORS_DIR, load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis import build_candidate, generator_spec, write_generator
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "sqlite_change_set")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, tmp_path, domain, level, seed, tasks="tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, tmp_path / tasks)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def family_module():
    """The family script imported in-process, for checks that need no sandbox."""
    spec = importlib.util.spec_from_file_location("sqlite_change_set_family", GENERATORS_DIR / "sqlite_change_set.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def params(domain, level):
    return generator_spec(CAPABILITY, domain, level).params


# Levels 0-1 in three domains, levels 2-5 in four so that seeds 0-3 (change
# file CSV or JSON, absent-key updates skipped or inserted) all occur.
CASES = [(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, (level + k) % 4)
         for level in range(6) for k in range(3 if level < 2 else 4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track, bundle.format) == (
        CAPABILITY.id, domain.id, level, "terminal", "sqlite")
    checks = bundle.answer()["checks"]
    assert checks and all(c["type"] == "sqlite_records" for c in checks)
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed


def test_level0_varies_its_single_step_across_seeds(sandbox, tmp_path):
    domain = DOMAINS[0]
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = load_task_bundle(build(sandbox, tmp_path, domain, 0, seed).bundle_dir)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(re.sub(r"\S+\.(csv|txt)\b", "FILE", solution))
        instructions.add(bundle.instruction)
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def test_level0_is_short_and_digit_free_in_every_domain():
    family = family_module()
    family.database_bytes = lambda tables: b""  # only the words are checked here
    for domain in DOMAINS:
        for seed in range(4):
            task = family.build(seed, params(domain, 0))
            last = task["solution"].strip().splitlines()[-1]
            assert len(last) < 60, (domain.id, last)
            assert not re.search(r"(?<![\w.])\d", task["instruction"]), (domain.id, task["instruction"])


def test_level5_is_large_and_small_enough():
    family = family_module()
    task = family.build(0, params(DOMAINS[3], 5))
    size = sum(len(v) for v in task["environment"].values()) + len(json.dumps(task["answer"]))
    tables = {c["table"]: len(c["expected"]) for c in task["answer"]["checks"]}
    assert tables[DOMAINS[3].record_file] >= 200 and tables["change_log"] >= 100, tables
    assert size < 600_000, size


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    domain = DOMAINS[5]
    for level in (1, 5):
        first = build(sandbox, tmp_path / str(level), domain, level, 7, tasks="a")
        second = build(sandbox, tmp_path / str(level), domain, level, 7, tasks="b")
        other = build(sandbox, tmp_path / str(level), domain, level, 8, tasks="c")
        db = "environment/%s.db" % domain.record_file
        assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
        assert tree_digest(first.bundle_dir)[db] != tree_digest(other.bundle_dir)[db]
        assert (first.bundle_dir / db).read_bytes().startswith(b"SQLite format 3\x00")


# ---- every contract rule read the other way

@pytest.fixture(scope="module")
def bundles(sandbox, tmp_path_factory):
    """Seed 0: CSV, absent-key updates skipped; 1: JSON, skipped; 2: CSV, inserted; 3: JSON, inserted."""
    root = tmp_path_factory.mktemp("bundles")
    built = {}
    for name, domain, level, seed in [
        ("L2-csv-skip", "apiary_hive_inventory", 2, 0),
        ("L2-json-insert", "library_book_loans", 2, 3),
        ("L3-json-skip", "trail_maintenance_logs", 3, 1),
        ("L4-csv-skip", "amateur_radio_contacts", 4, 0),
        ("L5-skip", "greenhouse_plant_trials", 5, 1),
        ("L5-insert", "apiary_hive_inventory", 5, 2),
    ]:
        candidate = build(sandbox, root, next(d for d in DOMAINS if d.id == domain), level, seed)
        assert candidate.error is None
        built[name] = load_task_bundle(candidate.bundle_dir)
    return built


# Each reading is the oracle with one decision changed (exact replacements,
# each occurring once in solve.sh). The generator plants, for every seed, a
# case where the two readings end in different tables: two updates of one key
# with the later seq first in the file, a delete with the re-insert first in
# the file, an update of a key the table never had, updates that leave a field
# empty, an insert over an existing row, a value on an exact half after an even
# hundredth, dirty keys on existing rows, one key changed in two batches with
# the later batch's seq lower, a group whose rows are all deleted, a rejected
# batch and an unlisted file that delete untouched rows, an insert with an
# empty key, an insert without a value, a batch in hundredths, retired rows
# that are updated, deleted and re-inserted, and a delete of a key never seen.
STORE_ROW = "        rows[key] = {GROUP: fields.get(GROUP)"
READINGS = {
    "keys matched as written": ("    return key.strip().upper()", "    return key"),
    "changes applied in file order": ("changes.sort(key=lambda x: (x[0], x[1]))\n", ""),
    "seq alone orders the changes": ("changes.sort(key=lambda x: (x[0], x[1]))", "changes.sort(key=lambda x: x[1])"),
    "an update of an absent key inserts it": ("MISSING_UPDATE = 'skip'", "MISSING_UPDATE = 'insert'"),
    "an update of an absent key is ignored": ("MISSING_UPDATE = 'insert'", "MISSING_UPDATE = 'skip'"),
    "an empty value clears the stored one": (
        "    if given(c['value']):\n        fields[VALUE] = stored(c['value'], c['scale'])\n",
        "    fields[VALUE] = stored(c['value'], c['scale']) if given(c['value']) else None\n"),
    "an empty group clears the stored one": (
        "    if given(c['group']):\n        fields[GROUP] =",
        "    if True:\n        fields[GROUP] = None if not given(c['group']) else"),
    "an insert over an existing row is ignored": (
        STORE_ROW, STORE_ROW.replace("= {", "= rows[key] if key in rows else {")),
    "halves rounded to even": ("Decimal('0.01'), ROUND_HALF_UP)", "Decimal('0.01'))"),
    "values stored unrounded": (".quantize(Decimal('0.01'), ROUND_HALF_UP)", ""),
    "a deleted key stays deleted": (
        "changes.sort(key=lambda x: (x[0], x[1]))\n",
        "changes.sort(key=lambda x: (x[0], x[1]))\ngone = set()\n",
        "        rows.pop(key, None)\n",
        "        rows.pop(key, None)\n        gone.add(key)\n    elif key in gone:\n        pass\n"),
    "codes stored as they are": ("fields[GROUP] = codes[c['group'].strip()]", "fields[GROUP] = c['group'].strip()"),
    "an emptied group keeps its summary row": (
        "summary = {}\n",
        "summary = {g: [0, Decimal(0)] for (g,) in con.execute('SELECT %s FROM %s' % (GROUP, SUMMARY))}\n"),
    "rejected batches applied": ("        if row['status'].strip() != 'accepted':\n            continue\n", ""),
    "unlisted files applied": (
        "batches = []\n", "batches, listed = [], set()\n",
        "    for row in csv.DictReader(f):\n",
        "    for row in csv.DictReader(f):\n        listed.add(row['file'].strip())\n",
        "for batch, name in batches:",
        "for batch, name in batches + [(0, n) for n in sorted(os.listdir('changes'))"
        " if n not in listed | {'index.csv'}]:"),
    "an empty key is a key": ("    if not given(c['key']):\n        continue\n", ""),
    "an empty key is a key in the log": ("key = norm(c['key']) if given(c['key']) else None",
                                         "key = norm(c['key'] or '')"),
    "hundredths taken as the unit": ("scale = HUNDREDTHS if", "scale = 1 if"),
    "rows without a value not counted": ("    s[0] += 1\n", "    s[0] += r[VALUE] is not None\n"),
    "deletes remove the row": ("            rows[key]['status'] = 'retired'", "            del rows[key]"),
    "retired rows count as present": ("    present = key in rows and rows[key]['status'] == 'active'",
                                      "    present = key in rows"),
    "retired rows counted in the summary": ("    if r['status'] != 'active':\n        continue\n", ""),
    "skipped changes not logged": (
        "    log.append((batch, seq, key, c['op'], outcome))",
        "    if outcome == 'applied':\n        log.append((batch, seq, key, c['op'], outcome))"),
}
L2_RULES = ["keys matched as written", "changes applied in file order", "an empty value clears the stored one",
            "an empty group clears the stored one", "an insert over an existing row is ignored",
            "halves rounded to even", "values stored unrounded", "a deleted key stays deleted"]
READING_CASES = (
    [("L2-csv-skip", r) for r in L2_RULES + ["an update of an absent key inserts it"]]
    + [("L2-json-insert", r) for r in ["an update of an absent key is ignored", "halves rounded to even",
                                       "changes applied in file order"]]
    + [("L3-json-skip", r) for r in ["seq alone orders the changes", "codes stored as they are",
                                     "an emptied group keeps its summary row", "keys matched as written"]]
    + [("L4-csv-skip", r) for r in ["rejected batches applied", "unlisted files applied", "an empty key is a key",
                                    "hundredths taken as the unit", "rows without a value not counted",
                                    "seq alone orders the changes", "a deleted key stays deleted"]]
    + [("L5-skip", r) for r in ["deletes remove the row", "retired rows count as present",
                                "retired rows counted in the summary", "skipped changes not logged",
                                "an empty key is a key in the log", "an update of an absent key inserts it",
                                "seq alone orders the changes", "an insert over an existing row is ignored",
                                "values stored unrounded", "an emptied group keeps its summary row",
                                "rejected batches applied", "unlisted files applied", "hundredths taken as the unit"]]
    + [("L5-insert", r) for r in ["an update of an absent key is ignored", "retired rows count as present",
                                  "deletes remove the row", "halves rounded to even"]]
)


def copy_bundle(bundle: TaskBundle, tmp_path: Path) -> TaskBundle:
    return load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))


@pytest.mark.parametrize("name, reading", READING_CASES, ids=[f"{n}-{r}" for n, r in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, bundles, tmp_path, name, reading):
    bundle = copy_bundle(bundles[name], tmp_path)
    edits = READINGS[reading]
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True),
                          Mount(bundle.solution_path.parent, "/solution")])
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading


def test_every_reading_is_exercised():
    assert {r for _, r in READING_CASES} == set(READINGS)


def test_family_script_imports_only_the_stdlib_and_the_shared_module():
    source = (GENERATORS_DIR / "sqlite_change_set.py").read_text()
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M))
    assert imported - {"generator_common"} <= set(sys.stdlib_module_names), imported
