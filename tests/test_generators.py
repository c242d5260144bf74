"""Generator families build through the sandbox into bundles that pass
agent-free validation; generator failures are recorded, not raised."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from family_readings import FAMILIES
from family_tasks import domain_dependent_checks

from clawloop_assets.synthesis.candidates import (
    GeneratorSpec,
    build_candidate,
    generator_spec,
    write_generator,
)
from clawloop_assets.synthesis.catalogs import (
    CatalogError,
    load_capability_catalog,
    load_domain_catalog,
)
from clawloop_assets.synthesis.generators.generator_common import KNOBS, knob_text
from clawloop_assets.synthesis.plan import LEVELS
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox, SandboxError, SandboxLimits

CAPABILITIES = {c.id: c for c in load_capability_catalog()}
DOMAINS = load_domain_catalog()
ROUND = "round-0001"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def build(sandbox, tmp_path, capability, domain, level, seed, tasks="tasks", knobs=()):
    spec = generator_spec(CAPABILITIES[capability], domain, level, knobs)
    gen = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, gen, spec, seed, ROUND, tmp_path / tasks)


def test_catalogs_cover_the_brief():
    analysis = {"ledger_reconciliation", "cross_source_audit", "multi_document_merge", "grouped_statistics",
                "entity_resolution", "schedule_checking", "log_analysis", "rate_table_calculation"}
    terminal = {"file_reorganization", "config_edits", "sqlite_change_set", "multi_module_refactor"}
    assert {c for c in CAPABILITIES if CAPABILITIES[c].track == "analysis"} == analysis
    assert {c for c in CAPABILITIES if CAPABILITIES[c].track == "terminal"} == terminal
    assert all(CAPABILITIES[c].skills and CAPABILITIES[c].description for c in CAPABILITIES)
    assert len(DOMAINS) >= 60
    assert {"apiary_hive_inventory", "trail_maintenance_logs", "amateur_radio_contacts"} <= {d.id for d in DOMAINS}


def test_catalog_error_names_file_and_field(tmp_path):
    path = tmp_path / "capabilities.json"
    path.write_text(json.dumps({"capabilities": [{"id": "grouped_statistics", "track": "vibes", "description": "x", "skills": ["a"]}]}))
    with pytest.raises(CatalogError, match=r"capabilities.json: capabilities\[0\] \(grouped_statistics\): field 'track'"):
        load_capability_catalog(path)
    domain = json.loads((Path(__file__).parents[1] / "clawloop_assets/synthesis/catalog/domains.json").read_text())["domains"][0]
    del domain["group_field"]
    path = tmp_path / "domains.json"
    path.write_text(json.dumps({"domains": [domain]}))
    with pytest.raises(CatalogError, match=r"domains.json: domains\[0\] \(apiary_hive_inventory\): missing field 'group_field'"):
        load_domain_catalog(path)


# test_family_contract.py validates each family at the levels of its cases;
# here, every family x level it leaves out, in two domains with two seeds
# (domains and seeds shift with family and level; the seed picks the
# deliverable format). The slow test below visits every domain.
CASES = [
    (capability, DOMAINS[(offset * 5 + level * 2 + k * 31) % len(DOMAINS)], level, (offset + level + k) % 4)
    for offset, capability in enumerate(sorted(CAPABILITIES))
    for k in range(2)
    for level in LEVELS
    if level not in {case_level for _, case_level, _ in FAMILIES[capability].cases}
]


@pytest.mark.parametrize("capability, domain, level, seed", CASES,
                         ids=[f"{c}-{d.id}-L{lv}-s{s}" for c, d, lv, s in CASES])
def test_family_builds_and_passes_agent_free_validation(sandbox, tmp_path, capability, domain, level, seed):
    candidate = build(sandbox, tmp_path, capability, domain, level, seed)
    assert candidate.error is None
    assert candidate.task_id == f"{ROUND}.{capability}.{domain.id}.L{level}.s{seed}"
    bundle = load_task_bundle(candidate.bundle_dir)
    assert (bundle.capability, bundle.domain, bundle.difficulty, bundle.track) == (
        capability, domain.id, level, CAPABILITIES[capability].track)
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.oracle_passed and result.untouched_failed and result.leak_free


KNOB_CASES = [(capability, level) for capability in sorted(CAPABILITIES) for level in (LEVELS[0], 0, 3)]


@pytest.mark.parametrize("capability, level", KNOB_CASES, ids=[f"{c}-L{lv}" for c, lv in KNOB_CASES])
def test_generator_knobs_change_the_instruction_and_keep_the_task_valid(sandbox, tmp_path, capability, level):
    domain = DOMAINS[(level * 7 + len(capability)) % len(DOMAINS)]
    plain = load_task_bundle(build(sandbox, tmp_path, capability, domain, level, 1).bundle_dir)
    candidate = build(sandbox, tmp_path, capability, domain, level, 1, tasks="knobbed", knobs=KNOBS)
    assert candidate.error is None, candidate.error
    bundle = load_task_bundle(candidate.bundle_dir)
    assert bundle.instruction.startswith(plain.instruction.strip())  # the task itself is unchanged
    added = bundle.instruction[len(plain.instruction.strip()):]
    deliverable = bundle.contract["deliverable"]
    first_path = (deliverable.get("paths") or [deliverable["path"]])[0]
    assert "Files in the workspace: " in added and "Tools you can use: " in added
    assert f"Before you finish, check that {first_path}" in added and f"Write {first_path}" in added
    workspace_files = sorted(p.relative_to(bundle.environment_dir).as_posix() for p in bundle.environment_dir.rglob("*")
                             if p.is_file() and p.name != "CONTRACT.md")
    listed = [name for name in workspace_files if name in added]
    assert listed
    assert json.loads((bundle.root / "meta.json").read_text())["knobs"] == sorted(KNOBS)
    assert tree_digest(bundle.environment_dir) == tree_digest(plain.environment_dir)
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason


def test_the_plan_and_the_generators_know_the_same_knobs():
    from clawloop_assets.synthesis.plan import KNOB_FOR_ROOT_CAUSE
    from resources.schemas import ROOT_CAUSES

    assert set(KNOB_FOR_ROOT_CAUSE.values()) == set(KNOBS)
    assert set(KNOB_FOR_ROOT_CAUSE) == set(ROOT_CAUSES) - {"environment_error"}  # nothing to change for that one
    with pytest.raises(ValueError, match="unknown generator knobs"):
        knob_text(["louder"], {}, {"deliverable": {"path": "a.txt", "schema": "x"}, "rules": []}, {})


@pytest.mark.slow
@pytest.mark.parametrize("domain", DOMAINS, ids=[d.id for d in DOMAINS])
def test_every_capability_instantiates_in_every_domain(sandbox, tmp_path, domain):
    # Each capability at one end of the scale, level 0 or 5, alternating over
    # domains (so each end meets every capability in about half of them); two
    # candidates at a time, since the sandbox runs are separate processes.
    offset = DOMAINS.index(domain)

    def check(item):
        index, capability = item
        level = (0, LEVELS[-1])[(offset + index) % 2]
        candidate = build(sandbox, tmp_path / f"{capability}-{level}", capability, domain, level, offset % 4)
        assert candidate.error is None, (capability, level, candidate.error)
        scratch = tmp_path / f"scratch-{capability}"
        scratch.mkdir()
        failure = domain_dependent_checks(sandbox, load_task_bundle(candidate.bundle_dir), scratch)
        assert failure is None, (capability, level, failure)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(check, enumerate(sorted(CAPABILITIES))))


@pytest.mark.parametrize("capability", sorted(CAPABILITIES))
def test_level0_varies_its_single_step_across_seeds(sandbox, tmp_path, capability):
    domain = DOMAINS[0]
    solutions, instructions = set(), set()
    for seed in range(4):
        bundle = load_task_bundle(build(sandbox, tmp_path, capability, domain, 0, seed).bundle_dir)
        solution = bundle.solution_path.read_text().strip().splitlines()[-1]
        assert len(solution) < 60, solution  # one short command
        solutions.add(re.sub(r"\S+\.(csv|txt)\b", "FILE", solution))
        instructions.add(bundle.instruction)
        # Level-0 instructions state no number at all (file names aside).
        assert not re.search(r"(?<![\w.])\d", bundle.instruction), bundle.instruction
    assert len(solutions) == 4 and len(instructions) == 4


@pytest.mark.parametrize("capability", sorted(CAPABILITIES))
def test_same_seed_gives_identical_bytes(sandbox, tmp_path, capability):
    domain = DOMAINS[5]
    first = build(sandbox, tmp_path, capability, domain, 2, 7, tasks="a")
    second = build(sandbox, tmp_path, capability, domain, 2, 7, tasks="b")
    other = build(sandbox, tmp_path, capability, domain, 2, 8, tasks="c")
    assert tree_digest(first.bundle_dir) == tree_digest(second.bundle_dir)
    assert tree_digest(first.bundle_dir) != tree_digest(other.bundle_dir)


GENERATORS = Path(__file__).parents[1] / "clawloop_assets/synthesis/generators"
SHARED = ("def write_task(", "def assemble(", "def new_rng(", "def record_ids(", "def csv_text(", "argparse")


@pytest.mark.parametrize("capability", sorted(CAPABILITIES))
def test_generator_directory_holds_the_shared_module_beside_the_family(tmp_path, capability):
    spec = generator_spec(CAPABILITIES[capability], DOMAINS[0], 1)
    gen = write_generator(spec, tmp_path / spec.generator_id)
    # The oracle scripts (oracles/common/ and the family's oracles/<family>/) come along, as they are.
    oracles = {p.relative_to(GENERATORS).as_posix(): p.read_bytes()
               for folder in ("common", capability) for p in sorted((GENERATORS / "oracles" / folder).glob("*.py"))}
    assert sorted(p.name for p in gen.iterdir()) == sorted(
        [f"{capability}.py", "generator_common.py", "oracles", "params.json", "__pycache__"])
    # The shared module's compiled bytecode, and nothing else, rides along.
    assert [p.name for p in (gen / "__pycache__").iterdir()] == [f"generator_common.{sys.implementation.cache_tag}.pyc"]
    assert (gen / "generator_common.py").read_bytes() == (GENERATORS / "generator_common.py").read_bytes()
    assert {p.relative_to(gen).as_posix(): p.read_bytes() for p in sorted(gen.glob("oracles/*/*"))} == oracles
    # The family imports the shared code instead of carrying a copy of it.
    family = (gen / f"{capability}.py").read_text()
    assert "from generator_common import" in family
    assert not [name for name in SHARED if name in family]


def test_family_runs_isolated_from_any_working_directory(tmp_path):
    # -I leaves the script's directory off sys.path; the family puts it back itself.
    spec = generator_spec(CAPABILITIES["ledger_reconciliation"], DOMAINS[2], 2)
    gen = write_generator(spec, tmp_path / "gen")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-I", str(gen / spec.script_name), "--params", str(gen / "params.json"),
                    "--seed", "3", "--out", str(tmp_path / "out")], cwd=elsewhere, check=True)
    assert {"instruction.md", "meta.json", "answer/answer.json", "solution/solve.sh", "environment/CONTRACT.md"} <= set(
        tree_digest(tmp_path / "out"))


@pytest.mark.parametrize("argv", [[], ["--seed", "x", "--params", "p", "--out", "o"], ["--seed", "3", "--out", "o"]])
def test_a_generator_refuses_a_bad_command_line_and_writes_nothing(tmp_path, argv):
    spec = generator_spec(CAPABILITIES["log_analysis"], DOMAINS[0], 0)
    gen = write_generator(spec, tmp_path / "gen")
    done = subprocess.run([sys.executable, "-I", str(gen / spec.script_name), *argv], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "usage: --" in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


def test_model_written_generator_gets_the_shared_module_too(sandbox, tmp_path):
    body = (
        "import os, sys\n"
        "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        "from generator_common import run\n"
        "import grouped_statistics_original as family\n"
        "run(family.build)\n"
    )
    spec, gen = broken_generator(tmp_path, body)
    assert (gen / "generator_common.py").is_file()
    (gen / "grouped_statistics_original.py").write_bytes((GENERATORS / "grouped_statistics.py").read_bytes())
    os.chmod(gen / "grouped_statistics_original.py", 0o644)
    built = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert built.error is None
    reference = build(sandbox, tmp_path, "grouped_statistics", DOMAINS[0], 0, 0, tasks="reference")
    assert tree_digest(built.bundle_dir) == tree_digest(reference.bundle_dir)


def test_verifier_stays_self_contained():
    # verify.py is copied alone into each bundle's tests/, so it imports only the stdlib.
    source = (GENERATORS / "verify.py").read_text()
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M))
    assert imported and imported <= set(sys.stdlib_module_names), imported


def broken_generator(tmp_path: Path, body: str) -> tuple[GeneratorSpec, Path]:
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAINS[0], 0)
    script = tmp_path / "grouped_statistics.py"
    script.write_text(body)
    return spec, write_generator(spec, tmp_path / "broken", script=script)


def test_generator_that_raises_is_a_recorded_failure(sandbox, tmp_path):
    good = build(sandbox, tmp_path, "grouped_statistics", DOMAINS[0], 0, 1)
    before = tree_digest(tmp_path / "tasks")
    spec, gen = broken_generator(tmp_path, "raise RuntimeError('no hives today')\n")
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert failed.bundle_dir is None
    assert "exited with code 1" in failed.error and "no hives today" in failed.error
    assert tree_digest(tmp_path / "tasks") == before  # the other candidate is untouched
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == [good.task_id]


def test_generator_that_never_returns_times_out(sandbox, tmp_path):
    spec, gen = broken_generator(tmp_path, "while True:\n    pass\n")
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks",
                             limits=SandboxLimits(wall_seconds=1.5, cpu_seconds=5))
    assert failed.bundle_dir is None and "did not finish within 2s" in failed.error
    assert list((tmp_path / "tasks").iterdir()) == []


def test_generator_writing_no_answer_is_a_malformed_bundle(sandbox, tmp_path):
    body = (
        "import json, os\n"
        "os.makedirs('/out/environment'); os.makedirs('/out/solution')\n"
        "open('/out/instruction.md', 'w').write('Do it.\\n')\n"
        "open('/out/environment/CONTRACT.md', 'w').write('# c\\n')\n"
        "open('/out/solution/solve.sh', 'w').write('true\\n')\n"
        "json.dump({'track': 'analysis', 'format': 'number', 'contract': {'rules': []}}, open('/out/meta.json', 'w'))\n"
    )
    spec, gen = broken_generator(tmp_path, body)
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert failed.bundle_dir is None
    assert failed.error.startswith("malformed bundle:") and "answer/answer.json: missing file" in failed.error


def test_generator_writing_its_own_verifier_is_refused(sandbox, tmp_path):
    body = "import os\nos.makedirs('/out/tests')\nopen('/out/tests/verify.py', 'w').write('reward = 1\\n')\n"
    spec, gen = broken_generator(tmp_path, body)
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert failed.bundle_dir is None and "wrote tests" in failed.error


def family_then(family: str, code: str) -> str:
    """The family script, running `code` after it has written its task (as a script only)."""
    source = (GENERATORS / f"{family}.py").read_text()
    footer = "build = family(__name__, LEVELS)\n"
    assert source.endswith(footer)
    return source + "if __name__ == \"__main__\":\n" + "".join(f"    {line}\n" for line in code.splitlines())


def test_generator_planting_a_symlink_is_refused(sandbox, tmp_path):
    good = generator_spec(CAPABILITIES["grouped_statistics"], DOMAINS[0], 0)
    body = family_then("grouped_statistics", "import os\nos.symlink('/etc/shadow', '/out/environment/shadow')")
    spec, gen = broken_generator(tmp_path, body)
    assert spec.generator_id == good.generator_id
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert failed.bundle_dir is None and "symlinks are not allowed" in failed.error


def test_sandbox_failure_propagates(sandbox, tmp_path):
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAINS[0], 0)
    with pytest.raises(SandboxError):
        build_candidate(sandbox, tmp_path / "no-such-generator", spec, 0, ROUND, tmp_path / "tasks")


def test_a_generator_that_is_not_deterministic_is_rejected(sandbox, tmp_path):
    # The real family, plus one file whose bytes change from run to run.
    body = family_then("grouped_statistics", "import os\nopen('/out/environment/noise.txt', 'w').write(os.urandom(8).hex())")
    spec, gen = broken_generator(tmp_path, body)
    failed = build_candidate(sandbox, gen, spec, 0, ROUND, tmp_path / "tasks")
    assert failed.bundle_dir is None
    assert failed.error == "generator is not deterministic: same seed, environment/noise.txt differs between two runs"
    assert list((tmp_path / "tasks").iterdir()) == []  # neither run left anything behind


def test_oracle_scripts_take_their_values_in_the_parameter_block_only():
    from clawloop_assets.synthesis.generators.generator_common import oracle_source, python_oracle

    oracles = sorted((GENERATORS / "oracles").glob("*/*.py"))
    assert oracles
    for path in oracles:
        compile(path.read_text(), str(path), "exec")  # a real script, runnable and lint-able as it is
    source = oracle_source("file_reorganization", "manifest", KEY="it's", GROUP="bench")
    assert "KEY = \"it's\"\nGROUP = 'bench'\n" in source
    assert python_oracle("file_reorganization", "manifest", KEY="a", GROUP="b").endswith("\nPY\n")
    with pytest.raises(ValueError, match="parameter"):
        oracle_source("file_reorganization", "manifest", KEY="a")
    with pytest.raises(ValueError, match="parameter"):
        oracle_source("file_reorganization", "manifest", KEY="a", GROUP="b", OTHER=1)


def test_family_skeleton_builds_the_declared_levels():
    from clawloop_assets.synthesis.generators.generator_common import family, numbered_levels, shaped_levels

    levels = numbered_levels(lambda rng, seed, params, level: ("numbered", level), range(3)) + shaped_levels(
        lambda rng, seed, params, dirty, large: ("shaped", dirty, large))
    build = family("not_run_as_a_script", levels)  # returns build, parses no command line
    params = {"capability": "grouped_statistics", "domain": {"id": "d"}}
    assert [build(0, dict(params, difficulty=level)) for level in range(6)] == [
        ("numbered", 0), ("numbered", 1), ("numbered", 2),
        ("shaped", False, False), ("shaped", True, False), ("shaped", True, True)]
    with pytest.raises(ValueError, match="levels 0 to 5"):
        family("not_run_as_a_script", levels[:5])
