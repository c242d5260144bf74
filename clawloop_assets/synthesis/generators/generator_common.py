"""What every generator family shares: the command line, assembling a task,
writing it out as a bundle, the seeded random source, and a few helpers.

Stdlib-only. `write_generator` copies this file into each generator
directory next to the family script, which imports it (the sandbox runs
`python3 -I /generator/<family>.py --params P --seed N --out /out`, so the
family puts its own directory on sys.path first).
"""

import hashlib
import json
import os
import random
import sqlite3
import sys
from decimal import Decimal

# The difficulty scale, the same in every family. Every knob is in the
# generator (the data and layout it writes), none in the prompt:
#  -2  warm-up: one basic shell command on a file of the family's own level-0
#      workspace (append a word, count characters, copy), the command shown;
#      shared by every family (one_step_task below)
#  -1  the family's level-0 task with its one command shown (shown_command_task
#      below): the family's own files and tools, the command to copy
#   0  one step on one small file: a single command solves it
#   1  a few steps on one or two files
#   2  stated rules with hidden decisions (rounding order, ties at thresholds,
#      tolerances, omitted groups, tie-breaking), a structured deliverable
#   3  multi-hop layout: an index file with ids and file names but no values,
#      per-entity detail files none of which suffices alone, and at least one
#      cross-cutting reference table
#   4  level 3 on dirty data: distractor records, missing fields, schema
#      differences across files, unit mismatches; the contract says how each
#      is treated and the gold answer is computed on the dirty data
#   5  level 4 with more hidden decisions and larger data (hundreds of records)
# (plan.LEVELS is the host's copy of this range, -2 to 5.)
# Structured deliverables rotate through these with the seed (levels 2 and up).
DELIVERABLE_FORMATS = ("json", "csv", "files", "report")


def run(build):
    """Parses --params/--seed/--out and writes `build(seed, params)` to --out."""
    args = command_line(sys.argv[1:], ("--params", "--seed", "--out"))
    try:
        seed = int(args["--seed"])
    except ValueError:
        sys.exit(f"usage: --seed takes an integer, not {args['--seed']!r}")
    with open(args["--params"], encoding="utf-8") as handle:
        params = json.load(handle)
    write_task(args["--out"], build(seed, params))


def command_line(argv, flags):
    """`{flag: value}` from `--flag value` pairs, each of `flags` exactly once
    and nothing else; exits with a usage error otherwise. Not argparse: its
    import is a large share of a generator run, and every candidate makes two."""
    if len(argv) != 2 * len(flags) or sorted(argv[0::2]) != sorted(flags):
        sys.exit(f"usage: {' '.join(f'{flag} VALUE' for flag in flags)} (got {' '.join(argv) or 'nothing'})")
    return dict(zip(argv[0::2], argv[1::2]))


# ---- the family skeleton
#
# A family script declares its six levels once, in a LEVELS table, and ends
# with `build = family(__name__, LEVELS)`: the shared build (warm-up levels
# included) and, when it runs as a script, the command line come from here.

# Levels 3 to 5 of the scale as a family's shaped level function reads them
# (see the difficulty scale above): multi-hop, then dirty, then dirty and large.
DEEP_SHAPES = ({"dirty": False, "large": False}, {"dirty": True, "large": False}, {"dirty": True, "large": True})


def numbered_levels(function, numbers):
    """Level functions for `numbers`, each `function(rng, seed, params, level)`."""
    return tuple(lambda rng, seed, params, level=level: function(rng, seed, params, level) for level in numbers)


def shaped_levels(function):
    """Levels 3 to 5, each `function(rng, seed, params, dirty=..., large=...)` with its DEEP_SHAPES entry."""
    return tuple(lambda rng, seed, params, shape=shape: function(rng, seed, params, **shape) for shape in DEEP_SHAPES)


def family(module_name, levels):
    """A family's `build(seed, params)` over its levels 0 to 5 (`levels`, each
    `level(rng, seed, params)`); when `module_name` is "__main__" (the family
    runs as the sandbox runs it), also parses the command line and writes
    the task. Call it last in the family script: `build = family(__name__, LEVELS)`."""
    levels = tuple(levels)
    if len(levels) != 6:
        raise ValueError("a family declares levels 0 to 5, got %d" % len(levels))

    def build(seed, params):
        return build_level(levels, seed, params)

    if module_name == "__main__":
        run(build)
    return build


def build_level(levels, seed, params):
    """The task at params["difficulty"]: `levels[difficulty](rng, seed, params)`
    with the seeded random source of these params; at a warm-up level, a
    one-step task on the workspace of `levels[0]`."""
    rng = new_rng(params, seed)
    level = params["difficulty"]
    if level in WARMUP_LEVELS:
        workspace = levels[0](rng, seed, dict(params, knobs=[]))["environment"]
        return one_step_task(rng, params, workspace)
    if level == SHOWN_COMMAND_LEVEL:
        return shown_command_task(levels[0](rng, seed, dict(params, knobs=[])))
    for number, build in enumerate(levels):
        if level == number:
            return build(rng, seed, params)
    names = [str(number) for number in WARMUP_LEVELS + (SHOWN_COMMAND_LEVEL,) + tuple(range(len(levels)))]
    raise ValueError("difficulty must be %s or %s, got %r" % (", ".join(names[:-1]), names[-1], level))


# ---- the levels below a family's level 0
#
# Why: the embedded 135M model passes none of the families' level-0 tasks,
# and the admission band needs tasks the current policy solves now and
# then; training on them is what lifts it toward level 0. Level -2 is one
# basic shell command on a file of the family's workspace, shown (the model
# still has to copy it right: base pass rates 14-50% by operation).
# Operations the base model never solved (sorting lines: 2 passes in 104)
# are left out, and so are those it solves almost always (writing a word to
# a new file: 69%). Level -1 is the family's own level-0 task with its
# command shown: in words that task stays out of reach after six rounds of
# warm-up training (0 of 208 rollouts), shown it is in the band and rises
# with that training (12% -> 32%), so it is the rung between copying a
# command and knowing it (docs/experiments/2026-12-03-the-level-0-cliff.md).
WARMUP_LEVELS = (-2,)
SHOWN_COMMAND_LEVEL = -1
# The words before the command a level -2 or -1 task shows (benchmarks/rung_forms.py takes it off again).
SHOWN_COMMAND_LEAD = "Run: "
# The operations of each warm-up level.
WARMUP_OPERATIONS = {-2: ("append_word", "count_characters", "copy_file")}
# Everyday words for append_word: a rare word (a domain term) turns the task
# into spelling it, which is not the skill this level is for.
COMMON_WORDS = ("done", "checked", "ready", "closed", "reviewed", "saved")


def _text_files(workspace):
    """Workspace files fit for a one-line shell command: UTF-8 text, ending in
    a newline, with a plain name, at least three lines."""
    found = []
    for name, data in sorted(workspace.items()):
        if name == "CONTRACT.md" or not isinstance(data, str) or not data.endswith("\n"):
            continue
        if any(c in name for c in " '\"$`\\*?[]") or len([line for line in data.splitlines() if line]) < 3:
            continue
        found.append(name)
    # Short top-level names first: the weakest policies copy a name they can
    # read at a glance far more reliably than a long or nested one.
    return sorted(found, key=lambda name: ("/" in name, len(name), name))


def _table_exports(workspace):
    """{"<table>.csv": rows} for the first table of each SQLite database in the workspace."""
    exports = {}
    for name, data in sorted(workspace.items()):
        if not isinstance(data, bytes) or not data.startswith(b"SQLite format 3\x00"):
            continue
        connection = sqlite3.connect(":memory:")
        try:
            connection.deserialize(data)
            tables = [row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            if tables:
                cursor = connection.execute('SELECT * FROM "%s"' % tables[0].replace('"', '""'))
                header = [column[0] for column in cursor.description]
                exports.setdefault(tables[0] + ".csv", csv_text(header, cursor.fetchall()))
        finally:
            connection.close()
    return exports


def sha256(data):
    """Hex digest of text (as UTF-8) or bytes: what a tree check compares."""
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode("utf-8")).hexdigest()


# Each operation: (rng, file name, its text, {other file: sha256}) ->
# (instruction, deliverable, rules, checks, command, format, labels).

def _append_word(rng, name, text, others):
    word = rng.choice(COMMON_WORDS)
    checks = [{"type": "text", "name": "%s with %s appended" % (name, word), "path": name, "expected": text + word + "\n"}]
    return ("Append the word %s to %s." % (word, name),
            {"path": name, "format": "text", "schema": "%s with one more line" % name},
            ["%s keeps its lines and ends with a line holding the word %s." % (name, word)],
            checks, "echo %s >> %s" % (word, name), "text", [word])


def _count_characters(rng, name, text, others):
    checks = [{"type": "number", "name": "characters in %s" % name, "path": "chars.txt",
               "expected": len(text.encode("utf-8")), "tolerance": 0}]
    return ("Write the number of characters in %s to chars.txt." % name,
            {"path": "chars.txt", "format": "text", "schema": "one integer"},
            ["The count is of bytes, newlines included, as `wc -c` gives it."],
            checks, "wc -c < %s > chars.txt" % name, "number", [])


def _copy_file(rng, name, text, others):
    # backup.<ext>: a short target name, which the model copies far more often right.
    target = "backup." + name.rsplit(".", 1)[-1] if "." in name.rsplit("/", 1)[-1] else "backup"
    checks = [{"type": "tree", "name": "%s copied" % name, "files": {name: sha256(text), target: sha256(text)}}]
    return ("Copy %s to %s." % (name, target),
            {"path": target, "format": "text", "schema": "a byte-for-byte copy of %s" % name},
            ["%s stays where it is." % name], checks, "cp %s %s" % (name, target), "tree", [])


OPERATIONS = {"append_word": _append_word, "count_characters": _count_characters,
              "copy_file": _copy_file}


def one_step_task(rng, params, workspace):
    """A warm-up task: one operation of `WARMUP_OPERATIONS[level]`, drawn from
    the seeded source (a plan entry's seeds start at 0, so `seed % n` would
    favour the first operations) with the plan's `operation_weights` if it
    gives them, on one text file of `workspace` (the
    family's level-0 files, kept as they are)."""
    level = params["difficulty"]
    # The family's own contract goes; this task's is written by assemble.
    workspace = {name: data for name, data in workspace.items() if name != "CONTRACT.md"}
    files = _text_files(workspace)
    if not files:
        # A workspace of SQLite databases only: a table of one, exported as CSV
        # beside it, is the file to work on.
        workspace.update(_table_exports(workspace))
        files = _text_files(workspace)
    if not files:
        raise ValueError("the level-0 workspace has no text file of three lines or more for a warm-up task")
    name = rng.choice(files[:4])
    operations = WARMUP_OPERATIONS[level]
    # The plan's shares of the level's operations (plan.warmup_operation_mix),
    # else an even draw (the draw round 1 and every plan without a mix make).
    weights = params.get("operation_weights")
    if weights:
        operation = rng.choices(operations, [weights.get(op, 0.0) for op in operations])[0]
    else:
        operation = rng.choice(operations)
    others = {other: sha256(data) for other, data in workspace.items() if other != name}
    others["CONTRACT.md"] = CONTRACT_UNCHANGED  # "every other file stays": the contract too
    instruction, deliverable, rules, checks, command, fmt, labels = OPERATIONS[operation](
        rng, name, workspace[name], others)
    instruction += " " + SHOWN_COMMAND_LEAD + command
    contract = {"deliverable": deliverable, "rules": rules, "parameters": {}, "labels": labels}
    task = assemble(params, instruction, workspace, contract, checks, {"operation": operation}, command, fmt)
    task["meta"]["operation"], task["meta"]["file"] = operation, name
    return task


# A family's level 0 comes in LEVEL0_VARIANTS kinds of task (delete the .tmp
# files, copy the logs to backup/, ...), its seed choosing which. Whether
# the policy solves one depends on the variant far more than on the family,
# so a round's seeds start at a variant that moves with the round
# (candidates.candidate_assignments).
LEVEL0_VARIANTS = 4


def level0_variant(seed):
    """Which of its level-0 variants a family builds for `seed`."""
    return seed % LEVEL0_VARIANTS


def shown_command_task(task):
    """Level -1: `task` (the family's level 0) with its solution's command
    appended to the instruction as level -2 shows one (" Run: ...")."""
    return dict(task, instruction=with_help(task["instruction"], SHOWN_COMMAND_LEAD + shown_command(task["solution"])))


def shown_command(solution):
    """A level-0 solution's command as level -1 shows it: its one or two
    short shell lines joined by "; ". Anything longer is no command to copy
    and raises."""
    lines = [line for line in solution[len(SOLUTION_HEADER):].splitlines() if line.strip()]
    if not solution.startswith(SOLUTION_HEADER) or not lines or len(lines) > 2 or any("<<" in line or "#" in line for line in lines):
        raise ValueError("level -1 shows level 0's command, and this level-0 solution is no short command: %r"
                         % solution)
    return "; ".join(line.strip() for line in lines)


def with_help(instruction, help_text):
    """`instruction` with `help_text` appended: after a space, or on a
    paragraph of its own after an instruction of several lines."""
    instruction = instruction.strip()
    return instruction + ("\n\n" if "\n" in instruction else " ") + help_text + "\n"


def in_words(instruction, command):
    """The task in words: `instruction` without the `command` it shows at
    its end (levels -2 and -1, with_help's SHOWN_COMMAND_LEAD + command),
    as the same task reads with nothing shown. An instruction that shows
    no such command is returned as it is."""
    shown = SHOWN_COMMAND_LEAD + command
    stripped = instruction.rstrip("\n")
    words = stripped[:-len(shown)]
    return words.strip() + "\n" if stripped.endswith(shown) and words[-1:].isspace() else instruction


# ---- oracle solutions: real scripts under oracles/<family>/, beside this module
#
# An oracle script is a plain Python program (it runs and lints as it is):
# its task values sit in one block between the two marker lines, each a line
# `NAME = value`, and the generator writes the task's values there. One that
# writes a structured deliverable holds a stand-in write_deliverable between
# the writer's marker lines, where the generator puts the task's writer
# (oracles/common/write_deliverable.py, filled in by records_deliverable).
# The solution embeds the filled script in solve.sh (solution/ holds solve.sh only).
ORACLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracles")
PARAMETERS_START = "# ---- parameters"
PARAMETERS_END = "# ---- end of parameters"
WRITER_START = "# ---- deliverable writer"
WRITER_END = "# ---- end of deliverable writer"


def _block(lines, start, end, where):
    """(first, last) line numbers of the one block between `start` and `end`, or None."""
    starts = [i for i, line in enumerate(lines) if line.startswith(start)]
    ends = [i for i, line in enumerate(lines) if line.startswith(end)]
    if len(starts) > 1 or len(ends) != len(starts) or (starts and ends[0] < starts[0]):
        raise ValueError("oracle %s: one block, or none, between `%s` and `%s`" % (where, start, end))
    return (starts[0], ends[0]) if starts else None


def oracle_source(family, name, writer=None, **values):
    """The text of `oracles/<family>/<name>.py` with `values` written into its
    parameter block (each as its repr; the block's names and `values`' must
    match) and `writer` (a records_deliverable writer) in its writer block,
    given exactly when it has one."""
    where = "%s/%s" % (family, name)
    with open(os.path.join(ORACLES_DIR, family, name + ".py"), encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    block = _block(lines, PARAMETERS_START, PARAMETERS_END, where)
    writer_block = _block(lines, WRITER_START, WRITER_END, where)
    if (writer is None) != (writer_block is None):
        raise ValueError("oracle %s: a writer is given exactly when the script has a writer block" % where)
    seen = []
    for i in range(block[0] + 1, block[1]) if block else ():
        parameter, equals, _ = lines[i].partition(" = ")
        if not equals or not parameter.isidentifier() or parameter not in values:
            raise ValueError("oracle %s: line %d of its parameter block is no parameter the generator gives: %r"
                             % (where, i + 1, lines[i]))
        lines[i] = "%s = %r\n" % (parameter, values[parameter])
        seen.append(parameter)
    if sorted(seen) != sorted(values):
        raise ValueError("oracle %s: parameters %s, given %s" % (where, sorted(seen), sorted(values)))
    if writer_block:
        first, last = writer_block
        lines[first + 1:last] = [writer if writer.endswith("\n") else writer + "\n"]
    return "".join(lines)


def python_oracle(family, name, writer=None, **values):
    """A solve.sh step that runs the oracle script `oracles/<family>/<name>.py`
    with `values` (and `writer`: see oracle_source)."""
    source = oracle_source(family, name, writer, **values)
    if "\nPY\n" in "\n" + source:
        raise ValueError("oracle %s/%s: a line PY would end the here-document" % (family, name))
    return "python3 - <<'PY'\n" + source + "PY\n"


def dump_json(value):
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def decimal_text(cents):
    return str(Decimal(cents).scaleb(-2))


def render_contract(contract):
    deliverable = contract["deliverable"]
    paths = deliverable.get("paths") or [deliverable["path"]]
    shown = ", ".join("`%s`" % path for path in paths)
    lines = ["# Answer contract", "", "Deliverable: %s (%s)." % (shown, deliverable["schema"]), "", "Rules:"]
    lines += ["- " + rule for rule in contract["rules"]]
    return "\n".join(lines) + "\n"


def write_task(out, task):
    files = {
        "instruction.md": task["instruction"],
        "solution/solve.sh": task["solution"],
        "answer/answer.json": dump_json(task["answer"]),
        "meta.json": dump_json(task["meta"]),
    }
    for rel, text in task["environment"].items():
        files["environment/" + rel] = text
    for rel in sorted(files):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = files[rel]  # text, or bytes for a binary file (a SQLite database)
        with open(path, "wb") as handle:
            handle.write(data if isinstance(data, bytes) else data.encode("utf-8"))


# Generator knobs the plan may turn (plan.KNOB_FOR_ROOT_CAUSE is the
# host's map from diagnosed root cause to knob).
KNOBS = ("final_check", "inline_contract", "list_tools", "list_workspace_files")
# What the sandbox's workspace offers, for the list_tools knob.
STANDARD_TOOLS = "bash, coreutils (cat, head, tail, wc, sort, uniq, cut, mkdir, mv, cp), grep, sed, awk, python3, sqlite3"


def _leaves(value):
    if isinstance(value, dict):
        return [leaf for item in value.items() for part in item for leaf in _leaves(part)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [str(value)]


def knob_text(knobs, environment, contract, key):
    """The paragraphs the plan's generator knobs add to the instruction (see
    plan.KNOB_FOR_ROOT_CAUSE: each targets a diagnosed root cause)."""
    deliverable = contract["deliverable"]
    paths = deliverable.get("paths") or [deliverable["path"]]
    shown = ", ".join(paths)
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError("unknown generator knobs %s; known: %s" % (unknown, list(KNOBS)))
    out = []
    if "list_workspace_files" in knobs:
        # Names that hold an answer value (per-record files named by id) stay
        # out of the instruction: the leakage audit would rightly reject it.
        secrets = [value for value in _leaves(key) if len(value) >= 3]
        files = sorted(name for name in environment if name != "CONTRACT.md")
        shown_files = [name for name in files if not any(value in name for value in secrets)][:20]
        more = " and %d more" % (len(files) - len(shown_files)) if len(files) > len(shown_files) else ""
        out.append("Files in the workspace: %s%s." % (", ".join(shown_files) or "see ls", more))
    if "inline_contract" in knobs:
        rules = "".join("\n- " + rule for rule in contract["rules"])
        out.append("Write %s (%s).%s" % (shown, deliverable["schema"], ("\nRules:" + rules) if rules else ""))
    if "list_tools" in knobs:
        out.append("Tools you can use: %s." % STANDARD_TOOLS)
    if "final_check" in knobs:
        out.append("Before you finish, check that %s exists and holds your answer." % shown)
    return out


# A tree check's expected hash for CONTRACT.md before it is rendered:
# assemble puts in the rendered contract's.
CONTRACT_UNCHANGED = "<the rendered CONTRACT.md>"


# What every solve.sh assemble writes starts with; the commands follow it.
SOLUTION_HEADER = "#!/bin/bash\nset -euo pipefail\n"


def assemble(params, instruction, environment, contract, checks, key, solution, fmt):
    environment = dict(environment)
    environment["CONTRACT.md"] = render_contract(contract)
    for check in checks:
        if check["type"] == "tree" and check["files"].get("CONTRACT.md") == CONTRACT_UNCHANGED:
            check["files"] = dict(check["files"], **{"CONTRACT.md": sha256(environment["CONTRACT.md"])})
    knobs = params.get("knobs") or []
    instruction = "\n\n".join([instruction.strip()] + knob_text(knobs, environment, contract, key))
    meta = {"track": params["track"], "format": fmt, "contract": contract}
    if knobs:
        meta["knobs"] = sorted(knobs)
    return {
        "instruction": instruction + "\n",
        "environment": environment,
        "solution": SOLUTION_HEADER + solution.strip() + "\n",
        "answer": {"key": key, "checks": checks},
        "meta": meta,
    }


def new_rng(params, seed):
    # A string seed is hashed with SHA-512: stable across runs and machines.
    return random.Random("%s|%s|L%d|%d" % (params["capability"], params["domain"]["id"], params["difficulty"], seed))


def record_ids(rng, domain, count):
    return ["%s-%04d" % (domain["id_prefix"], n) for n in sorted(rng.sample(range(1, 10000), count))]


def cents_range(domain):
    low, high = domain["numeric_range"]
    return int(round(low * 100)), int(round(high * 100))


def csv_text(header, rows):
    return "\n".join([",".join(header)] + [",".join(str(v) for v in row) for row in rows]) + "\n"


# ---- structured deliverables in every format

def deliverable_format(seed):
    return DELIVERABLE_FORMATS[seed % len(DELIVERABLE_FORMATS)]


def records_deliverable(fmt, stem, key, columns, expected, number_tolerance=0.001, split_column=None, split_values=()):
    """One structured deliverable of `expected` (a list of dicts over `columns`,
    numbers as int/float, missing values as None) in the format `fmt`:

    json     `<stem>.json`, a JSON array of objects
    csv      `<stem>.csv` with a header row
    files    `<stem>/<value>.csv`, one CSV per value of `split_column`, a
             header-only file for a value with no records
    report   `<stem>.md`, a free-text report for people that names every
             record's key, with the machine-checkable sidecar `<stem>.json`

    Returns {"paths", "schema", "rules", "checks", "writer", "format"}: the
    contract's deliverable schema and format rules, the verifier checks, and
    the source of a Python function `write_deliverable(result)` for the oracle
    solution (oracles/common/write_deliverable.py with these values; `result`
    is a list of dicts; Decimal values are written as numbers)."""
    if fmt not in DELIVERABLE_FORMATS:
        raise ValueError("unknown deliverable format %r" % (fmt,))
    rules = {c: {"kind": "number", "tolerance": number_tolerance} if is_number_column(expected, c) else {"kind": "text"}
             for c in columns}
    listed = ", ".join("`%s`" % c for c in columns)
    json_rule = "Numbers are JSON numbers; a missing value is null."
    csv_rule = "Numbers are written as plain decimals; a missing value is an empty field."
    order_rule = "Records may be in any order; numbers are compared with an absolute tolerance of %s." % number_tolerance

    def records_check(kind, path, records):
        return {"type": kind, "name": "records in %s" % path, "path": path, "key": list(key),
                "columns": rules, "expected": records}

    if fmt == "json":
        path = stem + ".json"
        schema = "a JSON array with one object per record, keys %s" % listed
        checks = [records_check("json_records", path, expected)]
        paths, extra = [path], [json_rule]
    elif fmt == "csv":
        path = stem + ".csv"
        schema = "CSV with header `%s`, one row per record" % ",".join(columns)
        checks = [records_check("csv_records", path, expected)]
        paths, extra = [path], [csv_rule]
    elif fmt == "files":
        if split_column is None or not split_values:
            raise ValueError("the files format needs split_column and split_values")
        paths = ["%s/%s.csv" % (stem, value) for value in split_values]
        schema = "one CSV per %s in the directory `%s/`, named `<%s>.csv`, header `%s`" % (
            split_column, stem, split_column, ",".join(columns))
        checks = [records_check("csv_records", "%s/%s.csv" % (stem, value),
                                [r for r in expected if r[split_column] == value]) for value in split_values]
        # A record under any other value would land in a file nobody checks: no other file may exist.
        checks.append({"type": "directory", "name": "files in %s/" % stem, "dir": stem,
                       "expected": ["%s.csv" % value for value in split_values]})
        extra = [csv_rule, "Write a file for each of %s and no other file there; a file with no records holds only "
                 "the header." % ", ".join("`%s`" % v for v in split_values)]
    else:
        path, sidecar = stem + ".md", stem + ".json"
        paths = [path, sidecar]
        schema = "a report for people in `%s`, and its machine-checkable sidecar `%s`: a JSON array with one object per record, keys %s" % (
            path, sidecar, listed)
        mentions = sorted({record_name(r, key) for r in expected})
        checks = [
            {"type": "contains", "name": "report names every record", "path": path, "min_words": 12, "expected": mentions},
            records_check("json_records", sidecar, expected),
        ]
        extra = ["The report is free text of at least twelve words that names every record by its %s." % " ".join(key),
                 json_rule]
    writer = oracle_source("common", "write_deliverable", _FMT=fmt, _STEM=stem, _COLUMNS=list(columns), _KEY=list(key),
                           _SPLIT=split_column, _VALUES=list(split_values))
    return {"paths": paths, "schema": schema, "rules": extra + [order_rule], "checks": checks, "writer": writer,
            "format": fmt}


def record_name(record, key):
    """How the report names a record: its key values, empty ones left out."""
    return " ".join(str(record[k]) for k in key if record[k] not in (None, ""))


def is_number_column(expected, column):
    values = [r.get(column) for r in expected if r.get(column) is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
