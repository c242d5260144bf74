"""The task bundle format: task.toml round-trips, malformed bundles are
rejected with the file and the field named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clawloop_assets.task_bundle import (
    TaskBundleError,
    load_task_bundle,
    write_task_toml,
)

TOML_FIELDS = dict(
    task_id="round-0001.grouped_statistics.apiary_hive_inventory.L0.s0",
    capability="grouped_statistics",
    domain="apiary_hive_inventory",
    difficulty=0,
    track="analysis",
    format="number",
    generator_id="grouped_statistics.apiary_hive_inventory.L0",
    seed=0,
    round_key="round-0001",
    max_turns=4,
    command_timeout_s=20.0,
)


def make_bundle(root: Path) -> Path:
    files = {
        "instruction.md": "Write the number of data rows in hives.csv (not counting the header line) to answer.txt.\n",
        "meta.json": json.dumps({"track": "analysis", "format": "number", "contract": {"rules": ["r"], "parameters": {}, "labels": []}}),
        "environment/CONTRACT.md": "# Answer contract\n",
        "environment/hives.csv": "hive_id,apiary,honey_kg\nHV-0001,ridge,3.50\n",
        "solution/solve.sh": "tail -n +2 hives.csv | wc -l > answer.txt\n",
        "tests/verify.py": "# verifier\n",
        "answer/answer.json": json.dumps({"key": {"answer.txt": 1}, "checks": [{"type": "number", "path": "answer.txt", "expected": 1}]}),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    write_task_toml(root / "task.toml", **TOML_FIELDS)
    return root


def rewrite_toml(root: Path, old: str, new: str) -> None:
    path = root / "task.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_written_bundle_loads(tmp_path):
    bundle = load_task_bundle(make_bundle(tmp_path))
    assert bundle.task_id == TOML_FIELDS["task_id"]
    assert (bundle.difficulty, bundle.seed, bundle.round_key, bundle.max_turns) == (0, 0, "round-0001", 4)
    assert bundle.command_timeout_s == 20.0
    assert bundle.contract["rules"] == ["r"]
    assert bundle.instruction.startswith("Write the number")


@pytest.mark.parametrize("field_line, field", [('seed = 0\n', "seed"), ('domain = "apiary_hive_inventory"\n', "domain"),
                                               ("max_turns = 4\n", "max_turns")])
def test_missing_field_names_file_and_field(tmp_path, field_line, field):
    root = make_bundle(tmp_path)
    rewrite_toml(root, field_line, "")
    with pytest.raises(TaskBundleError) as excinfo:
        load_task_bundle(root)
    assert "task.toml" in str(excinfo.value) and f"'{field}'" in str(excinfo.value)


def test_ill_typed_field(tmp_path):
    root = make_bundle(tmp_path)
    rewrite_toml(root, "seed = 0", 'seed = "zero"')
    with pytest.raises(TaskBundleError, match=r"task.toml \[task\]: field 'seed' must be int"):
        load_task_bundle(root)


def test_unknown_track(tmp_path):
    root = make_bundle(tmp_path)
    rewrite_toml(root, 'track = "analysis"', 'track = "poetry"')
    with pytest.raises(TaskBundleError, match=r"task.toml \[task\]: field 'track' must be one of"):
        load_task_bundle(root)


def test_missing_table(tmp_path):
    root = make_bundle(tmp_path)
    rewrite_toml(root, "[limits]", "[limitz]")
    with pytest.raises(TaskBundleError, match=r"task.toml: missing table \[limits\]"):
        load_task_bundle(root)


@pytest.mark.parametrize("rel", ["answer/answer.json", "tests/verify.py", "solution/solve.sh", "environment/CONTRACT.md"])
def test_missing_file(tmp_path, rel):
    root = make_bundle(tmp_path)
    (root / rel).unlink()
    with pytest.raises(TaskBundleError, match=f"{rel}: missing file"):
        load_task_bundle(root)


def test_answer_without_checks(tmp_path):
    root = make_bundle(tmp_path)
    (root / "answer/answer.json").write_text(json.dumps({"key": {}}))
    with pytest.raises(TaskBundleError, match=r"answer.json: field 'checks'"):
        load_task_bundle(root)


def test_meta_disagreeing_with_toml(tmp_path):
    root = make_bundle(tmp_path)
    (root / "meta.json").write_text(json.dumps({"track": "terminal", "format": "number", "contract": {"rules": []}}))
    with pytest.raises(TaskBundleError, match=r"meta.json: field 'track'"):
        load_task_bundle(root)


def test_symlink_rejected(tmp_path):
    root = make_bundle(tmp_path)
    os.symlink("/etc/passwd", root / "environment" / "passwd")
    with pytest.raises(TaskBundleError, match="symlinks are not allowed"):
        load_task_bundle(root)


def test_toml_rejects_non_ascii(tmp_path):
    with pytest.raises(ValueError):
        write_task_toml(tmp_path / "task.toml", **{**TOML_FIELDS, "domain": "caf\u00e9"})
