"""The multi_document_merge family: every level builds through the sandbox and
passes agent-free validation, level 0 is one short varied step, builds are
deterministic, and every contract rule read the other way fails the real
verifier (the generator plants data where the two readings differ)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis import build_candidate, generator_spec, write_generator
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "multi_document_merge")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


@pytest.fixture(scope="module")
def built(sandbox, tmp_path_factory):
    """Builds each (level, seed, domain) once for the whole module."""
    root = tmp_path_factory.mktemp("merge")
    cache: dict[tuple, TaskBundle] = {}

    def get(level: int, seed: int, domain) -> TaskBundle:
        key = (level, seed, domain.id)
        if key not in cache:
            cache[key] = load_task_bundle(build(sandbox, root / f"L{level}-s{seed}-{domain.id}", domain, level, seed))
        return cache[key]

    return get


def build(sandbox, root: Path, domain, level: int, seed: int, tasks: str = "tasks") -> Path:
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, root / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, gen, spec, seed, ROUND, root / tasks)
    assert candidate.error is None, candidate.error
    return candidate.bundle_dir


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


# Three domains per level (shifting with the level); seeds 0-3 at levels 2-5
# cover the four deliverable formats (json, csv, files, report).
def _domain(level: int, seed: int):
    return DOMAINS[0] if level == 0 and seed in (0, 3) else DOMAINS[(level * 9 + seed * 13 + 1) % len(DOMAINS)]


CASES = [(level, seed, _domain(level, seed)) for level in range(6) for seed in (range(4) if level != 1 else range(3))]


@pytest.mark.parametrize("level, seed, domain", CASES, ids=[f"L{lv}-s{s}-{d.id}" for lv, s, d in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, built, tmp_path, level, seed, domain):
    bundle = built(level, seed, domain)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        CAPABILITY.id, domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == ("json", "csv", "files", "report")[seed % 4]
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed


def test_level0_varies_its_single_step_across_seeds(built):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = built(0, seed, DOMAINS[0])
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(re.sub(r"\S+\.(csv|txt)\b", "FILE", solution))
        instructions.add(bundle.instruction)
        # Level-0 instructions state no number at all (file names aside).
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, domain, 4, 7, tasks="a")
    second = build(sandbox, tmp_path, domain, 4, 7, tasks="b")
    other = build(sandbox, tmp_path, domain, 4, 8, tasks="c")
    assert tree_digest(first) == tree_digest(second)
    assert tree_digest(first) != tree_digest(other)


def test_level5_is_large_and_stays_small(built):
    bundle = built(5, 1, _domain(5, 1))
    records = json.loads(bundle.answer_path.read_text())["key"]["records"]
    size = sum(p.stat().st_size for p in bundle.root.rglob("*") if p.is_file())
    assert len(records) >= 150 and size < 1 << 20, (len(records), size)


# Each contract rule read the other way: the oracle's solve.sh with that one
# decision changed must score 0.0 on the real verifier.
SORT = "key=lambda d: (d['revision'],"
COMMON_READINGS = {
    "the date decides, not the revision": (SORT, "key=lambda d: (d['date'],"),
    "a revision tie goes to the other source": ("-RANK[d['source']]", "RANK[d['source']]"),
    "the newest document replaces the whole record": ("row = merged.setdefault(key, {})", "row = merged[key] = {}"),
    "an empty value clears the field": ("continue  # an empty value gives no value",
                                        "row.pop(field, None)\n                continue"),
    "ids compared with their letter case": ("raw.strip().upper()", "raw.strip()"),
    "halves rounded to even": (", rounding=ROUND_HALF_UP)", ")"),
    "retired records kept": ("if row.get(STATUS) == 'retired':", "if False:"),
    "retired in any document is final": ("row[field] = value",
                                         "row[field] = 'retired' if row.get(field) == 'retired' else value"),
}
LEVEL2_READINGS = dict(COMMON_READINGS, **{
    "ids outside the register kept": ("if key not in listed:", "if False:"),
})
LEVEL3_READINGS = {
    "unlisted files merged": ("paths = sorted({r['file'].strip() for r in index})",
                              "paths = sorted('documents/' + name for name in os.listdir('documents'))"),
}
LEVEL4_READINGS = {
    "drafts merged as the newest": ("continue  # a draft is not merged", "head['revision'] = '1000000'"),
    "the source scale ignored": (" * SCALE[doc['source']]", ""),
    "the other source's field names ignored": ("ALIASES.get(doc['source'], {}).get(k.strip(), k.strip())",
                                               "k.strip()"),
    "ids left without zero padding": ("'%s-%04d' % (prefix, int(number))", "'%s-%s' % (prefix, number)"),
    "records without a value left out": ("if row.get(STATUS) == 'retired':",
                                         "if row.get(STATUS) == 'retired' or VALUE not in row:"),
}
LEVEL5_READINGS = dict(COMMON_READINGS, **LEVEL3_READINGS, **LEVEL4_READINGS, **{
    "a same-source tie goes to the earlier date": (", d['date']))", ", [-ord(c) for c in d['date']]))"),
    "a decimal comma read as a thousands separator": ("value.replace(',', '.')", "value.replace(',', '')"),
    "group values kept in their letter case": ("value = value.lower()", "value = value"),
    "last_revision the lowest, not the highest": ("row['last_revision'] = doc['revision']",
                                                  "row.setdefault('last_revision', doc['revision'])"),
})
READINGS_BY_LEVEL = {
    2: LEVEL2_READINGS,
    3: dict(COMMON_READINGS, **LEVEL3_READINGS),
    4: dict(COMMON_READINGS, **LEVEL3_READINGS, **LEVEL4_READINGS),
    5: LEVEL5_READINGS,
}
READING_CASES = [(level, level - 2, name, edits)  # seeds 0-3 over levels 2-5: each format once
                 for level, readings in READINGS_BY_LEVEL.items() for name, edits in sorted(readings.items())]


@pytest.mark.parametrize("level, seed, reading, edits", READING_CASES,
                         ids=[f"L{lv}-{name}" for lv, _, name, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, built, tmp_path, level, seed, reading, edits):
    bundle = built(level, seed, _domain(level, seed))
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solve.sh").write_text(solve)
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    workspace.chmod(0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(solution, "/solution")])
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
