"""`grouped_statistics` at levels 3-5 (multi-hop layout, dirty data, larger
data with revisions and small groups): every level builds and passes
agent-free validation in every deliverable format, and each rule these
levels add, read the other way, fails the real verifier. Levels 0-2 are
covered by test_generators.py and test_agent_free_validation.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_tasks import build_bundle, solve_read_the_other_way

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle
from resources.sandbox import BubblewrapSandbox

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "grouped_statistics")
DOMAINS = load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, domain, level: int, seed: int) -> TaskBundle:
    return build_bundle(sandbox, CAPABILITY, root, domain, level, seed)


# Seeds 0-3 give the four deliverable formats; three domains per level.
CASES = [(DOMAINS[(level * 13 + seed * 7) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(4)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    bundle = build(sandbox, tmp_path, domain, level, seed)
    assert bundle.format == ("json", "csv", "files", "report")[seed]
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason


READINGS = {
    "group codes reported untranslated": (3, [("groups.setdefault(names[record[GROUP + '_code']], [])",
                                               "groups.setdefault(record[GROUP + '_code'], [])")]),
    "detail files the index does not list counted": (4, [
        ("for key, (revision, path) in sorted(latest.items()):", "import glob\nfor path in sorted(glob.glob('records/*.txt')):")]),
    "hundredths taken as whole units": (4, [("Decimal(record[VALUE + '_hundredths']) / 100",
                                             "Decimal(record[VALUE + '_hundredths'])")]),
    "a valid record without a value counted as zero": (4, [("    else:\n        continue\n",
                                                            "    else:\n        value = Decimal(0)\n")]),
    "the first revision counts": (5, [("revision > latest[row[KEY]][0]", "revision < latest[row[KEY]][0]")]),
    "small groups tiered like the others": (5, [("    if n < MIN_RECORDS:", "    if False:")]),
}
READING_CASES = [(reading, seed) for reading in sorted(READINGS) for seed in (0, 3)]


@pytest.mark.parametrize("reading, seed", READING_CASES, ids=[f"{r}-s{s}" for r, s in READING_CASES])
def test_each_rule_read_the_other_way_fails(sandbox, tmp_path, reading, seed):
    level, edits = READINGS[reading]
    built = build(sandbox, tmp_path / "build", DOMAINS[(seed * 17 + level) % len(DOMAINS)], level, seed)
    verdict = solve_read_the_other_way(sandbox, built, edits, tmp_path)
    assert verdict is not None, reading
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
