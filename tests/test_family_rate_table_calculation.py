"""The rate_table_calculation family: every level builds through the sandbox
into bundles that pass agent-free validation, level 0 varies its single step,
the generator is deterministic, and every rule of the contract read the other
way (the oracle with that one decision changed) fails the real verifier."""

from __future__ import annotations

import hashlib
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

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "rate_table_calculation")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"
FORMATS = ("json", "csv", "files", "report")


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, domain, level: int, seed: int, tasks: str = "tasks"):
    spec = generator_spec(CAPABILITY, domain, level)
    gen = write_generator(spec, root / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, root / tasks)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


# Levels 0 and 1 in three domains; levels 2 to 5 with seeds 0-3, which rotate
# through the four deliverable formats, each seed in another domain.
CASES = [(level, DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], k) for level in (0, 1) for k in range(3)]
CASES += [(level, DOMAINS[(level * 11 + seed * 17 + 5) % len(DOMAINS)], seed) for level in (2, 3, 4, 5)
          for seed in range(4)]


@pytest.mark.parametrize("level, domain, seed", CASES, ids=[f"L{lv}-{d.id}-s{s}" for lv, d, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, level, domain, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        CAPABILITY.id, domain.id, level, "analysis")
    if level >= 2:
        assert bundle.format == FORMATS[seed % 4]
    assert sum(p.stat().st_size for p in candidate.bundle_dir.rglob("*") if p.is_file()) < 1_000_000
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


def test_level5_is_large_and_fast(tmp_path):
    """Hundreds of usage lines, well under a megabyte, built in well under a second."""
    import json
    import subprocess
    import sys
    import time

    spec = generator_spec(CAPABILITY, DOMAINS[2], 5)  # the widest value range of the catalog
    gen = write_generator(spec, tmp_path / "gen")
    started = time.monotonic()
    subprocess.run([sys.executable, "-I", str(gen / spec.script_name), "--params", str(gen / "params.json"),
                    "--seed", "1", "--out", str(tmp_path / "out")], check=True)
    assert time.monotonic() - started < 1.0
    details = [p for p in (tmp_path / "out" / "environment").rglob("*") if p.parent.name != "environment"]
    lines = 0
    for path in details:
        text = path.read_text()
        lines += len(json.loads(text)["lines"]) if path.suffix == ".json" else len(text.splitlines()) - 1
    assert lines >= 200
    assert sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file()) < 1_000_000


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, domain, 5, 7, tasks="a")
    second = build(sandbox, tmp_path, domain, 5, 7, tasks="b")
    other = build(sandbox, tmp_path, domain, 5, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


# ---- every contract rule read the other way

# The four readings each task draws: the oracle holds one value, the other
# reading is the other value (a toggle flips whichever of the two it finds).
TOGGLES = {
    "a quantity on a band limit in the other band": ("INCLUSIVE_UPPER = True", "INCLUSIVE_UPPER = False"),
    "the other pricing (whole quantity or marginal)": ("PRICING = 'whole'", "PRICING = 'marginal'"),
    "the minimum on the other side of the surcharge": ("MIN_BEFORE_SURCHARGE = True", "MIN_BEFORE_SURCHARGE = False"),
    "rounding lines instead of totals or back": ("ROUND_LINES = True", "ROUND_LINES = False"),
}
HALF_EVEN = {"halves rounded to even": ("rounding=ROUND_HALF_UP", "rounding=ROUND_HALF_EVEN")}
# Level 2: a category without rates is left out.
CATEGORY_READINGS = {
    "a category without rates gets a zero row": (
        "            continue  # no rate: not charged\n",
        "            charges.setdefault(group, []).append(Decimal(0))\n            continue\n"),
}
# Levels 3-5: an entity without rates is listed with an empty total.
ENTITY_READINGS = {
    "an entity without rates left out": (
        "        result.append({ID: ident, GROUP: group, 'lines': len(usable), 'total_charge': None})\n", ""),
    "an entity without rates totals zero": ("'lines': len(usable), 'total_charge': None}",
                                            "'lines': len(usable), 'total_charge': Decimal(0)}"),
}
# Levels 4-5: the dirty-data rules.
DIRTY_READINGS = {
    "files the index does not list are charged": (
        "entries = [(row[ID].strip(), row['file'].strip()) for row in csv.DictReader(f)]",
        "entries = [(os.path.splitext(n)[0], os.path.join(DETAIL_DIR, n)) for n in sorted(os.listdir(DETAIL_DIR))]"),
    "a line without a quantity is charged as zero": ("continue  # no quantity: skipped", "q = band_q = Decimal(0)"),
    "void lines are charged": ("== 'void':", "== 'never':"),
    "hundredths taken as whole units": ("q = band_q = Decimal(str(hundredths).strip()) / HUNDREDTHS",
                                        "q = band_q = Decimal(str(hundredths).strip())"),
    "hundredths banded before conversion": ("q = band_q = Decimal(str(hundredths).strip()) / HUNDREDTHS",
                                            "band_q = Decimal(str(hundredths).strip())\n"
                                            "            q = band_q / HUNDREDTHS"),
}
# Level 5: dated rate versions and corrected lines.
DATED_READINGS = {
    "a line on an effective date keeps the old version": ("if e <= date", "if e < date"),
    "a corrected line is charged twice": ("latest[str(item['line']).strip()] = item", "latest[len(latest)] = item"),
    "a corrected line keeps its first row": ("latest[str(item['line']).strip()] = item",
                                             "latest.setdefault(str(item['line']).strip(), item)"),
}

# One bundle per level with contract readings to test; together they draw
# both values of every toggle (checked below).
READING_BUNDLES = {
    "L2": (2, "apiary_hive_inventory", 1),
    "L4": (4, "tide_gauge_readings", 0),
    "L5": (5, "sawmill_log_scaling", 0),
}
READINGS_BY_BUNDLE = {
    "L2": {**TOGGLES, **HALF_EVEN, **CATEGORY_READINGS},
    "L4": {**TOGGLES, **ENTITY_READINGS, **DIRTY_READINGS},
    "L5": {**TOGGLES, **HALF_EVEN, **ENTITY_READINGS, **DIRTY_READINGS, **DATED_READINGS},
}
READING_CASES = [(name, reading, edit) for name, readings in READINGS_BY_BUNDLE.items()
                 for reading, edit in sorted(readings.items())]


@pytest.fixture(scope="module")
def reading_bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("reading-bundles")
    domains = {d.id: d for d in DOMAINS}
    built = {}
    for name, (level, domain, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root / name, domains[domain], level, seed)
        assert candidate.error is None
        built[name] = load_task_bundle(candidate.bundle_dir)
    return built


def read_other_way(solve: str, reading: str, edit: tuple[str, str]) -> str:
    correct, other = edit
    if reading in TOGGLES and solve.count(correct) == 0:
        correct, other = other, correct  # this task drew the other value
    assert solve.count(correct) == 1, (reading, correct)
    return solve.replace(correct, other)


def test_reading_bundles_draw_both_values_of_every_toggle(reading_bundles):
    solves = [bundle.solution_path.read_text() for bundle in reading_bundles.values()]
    for reading, values in TOGGLES.items():
        for value in values:
            assert any(value in solve for solve in solves), (reading, value)


@pytest.mark.parametrize("name, reading, edit", READING_CASES, ids=[f"{n}-{r}" for n, r, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, reading_bundles, tmp_path, name, reading, edit):
    bundle = load_task_bundle(Path(shutil.copytree(reading_bundles[name].root, tmp_path / "bundle")))
    bundle.solution_path.write_text(read_other_way(bundle.solution_path.read_text(), reading, edit))
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    workspace.chmod(0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
