#!/usr/bin/env python3
"""Generator family `ledger_reconciliation` (analysis track).

build(seed, params) -> task: two sources of the same domain records, an
instruction, the answer contract, the answer key computed from the generated
sources, and an oracle solution. Stdlib-only, with generator_common.py
beside it: it runs in the sandbox as `python3 -I
/generator/ledger_reconciliation.py --params P --seed N --out /out`.

Levels: 0 = one `comm`/`sort` step on two sorted id lists; 1 = a set
difference or amount comparison on two unsorted CSVs; 2 = full
reconciliation with dirty keys, split entries, a match tolerance, and a CSV
or JSON discrepancy report; 3 = the same reconciliation over a multi-hop
layout (the first source is an index of per-record detail files holding
entries, the second is keyed by reference codes that a map turns into ids);
4 = level 3 on dirty data (detail files the index does not list, a second
export in cents under other column names, references the map does not know,
dirty references); 5 = level 4 with well over a hundred records and voided
entries. Levels 3-5 rotate the deliverable through JSON, CSV, one file per
status and a report with a JSON sidecar.
"""

import os
import sys

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import (  # noqa: E402
    assemble,
    cents_range,
    csv_text,
    decimal_text,
    deliverable_format,
    family,
    level0_variant,
    python_oracle,
    record_ids,
    records_deliverable,
    shaped_levels,
)

# ---- the family

def split_ids(rng, domain, only_a, only_b, common):
    ids = record_ids(rng, domain, only_a + only_b + common)
    rng.shuffle(ids)
    a_only, b_only, both = ids[:only_a], ids[only_a:only_a + only_b], ids[only_a + only_b:]
    return sorted(a_only), sorted(b_only), sorted(both)


def lines_contract(out, ordered):
    order = "in sorted order" if ordered else "in any order"
    return {
        "deliverable": {"path": out, "format": "lines", "schema": "one id per line, %s" % order},
        "rules": ["Write each id once, exactly as it appears in the sources; blank lines and surrounding spaces are ignored."],
        "parameters": {},
        "labels": [],
    }


def level0(rng, seed, params):
    d = params["domain"]
    a_name, b_name = d["ledger_sources"]
    a_file, b_file = a_name + ".txt", b_name + ".txt"
    a_only, b_only, both = split_ids(rng, d, rng.randint(2, 5), rng.randint(2, 5), rng.randint(6, 12))
    a_ids, b_ids = sorted(a_only + both), sorted(b_only + both)
    variant = level0_variant(seed)
    sorted_note = "Both files are sorted."
    if variant == 0:
        out, expected, ordered = "missing.txt", a_only, False
        instruction = "Write the ids in %s that are missing from %s to missing.txt, one per line. %s" % (a_file, b_file, sorted_note)
        solution = "comm -23 %s %s > missing.txt" % (a_file, b_file)
    elif variant == 1:
        out, expected, ordered = "extra.txt", b_only, False
        instruction = "Write the ids in %s that do not appear in %s to extra.txt, one per line. %s" % (b_file, a_file, sorted_note)
        solution = "comm -13 %s %s > extra.txt" % (a_file, b_file)
    elif variant == 2:
        out, expected, ordered = "matched.txt", both, False
        instruction = "Write the ids that appear in both %s and %s to matched.txt, one per line. %s" % (a_file, b_file, sorted_note)
        solution = "comm -12 %s %s > matched.txt" % (a_file, b_file)
    else:
        out, expected, ordered = "all_ids.txt", sorted(a_only + b_only + both), True
        instruction = "Write every id from %s and %s to all_ids.txt, sorted, one per line, without duplicates." % (a_file, b_file)
        solution = "sort -u %s %s > all_ids.txt" % (a_file, b_file)
    environment = {a_file: "".join(i + "\n" for i in a_ids), b_file: "".join(i + "\n" for i in b_ids)}
    check = {"type": "lines", "name": "ids in %s" % out, "path": out, "expected": expected, "ordered": ordered}
    return assemble(params, instruction, environment, lines_contract(out, ordered), [check], {out: expected}, solution, "lines")


def level1(rng, seed, params):
    d = params["domain"]
    a_name, b_name = d["ledger_sources"]
    a_file, b_file = a_name + ".csv", b_name + ".csv"
    idf, nf = d["id_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    a_only, b_only, both = split_ids(rng, d, rng.randint(2, 4), rng.randint(2, 4), rng.randint(6, 12))
    a_amount = {i: rng.randint(lo, hi) for i in a_only + both}
    b_amount = {i: rng.randint(lo, hi) for i in b_only}
    differing = set(rng.sample(both, rng.randint(2, max(2, len(both) // 3))))
    for i in both:
        b_amount[i] = a_amount[i] if i not in differing else a_amount[i] + rng.choice([-1, 1]) * rng.randint(1, 500)
        if b_amount[i] <= 0:
            b_amount[i] = a_amount[i] + rng.randint(1, 500)
    a_rows = [(i, decimal_text(a_amount[i])) for i in a_amount]
    b_rows = [(i, decimal_text(b_amount[i])) for i in b_amount]
    rng.shuffle(a_rows)
    rng.shuffle(b_rows)
    environment = {a_file: csv_text([idf, nf], a_rows), b_file: csv_text([idf, nf], b_rows)}
    columns = "Both files have the columns %s and %s and are not sorted." % (idf, nf)
    if seed % 2 == 0:
        out, expected = "missing.txt", a_only
        instruction = "Write the %s values of %s that have no row in %s to missing.txt, one per line. %s" % (idf, a_file, b_file, columns)
        solution = (
            "comm -23 <(tail -n +2 %s | cut -d, -f1 | sort) <(tail -n +2 %s | cut -d, -f1 | sort) > missing.txt"
            % (a_file, b_file)
        )
    else:
        out, expected = "mismatched.txt", sorted(differing)
        instruction = (
            "Write the %s values that appear in both %s and %s but with a different %s to mismatched.txt, one per line. %s"
            % (idf, a_file, b_file, nf, columns)
        )
        solution = (
            "awk -F, 'NR == FNR { a[$1] = $2; next } FNR > 1 && ($1 in a) && a[$1] != $2 { print $1 }' %s %s > mismatched.txt"
            % (a_file, b_file)
        )
    check = {"type": "lines", "name": "ids in %s" % out, "path": out, "expected": expected, "ordered": False}
    return assemble(params, instruction, environment, lines_contract(out, False), [check], {out: expected}, solution, "lines")


def level2(rng, seed, params):
    d = params["domain"]
    a_name, b_name = d["ledger_sources"]
    a_file, b_file = a_name + ".csv", b_name + ".csv"
    idf, nf = d["id_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    tolerance = 5  # cents: two amounts match when they differ by at most this
    a_only, b_only, both = split_ids(rng, d, rng.randint(2, 3), rng.randint(1, 2), rng.randint(10, 14))
    a_amount = {i: rng.randint(lo, hi) for i in a_only + both}
    b_parts = {i: [rng.randint(lo, hi)] for i in b_only}
    cases = ["within", "at_tolerance", "beyond", "far", "split_match", "split_mismatch"]
    cases += ["exact"] * (len(both) - len(cases))
    rng.shuffle(cases)
    for i, case in zip(both, cases):
        a = a_amount[i]
        sign = rng.choice([-1, 1])
        if case == "exact":
            b_parts[i] = [a]
        elif case == "within":
            b_parts[i] = [a + sign * rng.randint(1, tolerance - 1)]
        elif case == "at_tolerance":
            b_parts[i] = [a + sign * tolerance]
        elif case == "beyond":
            b_parts[i] = [a + sign * rng.randint(tolerance + 1, tolerance + 4)]
        elif case == "far":
            b_parts[i] = [a + rng.randint(100, max(101, (hi - lo) // 4))]
        else:
            total = a if case == "split_match" else a + rng.randint(tolerance + 1, 300)
            first = rng.randint(1, total - 1)
            b_parts[i] = [first, total - first]
    b_rows = []
    for i, parts in b_parts.items():
        for amount in parts:
            # Dirty keys: the second source sometimes writes ids in lower case or padded.
            shown = rng.choice([i, i, i.lower(), " " + i, i + " ", " " + i.lower()])
            b_rows.append((shown, decimal_text(amount)))
    a_rows = [(i, decimal_text(a_amount[i])) for i in a_amount]
    rng.shuffle(a_rows)
    rng.shuffle(b_rows)

    status_a, status_b = "only_in_" + a_name, "only_in_" + b_name
    a_col, b_col = a_name + "_amount", b_name + "_amount"
    expected = []
    for i in sorted(set(a_amount) | set(b_parts)):
        a = a_amount.get(i)
        b = sum(b_parts[i]) if i in b_parts else None
        if a is None:
            row = {idf: i, "status": status_b, a_col: None, b_col: float(decimal_text(b)), "difference": None}
        elif b is None:
            row = {idf: i, "status": status_a, a_col: float(decimal_text(a)), b_col: None, "difference": None}
        elif abs(b - a) > tolerance:
            row = {idf: i, "status": "amount_mismatch", a_col: float(decimal_text(a)), b_col: float(decimal_text(b)),
                   "difference": float(decimal_text(b - a))}
        else:
            continue
        expected.append(row)

    fmt = "csv" if seed % 2 == 0 else "json"
    out = "reconciliation." + fmt
    columns = [idf, "status", a_col, b_col, "difference"]
    if fmt == "csv":
        schema = "CSV with header `%s`, one row per id that does not match" % ",".join(columns)
        empty = "left empty"
    else:
        schema = "a JSON array with one object per id that does not match, keys %s" % ", ".join("`%s`" % c for c in columns)
        empty = "null"
    tol_text = decimal_text(tolerance)
    contract = {
        "deliverable": {"path": out, "format": fmt, "schema": schema, "columns": columns},
        "rules": [
            "Ids are compared after trimming surrounding spaces and ignoring letter case; write ids in upper case.",
            "An id listed on several rows of %s is one entry whose amount is the sum of those rows." % b_file,
            "Two amounts match when they differ by at most %s %s; a difference of exactly %s is a match." % (tol_text, d["unit"], tol_text),
            "Report only ids that do not match: `%s` (no row in %s), `%s` (no row in %s), or `amount_mismatch`."
            % (status_a, b_file, status_b, a_file),
            "`%s` and `%s` are the amounts of each source (after summing); the amount of a source that has no row is %s."
            % (a_col, b_col, empty),
            "`difference` is the %s amount minus the %s amount, to two decimals; it is %s when either amount is missing."
            % (b_name, a_name, empty),
            "Rows may be in any order; numbers are compared with an absolute tolerance of 0.001.",
        ],
        "parameters": {"match_tolerance": float(tol_text), "tolerance": 0.001},
        "labels": [status_a, status_b, "amount_mismatch"],
    }
    instruction = (
        "%s and %s both record the %s (%s) of each %s, keyed by %s. Reconcile the two sources following the rules in "
        "CONTRACT.md exactly and write the discrepancies to %s."
        % (a_file, b_file, d["numeric_label"], d["unit"], d["entity"], idf, out)
    )
    number = {"kind": "number", "tolerance": 0.001}
    check = {
        "type": "csv_records" if fmt == "csv" else "json_records", "name": "discrepancies", "path": out, "key": [idf],
        "columns": {idf: {"kind": "text"}, "status": {"kind": "text"}, a_col: number, b_col: number, "difference": number},
        "expected": expected,
    }
    solution = python_oracle("ledger_reconciliation", "two_sources", A=a_file, B=b_file, OUT=out, KEY=idf, VALUE=nf,
                             STATUS_A=status_a, STATUS_B=status_b, TOLERANCE=tol_text, COLUMNS=columns)
    environment = {a_file: csv_text([idf, nf], a_rows), b_file: csv_text([idf, nf], b_rows)}
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, fmt)


TOLERANCE = 5  # cents: two totals match when they differ by at most this


def planted_totals(rng, d, both, lo, hi):
    """{id: (total in the first source, total in the second)} for ids in both
    sources, with the level-2 cases planted: a difference inside, exactly at
    and just beyond the tolerance, and far off."""
    cases = ["within", "at_tolerance", "beyond", "far"] + ["exact"] * (len(both) - 4)
    rng.shuffle(cases)
    totals = {}
    for i, case in zip(both, cases):
        a = rng.randint(lo + 10, hi)
        sign = rng.choice([-1, 1])
        b = {"exact": a, "within": a + sign * rng.randint(1, TOLERANCE - 1), "at_tolerance": a + sign * TOLERANCE,
             "beyond": a + sign * rng.randint(TOLERANCE + 1, TOLERANCE + 4),
             "far": a + rng.randint(100, max(101, (hi - lo) // 4))}[case]
        totals[i] = (a, b)
    return totals


def split_amount(rng, total, parts):
    """`total` cents as `parts` positive amounts."""
    if parts == 1 or total < parts:
        return [total]
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def multi_hop(rng, seed, params, dirty, large):
    """Levels 3-5: the level-2 reconciliation, one hop further from the data."""
    d = params["domain"]
    a_name, b_name = d["ledger_sources"]
    idf, nf = d["id_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    n_both = rng.randint(110, 140) if large else rng.randint(10, 14)
    a_only, b_only, both = split_ids(rng, d, rng.randint(2, 4), rng.randint(2, 3), n_both)
    totals = planted_totals(rng, d, both, lo, hi)
    for i in a_only:
        totals[i] = (rng.randint(lo + 10, hi), None)
    for i in b_only:
        totals[i] = (None, rng.randint(lo + 10, hi))
    environment = {}

    # The first source: index.csv -> one detail file of entries per record.
    index_rows = []
    voided = set(rng.sample(sorted(i for i in both if totals[i][0] == totals[i][1]), 2)) if large else set()
    for i in sorted(i for i in totals if totals[i][0] is not None):
        name = "%s/%s.txt" % (a_name, i.lower())
        lines = ["%s: %s" % (idf, i)]
        for amount in split_amount(rng, totals[i][0], rng.randint(1, 3)):
            lines.append("entry: %s" % decimal_text(amount))
        if i in voided:
            # A voided entry: counting it would turn a match into a mismatch.
            lines.insert(rng.randint(1, len(lines)), "entry: %s void" % decimal_text(rng.randint(100, 900)))
        environment[name] = "\n".join(lines) + "\n"
        index_rows.append((i, name))
    stray = record_ids(rng, d, 60)
    stray = [i for i in stray if i not in totals][: rng.randint(2, 3) if dirty else 0]
    for i in stray:
        # Dirty data: detail files the index does not list.
        environment["%s/%s.txt" % (a_name, i.lower())] = "%s: %s\nentry: %s\n" % (idf, i, decimal_text(rng.randint(lo + 10, hi)))
    rng.shuffle(index_rows)
    environment["%s_index.csv" % a_name] = csv_text([idf, "file"], index_rows)

    # The second source: rows keyed by reference codes; ref_map.csv maps them to ids.
    refs = rng.sample(range(1000, 9999), 3 * len(totals) + 8)
    ref_rows, b_rows = [], []
    for i in sorted(i for i in totals if totals[i][1] is not None):
        for amount in split_amount(rng, totals[i][1], rng.choice([1, 1, 2])):
            ref = "R%d" % refs.pop()
            ref_rows.append((ref, i))
            b_rows.append((ref, amount))
    unknown = [("R%d" % refs.pop(), rng.randint(lo + 10, hi)) for _ in range(rng.randint(1, 2) if dirty else 0)]
    rng.shuffle(b_rows)
    rng.shuffle(ref_rows)
    environment["ref_map.csv"] = csv_text(["ref", idf], ref_rows)
    amount_col = nf
    if dirty:
        # A second export in cents with other column names; references sometimes padded or lower case.
        # Every file has known references (so each rule decides some amount) and a dirty one first.
        cut = max(2, len(b_rows) // 3)
        first, second = b_rows[cut:] + unknown, b_rows[:cut]
        rng.shuffle(first)

        def shown(rows):
            return [((r.lower() if n == 0 else rng.choice([r, r, r.lower(), " " + r, r + " "])), c)
                    for n, (r, c) in enumerate(rows)]
        environment["%s.csv" % b_name] = csv_text(["ref", amount_col], [(r, decimal_text(c)) for r, c in shown(first)])
        environment["%s_cents.csv" % b_name] = csv_text(["reference", amount_col + "_cents"], shown(second))
    else:
        environment["%s.csv" % b_name] = csv_text(["ref", amount_col], [(r, decimal_text(c)) for r, c in b_rows])

    status_a, status_b = "only_in_" + a_name, "only_in_" + b_name
    a_col, b_col = a_name + "_amount", b_name + "_amount"
    expected = []
    for i in sorted(totals):
        a, b = totals[i]
        money = lambda cents: None if cents is None else float(decimal_text(cents))  # noqa: E731
        if a is None or b is None or abs(b - a) > TOLERANCE:
            status = status_b if a is None else status_a if b is None else "amount_mismatch"
            difference = None if a is None or b is None else money(b - a)
            expected.append({idf: i, "status": status, a_col: money(a), b_col: money(b), "difference": difference})
    fmt = deliverable_format(seed)
    labels = [status_a, status_b, "amount_mismatch"]
    columns = [idf, "status", a_col, b_col, "difference"]
    out = records_deliverable(fmt, "reconciliation", [idf], columns, expected, split_column="status", split_values=labels)
    tol_text = decimal_text(TOLERANCE)
    rules = [
        "%s_index.csv lists every %s of %s and the detail file that holds its entries; the %s amount of a %s is "
        "the sum of its entries." % (a_name, d["entity"], a_name, a_name, d["entity"]),
        "%s rows carry a reference code; ref_map.csv gives the %s each code belongs to, and the %s amount of a %s is "
        "the sum of the rows of all its codes." % (b_name, idf, b_name, d["entity"]),
        "Two amounts match when they differ by at most %s %s; a difference of exactly %s is a match." % (tol_text, d["unit"], tol_text),
        "Report only ids that do not match: `%s` (no entries in %s), `%s` (no rows in %s), or `amount_mismatch`."
        % (status_a, a_name, status_b, b_name),
        "`%s` and `%s` are the two amounts; the amount of a source with no entries is missing." % (a_col, b_col),
        "`difference` is the %s amount minus the %s amount; it is missing when either amount is missing."
        % (b_name, a_name),
    ]
    if dirty:
        rules += [
            "A detail file that %s_index.csv does not list is not part of %s." % (a_name, a_name),
            "%s_cents.csv holds more %s rows: its `reference` is the reference code and `%s_cents` the amount in "
            "hundredths of %s." % (b_name, b_name, amount_col, d["unit"]),
            "Reference codes are compared after trimming spaces and ignoring letter case; a row whose code "
            "ref_map.csv does not know is ignored.",
        ]
    if large:
        rules.append("An entry marked `void` after its amount is ignored.")
    contract = {
        "deliverable": {"paths": out["paths"], "path": out["paths"][0], "format": fmt, "schema": out["schema"],
                        "columns": columns},
        "rules": rules + out["rules"],
        "parameters": {"match_tolerance": float(tol_text), "tolerance": 0.001},
        "labels": labels,
    }
    instruction = (
        "Two sources record the %s (%s) of each %s: %s (an index of detail files) and %s (rows keyed by reference "
        "codes, with ref_map.csv). Reconcile them by %s following the rules in CONTRACT.md exactly, and write the "
        "discrepancies as CONTRACT.md describes." % (d["numeric_label"], d["unit"], d["entity"], a_name, b_name, idf))
    solution = python_oracle("ledger_reconciliation", "multi_hop", out["writer"], A=a_name, B=b_name, KEY=idf, VALUE=nf,
                             TOLERANCE=tol_text, STATUS_A=status_a, STATUS_B=status_b, A_COL=a_col, B_COL=b_col)
    return assemble(params, instruction, environment, contract, out["checks"], {"discrepancies": expected}, solution, fmt)


LEVELS = (level0, level1, level2) + shaped_levels(multi_hop)
build = family(__name__, LEVELS)
