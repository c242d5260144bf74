#!/usr/bin/env python3
"""The one generic verifier, driven by the check specification in answer.json.

Runs in the sandbox after the agent ends, as
`python3 -I /tests/verify.py --workspace /workspace --answer /answer/answer.json --result /result/result.json`,
and writes {"reward": 1.0 or 0.0, "checks": [{"name", "passed", "detail"}]}.
The reward is 1.0 iff every check passes.

The workspace is untrusted: deliverables are read as bytes and parsed as
data, never imported or evaluated; symlinks and files outside the workspace
are never followed. A malformed answer.json is a crash (no result written),
which the runner records as a verifier error, not a score.
"""

import argparse
import csv
import hashlib
import io
import json
import math
import os
import stat

MAX_BYTES = 8 << 20


class Failed(Exception):
    """The deliverable does not satisfy a check; the message is the detail."""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--answer", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    with open(args.answer, encoding="utf-8") as handle:
        spec = json.load(handle)
    checks = spec["checks"]
    if not isinstance(checks, list) or not checks:
        raise ValueError("answer.json: 'checks' must be a non-empty list")
    results = [run_check(args.workspace, check) for check in checks]
    reward = 1.0 if all(r["passed"] for r in results) else 0.0
    tmp = args.result + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"reward": reward, "checks": results}, handle, indent=2)
    os.replace(tmp, args.result)


def run_check(workspace, check):
    kind = check["type"]
    handler = CHECKS.get(kind)
    if handler is None:
        raise ValueError("answer.json: unknown check type %r" % (kind,))
    name = check.get("name") or kind
    try:
        detail = handler(workspace, check)
        return {"name": name, "passed": True, "detail": detail}
    except Failed as exc:
        return {"name": name, "passed": False, "detail": str(exc)}


# ---- reading the workspace as data

def safe_relpath(path):
    norm = os.path.normpath(path)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
        raise ValueError("answer.json: path %r leaves the workspace" % (path,))
    return norm


def read_deliverable(workspace, path):
    full = os.path.join(workspace, safe_relpath(path))
    # Every component must be a real directory: a planted symlink is not followed.
    parts = safe_relpath(path).split("/")
    for i in range(1, len(parts)):
        sub = os.path.join(workspace, *parts[:i])
        if os.path.islink(sub):
            raise Failed("%s: %s is a symlink" % (path, "/".join(parts[:i])))
    try:
        info = os.lstat(full)
    except FileNotFoundError:
        raise Failed("%s does not exist" % path) from None
    if not stat.S_ISREG(info.st_mode):
        raise Failed("%s is not a regular file" % path)
    if info.st_size > MAX_BYTES:
        raise Failed("%s is larger than %d bytes" % (path, MAX_BYTES))
    fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_BYTES + 1)


def read_text(workspace, path):
    data = read_deliverable(workspace, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Failed("%s is not UTF-8 text" % path) from None


def parse_number(text, where):
    text = str(text).strip()
    try:
        value = float(text)
    except ValueError:
        raise Failed("%s: %r is not a number" % (where, text[:40])) from None
    if not math.isfinite(value):
        raise Failed("%s: %r is not a finite number" % (where, text[:40]))
    return value


def close(actual, expected, tolerance):
    return abs(actual - float(expected)) <= float(tolerance) + 1e-9


# ---- check types

def check_number(workspace, check):
    text = read_text(workspace, check["path"])
    actual = parse_number(text, check["path"])
    if not close(actual, check["expected"], check.get("tolerance", 0)):
        raise Failed("%s holds %s, which is not the expected value" % (check["path"], text.strip()[:40]))
    return "%s holds the expected number" % check["path"]


def check_text(workspace, check):
    actual = " ".join(read_text(workspace, check["path"]).split())
    if actual != " ".join(str(check["expected"]).split()):
        raise Failed("%s does not hold the expected text (got %r)" % (check["path"], actual[:80]))
    return "%s holds the expected text" % check["path"]


def check_lines(workspace, check):
    actual = [line.strip() for line in read_text(workspace, check["path"]).splitlines() if line.strip()]
    expected = [str(line).strip() for line in check["expected"]]
    if check.get("ordered", False):
        if actual != expected:
            raise Failed("%s: lines differ from the expected ones in content or order" % check["path"])
    else:
        missing = sorted(set(expected) - set(actual))
        extra = sorted(set(actual) - set(expected))
        if missing or extra:
            raise Failed("%s: %d expected lines missing, %d unexpected lines" % (check["path"], len(missing), len(extra)))
        if len(actual) != len(set(actual)):
            raise Failed("%s: some lines are repeated" % check["path"])
    return "%s holds the expected %d lines" % (check["path"], len(expected))


def csv_rows(workspace, check):
    text = read_text(workspace, check["path"])
    reader = csv.reader(io.StringIO(text))
    rows = [row for row in reader if any(cell.strip() for cell in row)]
    if not rows:
        raise Failed("%s is empty" % check["path"])
    header = [cell.strip() for cell in rows[0]]
    missing = [c for c in check["columns"] if c not in header]
    if missing:
        raise Failed("%s: header lacks column(s) %s" % (check["path"], ", ".join(missing)))
    records = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise Failed("%s line %d: %d fields, header has %d" % (check["path"], number, len(row), len(header)))
        records.append({header[i]: row[i].strip() for i in range(len(header))})
    return records


def json_rows(workspace, check):
    text = read_text(workspace, check["path"])
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Failed("%s is not valid JSON (%s)" % (check["path"], exc)) from None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise Failed("%s must hold a JSON array of objects" % check["path"])
    for index, item in enumerate(data):
        missing = [c for c in check["columns"] if c not in item]
        if missing:
            raise Failed("%s item %d lacks key(s) %s" % (check["path"], index, ", ".join(missing)))
    return data


def key_of(record, key_columns):
    return tuple("" if record.get(c) is None else str(record.get(c)).strip() for c in key_columns)


def compare_cell(actual, expected, rule, where):
    if rule["kind"] == "number":
        if expected is None:
            if actual not in (None, ""):
                raise Failed("%s: expected no value, got %r" % (where, str(actual)[:40]))
            return
        if actual is None or actual == "" or isinstance(actual, bool):
            raise Failed("%s: value is missing" % where)
        if isinstance(actual, (dict, list)):
            raise Failed("%s: not a number" % where)
        if not close(parse_number(actual, where), expected, rule.get("tolerance", 0)):
            raise Failed("%s: value %s is not the expected one" % (where, str(actual)[:40]))
    else:
        shown = "" if actual is None else str(actual).strip()
        if shown != ("" if expected is None else str(expected).strip()):
            raise Failed("%s: %r is not the expected value" % (where, shown[:40]))


def check_records(workspace, check):
    records = csv_rows(workspace, check) if check["type"] == "csv_records" else json_rows(workspace, check)
    key_columns = check["key"]
    actual = {}
    for record in records:
        key = key_of(record, key_columns)
        if key in actual:
            raise Failed("%s: key %s appears more than once" % (check["path"], "/".join(key)))
        actual[key] = record
    expected = {key_of(record, key_columns): record for record in check["expected"]}
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    if missing:
        raise Failed("%s: no record for key %s" % (check["path"], "/".join(missing[0])))
    if extra:
        raise Failed("%s: unexpected record with key %s" % (check["path"], "/".join(extra[0])))
    for key, want in sorted(expected.items()):
        for column, rule in check["columns"].items():
            compare_cell(actual[key].get(column), want.get(column), rule, "%s[%s].%s" % (check["path"], "/".join(key), column))
    return "%s: all %d records match by key" % (check["path"], len(expected))


def workspace_files(workspace):
    found = {}
    for root, dirs, files in os.walk(workspace, followlinks=False):
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                found[os.path.relpath(os.path.join(root, name), workspace)] = "symlink"
        for name in files:
            full = os.path.join(root, name)
            found[os.path.relpath(full, workspace)] = "symlink" if os.path.islink(full) else "file"
    return found


def check_tree(workspace, check):
    present = workspace_files(workspace)
    for path, digest in sorted(check["files"].items()):
        data = read_deliverable(workspace, path)
        if hashlib.sha256(data).hexdigest() != digest:
            raise Failed("%s does not have the expected content" % path)
    for path in check.get("absent", []):
        if os.path.lexists(os.path.join(workspace, safe_relpath(path))):
            raise Failed("%s should no longer exist" % path)
    if check.get("no_other_files", False):
        extra = sorted(p for p in present if p not in check["files"])
        if extra:
            raise Failed("unexpected file %s (and %d more)" % (extra[0], len(extra) - 1))
    return "%d expected files in place" % len(check["files"])


CHECKS = {
    "number": check_number,
    "text": check_text,
    "lines": check_lines,
    "csv_records": check_records,
    "json_records": check_records,
    "tree": check_tree,
}


if __name__ == "__main__":
    main()
