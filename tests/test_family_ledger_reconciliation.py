"""`ledger_reconciliation` at levels 3-5 (an index of detail files against
reference-coded rows, dirty data, voided entries at scale): every level
builds and passes agent-free validation in every deliverable format, and
each rule these levels add, read the other way, fails the real verifier.
Levels 0-2 are covered by test_generators.py and test_agent_free_validation.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_tasks import build_bundle, solve_read_the_other_way

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle
from resources.sandbox import BubblewrapSandbox

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "ledger_reconciliation")
DOMAINS = load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, domain, level: int, seed: int) -> TaskBundle:
    return build_bundle(sandbox, CAPABILITY, root, domain, level, seed)


CASES = [(DOMAINS[(level * 19 + seed * 5) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    bundle = build(sandbox, tmp_path, domain, level, seed)
    assert bundle.format == ("json", "csv", "files", "report")[seed]
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason


READINGS = {
    "reference codes not mapped to ids": (3, [("        b[owner[ref]] = b.get(owner[ref], Decimal(0)) + amount\n",
                                               "        b[ref] = b.get(ref, Decimal(0)) + amount\n")]),
    "only the first entry of a detail file counts": (3, [
        ("a[row[KEY]] = a.get(row[KEY], Decimal(0)) + Decimal(value)", "a.setdefault(row[KEY], Decimal(value))")]),
    "a difference at the tolerance is a mismatch": (3, [("abs(b[key] - a[key]) > TOL", "abs(b[key] - a[key]) >= TOL")]),
    "detail files the index does not list counted": (4, [
        ("    for row in csv.DictReader(f):\n        with open(row['file']) as detail:",
         "    import glob\n    for path in sorted(glob.glob(A + '/*.txt')):\n"
         "        row = {KEY: open(path).readline().split(': ')[1].strip(), 'file': path}\n"
         "        with open(row['file']) as detail:")]),
    "cents taken as whole units": (4, [("Decimal(row[VALUE + '_cents']) / 100", "Decimal(row[VALUE + '_cents'])")]),
    "reference codes compared as written": (4, [("    ref = ref.strip().upper()\n", "")]),
    "unknown references reported": (4, [("    if ref in owner:\n        b[owner[ref]]", "    if True:\n        b[owner.get(ref, ref)]"),
                                        ("b.get(owner[ref], Decimal(0))", "b.get(owner.get(ref, ref), Decimal(0))")]),
    "voided entries counted": (5, [("and not value.endswith(' void')", "and value")]),
}
READINGS["voided entries counted"][1].append(("Decimal(value)\n", "Decimal(value.split()[0])\n"))
READING_CASES = [(reading, seed) for reading in sorted(READINGS) for seed in (1, 2)]


@pytest.mark.parametrize("reading, seed", READING_CASES, ids=[f"{r}-s{s}" for r, s in READING_CASES])
def test_each_rule_read_the_other_way_fails(sandbox, tmp_path, reading, seed):
    level, edits = READINGS[reading]
    built = build(sandbox, tmp_path / "build", DOMAINS[(seed * 23 + level) % len(DOMAINS)], level, seed)
    verdict = solve_read_the_other_way(sandbox, built, edits, tmp_path)
    assert verdict is not None, reading
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
