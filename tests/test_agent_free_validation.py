"""The verifier and agent-free validation: records are found by key, wrong
deliverables fail, a broken verifier is an error (never a reward of 0), and
the oracle / untouched / leakage gates each catch what they are for."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox, Mount, SandboxLimits

CAPABILITIES = {c.id: c for c in load_capability_catalog()}
DOMAINS = {d.id: d for d in load_domain_catalog()}


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


@pytest.fixture(scope="module")
def bundles(sandbox, tmp_path_factory):
    """Level-2 bundles: grouped statistics as CSV (seed 0) and JSON (seed 1),
    a reconciliation, a reorganization."""
    root = tmp_path_factory.mktemp("bundles")
    built = {}
    for name, capability, domain, seed in [
        ("grouped_csv", "grouped_statistics", "tide_gauge_readings", 0),
        ("grouped_json", "grouped_statistics", "apiary_hive_inventory", 1),
        ("ledger_csv", "ledger_reconciliation", "museum_artifact_loans", 0),
        ("tree", "file_reorganization", "trail_maintenance_logs", 0),
    ]:
        spec = generator_spec(CAPABILITIES[capability], DOMAINS[domain], 2)
        gen = write_generator(spec, root / "generators" / spec.generator_id)
        candidate = build_candidate(sandbox, gen, spec, seed, "round-0001", root / "tasks")
        assert candidate.error is None
        built[name] = load_task_bundle(candidate.bundle_dir)
    return built


def copy_bundle(bundle: TaskBundle, tmp_path: Path) -> TaskBundle:
    return load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))


def workspace_from(bundle: TaskBundle, tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    os.chmod(workspace, 0o755)
    return workspace


def the_check(bundle: TaskBundle) -> dict:
    return json.loads(bundle.answer_path.read_text())["checks"][0]


def write_records(workspace: Path, check: dict, records: list[dict]) -> None:
    columns = list(check["columns"])
    path = workspace / check["path"]
    if check["type"] == "json_records":
        path.write_text(json.dumps(records))
        return
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for record in records:
            writer.writerow(["" if record[c] is None else record[c] for c in columns])


@pytest.mark.parametrize("name", ["grouped_csv", "grouped_json", "ledger_csv"])
def test_correct_records_in_another_order_pass(sandbox, bundles, tmp_path, name):
    bundle = bundles[name]
    check = the_check(bundle)
    workspace = workspace_from(bundle, tmp_path)
    write_records(workspace, check, list(reversed(check["expected"])))
    result = run_verifier(sandbox, bundle, workspace)
    assert result.status == "scored" and result.reward == 1.0, result


@pytest.mark.parametrize("name", ["grouped_csv", "grouped_json", "ledger_csv"])
def test_wrong_records_fail(sandbox, bundles, tmp_path, name):
    bundle = bundles[name]
    check = the_check(bundle)
    numeric = next(c for c, rule in check["columns"].items() if rule["kind"] == "number"
                   and all(r[c] is not None for r in check["expected"][:1]))
    records = [dict(r) for r in check["expected"]]
    records[0][numeric] = records[0][numeric] + 0.1
    workspace = workspace_from(bundle, tmp_path)
    write_records(workspace, check, records)
    result = run_verifier(sandbox, bundle, workspace)
    assert result.status == "scored" and result.reward == 0.0
    assert "not the expected one" in result.checks[0]["detail"]

    write_records(workspace, check, check["expected"][1:])  # a record missing
    result = run_verifier(sandbox, bundle, workspace)
    assert result.reward == 0.0 and "no record for key" in result.checks[0]["detail"]


def test_tree_check(sandbox, bundles, tmp_path):
    bundle = bundles["tree"]
    assert validate_without_agent(sandbox, bundle, tmp_path / "scratch").passed
    workspace = workspace_from(bundle, tmp_path)
    (workspace / "extra.txt").write_text("left behind\n")
    result = run_verifier(sandbox, bundle, workspace)
    assert result.status == "scored" and result.reward == 0.0


def test_symlinked_deliverable_is_not_followed(sandbox, bundles, tmp_path):
    bundle = bundles["grouped_json"]
    workspace = workspace_from(bundle, tmp_path)
    os.symlink("/answer/answer.json", workspace / the_check(bundle)["path"])
    result = run_verifier(sandbox, bundle, workspace)
    assert result.status == "scored" and result.reward == 0.0
    assert "not a regular file" in result.checks[0]["detail"]


def test_corrupt_answer_is_a_verifier_error_not_a_zero(sandbox, bundles, tmp_path):
    bundle = copy_bundle(bundles["grouped_csv"], tmp_path)
    bundle.answer_path.write_text('{"checks": [')
    result = run_verifier(sandbox, bundle, workspace_from(bundle, tmp_path))
    assert result.status == "error" and result.reward is None
    assert "exited with code 1" in result.error and "JSONDecodeError" in result.error


@pytest.mark.parametrize("script, message", [
    ("pass\n", "wrote no result.json"),
    ("import json\njson.dump({'reward': 1.0, 'checks': [{'name': 'x', 'passed': False}]}, open('/result/result.json', 'w'))\n",
     "disagrees"),
    ("while True:\n    pass\n", "timed out"),
])
def test_broken_verifier_is_an_error(sandbox, bundles, tmp_path, script, message):
    bundle = copy_bundle(bundles["ledger_csv"], tmp_path)
    (bundle.tests_dir / "verify.py").write_text(script)
    result = run_verifier(sandbox, bundle, workspace_from(bundle, tmp_path),
                          limits=SandboxLimits(wall_seconds=2.0, cpu_seconds=5))
    assert result.status == "error" and result.reward is None and message in result.error


def test_verifier_cannot_change_the_bundle(sandbox, bundles, tmp_path):
    bundle = copy_bundle(bundles["ledger_csv"], tmp_path)
    before = bundle.answer_path.read_bytes()
    (bundle.tests_dir / "verify.py").write_text("open('/answer/answer.json', 'w').write('gone')\n")
    result = run_verifier(sandbox, bundle, workspace_from(bundle, tmp_path))
    assert result.status == "error" and bundle.answer_path.read_bytes() == before


def test_failing_oracle_is_caught(sandbox, bundles, tmp_path):
    bundle = copy_bundle(bundles["grouped_csv"], tmp_path)
    bundle.solution_path.write_text("#!/bin/bash\necho broken >&2\nexit 3\n")
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert not result.passed and not result.oracle_passed and result.untouched_failed and result.leak_free
    assert result.reason == "oracle solution exited with code 3: broken"


def test_untouched_workspace_passing_is_caught(sandbox, bundles, tmp_path):
    bundle = copy_bundle(bundles["tree"], tmp_path)
    answer = json.loads(bundle.answer_path.read_text())
    check = answer["checks"][0]
    check["files"] = {"CONTRACT.md": check["files"]["CONTRACT.md"]}
    check["absent"], check["no_other_files"] = [], False
    bundle.answer_path.write_text(json.dumps(answer))
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert not result.passed and result.oracle_passed and not result.untouched_failed
    assert result.reason == "the untouched workspace already passes the verifier"


@pytest.mark.parametrize("name", ["grouped_json", "ledger_csv"])
def test_leak_in_instruction_is_caught(sandbox, bundles, tmp_path, name):
    bundle = copy_bundle(bundles[name], tmp_path)
    check = the_check(bundle)
    # A computed number: labels (tiers, statuses) and parameters (thresholds) are
    # the contract's declared vocabulary, and one-digit integers are exempt.
    parameters = set(bundle.contract["parameters"].values())
    value = next(
        r[c] for r in check["expected"] for c, rule in check["columns"].items()
        if rule["kind"] == "number" and r[c] is not None and abs(r[c]) >= 10 and r[c] not in parameters
    )
    bundle.instruction_path.write_text(bundle.instruction + f"Hint: one of the values is {value}.\n")
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert not result.passed and not result.leak_free and result.oracle_passed
    assert result.reason.startswith("leakage: answer value") and "instruction.md" in result.reason


@pytest.mark.parametrize("name", ["grouped_csv", "grouped_json", "ledger_csv", "tree"])
def test_empty_and_perturbed_deliverables_fail_the_real_verifier(sandbox, bundles, tmp_path, name):
    result = validate_without_agent(sandbox, bundles[name], tmp_path / "scratch")
    assert result.passed, result.reason
    assert result.wrong_deliverables_failed and result.verifier_deterministic


# Verifiers that a careless generator could ship: each passes the oracle and
# fails the untouched workspace, so only the wrong-deliverable checks catch it.
LAX_VERIFIERS = [
    ("exists", "os.path.exists(path)", "the verifier passes a empty deliverable"),
    ("has a header", "os.path.exists(path) and open(path).readline().strip() != ''",
     "the verifier passes a perturbed deliverable"),
]


@pytest.mark.parametrize("label, condition, reason", LAX_VERIFIERS, ids=[v[0] for v in LAX_VERIFIERS])
def test_a_verifier_that_does_not_read_the_values_is_caught(sandbox, bundles, tmp_path, label, condition, reason):
    bundle = copy_bundle(bundles["grouped_csv"], tmp_path)
    path = the_check(bundle)["path"]
    (bundle.tests_dir / "verify.py").write_text(
        "import json, os, sys\n"
        f"path = os.path.join(sys.argv[sys.argv.index('--workspace') + 1], {path!r})\n"
        f"ok = {condition}\n"
        "json.dump({'reward': 1.0 if ok else 0.0, 'checks': [{'name': 'lax', 'passed': bool(ok), 'detail': ''}]},\n"
        "          open(sys.argv[sys.argv.index('--result') + 1], 'w'))\n"
    )
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert not result.passed and result.oracle_passed and result.untouched_failed
    assert not result.wrong_deliverables_failed
    assert result.reason.startswith(reason), result.reason


def test_a_verifier_that_disagrees_with_itself_is_caught(sandbox, bundles, tmp_path):
    bundle = copy_bundle(bundles["grouped_csv"], tmp_path)
    verifier = bundle.tests_dir / "verify.py"
    source = verifier.read_text()
    # The real verifier, with a detail that changes on every run.
    passing = 'return {"name": name, "passed": True, "detail": printable(detail)}'
    assert source.count(passing) == 1
    verifier.write_text(source.replace(passing, 'import time; return {"name": name, "passed": True, '
                                                '"detail": str(time.time_ns())}'))
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert not result.passed and not result.verifier_deterministic
    assert result.reason == "verifier is not deterministic: three runs on the oracle workspace disagree"


# Each rule of the level-2 grouped-statistics contract, read the other way:
# the oracle's solution with that one decision changed. The generator plants
# data where the two readings differ (a median on a threshold, one just under
# a threshold that rounds onto it, a median on .x5, ignored rows at the
# extremes, a group with no counted rows), so each must fail the verifier.
OTHER_READINGS = {
    "ignored rows counted": ("if row['status'].strip() != 'valid' or not row[VALUE].strip():",
                             "if not row[VALUE].strip():"),
    "median of an even count is the lower middle": ("(v[n // 2 - 1] + v[n // 2]) / 2", "v[n // 2 - 1]"),
    "a median on a threshold goes to the lower tier": ("'low' if m < T1 else ('medium' if m < T2 else 'high')",
                                                       "'low' if m <= T1 else ('medium' if m <= T2 else 'high')"),
    "tier from the rounded median": ("tier = 'low' if m < T1",
                                     "m = m.quantize(Decimal('0.1'), ROUND_HALF_UP)\n    tier = 'low' if m < T1"),
    "halves rounded to even": ("m.quantize(Decimal('0.1'), ROUND_HALF_UP)", "m.quantize(Decimal('0.1'))"),
    "an empty group kept with 0 records": ("    n = len(v)\n",
                                           "    n = len(v)\n"
                                           "    if not n:\n"
                                           "        result.append({GROUP: g, 'records': 0, COLUMNS[2]: Decimal(0), 'tier': 'low'})\n"
                                           "        continue\n",
                                           "        if row['status'].strip() != 'valid' or not row[VALUE].strip():\n",
                                           "        groups.setdefault(row[GROUP], [])\n"
                                           "        if row['status'].strip() != 'valid' or not row[VALUE].strip():\n"),
}


# The same for the level-2 reconciliation contract: dirty keys, split
# entries, a difference exactly at the tolerance, the sign of `difference`.
LEDGER_READINGS = {
    "ids compared as written": ("key = row[KEY].strip().upper()", "key = row[KEY]"),
    "a repeated id keeps its last amount": ("totals.get(key, Decimal(0)) + Decimal(row[VALUE].strip())",
                                            "Decimal(row[VALUE].strip())"),
    "a difference at the tolerance is a mismatch": ("abs(b[key] - a[key]) > TOL", "abs(b[key] - a[key]) >= TOL"),
    "difference taken the other way": ("'difference': b[key] - a[key]", "'difference': a[key] - b[key]"),
    "matching ids reported too": ("abs(b[key] - a[key]) > TOL", "True"),
}
# And the level-2 reorganization contract: extension case, impossible dates,
# .tmp files, zero-padded months, undated files.
TREE_READINGS = {
    "extension kept as written": ("ext = name.rsplit('.', 1)[1].lower()", "ext = name.rsplit('.', 1)[1]"),
    "an impossible date counts as a date": ("datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))", "pass"),
    ".tmp files kept": ("if ext == 'tmp':", "if ext == 'never':"),
    "months without a leading zero": ("os.path.join(ext, m.group(1), m.group(2))",
                                      "os.path.join(ext, m.group(1), str(int(m.group(2))))"),
    "undated files left where they are": ("folder = os.path.join(ext, 'undated')", "folder = '.'"),
}
READING_CASES = ([(name, reading, OTHER_READINGS[reading]) for name in ("grouped_csv", "grouped_json")
                  for reading in sorted(OTHER_READINGS)]
                 + [("ledger_csv", reading, edits) for reading, edits in sorted(LEDGER_READINGS.items())]
                 + [("tree", reading, edits) for reading, edits in sorted(TREE_READINGS.items())])


@pytest.mark.parametrize("name, reading, edits", READING_CASES, ids=[f"{n}-{r}" for n, r, _ in READING_CASES])
def test_each_contract_rule_read_the_other_way_fails(sandbox, bundles, tmp_path, name, reading, edits):
    bundle = copy_bundle(bundles[name], tmp_path)
    solve = bundle.solution_path.read_text()
    for correct, other in zip(edits[::2], edits[1::2]):
        assert solve.count(correct) == 1, (reading, correct)
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = workspace_from(bundle, tmp_path)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    assert solved.exit_code == 0, solved.output
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), reading
