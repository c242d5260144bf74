"""The levels below every family's level 0: at -2 one basic shell command
on a file of the family's own workspace, shown; at -1 the family's level-0
task with its command shown. Every capability, both routes, builds them in
the real sandbox into bundles that pass agent-free validation; every
operation of a warm-up level is drawn for some seed; the command the
instruction shows passes the real verifier and a near miss fails it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.synthesis import catalogs
from clawloop_assets.synthesis.candidates import (
    MAX_TURNS,
    build_candidate,
    domain_generator_spec,
    generator_spec,
    write_generator,
)
from clawloop_assets.synthesis.executable_domains import load_domains
from clawloop_assets.synthesis.generators.generator_common import (
    SHOWN_COMMAND_LEVEL,
    WARMUP_LEVELS,
    WARMUP_OPERATIONS,
    shown_command_task,
)
from clawloop_assets.synthesis.plan import LEVELS, MIN_LEVEL
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox, Mount

CAPABILITIES = catalogs.round_capabilities(catalogs.ROUTES)
DOMAINS = catalogs.load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, root: Path, capability, level: int, seed: int, operation_weights=None) -> TaskBundle:
    index = [c.id for c in CAPABILITIES].index(capability.id)
    if catalogs.route_of(capability.id) == "domain":
        domains = load_domains()
        spec = domain_generator_spec(capability, domains[seed % len(domains)], level, (), operation_weights)
    else:
        spec = generator_spec(capability, DOMAINS[(3 * index + seed) % len(DOMAINS)], level, (), operation_weights)
    generator = write_generator(spec, root / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, generator, spec, seed, "round-0001", root / "tasks")
    assert candidate.error is None, candidate.error
    return load_task_bundle(candidate.bundle_dir)


def operation_of(bundle: TaskBundle) -> str:
    return json.loads((bundle.root / "meta.json").read_text())["operation"]


def test_the_warmup_levels_are_the_bottom_of_the_one_scale():
    assert LEVELS[: len(WARMUP_LEVELS) + 1] == WARMUP_LEVELS + (SHOWN_COMMAND_LEVEL,) == (MIN_LEVEL, -1)
    assert set(WARMUP_OPERATIONS) == set(WARMUP_LEVELS)
    assert set(MAX_TURNS) == set(LEVELS)


def shown_command(bundle: TaskBundle) -> str:
    """The command the instruction shows: everything after its last "Run: "."""
    return bundle.instruction.strip().rsplit("Run: ", 1)[1]


@pytest.mark.parametrize("capability", CAPABILITIES, ids=[c.id for c in CAPABILITIES])
def test_every_capability_builds_valid_tasks_below_level_0(sandbox, tmp_path, capability):
    for level in WARMUP_LEVELS + (SHOWN_COMMAND_LEVEL,):
        for seed in range(3):
            bundle = build(sandbox, tmp_path / f"L{level}-s{seed}", capability, level, seed)
            assert bundle.difficulty == level and bundle.capability == capability.id
            solution = [line for line in bundle.solution_path.read_text().splitlines()[2:] if line.strip()]
            # A short command, shown as the solution runs it.
            assert shown_command(bundle) == "; ".join(solution) and len(shown_command(bundle)) < 160
            if level in WARMUP_LEVELS:
                assert operation_of(bundle) in WARMUP_OPERATIONS[level]
                assert "\n" not in bundle.instruction.strip(), bundle.instruction  # one sentence
            result = validate_without_agent(sandbox, bundle, tmp_path / f"scratch-L{level}-s{seed}")
            assert result.passed, (level, seed, result.reason)


def test_level_minus_1_refuses_a_solution_that_is_no_short_command():
    task = {"instruction": "Do it.\n", "solution": "#!/bin/bash\nset -euo pipefail\npython3 - <<'PY'\nprint(1)\nPY\n"}
    with pytest.raises(ValueError, match="no short command"):
        shown_command_task(task)
    one = shown_command_task(dict(task, solution="#!/bin/bash\nset -euo pipefail\nsort -u a.txt > b.txt\n"))
    assert one["instruction"] == "Do it. Run: sort -u a.txt > b.txt\n"
    two = shown_command_task({"instruction": "Given x.\n\nDo it.\n",
                              "solution": "#!/bin/bash\nset -euo pipefail\ncmd one\ncmd two\n"})
    assert two["instruction"] == "Given x.\n\nDo it.\n\nRun: cmd one; cmd two\n"


def seed_for(sandbox, root: Path, capability, level: int, operation: str) -> int:
    """The first seed whose task is `operation` (the seeded source draws it)."""
    for seed in range(40):
        if operation_of(build(sandbox, root / f"probe-{level}-{seed}", capability, level, seed)) == operation:
            return seed
    raise AssertionError(f"no seed below 40 draws {operation} at level {level}")


# A command the instruction's wording invites but that misses, per operation.
NEAR_MISSES = {
    "append_word": "echo something >> {file}",
    "copy_file": "mv {file} {target}",
    "count_characters": "wc -l < {file} > chars.txt",
}


def run_command(sandbox, bundle: TaskBundle, command: str, directory: Path):
    workspace = Path(shutil.copytree(bundle.environment_dir, directory))
    done = sandbox.run(["bash", "-c", command], [Mount(workspace, "/workspace", writable=True)])
    assert done.exit_code == 0, done
    return run_verifier(sandbox, bundle, workspace)


@pytest.mark.parametrize("level", WARMUP_LEVELS)
def test_the_asked_command_passes_and_a_near_miss_fails(sandbox, tmp_path, level):
    capability = next(c for c in CAPABILITIES if c.id == "log_analysis")
    for operation in WARMUP_OPERATIONS[level]:
        seed = seed_for(sandbox, tmp_path, capability, level, operation)
        bundle = build(sandbox, tmp_path / f"s{seed}", capability, level, seed)
        asked = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert shown_command(bundle) == asked
        passed = run_command(sandbox, bundle, asked, tmp_path / f"asked-{seed}")
        assert (passed.status, passed.reward) == ("scored", 1.0), passed
        file = json.loads((bundle.root / "meta.json").read_text())["file"]
        target = bundle.contract["deliverable"]["path"]
        miss = NEAR_MISSES[operation].format(file=file, target=target)
        failed = run_command(sandbox, bundle, miss, tmp_path / f"miss-{seed}")
        assert (failed.status, failed.reward) == ("scored", 0.0), (operation, miss, failed)


def test_a_workspace_of_databases_only_gets_a_table_export(sandbox, tmp_path):
    capability = next(c for c in CAPABILITIES if c.id == "sqlite_change_set")
    bundle = build(sandbox, tmp_path, capability, MIN_LEVEL, 0)
    files = sorted(p.name for p in bundle.environment_dir.iterdir())
    exports = [name for name in files if name.endswith(".csv")]
    assert "data.db" in files and len(exports) == 1
    assert exports[0] in bundle.instruction
    rows = (bundle.environment_dir / exports[0]).read_text().splitlines()
    assert len(rows) >= 3 and "," in rows[0]


def test_an_unknown_level_names_the_whole_scale(sandbox, tmp_path):
    capability = next(c for c in CAPABILITIES if c.id == "grouped_statistics")
    spec = generator_spec(capability, DOMAINS[0], 9)
    generator = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, generator, spec, 0, "round-0001", tmp_path / "tasks")
    assert candidate.error and "difficulty must be -2, -1, 0, 1, 2, 3, 4 or 5, got 9" in candidate.error


@pytest.mark.parametrize("capability_id", ["log_analysis", "domain_workflow"])
def test_the_plans_operation_shares_steer_the_draw(sandbox, tmp_path, capability_id):
    """A plan's operation_weights reach the generator on both routes: an
    operation at share 0 is never drawn, and one at share 1 always is."""
    capability = next(c for c in CAPABILITIES if c.id == capability_id)
    only_copying = {"append_word": 0.0, "count_characters": 0.0, "copy_file": 1.0}
    drawn = {operation_of(build(sandbox, tmp_path / f"copy-{seed}", capability, MIN_LEVEL, seed, only_copying))
             for seed in range(4)}
    assert drawn == {"copy_file"}
    no_copying = {"append_word": 0.5, "count_characters": 0.5, "copy_file": 0.0}
    drawn = [operation_of(build(sandbox, tmp_path / f"other-{seed}", capability, MIN_LEVEL, seed, no_copying))
             for seed in range(6)]
    assert "copy_file" not in drawn and len(set(drawn)) == 2


def test_a_probe_of_one_candidate_asks_another_level_0_variant_each_round(clawloop_home):
    """A plan entry's seeds start at a variant that moves with the round,
    round 1's at variant 0: a one-candidate entry (the probe of the level
    above) asks each of a family's variants in turn, not the first always."""
    from clawloop_assets.partitions import round_key
    from clawloop_assets.synthesis.candidates import candidate_assignments
    from clawloop_assets.synthesis.generators.generator_common import LEVEL0_VARIANTS, level0_variant
    from resources.warehouse import DuckDBWarehouse, table_frame

    warehouse = DuckDBWarehouse()
    probed, rung = [], {}
    for number in range(1, LEVEL0_VARIANTS + 2):
        key = round_key(number)
        rows = [{"round": key, "capability_id": "file_reorganization", "difficulty": level, "weight": 1.0,
                 "candidates": count, "source_round": None, "reason": "", "knobs": []}
                for level, count in ((SHOWN_COMMAND_LEVEL, 5), (0, 1))]
        warehouse.replace("synthesis_plans", table_frame("synthesis_plans", rows), {"round": key})
        assignments = candidate_assignments(warehouse, key)
        probed += [level0_variant(seed) for spec, seed in assignments if spec.difficulty == 0]
        rung[number] = sorted(seed for spec, seed in assignments if spec.difficulty == SHOWN_COMMAND_LEVEL)
    assert probed == [0, 1, 2, 3, 0]
    assert rung[1] == list(range(1000, 1005)) and rung[2] == list(range(2001, 2006))


def test_a_level_0_tasks_variant_is_its_seeds(sandbox, tmp_path):
    """What the rotation above relies on: the seed alone picks the variant
    (file reorganization's variant 1 deletes the .tmp files, variant 0
    moves one extension's files), whatever the domain."""
    capability = next(c for c in CAPABILITIES if c.id == "file_reorganization")

    def command(seed):
        bundle = build(sandbox, tmp_path / str(seed), capability, SHOWN_COMMAND_LEVEL, seed)
        return bundle.instruction.strip().rsplit("Run: ", 1)[1]

    assert {command(seed) for seed in (1001, 1005, 2001)} == {"rm -f *.tmp"}
    moved = command(1000)
    assert moved.startswith("mkdir -p ") and " && mv *." in moved
