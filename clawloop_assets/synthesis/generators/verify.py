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

Whose fault is what: answer.json is validated whole before the workspace is
touched, so a fault in it stays a crash. After that, anything about the
deliverable (missing, unreadable, of the wrong type, malformed, too large or
too deep for a parser) fails its check with the reason in the detail and
scores 0: an agent's output must never turn its own failure into an
excluded rollout.
"""

import ast
import builtins
import configparser
import csv
import hashlib
import io
import json
import math
import os
import sqlite3
import stat
import sys
import tempfile

MAX_BYTES = 8 << 20
MAX_DETAIL = 500


class Failed(Exception):
    """The deliverable does not satisfy a check; the message is the detail."""


class SpecError(ValueError):
    """answer.json is malformed: the harness's fault, never a score."""


def command_line(argv, flags):
    """`{flag: value}` from `--flag value` pairs, each of `flags` exactly once
    and nothing else; exits with a usage error otherwise. Not argparse: its
    import is a large share of a verification."""
    if len(argv) != 2 * len(flags) or sorted(argv[0::2]) != sorted(flags):
        sys.exit("usage: %s (got %s)" % (" ".join(f + " VALUE" for f in flags), " ".join(argv) or "nothing"))
    return dict(zip(argv[0::2], argv[1::2]))


def main():
    args = command_line(sys.argv[1:], ("--workspace", "--answer", "--result"))
    with open(args["--answer"], encoding="utf-8") as handle:
        spec = json.load(handle)
    checks = spec.get("checks") if isinstance(spec, dict) else None
    if not isinstance(checks, list) or not checks:
        raise SpecError("answer.json: 'checks' must be a non-empty list")
    for check in checks:
        validate_check(check)
    # The workspace root is the harness's copy: if the verifier cannot list
    # it, the harness failed, and no check may score that as the agent's 0.
    os.listdir(args["--workspace"])
    results = [run_check(args["--workspace"], check) for check in checks]
    reward = 1.0 if all(r["passed"] for r in results) else 0.0
    tmp = args["--result"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"reward": reward, "checks": results}, handle, indent=2)
    os.replace(tmp, args["--result"])


def run_check(workspace, check):
    validate_check(check)
    name = check.get("name") or check["type"]
    try:
        detail = CHECKS[check["type"]](workspace, check)
        return {"name": name, "passed": True, "detail": printable(detail)}
    except Failed as exc:
        return {"name": name, "passed": False, "detail": printable(str(exc))}
    except SpecError:
        raise
    except Exception as exc:
        # The spec was validated above, so what is left is the deliverable:
        # unreadable (PermissionError, NotADirectoryError), beyond a parser's
        # limits (csv.Error, RecursionError, MemoryError) or otherwise
        # malformed. A failed check, never a crash the agent could hide behind.
        return {"name": name, "passed": False,
                "detail": printable("the deliverable could not be read or parsed (%s: %s)" % (type(exc).__name__, exc))}


def printable(text):
    """A detail fit for result.json: capped, and valid UTF-8 whatever names
    or escapes the deliverable held."""
    text = str(text)
    if len(text) > MAX_DETAIL:
        text = text[:MAX_DETAIL] + "..."
    return text.encode("utf-8", "replace").decode("utf-8")


# ---- validating answer.json (before the workspace is read)

def _spec(condition, check, message):
    if not condition:
        raise SpecError("answer.json: check %r: %s" % (check.get("name") or check.get("type"), message))


def _is_number(value):
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _is_str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_str_lists(value):
    return isinstance(value, dict) and all(isinstance(k, str) and _is_str_list(v) for k, v in value.items())


def _valid_path(value):
    if not isinstance(value, str) or not value:
        return False
    try:
        safe_relpath(value)
    except SpecError:
        return False
    return True


_OPTIONAL_BOOL = ("ordered", "no_other_files", "names_resolve")


def validate_check(check):
    """Raise SpecError unless `check` has every field its type reads, of the
    right type: after this, a check's handler fails only on the deliverable."""
    if not isinstance(check, dict):
        raise SpecError("answer.json: a check must be an object, got %r" % (check,))
    kind = check.get("type")
    if kind not in CHECKS:
        raise SpecError("answer.json: unknown check type %r" % (kind,))
    _spec(check.get("name") is None or isinstance(check["name"], str), check, "'name' must be a string")
    for flag in _OPTIONAL_BOOL:
        _spec(isinstance(check.get(flag, False), bool), check, "%r must be true or false" % flag)
    if "tolerance" in check:
        _spec(_is_number(check["tolerance"]) and check["tolerance"] >= 0, check, "'tolerance' must be a number >= 0")
    if kind not in ("tree", "directory", "python_imports"):
        _spec(_valid_path(check.get("path")), check, "'path' must be a relative path inside the workspace")
    expected = check.get("expected")
    if kind == "number":
        _spec(_is_number(expected), check, "'expected' must be a finite number")
    elif kind == "text":
        _spec(isinstance(expected, (str, int, float)) and not isinstance(expected, bool), check, "'expected' must be text")
    elif kind in ("lines", "contains"):
        _spec(isinstance(expected, list) and all(isinstance(e, (str, int, float)) for e in expected), check,
              "'expected' must be a list of lines")
        min_words = check.get("min_words", 1)
        _spec(isinstance(min_words, int) and not isinstance(min_words, bool), check, "'min_words' must be an integer")
    elif kind in ("csv_records", "json_records", "sqlite_records"):
        _spec(_is_str_list(check.get("key")) and check["key"], check, "'key' must be a non-empty list of column names")
        columns = check.get("columns")
        _spec(isinstance(columns, dict) and all(
            isinstance(c, str) and isinstance(r, dict) and r.get("kind") in ("number", "text")
            and _is_number(r.get("tolerance", 0)) for c, r in columns.items()), check,
            "'columns' must map each column to a rule of kind 'number' or 'text'")
        _spec(isinstance(expected, list) and all(isinstance(e, dict) for e in expected), check,
              "'expected' must be a list of records")
        if kind == "sqlite_records":
            _spec(isinstance(check.get("table"), str) and check["table"], check, "'table' must be a table name")
    elif kind == "tree":
        files = check.get("files")
        _spec(isinstance(files, dict) and all(_valid_path(p) and isinstance(d, str) for p, d in files.items()), check,
              "'files' must map workspace paths to digests")
        _spec(all(_valid_path(p) for p in _list(check, "absent")), check, "'absent' must list workspace paths")
    elif kind == "config_values":
        _spec(check.get("format") in ("json", "ini", "env"), check, "'format' must be json, ini or env")
        _spec(isinstance(expected, dict) and all(isinstance(k, str) for k in expected), check,
              "'expected' must map keys to values")
        _spec(_is_str_list(check.get("absent", [])), check, "'absent' must list keys")
    elif kind == "python_imports":
        root = check.get("root", "")
        _spec(root == "" or _valid_path(root), check, "'root' must be a relative path inside the workspace")
        for field in ("defines", "absent_names"):
            _spec(_is_str_lists(check.get(field, {})), check, "%r must map modules to lists of names" % field)
        digests = check.get("digests", {})
        _spec(isinstance(digests, dict) and all(isinstance(k, str) and ":" in k and isinstance(v, str)
                                                for k, v in digests.items()), check,
              "'digests' must map 'module:name' to digests")
        _spec(_is_str_list(check.get("absent", [])), check, "'absent' must list modules")
    elif kind == "directory":
        _spec(_valid_path(check.get("dir")), check, "'dir' must be a relative path inside the workspace")
        _spec(_is_str_list(expected), check, "'expected' must list file names")


def _list(check, field):
    value = check.get(field, [])
    _spec(isinstance(value, list), check, "%r must be a list" % field)
    return value


# ---- reading the workspace as data

def safe_relpath(path):
    norm = os.path.normpath(path)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
        raise SpecError("answer.json: path %r leaves the workspace" % (path,))
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
    except (FileNotFoundError, NotADirectoryError):
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
    readers = {"csv_records": csv_rows, "json_records": json_rows, "sqlite_records": sqlite_rows}
    records = readers[check["type"]](workspace, check)
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


def _raise(error):
    raise error


def workspace_files(workspace):
    found = {}
    # An unreadable directory is a failure, never a silently empty one.
    for root, dirs, files in os.walk(workspace, followlinks=False, onerror=_raise):
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                found[os.path.relpath(os.path.join(root, name), workspace)] = "symlink"
        for name in files:
            full = os.path.join(root, name)
            found[os.path.relpath(full, workspace)] = "symlink" if os.path.islink(full) else "file"
    return found


def check_tree(workspace, check):
    for path, digest in sorted(check["files"].items()):
        data = read_deliverable(workspace, path)
        if hashlib.sha256(data).hexdigest() != digest:
            raise Failed("%s does not have the expected content" % path)
    for path in check.get("absent", []):
        if os.path.lexists(os.path.join(workspace, safe_relpath(path))):
            raise Failed("%s should no longer exist" % path)
    if check.get("no_other_files", False):
        extra = sorted(p for p in workspace_files(workspace) if p not in check["files"])
        if extra:
            raise Failed("unexpected file %s (and %d more)" % (extra[0], len(extra) - 1))
    return "%d expected files in place" % len(check["files"])


def sqlite_rows(workspace, check):
    """The rows of one table of a SQLite database in the workspace, read from a
    private copy of its bytes (never the agent's file in place)."""
    data = read_deliverable(workspace, check["path"])
    if not data.startswith(b"SQLite format 3\x00"):
        raise Failed("%s is not a SQLite database" % check["path"])
    with tempfile.TemporaryDirectory() as scratch:
        copy = os.path.join(scratch, "copy.db")
        with open(copy, "wb") as handle:
            handle.write(data)
        try:
            con = sqlite3.connect("file:%s?mode=ro&immutable=1" % copy, uri=True)
            try:
                con.execute("PRAGMA trusted_schema = OFF")
                names = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if check["table"] not in names:
                    raise Failed("%s: no table %s" % (check["path"], check["table"]))
                cursor = con.execute('SELECT * FROM "%s"' % check["table"].replace('"', '""'))
                header = [d[0] for d in cursor.description]
                rows = [dict(zip(header, row)) for row in cursor.fetchall()]
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise Failed("%s: unreadable database (%s)" % (check["path"], exc)) from None
    missing = [c for c in check["columns"] if c not in header]
    if missing:
        raise Failed("%s: table %s lacks column(s) %s" % (check["path"], check["table"], ", ".join(missing)))
    return rows


def config_value(data, fmt, key, where):
    if fmt == "json":
        node = data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise Failed("%s: no key %s" % (where, key))
            node = node[part]
        return node
    if fmt == "ini":
        section, _, option = key.partition(".")
        if not data.has_option(section, option):
            raise Failed("%s: no option %s" % (where, key))
        return data.get(section, option)
    if key not in data:
        raise Failed("%s: no key %s" % (where, key))
    return data[key]


def parse_config(workspace, check):
    text = read_text(workspace, check["path"])
    fmt = check["format"]
    if fmt == "json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise Failed("%s is not valid JSON (%s)" % (check["path"], exc)) from None
    if fmt == "ini":
        parser = configparser.ConfigParser(interpolation=None)
        parser.optionxform = str
        try:
            parser.read_string(text)
        except configparser.Error as exc:
            raise Failed("%s is not a valid INI file (%s)" % (check["path"], str(exc).splitlines()[0])) from None
        return parser
    if fmt == "env":
        values = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise Failed("%s line %d: not KEY=value" % (check["path"], number))
            if name.strip() in values:
                raise Failed("%s: key %s is set twice" % (check["path"], name.strip()))
            values[name.strip()] = value.strip()
        return values
    raise SpecError("answer.json: unknown config format %r" % (fmt,))


def check_config_values(workspace, check):
    """Each listed key of a JSON, INI or KEY=value file holds its expected
    value (numbers compared as numbers); keys in `absent` are gone."""
    data = parse_config(workspace, check)
    rule = {"kind": "number", "tolerance": check.get("tolerance", 0)}
    for key, expected in sorted(check["expected"].items()):
        actual = config_value(data, check["format"], key, check["path"])
        where = "%s: %s" % (check["path"], key)
        if isinstance(expected, bool) or expected is None or isinstance(expected, (list, dict)):
            if actual != expected:
                raise Failed("%s: not the expected value" % where)
        elif isinstance(expected, (int, float)):
            compare_cell(actual, expected, rule, where)
        else:
            compare_cell(actual, expected, {"kind": "text"}, where)
    for key in check.get("absent", []):
        try:
            config_value(data, check["format"], key, check["path"])
        except Failed:
            continue
        raise Failed("%s: key %s should no longer be set" % (check["path"], key))
    return "%s: all %d keys hold the expected values" % (check["path"], len(check["expected"]))


def check_contains(workspace, check):
    """A free-text report: at least `min_words` words and every expected
    phrase present (case and spacing ignored)."""
    text = read_text(workspace, check["path"])
    words = text.split()
    if len(words) < check.get("min_words", 1):
        raise Failed("%s has %d words, fewer than %d" % (check["path"], len(words), check.get("min_words", 1)))
    folded = " ".join(words).lower()
    missing = [p for p in check["expected"] if " ".join(str(p).split()).lower() not in folded]
    if missing:
        raise Failed("%s does not mention %d of the %d required items" % (check["path"], len(missing), len(check["expected"])))
    return "%s mentions all %d required items" % (check["path"], len(check["expected"]))


def python_modules(workspace, root):
    """{dotted module name: parsed tree} for every .py file under `root`."""
    base = os.path.join(workspace, safe_relpath(root)) if root else workspace
    modules = {}
    for rel, kind in sorted(workspace_files(base).items()):
        if not rel.endswith(".py"):
            continue
        if kind != "file":
            raise Failed("%s is a symlink" % rel)
        source = read_text(base, rel)
        try:
            tree = ast.parse(source, filename=rel)
        except SyntaxError as exc:
            raise Failed("%s does not parse (line %s: %s)" % (rel, exc.lineno, exc.msg)) from None
        name = rel[:-3].replace("/", ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        modules[name] = tree
    return modules


def top_level_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return names


def unresolved_names(tree):
    """(function, name) for the first name a top-level function reads that is
    neither bound in it, nor a top-level name of its module, nor a builtin."""
    module_names = top_level_names(tree) | set(dir(builtins))
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
        bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node}
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in inner.names}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in bound | module_names:
                return node.name, n.id
    return None


def check_python_imports(workspace, check):
    """A multi-module program read as data (parsed, never run): every module
    parses; every import of one of its own modules names a module that exists
    and, for `from m import x`, an x that m defines at top level or a submodule
    of m; with `names_resolve`, every name a top-level function reads is bound
    in it, at its module's top level or a builtin; each module in `defines`
    defines those names and none in
    `absent_names` defines or imports those; each function or class in
    `digests` ("module:name") is the original code; `absent` modules are gone."""
    modules = python_modules(workspace, check.get("root", ""))
    local_roots = {name.split(".")[0] for name in modules}
    for name, tree in sorted(modules.items()):
        package = name if name in {m.rsplit(".", 1)[0] for m in modules if "." in m} else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in local_roots and alias.name not in modules:
                        raise Failed("%s: import %s does not resolve" % (name, alias.name))
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    parts = package.split(".") if package else []
                    if node.level - 1 > len(parts):
                        raise Failed("%s: relative import beyond the top package" % name)
                    base = parts[: len(parts) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                if target.split(".")[0] not in local_roots:
                    continue
                if target not in modules:
                    raise Failed("%s: from %s import ... does not resolve" % (name, target))
                defined = top_level_names(modules[target])
                for alias in node.names:
                    if alias.name != "*" and alias.name not in defined and "%s.%s" % (target, alias.name) not in modules:
                        raise Failed("%s: %s does not define %s" % (name, target, alias.name))
    for module, names in sorted(check.get("defines", {}).items()):
        if module not in modules:
            raise Failed("module %s does not exist" % module)
        lacking = sorted(set(names) - top_level_names(modules[module]))
        if lacking:
            raise Failed("module %s does not define %s" % (module, ", ".join(lacking)))
    if check.get("names_resolve"):
        for name, tree in sorted(modules.items()):
            unresolved = unresolved_names(tree)
            if unresolved:
                raise Failed("%s: %s uses %s, which nothing defines or imports" % ((name,) + unresolved))
    for module, names in sorted(check.get("absent_names", {}).items()):
        kept = sorted(set(names) & top_level_names(modules[module])) if module in modules else []
        if kept:
            raise Failed("module %s still defines or imports %s" % (module, ", ".join(kept)))
    for where, digest in sorted(check.get("digests", {}).items()):
        module, _, name = where.partition(":")
        nodes = [n for n in modules.get(module, ast.Module(body=[])).body
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name]
        # ast.dump leaves out positions and comments: the code may move, not change.
        if not nodes or hashlib.sha256(ast.dump(nodes[0]).encode()).hexdigest() != digest:
            raise Failed("%s in %s is not the original code" % (name, module))
    for module in check.get("absent", []):
        if module in modules:
            raise Failed("module %s should no longer exist" % module)
    return "%d modules parse and every import resolves" % len(modules)


def check_directory(workspace, check):
    """A directory of the workspace holds exactly the expected file names."""
    path = check["dir"]
    full = os.path.join(workspace, safe_relpath(path))
    if os.path.islink(full) or not os.path.isdir(full):
        raise Failed("%s/ is not a directory" % path)
    present = sorted(workspace_files(full))
    extra = sorted(set(present) - set(check["expected"]))
    missing = sorted(set(check["expected"]) - set(present))
    if missing:
        raise Failed("%s/ lacks %s" % (path, missing[0]))
    if extra:
        raise Failed("%s/ holds an unexpected file %s" % (path, extra[0]))
    return "%s/ holds exactly the %d expected files" % (path, len(present))


CHECKS = {
    "number": check_number,
    "text": check_text,
    "lines": check_lines,
    "csv_records": check_records,
    "json_records": check_records,
    "tree": check_tree,
    "sqlite_records": check_records,  # rows located by business key, like the others
    "config_values": check_config_values,
    "contains": check_contains,
    "python_imports": check_python_imports,
    "directory": check_directory,
}


if __name__ == "__main__":
    main()
