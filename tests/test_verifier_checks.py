"""The verifier's check types for databases, configuration files, reports
and multi-module programs, called directly on workspaces written by the
test; and the agent-free perturbation of each, which the real check must
reject."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clawloop_assets.harness.verification import CANONICAL_VERIFIER
from clawloop_assets.synthesis.catalogs import GENERATORS_DIR
from clawloop_assets.validation.agent_free import _perturb_deliverable
from resources.sandbox import BubblewrapSandbox

_spec = importlib.util.spec_from_file_location("verify", GENERATORS_DIR / "verify.py")
verify = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verify)


def passes(workspace: Path, check: dict) -> bool:
    result = verify.run_check(str(workspace), check)
    return result["passed"]


def detail(workspace: Path, check: dict) -> str:
    return verify.run_check(str(workspace), check)["detail"]


# ---- sqlite_records

def make_db(path: Path, rows: list[tuple]) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE hives (hive_id TEXT PRIMARY KEY, apiary TEXT, honey_kg REAL)")
    con.executemany("INSERT INTO hives VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()


ROWS = [("HV-0001", "meadow", 12.5), ("HV-0002", "ridge", 3.0)]
SQLITE_CHECK = {
    "type": "sqlite_records", "name": "hives", "path": "apiary.db", "table": "hives", "key": ["hive_id"],
    "columns": {"hive_id": {"kind": "text"}, "apiary": {"kind": "text"}, "honey_kg": {"kind": "number", "tolerance": 0.001}},
    "expected": [{"hive_id": h, "apiary": a, "honey_kg": k} for h, a, k in ROWS],
}


def test_sqlite_rows_are_located_by_key_in_any_order(tmp_path):
    make_db(tmp_path / "apiary.db", list(reversed(ROWS)))
    assert passes(tmp_path, SQLITE_CHECK)


@pytest.mark.parametrize("rows, message", [
    ([ROWS[0], ("HV-0002", "ridge", 3.5)], "HV-0002].honey_kg"),
    ([ROWS[0]], "no record for key HV-0002"),
    (ROWS + [("HV-0003", "creek", 1.0)], "unexpected record with key HV-0003"),
])
def test_sqlite_wrong_rows_fail(tmp_path, rows, message):
    make_db(tmp_path / "apiary.db", rows)
    assert not passes(tmp_path, SQLITE_CHECK)
    assert message in detail(tmp_path, SQLITE_CHECK)


def test_sqlite_missing_table_and_non_database_fail(tmp_path):
    con = sqlite3.connect(tmp_path / "apiary.db")
    con.execute("CREATE TABLE other (x)")
    con.close()
    assert "no table hives" in detail(tmp_path, SQLITE_CHECK)
    (tmp_path / "apiary.db").write_text("hive_id,apiary\n")
    assert "not a SQLite database" in detail(tmp_path, SQLITE_CHECK)


def test_sqlite_symlinked_database_is_not_followed(tmp_path):
    make_db(tmp_path / "real.db", ROWS)
    (tmp_path / "apiary.db").symlink_to(tmp_path / "real.db")
    assert "not a regular file" in detail(tmp_path, SQLITE_CHECK)


# ---- config_values

CONFIGS = {
    "hive.json": ('{"sync": {"interval_s": 30, "enabled": true}, "name": "meadow"}\n',
                  {"sync.interval_s": 30, "sync.enabled": True, "name": "meadow"}, "json"),
    "hive.ini": ("[sync]\ninterval_s = 30\n# a comment\nname = meadow\n",
                 {"sync.interval_s": 30, "sync.name": "meadow"}, "ini"),
    "hive.env": ("# settings\nINTERVAL_S=30\nNAME=meadow\n", {"INTERVAL_S": 30, "NAME": "meadow"}, "env"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_values_read_each_format(tmp_path, name):
    text, expected, fmt = CONFIGS[name]
    (tmp_path / name).write_text(text)
    check = {"type": "config_values", "path": name, "format": fmt, "expected": expected}
    assert passes(tmp_path, check), detail(tmp_path, check)
    wrong = dict(expected)
    first = sorted(wrong)[0]
    wrong[first] = 31 if isinstance(wrong[first], int) and not isinstance(wrong[first], bool) else "ridge"
    assert not passes(tmp_path, {**check, "expected": wrong})
    assert not passes(tmp_path, {**check, "expected": {**expected, "missing_key": 1}})
    assert not passes(tmp_path, {**check, "absent": [first]})


def test_config_values_reject_malformed_files(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "a.env").write_text("A=1\nA=2\n")
    (tmp_path / "b.env").write_text("just words\n")
    assert "not valid JSON" in detail(tmp_path, {"type": "config_values", "path": "a.json", "format": "json", "expected": {}})
    assert "set twice" in detail(tmp_path, {"type": "config_values", "path": "a.env", "format": "env", "expected": {}})
    assert "not KEY=value" in detail(tmp_path, {"type": "config_values", "path": "b.env", "format": "env", "expected": {}})


# ---- contains

def test_report_must_name_every_item_and_be_long_enough(tmp_path):
    (tmp_path / "report.md").write_text("# Findings\n\nHives  hv-0001 and HV-0002 failed the check; all others passed it fine.\n")
    check = {"type": "contains", "path": "report.md", "min_words": 8, "expected": ["HV-0001", "HV-0002"]}
    assert passes(tmp_path, check)
    assert not passes(tmp_path, {**check, "expected": ["HV-0001", "HV-0003"]})
    assert "fewer than 50" in detail(tmp_path, {**check, "min_words": 50})


# ---- python_imports

def write_program(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


PROGRAM = {
    "hives/__init__.py": "",
    "hives/records.py": "import json\nfrom dataclasses import dataclass\n\nLIMIT = 3\n\ndef load(path):\n    return json.load(open(path))\n",
    "hives/report.py": "from hives.records import load, LIMIT\nfrom . import records\nfrom .records import load as read\n\n"
                       "def summary(path):\n    return len(load(path)) > LIMIT\n",
    "main.py": "import hives.report\nfrom hives import records\nimport os\n\nprint(hives.report.summary(os.sys.argv[1]))\n",
}
IMPORTS_CHECK = {"type": "python_imports", "path": "", "defines": {"hives.records": ["load", "LIMIT"], "hives.report": ["summary"]}}


def test_a_consistent_program_passes(tmp_path):
    write_program(tmp_path, PROGRAM)
    assert passes(tmp_path, IMPORTS_CHECK), detail(tmp_path, IMPORTS_CHECK)


@pytest.mark.parametrize("edit, message", [
    ({"hives/report.py": "from hives.records import load, gone\n"}, "hives.records does not define gone"),
    ({"main.py": "import hives.summary\n"}, "import hives.summary does not resolve"),
    ({"hives/report.py": "from .missing import x\n"}, "from hives.missing import ... does not resolve"),
    ({"hives/report.py": "def summary(:\n"}, "does not parse"),
    ({"hives/report.py": "from hives.records import load\n"}, "hives.report does not define summary"),
])
def test_a_broken_program_fails(tmp_path, edit, message):
    write_program(tmp_path, {**PROGRAM, **edit})
    assert message in detail(tmp_path, IMPORTS_CHECK)


def test_a_module_that_should_be_gone_fails(tmp_path):
    write_program(tmp_path, PROGRAM)
    assert "hives.records should no longer exist" in detail(tmp_path, {**IMPORTS_CHECK, "absent": ["hives.records"]})


def test_the_program_is_read_never_run(tmp_path):
    marker = tmp_path / "ran"
    write_program(tmp_path, {**PROGRAM, "hives/records.py": PROGRAM["hives/records.py"]
                             + f"open({str(marker)!r}, 'w').write('x')\n"})
    assert passes(tmp_path, IMPORTS_CHECK)
    assert not marker.exists()


# ---- the agent-free perturbation of each kind is caught by the real check

@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def test_each_perturbation_fails_its_check(sandbox, tmp_path):
    cases = []
    (tmp_path / "sqlite").mkdir()
    make_db(tmp_path / "sqlite" / "apiary.db", ROWS)
    cases.append((tmp_path / "sqlite", SQLITE_CHECK))
    for name, (text, expected, fmt) in sorted(CONFIGS.items()):
        workspace = tmp_path / name.replace(".", "_")
        workspace.mkdir()
        (workspace / name).write_text(text)
        cases.append((workspace, {"type": "config_values", "path": name, "format": fmt, "expected": expected}))
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("Findings for people: hive HV-0001 and hive HV-0002 fell short this season.\n")
    cases.append((report, {"type": "contains", "path": "report.md", "min_words": 4, "expected": ["HV-0001", "HV-0002"]}))
    program = tmp_path / "program"
    write_program(program, PROGRAM)
    cases.append((program, IMPORTS_CHECK))
    for workspace, check in cases:
        assert passes(workspace, check), (check["type"], detail(workspace, check))
        change = _perturb_deliverable(workspace, [check], sandbox)
        assert change is not None, check
        assert not passes(workspace, check), (check["type"], change)


def test_json_config_perturbation_keeps_the_file_parseable(sandbox, tmp_path):
    text, expected, _ = CONFIGS["hive.json"]
    (tmp_path / "hive.json").write_text(json.dumps(json.loads(text), indent=2))
    check = {"type": "config_values", "path": "hive.json", "format": "json", "expected": expected}
    assert _perturb_deliverable(tmp_path, [check], sandbox)
    json.loads((tmp_path / "hive.json").read_text())
    assert "not the expected value" in detail(tmp_path, check)


# ---- directory

def test_a_directory_holds_exactly_the_expected_files(tmp_path):
    (tmp_path / "by_status").mkdir()
    for name in ("late.csv", "ok.csv"):
        (tmp_path / "by_status" / name).write_text("id\n")
    check = {"type": "directory", "dir": "by_status", "expected": ["late.csv", "ok.csv"]}
    assert passes(tmp_path, check)
    (tmp_path / "by_status" / "other.csv").write_text("id\nX\n")
    assert "unexpected file other.csv" in detail(tmp_path, check)
    assert "lacks missing.csv" in detail(tmp_path, {**check, "expected": ["late.csv", "missing.csv", "ok.csv", "other.csv"]})
    assert "not a directory" in detail(tmp_path, {**check, "dir": "nowhere"})


@pytest.mark.parametrize("argv", [
    [],
    ["--workspace", "w", "--answer", "a"],
    ["--workspace", "w", "--answer", "a", "--result", "r", "--extra", "x"],
    ["--workspace", "w", "--workspace", "w", "--result", "r"],
])
def test_the_verifier_refuses_a_command_line_it_was_not_built_for(argv, tmp_path):
    # A crash, which the runner records as a verifier error: never a score.
    done = subprocess.run([sys.executable, "-I", str(CANONICAL_VERIFIER), *argv], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode != 0 and "usage: --workspace VALUE --answer VALUE --result VALUE" in done.stderr
    assert not list(tmp_path.iterdir())
