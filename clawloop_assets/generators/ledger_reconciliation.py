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
or JSON discrepancy report.
"""

import os
import sys

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import assemble, build_level, cents_range, csv_text, decimal_text, record_ids, run  # noqa: E402


def main():
    run(build)


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
    variant = seed % 4
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
    writer = (
        "with open(OUT, 'w', newline='') as f:\n"
        "    w = csv.writer(f, lineterminator='\\n')\n"
        "    w.writerow(COLUMNS)\n"
        "    for r in result:\n"
        "        w.writerow(['' if r[c] is None else r[c] for c in COLUMNS])\n"
        if fmt == "csv" else
        "with open(OUT, 'w') as f:\n"
        "    json.dump([{c: (float(r[c]) if isinstance(r[c], Decimal) else r[c]) for c in COLUMNS} for r in result], f, indent=2)\n"
    )
    solution = (
        "python3 - <<'PY'\n"
        "import csv, json\n"
        "from decimal import Decimal\n"
        "A, B, OUT, KEY, VALUE = %r, %r, %r, %r, %r\n"
        "STATUS_A, STATUS_B, TOL = %r, %r, Decimal(%r)\n"
        "COLUMNS = %r\n"
        "def load(path):\n"
        "    totals = {}\n"
        "    with open(path, newline='') as f:\n"
        "        for row in csv.DictReader(f):\n"
        "            key = row[KEY].strip().upper()\n"
        "            totals[key] = totals.get(key, Decimal(0)) + Decimal(row[VALUE].strip())\n"
        "    return totals\n"
        "a, b = load(A), load(B)\n"
        "result = []\n"
        "for key in sorted(set(a) | set(b)):\n"
        "    if key not in b:\n"
        "        result.append({KEY: key, 'status': STATUS_A, COLUMNS[2]: a[key], COLUMNS[3]: None, 'difference': None})\n"
        "    elif key not in a:\n"
        "        result.append({KEY: key, 'status': STATUS_B, COLUMNS[2]: None, COLUMNS[3]: b[key], 'difference': None})\n"
        "    elif abs(b[key] - a[key]) > TOL:\n"
        "        result.append({KEY: key, 'status': 'amount_mismatch', COLUMNS[2]: a[key], COLUMNS[3]: b[key], 'difference': b[key] - a[key]})\n"
        "%s"
        "PY\n" % (a_file, b_file, out, idf, nf, status_a, status_b, tol_text, columns, writer)
    )
    environment = {a_file: csv_text([idf, nf], a_rows), b_file: csv_text([idf, nf], b_rows)}
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, fmt)


def build(seed, params):
    return build_level((level0, level1, level2), seed, params)


if __name__ == "__main__":
    main()
