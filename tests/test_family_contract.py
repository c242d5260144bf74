"""The contract every task family keeps, checked once over all of them (what
differs by family is data, in family_readings.py):

- every case builds through the sandbox into a bundle of the family's track
  and format that passes agent-free validation;
- level 0 is one short command, without a number in its instruction, that
  differs by seed, and still fits with the catalog's longest names;
- the same seed gives the same bytes, another seed others;
- level 5 is large but small on disk, and its generator fast;
- each contract rule read the other way (the oracle's solve.sh with that one
  decision changed) fails the real verifier.

Family-specific checks stay in tests/test_family_<family>.py."""

from __future__ import annotations

import re
import resource

import pytest
from family_readings import FAMILIES, FORMATS, Large
from family_tasks import (
    CAPABILITIES,
    FamilyBundles,
    build_bundle,
    family_module,
    run_generator,
    solve_read_the_other_way,
    tree_bytes,
    tree_digest,
)

from clawloop_assets.synthesis.candidates import generator_spec
from clawloop_assets.synthesis.catalogs import load_domain_catalog
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox

DOMAINS = load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


@pytest.fixture(scope="module")
def bundles(sandbox, tmp_path_factory):
    return FamilyBundles(sandbox, tmp_path_factory.mktemp("families"))


def assert_large(large: Large, root, domain):
    counts = large.counts(root, domain)
    for what, least in large.at_least.items():
        assert counts[what] >= least, (what, counts)
    if large.max_bytes is not None:
        size = sum(tree_bytes(root / part) for part in large.size_of)
        assert size < large.max_bytes, size


BUILD_CASES = [(family, domain, level, seed) for family, spec in FAMILIES.items() for domain, level, seed in spec.cases]


@pytest.mark.parametrize("family, domain, level, seed", BUILD_CASES,
                         ids=[f"{f}-{d.id}-L{lv}-s{s}" for f, d, lv, s in BUILD_CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, bundles, tmp_path, family, domain, level, seed):
    spec = FAMILIES[family]
    bundle = bundles.get(family, domain, level, seed)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        family, domain.id, level, CAPABILITIES[family].track)
    if spec.format is not None:
        assert bundle.format == spec.format
    elif level >= 2:
        assert bundle.format == FORMATS[seed % 4]
    if spec.labels is not None and level >= 2:
        assert set(bundle.contract["labels"]) == spec.labels
    if spec.check_types is not None:
        checks = bundle.answer()["checks"]
        assert checks and {c["type"] for c in checks} <= spec.check_types, checks
    if spec.max_bundle_bytes is not None:
        assert tree_bytes(bundle.root) < spec.max_bundle_bytes
    if spec.large is not None and level == 5:
        assert_large(spec.large, bundle.root, domain)
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed


LEVEL0_FAMILIES = [family for family, spec in FAMILIES.items() if spec.level0_step]


@pytest.mark.parametrize("family", LEVEL0_FAMILIES)
def test_level0_varies_its_single_step_across_seeds(bundles, family):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = bundles.get(family, DOMAINS[0], 0, seed)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(FAMILIES[family].level0_step(solution))
        instructions.add(bundle.instruction)
        # Level-0 instructions state no number at all (file names aside).
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


LONG_NAME_FAMILIES = [family for family, spec in FAMILIES.items() if spec.level0_domains]


@pytest.mark.parametrize("family", LONG_NAME_FAMILIES)
def test_level0_stays_short_and_digit_free_with_long_names(family):
    module = family_module(family)  # in-process: only the words are checked here
    for domain in FAMILIES[family].level0_domains(DOMAINS):
        params = generator_spec(CAPABILITIES[family], domain, 0).params
        for seed in range(4):
            task = module.build(seed, params)
            last = task["solution"].strip().splitlines()[-1]
            assert len(last) < 60, (domain.id, last)
            assert not re.search(r"(?<![\w.])\d", task["instruction"]), (domain.id, task["instruction"])


SAME_SEED_CASES = [(family, domain, level) for family, spec in FAMILIES.items() for domain, level in spec.same_seed]


@pytest.mark.parametrize("family, domain, level", SAME_SEED_CASES,
                         ids=[f"{f}-{d.id}-L{lv}" for f, d, lv in SAME_SEED_CASES])
def test_same_seed_gives_identical_bytes(sandbox, tmp_path, family, domain, level):
    capability = CAPABILITIES[family]
    first, second, other = (build_bundle(sandbox, capability, tmp_path / name, domain, level, seed).root
                            for name, seed in (("a", 7), ("b", 7), ("c", 8)))
    assert tree_digest(first) == tree_digest(second)
    assert tree_digest(first) != tree_digest(other)
    if FAMILIES[family].same_seed_database:  # the database bytes are a function of the seed
        db = "environment/%s.db" % domain.record_file
        assert tree_digest(first)[db] != tree_digest(other)[db]
        assert (first / db).read_bytes().startswith(b"SQLite format 3\x00")


LARGE_RUNS = [(family, domain, seed) for family, spec in FAMILIES.items() if spec.large
              for domain, seed in spec.large.runs]


@pytest.mark.parametrize("family, domain, seed", LARGE_RUNS, ids=[f"{f}-{d.id}-s{s}" for f, d, s in LARGE_RUNS])
def test_level5_is_large_but_small_and_fast(tmp_path, family, domain, seed):
    # CPU time, not wall time: the machine is shared.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run_generator(family, domain, 5, seed, tmp_path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 1.0
    assert_large(FAMILIES[family].large, out, domain)


READING_CASES = [(family, reading) for family, spec in FAMILIES.items() for reading in spec.readings]


@pytest.mark.parametrize("family, reading", READING_CASES,
                         ids=[f"{f}-L{r.level}-s{r.seed}-{r.name}" for f, r in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, bundles, tmp_path, family, reading):
    built = bundles.get(family, reading.domain, reading.level, reading.seed)
    solved, verdict = solve_read_the_other_way(sandbox, built, reading.edits, tmp_path)
    if FAMILIES[family].solve_exits_0:  # the rule read the other way still yields a deliverable
        assert solved.exit_code == 0, solved.output
    assert (verdict.status, verdict.reward) == ("scored", 0.0), (reading.name, verdict.error)
