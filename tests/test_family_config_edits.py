"""The `config_edits` family: every level builds and passes agent-free
validation; level 0 is one short command that differs by seed; the same seed
gives the same bytes; and each contract rule read the other way (the oracle's
solution with that one decision changed) fails the real verifier."""

from __future__ import annotations

import hashlib
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

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "config_edits")
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


# Every level in three domains that shift with the level, seeds 0-3 in turn.
CASES = [(DOMAINS[(level * 11 + k * 21) % len(DOMAINS)], level, (level + k) % 4)
         for level in range(6) for k in range(3)]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    candidate = build(sandbox, tmp_path, domain, level, seed)
    assert candidate.error is None
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.difficulty, bundle.track, bundle.format) == (
        "config_edits", level, "terminal", "tree")
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free and result.wrong_deliverables_failed
    checks = bundle.answer()["checks"]
    assert {c["type"] for c in checks} <= {"config_values", "contains", "tree"}
    if level >= 5:
        keys = sum(len(c["expected"]) for c in checks if c["type"] == "config_values")
        assert keys >= 300, keys  # hundreds of keys, each one checked


def test_level0_varies_its_single_step_across_seeds(sandbox, tmp_path):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = load_task_bundle(build(sandbox, tmp_path, DOMAINS[0], 0, seed).bundle_dir)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(re.sub(r"\S+\.(env|ini|json)\b", "FILE", solution))
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

MODE_LINE = re.compile(r"FACTOR, MODE, VERSION = Decimal\('[\d.]+'\), (ROUND_\w+), \d+")
MODES = ("ROUND_HALF_UP", "ROUND_HALF_EVEN", "ROUND_CEILING", "ROUND_FLOOR")


def other_rounding(k):
    """The k-th of the three rounding modes the contract does not state (half to
    even among them: Python's round, Decimal's default)."""
    def edits(solve):
        line = MODE_LINE.search(solve)
        other = [m for m in MODES if m != line.group(1)][k]
        return (line.group(0), line.group(0).replace(line.group(1), other))
    return edits


COMMON = {
    "rounding read as another mode (first)": other_rounding(0),
    "rounding read as another mode (second)": other_rounding(1),
    "rounding read as another mode (third)": other_rounding(2),
    "limits left unrounded": ("return int(new.to_integral_value(rounding=MODE))", "return plain(new)"),
    "a migrated file migrated again": (
        "    if data.get('schema_version') == VERSION:", "    if False:",
        "    if any(k.strip().lower() == 'schema_version'",
        "    if False and any(k.strip().lower() == 'schema_version'"),
    "the deprecated key kept": ("    if name == DEPRECATED:\n        return None",
                                "    if name == DEPRECATED:\n        return key, value"),
}
LEVEL2 = {
    **COMMON,
    "a required key a file sets reset to the default": (
        "        return key, value  # a file that sets it keeps its own value",
        "        return key, typed(REQUIRED[name])"),
    ".env keys written in lower case": ("return (NEW.upper() if env else NEW), value", "return NEW, value",
                                        "('%s=%s' % (k.upper(), v))", "('%s=%s' % (k, v))"),
    "comments dropped": ("            out.append(line)  # a comment stays as it is", "            pass"),
    "log_level added where a file sets none": ("REQUIRED = {'retention_days': ",
                                               "REQUIRED = {'log_level': LEVEL, 'retention_days': "),
}
LEVEL3 = {
    "retired services edited too": (
        "for path in FILES:",
        "for path in FILES + sorted(os.path.join(r, n) for r, _, ns in os.walk('services') for n in ns "
        "if os.path.join(r, n) not in FILES):"),
    "the shared defaults edited too": ("for path in FILES:", "for path in FILES + ['shared/defaults.ini']:"),
    "a required key a file sets reset to the default": LEVEL2["a required key a file sets reset to the default"],
}
LEVEL4 = {
    "key names matched case-sensitively": ("    name = key.lower()",
                                           "    name = key.lower() if key.isupper() else key"),
    "milliseconds not converted": ("plain(Decimal(str(value)) / 1000)", "value"),
    "an empty required value kept": (
        "        return (key, value) if str(value).strip() else None  # empty counts as missing",
        "        return key, value"),
    "a listed file that does not exist created": (
        "        continue  # listed, but there is no such file: not created", "        open(path, 'w').close()"),
    "commented-out settings read as settings": (
        "        if text.startswith(('#', ';')):", "        if text.startswith(('#', ';')) and '=' not in text:",
        "        key, _, value = text.partition('=')", "        key, _, value = text.lstrip('#; ').partition('=')"),
    "backup copies edited too": ("for path in FILES:",
                                 "for path in FILES + [p + '.bak' for p in FILES if os.path.exists(p + '.bak')]:"),
}
LEVEL5 = {
    **{name: COMMON[name] for name in COMMON if name.startswith(("rounding", "a migrated"))},
    "log_level lowered too": ("        return key, value if ORDER.index(value) >= ORDER.index(LEVEL) else LEVEL",
                              "        return key, LEVEL"),
    "caps ignored": ("    if old > cap:\n        return value  # an approved exception stays as it is\n", "",
                     "min(old * FACTOR, cap)", "old * FACTOR"),
    "a limit above its cap lowered to the cap": ("        return value  # an approved exception stays as it is",
                                                 "        return int(cap)"),
    "a scaled value above its cap kept": ("min(old * FACTOR, cap)", "old * FACTOR"),
    "a name with max inside read as a limit": ("    if name.startswith('max_'):", "    if 'max_' in name:",
                                               "    cap = CAPS[name]", "    cap = CAPS.get(name, Decimal('Infinity'))"),
    "the first assignment in an .env file wins": (
        "    last = {k.strip().lower(): i for i, (k, _, v) in settings}",
        "    last = {k.strip().lower(): i for i, (k, _, v) in reversed(settings)}"),
    "key names matched case-sensitively": LEVEL4["key names matched case-sensitively"],
}
READINGS = {2: LEVEL2, 3: LEVEL3, 4: LEVEL4, 5: LEVEL5}
# The bundle each level's readings run on: (domain index, seed).
READING_BUNDLES = {2: (3, 1), 3: (17, 2), 4: (29, 3), 5: (44, 0)}
READING_CASES = [(level, reading) for level, readings in sorted(READINGS.items()) for reading in sorted(readings)]


def apply_reading(solve: str, edits) -> str:
    edits = edits(solve) if callable(edits) else edits
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, correct
        solve = solve.replace(correct, other)
    return solve


@pytest.fixture(scope="module")
def reading_bundles(sandbox, tmp_path_factory):
    root = tmp_path_factory.mktemp("readings")
    built = {}
    for level, (domain, seed) in READING_BUNDLES.items():
        candidate = build(sandbox, root, DOMAINS[domain], level, seed)
        assert candidate.error is None
        built[level] = load_task_bundle(candidate.bundle_dir)
    return built


def copy_bundle(bundle: TaskBundle, tmp_path: Path) -> TaskBundle:
    return load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))


@pytest.mark.parametrize("level, reading", READING_CASES, ids=[f"L{lv}-{r}" for lv, r in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, reading_bundles, tmp_path, level, reading):
    bundle = copy_bundle(reading_bundles[level], tmp_path)
    bundle.solution_path.write_text(apply_reading(bundle.solution_path.read_text(), READINGS[level][reading]))
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    solved = bundle_run(sandbox, bundle, workspace)
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading


def bundle_run(sandbox, bundle: TaskBundle, workspace: Path):
    return sandbox.run(["bash", "/solution/solve.sh"],
                       [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")],
                       cwd="/workspace")
