"""The `multi_module_refactor` family: every level builds and passes
agent-free validation; each contract rule read the other way fails the real
verifier; the end-state check reads the program, never runs it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from family_tasks import build_bundle, solve_read_the_other_way

from clawloop_assets.agent_free_validation import validate_without_agent
from clawloop_assets.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle
from resources.sandbox import BubblewrapSandbox

CAPABILITY = next(c for c in load_capability_catalog() if c.id == "multi_module_refactor")
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, domain, level: int, seed: int) -> TaskBundle:
    return build_bundle(sandbox, CAPABILITY, root, domain, level, seed)


CASES = [(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, seed)
         for level in range(6) for k in range(3) for seed in ((k, k + 3) if level else (k,))]


@pytest.mark.parametrize("domain, level, seed", CASES, ids=[f"{d.id}-L{lv}-s{s}" for d, lv, s in CASES])
def test_level_builds_and_passes_agent_free_validation(sandbox, tmp_path, domain, level, seed):
    bundle = build(sandbox, tmp_path, domain, level, seed)
    assert (bundle.difficulty, bundle.track, bundle.format) == (level, "terminal", "python")
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason


def test_level0_varies_its_single_step(sandbox, tmp_path):
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = build(sandbox, tmp_path / str(seed), DOMAINS[0], 0, seed)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution
        solutions.add(solution.split()[0] + (" into" if solution.endswith("/") else ""))
        instructions.add(bundle.instruction)
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes(sandbox, tmp_path):
    first = build(sandbox, tmp_path / "a", DOMAINS[3], 5, 7)
    second = build(sandbox, tmp_path / "b", DOMAINS[3], 5, 7)
    other = build(sandbox, tmp_path / "c", DOMAINS[3], 5, 8)
    assert digest(first.root) == digest(second.root) != digest(other.root)


# Each rule of the contract read the other way: the oracle with that one
# decision changed must fail. Every level-2+ task moves functions whose old
# module keeps other code, and every ticket level empties one module.
READINGS = {
    "a re-export left in the old module": (2, [
        ('    write(src_path, left.rstrip("\\n") + "\\n")',
         '    write(src_path, left.rstrip("\\n") + "\\nfrom %s import %s\\n" % (dst, name))'),
        ("\ntidy(", "\n(lambda package: None)(")]),
    "the moved function's dependencies not imported": (2, [("add_imports(dst_text, imports)", "add_imports(dst_text, [])")]),
    "the moved code reformatted into a stub": (2, [(
        '    block = "".join(lines[node.lineno - 1: node.end_lineno])',
        '    block = "".join(lines[node.lineno - 1: node.lineno]) + "    return None\\n"')]),
    "the public API in __init__.py not kept": (3, [(
        "    for path in python_files():\n        text = read(path)\n        tree = ast.parse(text)\n        lines",
        "    for path in python_files():\n        if path.endswith('__init__.py'):\n            continue\n"
        "        text = read(path)\n        tree = ast.parse(text)\n        lines")]),
    "an emptied module kept": (3, [("    move(ticket[\"function\"], src, target, True)", "    move(ticket[\"function\"], src, target, False)")]),
    "cancelled tickets applied": (4, [('    if ticket.get("status") == "cancelled":', '    if False:')]),
    "module paths in tickets taken literally": (4, [('        target = target[:-3].replace("/", ".")', '        target = target')]),
    "tickets applied in file order": (5, [('key=lambda row: int(row["step"])', 'key=lambda row: 0')]),
}
READING_CASES = [(reading, seed) for reading in sorted(READINGS) for seed in (0, 1)]


@pytest.mark.parametrize("reading, seed", READING_CASES, ids=[f"{r}-s{s}" for r, s in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, tmp_path, reading, seed):
    level, edits = READINGS[reading]
    domain = DOMAINS[(seed * 29 + level * 5) % len(DOMAINS)]
    built = build(sandbox, tmp_path / "build", domain, level, seed)
    verdict = solve_read_the_other_way(sandbox, built, edits, tmp_path)
    if verdict is not None:  # a reading that crashes the solve fails just as surely
        assert (verdict.status, verdict.reward) == ("scored", 0.0), reading


@pytest.mark.slow
@pytest.mark.parametrize("domain", DOMAINS, ids=[d.id for d in DOMAINS])
def test_every_domain_at_levels_0_and_5(sandbox, tmp_path, domain):
    for level in (0, 5):
        bundle = build(sandbox, tmp_path / str(level), domain, level, 1)
        result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
        assert result.passed, (level, result.reason)
