#!/usr/bin/env python3
"""Generator family `grouped_statistics` (analysis track).

build(seed, params) -> task: a record file of the domain, an instruction, the
answer contract, the answer key computed from the generated rows, and an
oracle solution. Stdlib-only, with generator_common.py beside it: it runs in
the sandbox as
`python3 -I /generator/grouped_statistics.py --params P --seed N --out /out`.

Levels: 0 = one explicit shell step; 1 = count or maximum per group into a
CSV; 2 = medians per group with filters, tiers at thresholds, half-up
rounding on output, empty groups omitted, CSV or JSON deliverable; 3 = the
same statistics over a multi-hop layout (index.csv lists each record's detail
file, the detail files carry a group code, a reference table names the
codes); 4 = level 3 on dirty data (detail files the index does not list,
values given in hundredths under another field name, missing values); 5 =
level 4 with hundreds of records, revised records (the highest revision
counts) and groups too small to tier. Levels 3-5 rotate the deliverable
through JSON, CSV, one file per tier and a report with a JSON sidecar.
"""

import os
import sys
from decimal import ROUND_HALF_UP, Decimal

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

TIERS = ["low", "medium", "high"]


# ---- the family

def simple_rows(rng, domain, per_group):
    """Rows (id, group, value-text) for the given count per group, shuffled."""
    lo, hi = cents_range(domain)
    groups = [g for g, n in per_group.items() for _ in range(n)]
    ids = record_ids(rng, domain, len(groups))
    rng.shuffle(groups)
    return [(ids[i], groups[i], decimal_text(rng.randint(lo, hi))) for i in range(len(groups))]


def level0(rng, seed, params):
    d = params["domain"]
    data = d["record_file"] + ".csv"
    header = [d["id_field"], d["group_field"], d["numeric_field"]]
    variant = level0_variant(seed)
    if variant == 0:
        # Counts stay at 10 or more: the leakage audit ignores one-digit numbers.
        per_group = {g: rng.randint(2, 6) for g in rng.sample(d["group_values"], 4)}
        rows = simple_rows(rng, d, per_group)
        instruction = "Write the number of data rows in %s (not counting the header line) to answer.txt." % data
        contract_schema, out, value = "a single integer", "answer.txt", len(rows)
        check = {"type": "number", "name": "row count", "path": out, "expected": value, "tolerance": 0}
        solution = "tail -n +2 %s | wc -l > answer.txt" % data
        environment = {data: csv_text(header, rows)}
    elif variant == 1:
        notes = d["record_file"] + "_notes.txt"
        ids = record_ids(rng, d, rng.randint(10, 24))
        text = "".join("%s %s checked at %s %s\n" % (d["entity"], i, d["group_field"], rng.choice(d["group_values"])) for i in ids)
        instruction = "Write the number of lines in %s to answer.txt." % notes
        contract_schema, out, value = "a single integer", "answer.txt", len(ids)
        check = {"type": "number", "name": "line count", "path": out, "expected": value, "tolerance": 0}
        solution = "wc -l < %s > answer.txt" % notes
        environment = {notes: text}
    elif variant == 2:
        target, *others = rng.sample(d["group_values"], 4)
        per_group = {target: rng.randint(10, 14)}
        per_group.update({g: rng.randint(2, 6) for g in others})
        rows = simple_rows(rng, d, per_group)
        out = target + "_count.txt"
        instruction = "Write the number of lines of %s that contain the word %s to %s." % (data, target, out)
        contract_schema, value = "a single integer", per_group[target]
        check = {"type": "number", "name": "matching line count", "path": out, "expected": value, "tolerance": 0}
        solution = "grep -c %s %s > %s" % (target, data, out)
        environment = {data: csv_text(header, rows)}
    else:
        per_group = {g: rng.randint(2, 5) for g in rng.sample(d["group_values"], 3)}
        rows = simple_rows(rng, d, per_group)
        out = "header.txt"
        instruction = "Write the first line of %s (its header line) to header.txt." % data
        contract_schema, value = "one line of text", ",".join(header)
        check = {"type": "text", "name": "header line", "path": out, "expected": value}
        solution = "head -n 1 %s > header.txt" % data
        environment = {data: csv_text(header, rows)}
    contract = {
        "deliverable": {"path": out, "format": check["type"], "schema": contract_schema},
        "rules": ["Surrounding whitespace in %s is ignored; write nothing else into it." % out],
        "parameters": {},
        "labels": [],
    }
    return assemble(params, instruction, environment, contract, [check], {out: value}, solution, check["type"])


def level1(rng, seed, params):
    d = params["domain"]
    data = d["record_file"] + ".csv"
    gf, nf = d["group_field"], d["numeric_field"]
    per_group = {g: rng.randint(2, 7) for g in rng.sample(d["group_values"], rng.randint(3, 5))}
    rows = simple_rows(rng, d, per_group)
    if seed % 2 == 0:
        column, out = "count", gf + "_counts.csv"
        expected = [{gf: g, column: n} for g, n in sorted(per_group.items())]
        what = "how many rows of %s have that %s" % (data, gf)
        solution = "{ echo '%s,%s'; tail -n +2 %s | cut -d, -f2 | sort | uniq -c | awk '{print $2 \",\" $1}'; } > %s" % (
            gf, column, data, out)
        tolerance = 0
    else:
        column, out = "max_" + nf, gf + "_maximum.csv"
        best = {}
        for _, g, v in rows:
            if g not in best or Decimal(v) > Decimal(best[g]):
                best[g] = v
        expected = [{gf: g, column: float(best[g])} for g in sorted(best)]
        what = "the largest %s among the rows with that %s" % (nf, gf)
        solution = (
            "{ echo '%s,%s'; tail -n +2 %s | awk -F, '{ if (!($2 in m) || $3 + 0 > m[$2] + 0) m[$2] = $3 }"
            " END { for (g in m) print g \",\" m[g] }'; } > %s" % (gf, column, data, out)
        )
        tolerance = 0.001
    instruction = (
        "%s has one row per %s with columns %s, %s and %s. Write %s with the header line `%s,%s` and one row per %s "
        "value that appears in %s, giving %s." % (data, d["entity"], d["id_field"], gf, nf, out, gf, column, gf, data, what)
    )
    check = {
        "type": "csv_records", "name": "%s per %s" % (column, gf), "path": out, "key": [gf],
        "columns": {gf: {"kind": "text"}, column: {"kind": "number", "tolerance": tolerance}},
        "expected": expected,
    }
    contract = {
        "deliverable": {"path": out, "format": "csv", "schema": "CSV with header `%s,%s`, one row per %s" % (gf, column, gf)},
        "rules": [
            "Only %s values that occur in %s get a row." % (gf, data),
            "Rows may be in any order; numbers are compared with an absolute tolerance of %s." % (tolerance or "0 (exact)"),
        ],
        "parameters": {"tolerance": tolerance},
        "labels": [],
    }
    return assemble(params, instruction, {data: csv_text([d["id_field"], gf, nf], rows)}, contract, [check],
                    {out: expected}, solution, "csv")


def odd_group(rng, lo, hi, median, k):
    return [rng.randint(lo, median - 1) for _ in range(k)] + [median] + [rng.randint(median + 1, hi) for _ in range(k)]


def median_of(values):
    values = sorted(values)
    n = len(values)
    if n % 2:
        return values[n // 2]
    return (values[n // 2 - 1] + values[n // 2]) / 2


def level2(rng, seed, params):
    d = params["domain"]
    data = d["record_file"] + ".csv"
    gf, nf = d["group_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    span = hi - lo
    # Thresholds carry one decimal, so they are multiples of ten cents.
    t1 = int(round((lo + span / 3) / 10)) * 10
    t2 = int(round((lo + 2 * span / 3) / 10)) * 10
    on_group, below_group, half_group, plain_group, empty_group = rng.sample(d["group_values"], 5)
    on_threshold, other_threshold = rng.sample([t1, t2], 2)
    counted = {
        # a median exactly on a threshold: goes to the higher tier
        on_group: odd_group(rng, lo, hi, on_threshold, rng.randint(2, 3)),
        # a median just under a threshold that rounds up onto it: tier from the unrounded value
        below_group: odd_group(rng, lo, hi, other_threshold - 3, rng.randint(2, 3)),
        plain_group: [rng.randint(lo, hi) for _ in range(rng.randint(4, 7))],
    }
    # an even count whose median ends in 5 at the second decimal, after an even
    # tenth: half-up rounds it up where half-to-even (Python's round, Decimal's
    # default) rounds it down, so the rounding rule decides the answer
    middle = rng.randrange(t1 + 15, t2 - 15, 10)
    if (middle // 10) % 2:
        middle += 10 if middle + 10 < t2 - 15 else -10
    gap = rng.randint(1, 4)
    k = rng.randint(1, 3)
    counted[half_group] = (
        [rng.randint(lo, middle - gap - 1) for _ in range(k)] + [middle - gap, middle + gap]
        + [rng.randint(middle + gap + 1, hi) for _ in range(k)]
    )
    rows = [(g, "valid", decimal_text(v)) for g, values in counted.items() for v in values]
    for g in [on_group, below_group, half_group, plain_group]:
        for _ in range(rng.randint(1, 2)):
            # Ignored rows sit at one extreme, so counting them would move the median.
            extreme = decimal_text(rng.choice([rng.randint(lo, lo + span // 10), rng.randint(hi - span // 10, hi)]))
            rows.append(rng.choice([(g, "void", extreme), (g, "valid", "")]))
    rows += [(empty_group, rng.choice(["void", "void", "valid"]), "") for _ in range(rng.randint(2, 3))]
    rng.shuffle(rows)
    ids = record_ids(rng, d, len(rows))
    table = [(ids[i],) + rows[i] for i in range(len(rows))]

    fmt = "csv" if seed % 2 == 0 else "json"
    out = "%s_tiers.%s" % (gf, fmt)
    median_col = "median_" + nf
    expected = []
    for g in sorted(counted):
        m = median_of([Decimal(v) for v in counted[g]]) / 100
        tier = "low" if m < Decimal(t1) / 100 else ("medium" if m < Decimal(t2) / 100 else "high")
        shown = m.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
        expected.append({gf: g, "records": len(counted[g]), median_col: float(shown), "tier": tier})
    t1_text, t2_text = str(Decimal(t1).scaleb(-2).quantize(Decimal("0.1"))), str(Decimal(t2).scaleb(-2).quantize(Decimal("0.1")))
    columns = [gf, "records", median_col, "tier"]
    if fmt == "csv":
        schema = "CSV with header `%s`, one row per %s" % (",".join(columns), gf)
    else:
        schema = "a JSON array with one object per %s, keys %s" % (gf, ", ".join("`%s`" % c for c in columns))
    contract = {
        "deliverable": {"path": out, "format": fmt, "schema": schema, "columns": columns},
        "rules": [
            "Only rows with status `valid` and a non-empty `%s` are counted; every other row is ignored." % nf,
            "`records` is the number of counted rows of the %s." % gf,
            "The median of an even number of values is the mean of the two middle values.",
            "The tier comes from the unrounded median: `low` below %s, `medium` from %s up to but not including %s, "
            "`high` at %s or above. A median exactly on a threshold goes to the higher tier." % (t1_text, t1_text, t2_text, t2_text),
            "Round the median only on output, to one decimal place, halves rounded away from zero.",
            "Any %s with no counted rows is omitted." % gf,
            "Rows may be in any order; numbers are compared with an absolute tolerance of 0.001.",
        ],
        "parameters": {"lower_threshold": float(t1_text), "upper_threshold": float(t2_text), "tolerance": 0.001},
        "labels": list(TIERS),
    }
    instruction = (
        "%s lists %s with their %s, a status and the %s (%s, column %s). Summarize the median %s per %s and give "
        "each %s a tier, following the rules in CONTRACT.md exactly. Write the result to %s."
        % (data, d["entity_plural"], gf, d["numeric_label"], d["unit"], nf, d["numeric_label"], gf, gf, out)
    )
    check_type = "csv_records" if fmt == "csv" else "json_records"
    check = {
        "type": check_type, "name": "tiers per %s" % gf, "path": out, "key": [gf],
        "columns": {
            gf: {"kind": "text"}, "records": {"kind": "number", "tolerance": 0},
            median_col: {"kind": "number", "tolerance": 0.001}, "tier": {"kind": "text"},
        },
        "expected": expected,
    }
    solution = python_oracle("grouped_statistics", "tiers", DATA=data, OUT=out, GROUP=gf, VALUE=nf, LOWER=t1_text,
                             UPPER=t2_text, COLUMNS=columns)
    environment = {data: csv_text([d["id_field"], gf, "status", nf], table)}
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, fmt)


MIN_RECORDS = 3  # level 5: a group with fewer counted records gets no computed tier
SMALL = "insufficient"


def detail_text(fields):
    return "".join("%s: %s\n" % (name, value) for name, value in fields)


def multi_hop(rng, seed, params, dirty, large):
    """Levels 3-5: the level-2 statistics, one hop further from the data."""
    d = params["domain"]
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    span = hi - lo
    t1 = int(round((lo + span / 3) / 10)) * 10
    t2 = int(round((lo + 2 * span / 3) / 10)) * 10
    on_group, below_group, half_group, plain_group, empty_group = rng.sample(d["group_values"], 5)
    on_threshold, other_threshold = rng.sample([t1, t2], 2)
    k = (lambda: rng.randint(20, 30)) if large else (lambda: rng.randint(2, 3))
    counted = {
        on_group: odd_group(rng, lo, hi, on_threshold, k()),
        below_group: odd_group(rng, lo, hi, other_threshold - 3, k()),
        # Level 5: a group with fewer than MIN_RECORDS counted records.
        plain_group: [rng.randint(lo, hi) for _ in range(MIN_RECORDS - 1 if large else rng.randint(4, 7))],
    }
    middle = rng.randrange(t1 + 15, t2 - 15, 10)
    if (middle // 10) % 2:
        middle += 10 if middle + 10 < t2 - 15 else -10
    gap, n = rng.randint(1, 4), k()
    counted[half_group] = ([rng.randint(lo, middle - gap - 1) for _ in range(n)] + [middle - gap, middle + gap]
                           + [rng.randint(middle + gap + 1, hi) for _ in range(n)])
    codes = dict(zip(d["group_values"], ["%s-%02d" % (gf[:3].upper(), c) for c in rng.sample(range(10, 99), 5)]))

    # Each entity: (group, status, cents or None, planted). Planted: a counted
    # value below its group's median given in hundredths (level 4+), or the
    # one a superseded revision hides (level 5): reading either rule the other
    # way moves that median.
    entities = []
    for g, values in counted.items():
        revised = set()
        if large and g == on_group:
            revised = set([i for i, v in enumerate(values) if v < on_threshold][1:4])
        for number, v in enumerate(values):
            planted = "revised" if number in revised else (g != plain_group and number == 0)
            entities.append((g, "valid", v, planted))
    for g in [on_group, below_group, half_group, plain_group]:
        # Ignored records sit at one extreme: counting them would move the median.
        entities.append((g, "valid", None, False))
        for _ in range(rng.randint(1, 2) * (4 if large else 1)):
            extreme = rng.choice([rng.randint(lo, lo + span // 10), rng.randint(hi - span // 10, hi)])
            entities.append(rng.choice([(g, "void", extreme, False), (g, "valid", None, False)]))
    entities += [(empty_group, rng.choice(["void", "valid"]), None, False) for _ in range(rng.randint(2, 3))]
    rng.shuffle(entities)
    stale = rng.randint(2, 4) if dirty else 0
    ids = record_ids(rng, d, len(entities) + stale)
    environment, index_rows = {}, []

    def write_detail(record_id, group, status, cents, name, hundredths=False):
        fields = [(idf, record_id), (gf + "_code", codes[group]), ("status", status)]
        if cents is not None:
            # Dirty data: some files give the value in hundredths under another field name.
            if dirty and (hundredths or rng.random() < 0.3):
                fields.append((nf + "_hundredths", str(cents)))
            else:
                fields.append((nf, decimal_text(cents)))
        elif dirty and rng.random() < 0.5:
            fields.append((nf, ""))
        rng.shuffle(fields)
        environment[name] = detail_text(fields)

    for number, (group, status, cents, planted) in enumerate(entities):
        record_id = ids[number]
        name = "records/%s.txt" % record_id.lower()
        if planted == "revised":
            # A superseded revision with a value at the top: counting it would move the median.
            old = "records/%s-r1.txt" % record_id.lower()
            write_detail(record_id, group, "valid", hi, old)
            index_rows.append((record_id, old, 1))
            name = "records/%s-r2.txt" % record_id.lower()
            index_rows.append((record_id, name, 2))
        else:
            index_rows.append((record_id, name, 1))
        write_detail(record_id, group, status, cents, name, hundredths=planted is True)
    for record_id in ids[len(entities):]:
        # Detail files the index does not list: left over, never counted.
        write_detail(record_id, rng.choice([on_group, half_group]), "valid", rng.choice([lo, hi]),
                     "records/%s.txt" % record_id.lower())
    rng.shuffle(index_rows)
    if large:
        environment["index.csv"] = csv_text([idf, "file", "revision"], index_rows)
    else:
        environment["index.csv"] = csv_text([idf, "file"], [row[:2] for row in index_rows])
    code_rows = sorted((code, group) for group, code in codes.items())
    environment["%s_codes.csv" % gf] = csv_text(["code", gf], code_rows)

    median_col = "median_" + nf
    tiers = TIERS + ([SMALL] if large else [])
    expected = []
    for g in sorted(counted):
        m = median_of([Decimal(v) for v in counted[g]]) / 100
        tier = "low" if m < Decimal(t1) / 100 else ("medium" if m < Decimal(t2) / 100 else "high")
        if large and len(counted[g]) < MIN_RECORDS:
            tier = SMALL
        expected.append({gf: g, "records": len(counted[g]),
                         median_col: float(m.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)), "tier": tier})
    fmt = deliverable_format(seed)
    columns = [gf, "records", median_col, "tier"]
    out = records_deliverable(fmt, "%s_tiers" % gf, [gf], columns, expected, split_column="tier", split_values=tiers)
    t1_text = str(Decimal(t1).scaleb(-2).quantize(Decimal("0.1")))
    t2_text = str(Decimal(t2).scaleb(-2).quantize(Decimal("0.1")))
    rules = [
        "index.csv lists every record that counts and the detail file that holds it; a detail file the index does "
        "not list is not counted." if dirty else "index.csv lists every record and the detail file that holds it.",
        "A detail file gives the record's `%s_code`; %s_codes.csv maps each code to the %s name the deliverable "
        "uses." % (gf, gf, gf),
        "Only records with status `valid` and a non-empty `%s` are counted; every other record is ignored." % nf,
        "`records` is the number of counted records of the %s." % gf,
        "The median of an even number of values is the mean of the two middle values.",
        "The tier comes from the unrounded median: `low` below %s, `medium` from %s up to but not including %s, "
        "`high` at %s or above. A median exactly on a threshold goes to the higher tier." % (t1_text, t1_text, t2_text, t2_text),
        "Round the median only on output, to one decimal place, halves rounded away from zero.",
        "Any %s with no counted records is omitted." % gf,
    ]
    if dirty:
        rules.append("A detail file may give `%s_hundredths` instead of `%s`: the value in hundredths of %s; it "
                     "counts as that value divided by 100." % (nf, nf, d["unit"]))
    if large:
        rules += [
            "A record listed several times in index.csv counts once, from the row with the highest `revision`.",
            "A %s with fewer than %d counted records gets the tier `%s` (its median is still reported)."
            % (gf, MIN_RECORDS, SMALL),
        ]
    contract = {
        "deliverable": {"paths": out["paths"], "path": out["paths"][0], "format": fmt, "schema": out["schema"],
                        "columns": columns},
        "rules": rules + out["rules"],
        "parameters": {"lower_threshold": float(t1_text), "upper_threshold": float(t2_text), "tolerance": 0.001,
                       "min_records": MIN_RECORDS if large else 0},
        "labels": list(tiers),
    }
    instruction = (
        "The %s records in this workspace are spread over detail files: index.csv lists each %s and its file, and "
        "%s_codes.csv names the %s codes the files use. Summarize the median %s (%s) per %s and give each %s a "
        "tier, following the rules in CONTRACT.md exactly. Write the result as CONTRACT.md describes."
        % (d["entity"], idf, gf, gf, d["numeric_label"], d["unit"], gf, gf))
    solution = python_oracle("grouped_statistics", "multi_hop", out["writer"], KEY=idf, GROUP=gf, VALUE=nf, LOWER=t1_text,
                             UPPER=t2_text, MIN_RECORDS=MIN_RECORDS if large else 0, SMALL=SMALL, MEDIAN=median_col)
    return assemble(params, instruction, environment, contract, out["checks"], {"records": expected}, solution, fmt)


LEVELS = (level0, level1, level2) + shaped_levels(multi_hop)
build = family(__name__, LEVELS)
