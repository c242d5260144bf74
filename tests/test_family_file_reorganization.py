"""`file_reorganization` at levels 3-5 (a manifest and a register decide
where each file goes, dirty data, collisions at scale): every level builds
and passes agent-free validation, and each rule these levels add, read the
other way, fails the real verifier. Levels 0-2 are covered by
test_generators.py and test_agent_free_validation.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_tasks import build_bundle, solve_read_the_other_way

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle
from resources.sandbox import BubblewrapSandbox

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "file_reorganization")
DOMAINS = load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, domain, level: int, seed: int) -> TaskBundle:
    return build_bundle(sandbox, CAPABILITY, root, domain, level, seed)


CASES = [(DOMAINS[(level * 29 + seed * 11) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(3)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    bundle = build(sandbox, tmp_path, domain, level, seed)
    assert bundle.format == "tree"
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason


READINGS = {
    "the year of the opened date": (3, [("year(record['closed'])", "year(record['opened'])")]),
    "files the manifest does not list filed too": (3, [
        ("for target, claims in sorted(targets.items()):",
         "for path in glob.glob('inbox/**/*_unfiled.*', recursive=True):\n"
         "    targets.setdefault(os.path.join('unassigned', os.path.basename(path)), []).append(('', path))\n"
         "for target, claims in sorted(targets.items()):")]),
    "group names kept as written": (4, [("record[GROUP].strip().lower() or 'unassigned'", "record[GROUP] or 'unassigned'")]),
    "records with no group left in the inbox": (4, [("        group = record[GROUP].strip().lower() or 'unassigned'\n",
                                                     "        group = record[GROUP].strip().lower()\n"
                                                     "        if not group:\n            continue\n")]),
    "day-first dates read from the front": (4, [("return date[-4:] if '/' in date else date[:4]", "return date[:4].strip('/')")]),
    ".tmp files kept": (4, [("    os.remove(path)\n", "    pass\n")]),
    "the later record id keeps the name": (5, [("sorted(claims)", "sorted(claims, reverse=True)")]),
}
READING_CASES = [(reading, seed) for reading in sorted(READINGS) for seed in (0, 1)]


@pytest.mark.parametrize("reading, seed", READING_CASES, ids=[f"{r}-s{s}" for r, s in READING_CASES])
def test_each_rule_read_the_other_way_fails(sandbox, tmp_path, reading, seed):
    level, edits = READINGS[reading]
    built = build(sandbox, tmp_path / "build", DOMAINS[(seed * 31 + level * 3) % len(DOMAINS)], level, seed)
    verdict = solve_read_the_other_way(sandbox, built, edits, tmp_path)
    if verdict is not None:  # a reading that crashes the solve fails just as surely
        assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
