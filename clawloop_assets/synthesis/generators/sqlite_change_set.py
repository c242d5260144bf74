#!/usr/bin/env python3
"""Generator family `sqlite_change_set` (terminal track).

build(seed, params) -> task: a SQLite database of domain records and a change
set of inserts, updates and deletes keyed by the domain's id field, an
instruction, the answer contract, the expected end state of the database's
tables (every row, located by business key) computed from the generated data,
and an oracle solution. Stdlib-only, with generator_common.py beside it: it
runs in the sandbox as
`python3 -I /generator/sqlite_change_set.py --params P --seed N --out /out`.
The database is built with the sqlite3 module in a temporary directory and
shipped as bytes: fixed page size, rollback journal, insertion in a fixed
order, VACUUM, so the same seed gives the same bytes.

Levels: 0 = one sqlite3 CLI step on data.db (delete the void rows, import a
headerless CSV, run a SQL file, clear the void flags); 1 = a clean change set
applied to `<records>.db` (a CSV of insert/update/delete rows, or new rows
plus a list of removed ids); 2 = one change file (CSV or JSON) with sequence
numbers out of file order, dirty keys, partial updates, an update of an absent
key (skipped or inserted, as the contract says), delete then re-insert, an
insert over an existing key, values rounded half-up on storing; 3 = the change
set split over batch files behind changes/index.csv, seq counting within each
batch, group codes resolved through a reference table, a summary table kept
consistent (emptied groups removed); 4 = level 3 on dirty data: a rejected
batch, an unlisted file, JSON batches with other field names, values in
hundredths of the unit, an empty key, an insert without a value; 5 = level 4
with hundreds of records, soft deletes (a status column), retired rows counted
as absent, and an audit table with one row per change and its outcome.
"""

import json
import os
import sqlite3
import sys
import tempfile

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import (  # noqa: E402
    assemble,
    cents_range,
    csv_text,
    decimal_text,
    family,
    level0_variant,
    numbered_levels,
    python_oracle,
    record_ids,
)

TOLERANCE = 0.001
HUNDREDTHS = 100
OPS = ["insert", "update", "delete"]
STATUSES = ["active", "retired"]
OUTCOMES = ["applied", "skipped"]
BATCH_STATUSES = ["accepted", "rejected"]
POLICIES = ("skip", "insert")
AUDIT = "change_log"


# ---- the database file

def database_bytes(tables):
    """The bytes of a SQLite file holding `tables`, a list of (name, columns,
    primary key, rows); the same tables give the same bytes."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "build.db")
        con = sqlite3.connect(path)
        con.execute("PRAGMA page_size = 4096")
        con.execute("PRAGMA journal_mode = DELETE")
        for name, columns, key, rows in tables:
            parts = ["%s %s" % column for column in columns] + ["PRIMARY KEY (%s)" % ", ".join(key)]
            con.execute("CREATE TABLE %s (%s)" % (name, ", ".join(parts)))
            con.executemany("INSERT INTO %s VALUES (%s)" % (name, ", ".join("?" * len(columns))), rows)
        con.commit()
        con.execute("VACUUM")
        con.close()
        with open(path, "rb") as handle:
            return handle.read()


def money(cents):
    return None if cents is None else float(decimal_text(cents))


def half_up(mills):
    """Thousandths of the unit -> hundredths, halves away from zero (values are positive)."""
    return None if mills is None else (mills + 5) // 10


def mills_text(mills):
    return "%d.%03d" % divmod(mills, 1000)


def hundredths_text(mills):
    return "%d.%d" % divmod(mills, 10)


def records_check(db, table, key, columns, expected):
    return {"type": "sqlite_records", "name": "rows of %s" % table, "path": db, "table": table, "key": list(key),
            "columns": columns, "expected": expected}


def number_rule(tolerance=TOLERANCE):
    return {"kind": "number", "tolerance": tolerance}


TEXT = {"kind": "text"}


def end_rules(db):
    return [
        "Commit your changes: %s itself must hold the result (no -wal or -journal file left), with its tables and "
        "columns as they are." % db,
        "Rows are compared by key in any order; numbers with an absolute tolerance of %s." % TOLERANCE,
    ]


def contract_of(db, schema, rules, parameters=None, labels=()):
    return {
        "deliverable": {"path": db, "format": "sqlite", "schema": schema},
        "rules": rules + end_rules(db),
        "parameters": dict(parameters or {}, tolerance=TOLERANCE),
        "labels": list(labels),
    }


# ---- level 0: one sqlite3 CLI step

def level0(rng, seed, params):
    d = params["domain"]
    idf, gf, nf, table = d["id_field"], d["group_field"], d["numeric_field"], d["record_file"]
    db = "data.db"
    lo, hi = cents_range(d)
    ids = record_ids(rng, d, rng.randint(14, 20))
    rng.shuffle(ids)
    count = rng.randint(10, 13)
    rows = [[i, rng.choice(d["group_values"]), rng.randint(lo, hi), 0] for i in ids[:count]]
    fresh = ids[count:]
    variant = level0_variant(seed)
    if variant in (0, 3):
        for row in rng.sample(rows, rng.randint(2, 4)):
            row[3] = 1
    environment = {}
    final = [list(r) for r in rows]
    if variant == 0:
        final = [r for r in final if not r[3]]
        instruction = "In data.db, delete every row of the %s table whose void flag is set." % table
        rule = "Only the rows whose `void` is not zero go; every other row stays as it is."
        solution = 'sqlite3 %s "DELETE FROM %s WHERE void"' % (db, table)
    elif variant == 1:
        added = [[i, rng.choice(d["group_values"]), rng.randint(lo, hi), 0] for i in fresh[:rng.randint(2, 4)]]
        environment["new.csv"] = "".join("%s,%s,%s,%d\n" % (i, g, decimal_text(c), v) for i, g, c, v in added)
        final += added
        instruction = (
            "new.csv lists new %s without a header line, one per line, in the column order of the %s table. "
            "Add them to the %s table in data.db." % (d["entity_plural"], table, table)
        )
        rule = ("Each line of new.csv becomes one row with the values as written; the rows already there stay as "
                "they are.")
        solution = 'sqlite3 -csv %s ".import new.csv %s"' % (db, table)
    elif variant == 2:
        statements = []
        by_id = {r[0]: r for r in final}
        for i in fresh[:rng.randint(1, 2)]:
            row = [i, rng.choice(d["group_values"]), rng.randint(lo, hi), 0]
            statements.append("INSERT INTO %s (%s, %s, %s, void) VALUES ('%s', '%s', %s, 0);"
                              % (table, idf, gf, nf, i, row[1], decimal_text(row[2])))
            final.append(row)
        targets = rng.sample(sorted(by_id), 4)
        for i in targets[:2]:
            cents = rng.randint(lo, hi)
            statements.append("UPDATE %s SET %s = %s WHERE %s = '%s';" % (table, nf, decimal_text(cents), idf, i))
            by_id[i][2] = cents
        for i in targets[2:]:
            statements.append("DELETE FROM %s WHERE %s = '%s';" % (table, idf, i))
        final = [r for r in final if r[0] not in targets[2:]]
        rng.shuffle(statements)
        environment["changes.sql"] = "\n".join(statements) + "\n"
        instruction = "changes.sql holds SQL statements for the %s table of data.db. Apply them to data.db." % table
        rule = "Run the statements as written; nothing else changes."
        solution = "sqlite3 %s < changes.sql" % db
    else:
        final = [r[:3] + [0] for r in final]
        instruction = "In data.db, set the void column to zero in every row of the %s table." % table
        rule = "Only the `void` column changes; no row is added or removed."
        solution = 'sqlite3 %s "UPDATE %s SET void = 0"' % (db, table)
    columns = [(idf, "TEXT NOT NULL"), (gf, "TEXT NOT NULL"), (nf, "REAL"), ("void", "INTEGER NOT NULL")]
    environment[db] = database_bytes([(table, columns, [idf], [(i, g, money(c), v) for i, g, c, v in rows])])
    expected = [{idf: i, gf: g, nf: money(c), "void": v} for i, g, c, v in sorted(final)]
    check = records_check(db, table, [idf], {idf: TEXT, gf: TEXT, nf: number_rule(), "void": number_rule(0)}, expected)
    contract = contract_of(db, "table `%s` (%s, %s, %s, void)" % (table, idf, gf, nf), [rule])
    return assemble(params, instruction, environment, contract, [check], {table: expected}, solution, "sqlite")


# ---- level 1: a clean change set

def level1(rng, seed, params):
    d = params["domain"]
    idf, gf, nf, table = d["id_field"], d["group_field"], d["numeric_field"], d["record_file"]
    db = table + ".db"
    lo, hi = cents_range(d)
    ids = record_ids(rng, d, rng.randint(16, 20))
    rng.shuffle(ids)
    count = rng.randint(10, 13)
    rows = {i: (rng.choice(d["group_values"]), rng.randint(lo, hi)) for i in ids[:count]}
    fresh = ids[count:]
    existing = sorted(rows)
    rng.shuffle(existing)
    final = dict(rows)
    inserted = {i: (rng.choice(d["group_values"]), rng.randint(lo, hi)) for i in fresh[:rng.randint(2, 3)]}
    deleted = existing[:rng.randint(2, 3)]
    final.update(inserted)
    for i in deleted:
        del final[i]
    if seed % 2 == 0:
        targets = existing[len(deleted):len(deleted) + 3]
        updated = {i: (rng.choice(d["group_values"]), rng.randint(lo, hi)) for i in targets}
        final.update(updated)
        lines = ([("insert", i, g, decimal_text(c)) for i, (g, c) in inserted.items()]
                 + [("update", i, g, decimal_text(c)) for i, (g, c) in updated.items()]
                 + [("delete", i, "", "") for i in deleted])
        rng.shuffle(lines)
        environment = {"changes.csv": csv_text(["op", idf, gf, nf], lines)}
        instruction = (
            "%s has a table %s, one row per %s (%s, %s, %s in %s). Apply the changes in changes.csv to it: each row "
            "names an operation (insert, update or delete) and the %s it applies to."
            % (db, table, d["entity"], idf, gf, nf, d["unit"], idf)
        )
        rules = [
            "`insert` adds a new row; `update` sets the %s and %s of the row with that %s; `delete` removes the row "
            "with that %s (its other fields are empty)." % (gf, nf, idf, idf),
            "Rows that changes.csv does not name stay as they are.",
        ]
        solution = python_oracle("sqlite_change_set", "apply_rows", DB=db, TABLE=table, KEY=idf, GROUP=gf, VALUE=nf)
    else:
        new_file = "new_%s.csv" % table
        environment = {
            new_file: csv_text([idf, gf, nf], [(i, g, decimal_text(c)) for i, (g, c) in inserted.items()]),
            "removed.txt": "".join(i + "\n" for i in deleted),
        }
        instruction = (
            "%s has a table %s, one row per %s (%s, %s, %s in %s). Add the %s listed in %s to it, and delete the %s "
            "whose %s is listed in removed.txt." % (db, table, d["entity"], idf, gf, nf, d["unit"], d["entity_plural"],
                                                    new_file, d["entity_plural"], idf)
        )
        rules = [
            "Every row of %s (it has a header line) becomes a row of %s, with the values as written."
            % (new_file, table),
            "Every %s listed in removed.txt is deleted; all other rows stay as they are." % idf,
        ]
        solution = (
            'sqlite3 -csv %s ".import --skip 1 %s %s"\n'
            "while read -r id; do sqlite3 %s \"DELETE FROM %s WHERE %s = '$id'\"; done < removed.txt\n"
            % (db, new_file, table, db, table, idf)
        )
    columns = [(idf, "TEXT NOT NULL"), (gf, "TEXT NOT NULL"), (nf, "REAL")]
    initial = [(i, g, money(c)) for i, (g, c) in sorted(rows.items())]
    environment[db] = database_bytes([(table, columns, [idf], initial)])
    expected = [{idf: i, gf: g, nf: money(c)} for i, (g, c) in sorted(final.items())]
    check = records_check(db, table, [idf], {idf: TEXT, gf: TEXT, nf: number_rule()}, expected)
    contract = contract_of(db, "table `%s` (%s, %s, %s), one row per %s" % (table, idf, gf, nf, d["entity"]), rules,
                           labels=OPS)
    return assemble(params, instruction, environment, contract, [check], {table: expected}, solution, "sqlite")


# ---- levels 2-5: a change set whose hidden decisions the contract declares

# level: (initial records, filler changes, accepted batches)
SIZES = {2: ((16, 20), (4, 6), 1), 3: ((20, 24), (6, 9), 3), 4: ((24, 28), (6, 9), 3), 5: ((240, 300), (110, 140), 5)}
UNLISTED = 0  # the batch number of a file in changes/ that the index does not list


def plan_change_set(rng, d, level, policy):
    """The initial rows, the changes in canonical form (key, group name,
    value in thousandths of the unit) grouped into batch files in file order,
    and the gold end state. Every contract rule gets a planted case whose two
    readings end in different states; the cases use distinct keys."""
    lo, hi = cents_range(d)
    (rec_lo, rec_hi), (fill_lo, fill_hi), accepted_count = SIZES[level]
    groups = list(d["group_values"])
    rng.shuffle(groups)
    emptied, new_group, regular = (groups[0], groups[1], groups[2:]) if level >= 3 else (None, None, groups)
    count = rng.randint(rec_lo, rec_hi)
    ids = record_ids(rng, d, count + count // 2 + 40)
    rng.shuffle(ids)
    initial, fresh = ids[:count], ids[count:]
    rows = {}
    for n, key in enumerate(initial):
        rows[key] = {"group": regular[n] if n < len(regular) else rng.choice(regular), "cents": rng.randint(lo, hi),
                     "status": "active"}
    # The first row of each regular group is never touched, so every regular group keeps a row with a value.
    pool = initial[len(regular):]
    emptied_keys = pool[:rng.randint(1, 2)] if emptied else []
    for key in emptied_keys:
        rows[key]["group"] = emptied
    pool = pool[len(emptied_keys):]
    retired = pool[:count // 10] if level >= 5 else []
    for key in retired:
        rows[key]["status"] = "retired"
    pool = pool[len(retired):]

    numbers = list(range(1, accepted_count + (2 if level >= 4 else 1)))
    rejected = rng.choice(numbers[1:]) if level >= 4 else None
    accepted = [n for n in numbers if n != rejected]
    changes, reversed_pairs = [], []

    def rand_mills():
        return rng.randint(lo * 10, hi * 10)

    def new_mills(old_cents):
        while True:
            mills = rand_mills()
            if half_up(mills) != old_cents:
                return mills

    def half_mills():
        cents = rng.randint(lo, hi - 2)
        return 10 * (cents + cents % 2) + 5  # an exact half after an even hundredth: half-up and half-even differ

    def other_group(group):
        return rng.choice([g for g in regular if g != group])

    def change(op, key, group=None, mills=None, batch=None, t=None, dirty=None):
        c = {"n": len(changes), "op": op, "key": key, "group": group, "mills": mills,
             "batch": rng.choice(accepted) if batch is None else batch,
             "t": rng.uniform(0.01, 0.99) if t is None else t, "dirty": dirty}
        changes.append(c)
        return c

    def in_order(first, second):
        """Two changes of one key in one batch: `first` gets the lower seq, `second` comes first in the file."""
        batch = rng.choice(accepted)
        t1, t2 = sorted(rng.uniform(0.01, 0.99) for _ in range(2))
        pair = (change(*first, batch=batch, t=t1), change(*second, batch=batch, t=t2))
        reversed_pairs.append(pair)

    key = pool.pop()
    m1 = new_mills(rows[key]["cents"])
    in_order(("update", key, None, m1), ("update", key, None, new_mills(half_up(m1))))
    key = pool.pop()
    in_order(("delete", key), ("insert", key, rng.choice(regular), rand_mills()))
    change("update", fresh.pop(), rng.choice(regular), rand_mills())
    key = pool.pop()
    change("update", key, other_group(rows[key]["group"]), None)
    key = pool.pop()
    change("update", key, None, new_mills(rows[key]["cents"]))
    key = pool.pop()
    change("insert", key, other_group(rows[key]["group"]), new_mills(rows[key]["cents"]))
    change("insert", fresh.pop(), rng.choice(regular), half_mills())
    key = pool.pop()
    change("update", key, None, new_mills(rows[key]["cents"]), dirty=True)
    change("delete", pool.pop(), dirty=True)
    if level >= 3:
        # The same key in two batches: the later batch's change has the lower seq.
        key, i = pool.pop(), rng.randrange(len(accepted) - 1)
        m1 = new_mills(rows[key]["cents"])
        change("update", key, None, m1, accepted[i], 0.999)
        change("update", key, None, new_mills(half_up(m1)), accepted[i + 1], 0.001)
        cross = (accepted[i], accepted[i + 1])
        for key in emptied_keys:
            change("delete", key)
        change("insert", fresh.pop(), new_group, rand_mills())
    hundredths_batch = None
    if level >= 4:
        change("insert", None, rng.choice(regular), rand_mills())
        change("insert", fresh.pop(), rng.choice(regular), None)
        hundredths_batch = rng.choice(accepted)
        change("insert", fresh.pop(), rng.choice(regular), rand_mills(), batch=hundredths_batch)
        for batch in (rejected, UNLISTED):
            change("delete", pool.pop(), batch=batch)
            key = pool.pop()
            change("update", key, None, new_mills(rows[key]["cents"]), batch=batch)
            change("insert", fresh.pop(), rng.choice(regular), rand_mills(), batch=batch)
    if level >= 5:
        key = retired.pop()
        change("update", key, other_group(rows[key]["group"]), new_mills(rows[key]["cents"]))
        change("delete", retired.pop())
        change("insert", retired.pop(), rng.choice(regular), rand_mills())
        change("delete", fresh.pop())
    for n in range(rng.randint(fill_lo, fill_hi)):
        batch = accepted[n] if n < len(accepted) else rng.choice(accepted)
        kind = rng.random()
        if kind < 0.3 or not pool:
            change("insert", fresh.pop(), rng.choice(regular), rand_mills(), batch)
        elif kind < 0.8:
            key = pool.pop()
            shape = rng.choice(["both", "both", "group", "value"])
            group = other_group(rows[key]["group"]) if shape != "value" else None
            change("update", key, group, new_mills(rows[key]["cents"]) if shape != "group" else None, batch)
        else:
            change("delete", pool.pop(), batch=batch)

    files = {}
    for c in changes:
        files.setdefault(c["batch"], []).append(c)
    for batch in sorted(files):
        items = sorted(files[batch], key=lambda c: c["t"])
        seq = 1
        for c in items:
            c["seq"] = seq
            seq += rng.randint(1, 2)
        rng.shuffle(items)
        for first, second in reversed_pairs:
            place = {c["n"]: p for p, c in enumerate(items)}
            if first["batch"] == batch and place[first["n"]] < place[second["n"]]:
                items[place[first["n"]]], items[place[second["n"]]] = second, first
        files[batch] = items
    applied = sorted((c for n in accepted for c in files[n]), key=lambda c: (c["batch"], c["seq"]))
    final, log = apply_changes(rows, applied, policy, soft=level >= 5)
    return {
        "rows": rows, "final": final, "log": log, "files": files, "accepted": accepted, "rejected": rejected,
        "regular": regular, "cross": cross if level >= 3 else None, "hundredths_batch": hundredths_batch,
    }


def apply_changes(rows, applied, policy, soft):
    """The gold end state: rows {key: {group, cents, status}} and the audit log."""
    rows = {k: dict(v) for k, v in rows.items()}
    log = []
    for c in applied:
        key, op = c["key"], c["op"]
        present = key in rows and rows[key]["status"] == "active"
        outcome = "applied"
        if key is None:
            outcome = "skipped"
        elif op == "delete":
            if not present:
                outcome = "skipped"
            elif soft:
                rows[key]["status"] = "retired"
            else:
                del rows[key]
        elif op == "insert" or (not present and policy == "insert"):
            rows[key] = {"group": c["group"], "cents": half_up(c["mills"]), "status": "active"}
        elif present:
            if c["group"] is not None:
                rows[key]["group"] = c["group"]
            if c["mills"] is not None:
                rows[key]["cents"] = half_up(c["mills"])
        else:
            outcome = "skipped"
        log.append({"batch": c["batch"], "seq": c["seq"], "key": key, "op": op, "outcome": outcome})
    return rows, log


def summary_of(rows):
    """{group: (records, total cents)} over the active rows; groups without rows are absent."""
    summary = {}
    for row in rows.values():
        if row["status"] != "active":
            continue
        records, total = summary.get(row["group"], (0, 0))
        summary[row["group"]] = (records + 1, total + (row["cents"] or 0))
    return summary


def dirty_key(rng, c):
    key = c["key"]
    if key is None:
        return ""
    variants = [key.lower(), " " + key, key + " ", " " + key.lower(), key.lower() + " "]
    if c["dirty"] or (c["dirty"] is None and rng.random() < 0.25):
        return rng.choice(variants)
    return key


def group_codes(rng, d):
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    codes = {}
    for group in d["group_values"]:
        while True:
            code = "".join(rng.choice(letters) for _ in range(3))
            if code not in codes.values():
                codes[group] = code
                break
    return codes


def batch_files(rng, d, level, plan, fmt):
    """{number: (file name, format, hundredths)} for every batch file, the unlisted one included. Names carry
    no order: the file of the later batch of the cross-batch pair sorts first."""
    numbers = sorted(plan["files"])
    stems = list(d["file_stems"])
    bases = []
    while len(bases) < len(numbers):
        base = "%s_%03d" % (rng.choice(stems), rng.randint(100, 999))
        if base not in bases:
            bases.append(base)
    base_of = dict(zip(numbers, bases))
    first, second = plan["cross"]
    if base_of[second] > base_of[first]:
        base_of[first], base_of[second] = base_of[second], base_of[first]
    if level == 3:
        formats = {n: fmt for n in numbers}
    else:
        accepted = plan["accepted"]
        chosen = ["csv", "json"] + [rng.choice(["csv", "json"]) for _ in accepted[2:]]
        rng.shuffle(chosen)
        formats = dict(zip(accepted, chosen))
        formats.update({n: rng.choice(["csv", "json"]) for n in numbers if n not in formats})
    return {n: ("%s.%s" % (base_of[n], formats[n]), formats[n], n == plan["hundredths_batch"]) for n in numbers}


def render_batch(rng, d, level, items, fmt, hundredths, codes):
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    value_field = nf + "_hundredths" if hundredths else nf
    show = hundredths_text if hundredths else mills_text
    code_field = gf if level == 2 else gf + "_code"
    entries = []
    for c in items:
        group = c["group"] if level == 2 or c["group"] is None else codes[c["group"]]
        value = None if c["mills"] is None else show(c["mills"])
        entries.append((c["seq"], c["op"], dirty_key(rng, c), group, value))
    if fmt == "csv":
        rows = [(s, op, k, "" if g is None else g, "" if v is None else v) for s, op, k, g, v in entries]
        return csv_text(["seq", "op", idf, code_field, value_field], rows)
    objects = []
    for s, op, k, g, v in entries:
        if level <= 3:
            objects.append({"seq": s, "op": op, idf: k, code_field: g, value_field: None if v is None else float(v)})
        else:
            # Level 4 JSON batches name the fields differently and leave out what they do not give.
            item = {"seq": s, "action": op, "key": k}
            if g is not None:
                item["code"] = g
            if v is not None:
                item[value_field] = float(v)
            objects.append(item)
    return json.dumps(objects, indent=2) + "\n"


def change_set_task(rng, seed, params, level):
    d = params["domain"]
    idf, gf, nf, table = d["id_field"], d["group_field"], d["numeric_field"], d["record_file"]
    db = table + ".db"
    codes_table, summary_table, total = gf + "_codes", gf + "_summary", "total_" + nf
    fmt = ("csv", "json")[seed % 2]
    policy = POLICIES[(seed // 2) % 2]
    plan = plan_change_set(rng, d, level, policy)
    soft = level >= 5
    codes = group_codes(rng, d)
    environment = {}
    if level == 2:
        change_file = "changes." + fmt
        environment[change_file] = render_batch(rng, d, level, plan["files"][1], fmt, False, codes)
    else:
        names = batch_files(rng, d, level, plan, fmt)
        for batch, (name, batch_fmt, hundredths) in sorted(names.items()):
            environment["changes/" + name] = render_batch(rng, d, level, plan["files"][batch], batch_fmt, hundredths,
                                                          codes)
        listed = [n for n in sorted(names) if n != UNLISTED]
        if level == 3:
            index = [(n, names[n][0]) for n in listed]
            header = ["batch", "file"]
        else:
            index = [(n, names[n][0], "rejected" if n == plan["rejected"] else "accepted") for n in listed]
            header = ["batch", "file", "status"]
        environment["changes/index.csv"] = csv_text(header, sorted(index, key=lambda r: r[1]))

    main_columns = [(idf, "TEXT NOT NULL"), (gf, "TEXT"), (nf, "REAL")]
    if soft:
        main_columns.append(("status", "TEXT NOT NULL"))

    def main_row(key, row):
        values = (key, row["group"], money(row["cents"]))
        return values + (row["status"],) if soft else values

    tables = [(table, main_columns, [idf], [main_row(k, plan["rows"][k]) for k in sorted(plan["rows"])])]
    checks, key = [], {}
    expected = [dict(zip([c for c, _ in main_columns], main_row(k, plan["final"][k]))) for k in sorted(plan["final"])]
    main_check_columns = {idf: TEXT, gf: TEXT, nf: number_rule()}
    if soft:
        main_check_columns["status"] = TEXT
    checks.append(records_check(db, table, [idf], main_check_columns, expected))
    key[table] = expected
    if level >= 3:
        tables.append((codes_table, [("code", "TEXT NOT NULL"), (gf, "TEXT NOT NULL")], ["code"],
                       [(code, group) for group, code in sorted(codes.items(), key=lambda item: item[1])]))
        summary_columns = [(gf, "TEXT NOT NULL"), ("records", "INTEGER NOT NULL"), (total, "REAL NOT NULL")]
        before = [(g, n, money(t)) for g, (n, t) in sorted(summary_of(plan["rows"]).items())]
        tables.append((summary_table, summary_columns, [gf], before))
        expected = [{gf: g, "records": n, total: money(t)} for g, (n, t) in sorted(summary_of(plan["final"]).items())]
        summary_rules = {gf: TEXT, "records": number_rule(0), total: number_rule()}
        checks.append(records_check(db, summary_table, [gf], summary_rules, expected))
        key[summary_table] = expected
    if soft:
        tables.append((AUDIT, [("batch", "INTEGER NOT NULL"), ("seq", "INTEGER NOT NULL"), (idf, "TEXT"),
                               ("op", "TEXT NOT NULL"), ("outcome", "TEXT NOT NULL")], ["batch", "seq"], []))
        expected = [{"batch": e["batch"], "seq": e["seq"], idf: e["key"], "op": e["op"], "outcome": e["outcome"]}
                    for e in plan["log"]]
        audit_rules = {"batch": number_rule(0), "seq": number_rule(0), idf: TEXT, "op": TEXT, "outcome": TEXT}
        checks.append(records_check(db, AUDIT, ["batch", "seq"], audit_rules, expected))
        key[AUDIT] = expected
    environment[db] = database_bytes(tables)

    words = {"db": db, "t": table, "idf": idf, "gf": gf, "nf": nf, "unit": d["unit"], "entity": d["entity"],
             "label": d["numeric_label"], "codes": codes_table, "summary": summary_table, "total": total}
    contract = change_set_contract(level, policy, words, fmt)
    instruction = change_set_instruction(level, words, fmt)
    solution = change_set_solution(level, policy, words, fmt)
    return assemble(params, instruction, environment, contract, checks, key, solution, "sqlite")


def change_set_instruction(level, w, fmt):
    described = ("%(db)s holds the table %(t)s: one row per %(entity)s, keyed by %(idf)s, with its %(gf)s and its "
                 "%(nf)s (%(label)s, in %(unit)s)" % w)
    if level == 2:
        return (described + ". changes.%s is a change set for that table: inserts, updates and deletes keyed by %s. "
                "Apply it to %s following the rules in CONTRACT.md exactly." % (fmt, w["idf"], w["db"]))
    text = (described + "; it also holds the reference table %(codes)s and the summary table %(summary)s. A change set "
            "for %(t)s arrived in batches: changes/index.csv lists the batch files in changes/. Apply the change set, "
            "keep %(summary)s consistent with %(t)s" % w)
    if level >= 5:
        text += ", and record every change in %s" % AUDIT
    text += ", following the rules in CONTRACT.md exactly."
    if level >= 4:
        text += " Not every file is clean or in the same shape; CONTRACT.md says how each case is treated."
    return text


def change_set_contract(level, policy, w, fmt):
    soft = level >= 5
    rules = []
    if level == 2:
        rules.append("Changes are applied in increasing `seq` order; the order of the entries in changes.%s does not "
                     "matter." % fmt)
    else:
        rules.append("Batches are applied in increasing `batch` number from changes/index.csv; within a batch, changes "
                     "are applied in increasing `seq`, which counts within each batch. The order of the entries in a "
                     "file does not matter.")
    rules.append("A key is matched after trimming surrounding spaces and ignoring letter case; keys are stored in "
                 "capital letters.")
    if level >= 3:
        rules.append("`%(gf)s_code` gives a code from the table %(codes)s; store the %(gf)s it stands for." % w)
    rules.append("`insert` sets every field of the row: an existing row with that key is overwritten.")
    rules.append("`update` changes only the fields it gives: an empty, null or absent field leaves the stored value "
                 "as it is.")
    if policy == "skip":
        rules.append("An `update` of a key that is not in the table is ignored: it inserts nothing.")
    else:
        rules.append("An `update` of a key that is not in the table inserts the row, as an `insert` with the same "
                     "fields would.")
    if soft:
        rules.append("`delete` does not remove the row: it sets its `status` to `retired`. Every `insert` stores "
                     "`status` `active`, so a later `insert` of a deleted key makes it active again.")
        rules.append("A `retired` row counts as absent for `update` and `delete`: a `delete` of an absent key does "
                     "nothing, and an `update` of a retired key follows the rule for a key that is not in the table.")
    else:
        rules.append("`delete` removes the row; a later `insert` of the same key adds it again.")
    rules.append("%(nf)s values are rounded to two decimals, halves away from zero, before they are stored." % w)
    if level >= 4:
        rules.append("Only the batches whose `status` in changes/index.csv is `accepted` are applied; a file in "
                     "changes/ that the index does not list is ignored.")
        rules.append("JSON batch files name the fields differently: `action` is the op, `key` the %(idf)s and `code` "
                     "the %(gf)s code." % w)
        rules.append("A value given in a field named `%s_hundredths` is in hundredths of %s: divide it by %d, then "
                     "round as above." % (w["nf"], w["unit"], HUNDREDTHS))
        rules.append("A change whose key is empty is skipped.")
        rules.append("An `insert` without a %(nf)s stores NULL; such rows count in `records`, and `%(total)s` adds "
                     "only the values present." % w)
    if level >= 3:
        row = "`active` row" if soft else "row"
        rules.append("After the changes, %s holds one row per %s that has at least one %s in %s: `records` is the "
                     "number of those rows and `%s` the sum of their stored %s. Any %s left with no such row has no "
                     "summary row." % (w["summary"], w["gf"], row, w["t"], w["total"], w["nf"], w["gf"]))
    if soft:
        rules.append("%s gets one row per change of every applied batch: its `batch` and `seq`, the matched key in "
                     "capital letters (NULL when the key is empty), its `op`, and `outcome`: `skipped` for a change "
                     "with an empty key, a `delete` of an absent key, or an `update` the rules above ignore; `applied` "
                     "otherwise." % AUDIT)
    schema = "table `%(t)s` (%(idf)s, %(gf)s, %(nf)s" % w + (", status)" if soft else ")")
    if level >= 3:
        schema += " and table `%(summary)s` (%(gf)s, records, %(total)s)" % w
    if soft:
        schema += " and table `%s` (batch, seq, %s, op, outcome)" % (AUDIT, w["idf"])
    parameters = {"hundredths_divisor": HUNDREDTHS} if level >= 4 else {}
    labels = OPS + (BATCH_STATUSES if level >= 4 else []) + (STATUSES + OUTCOMES if soft else [])
    return contract_of(w["db"], schema, rules, parameters, labels)


def change_set_solution(level, policy, w, fmt):
    """The oracle (oracles/sqlite_change_set/change_set.py): it reads the change set the way the contract says and
    rewrites the tables."""
    return python_oracle(
        "sqlite_change_set", "change_set", DB=w["db"], TABLE=w["t"], KEY=w["idf"], GROUP=w["gf"], VALUE=w["nf"],
        CHANGE_FILE="changes." + fmt if level == 2 else None, CODES=w["codes"] if level >= 3 else None,
        SUMMARY=w["summary"] if level >= 3 else None, TOTAL=w["total"] if level >= 3 else None,
        HUNDREDTHS=HUNDREDTHS if level >= 4 else None, MISSING_UPDATE=policy, DIRTY=level >= 4,
        SOFT_DELETE=level >= 5, AUDIT=AUDIT if level >= 5 else None)


LEVELS = (level0, level1) + numbered_levels(change_set_task, (2, 3, 4, 5))
build = family(__name__, LEVELS)
