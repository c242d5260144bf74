#!/usr/bin/env python3
"""Generator family `cross_source_audit` (analysis track).

build(seed, params) -> task: a primary register of domain records, a field
log and an approval list (and, from level 3, a limits table), an
instruction, the answer contract, the answer key computed from the generated
sources, and an oracle solution. Stdlib-only, with generator_common.py beside
it: it runs in the sandbox as
`python3 -I /generator/cross_source_audit.py --params P --seed N --out /out`.

The sources: the register (`ledger_sources[0]`) is authoritative; the field
log (`ledger_sources[1]`) re-measures each record's value; the approval list
(`<file_stems[-1]>_approvals`) names the records approved and the group each
approval was filed under. Findings are keyed by id and issue label:
`value_mismatch`, `missing_log`, `missing_approval`, `group_conflict`,
`unregistered`.

Levels: 0 = one shell step on one audit file (count failed checks, repeated
approvals, conflicting group pairs, non-ok lines); 1 = a join of the register
with the approval list (group conflicts, or records at or above a threshold
without approval) into a list of ids; 2 = the full audit of three CSV sources
under stated rules (authoritative register, dirty keys, a tolerance tie, a
value on the threshold, approvals under another group, secondary-only ids,
one row per finding); 3 = the same on a multi-hop layout (a register index
naming one dossier per record, limits per group in a reference table);
4 = level 3 on dirty data (draft dossiers the index does not name, ids
without their hyphen, a field log split over two files with different
columns, readings in hundredths of the unit, empty readings, group names in
another letter case); 5 = level 4 with hundreds of records, dated readings
(the latest with a value counts), a default row in the limits table, log-only
ids not reported, and one row per record chosen by a priority order.
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
)

# Issue labels, in the contract's label order (alphabetical); level 5 picks
# one per record by PRIORITY, which is deliberately another order.
LABELS = ["group_conflict", "missing_approval", "missing_log", "unregistered", "value_mismatch"]
PRIORITY = ["unregistered", "missing_log", "value_mismatch", "missing_approval", "group_conflict"]
# Tolerances (in cents) are round amounts near one percent of the value range.
NICE_TOLERANCES = [5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000]
STEM = "audit_findings"
HUNDREDTHS = "hundredths"


# ---- source names

def names(d):
    reg, log = d["ledger_sources"]
    return {
        "reg": reg, "log": log, "appr": d["file_stems"][-1] + "_approvals",
        "limits": d["group_field"] + "_limits.csv", "crew_a": d["file_stems"][0], "crew_b": d["file_stems"][1],
    }


def lines_contract(out, rule):
    return {
        "deliverable": {"path": out, "format": "lines", "schema": "one line per item, in any order"},
        "rules": [rule, "Blank lines and surrounding spaces are ignored."],
        "parameters": {},
        "labels": [],
    }


# ---- level 0: one shell step

def level0(rng, seed, params):
    d = params["domain"]
    n = names(d)
    gf = d["group_field"]
    variant = level0_variant(seed)
    if variant == 0:
        data = n["log"] + ".txt"
        ids = record_ids(rng, d, rng.randint(22, 36))
        failed = set(rng.sample(ids, rng.randint(10, 14)))
        text = "".join("%s %s\n" % (i, "failed" if i in failed else "passed") for i in ids)
        instruction = ("Each line of %s is a %s id and the outcome of its check. Write the number of lines that "
                       "contain the word failed to answer.txt." % (data, d["entity"]))
        out, value = "answer.txt", len(failed)
        check = {"type": "number", "name": "failed checks", "path": out, "expected": value, "tolerance": 0}
        contract = {
            "deliverable": {"path": out, "format": "number", "schema": "a single integer"},
            "rules": ["Surrounding whitespace in %s is ignored; write nothing else into it." % out],
            "parameters": {}, "labels": [],
        }
        solution = "grep -c failed %s > %s" % (data, out)
    elif variant == 1:
        data = n["appr"] + ".txt"
        ids = record_ids(rng, d, rng.randint(14, 22))
        twice = sorted(rng.sample(ids, rng.randint(3, 5)))
        text = "".join(i + "\n" for i in sorted(ids + twice))
        instruction = ("%s lists the %s ids that hold an approval, one per line. The file is sorted. Write the ids "
                       "listed more than once to duplicates.txt, one per line." % (data, d["entity"]))
        out, value = "duplicates.txt", twice
        check = {"type": "lines", "name": "repeated ids", "path": out, "expected": value, "ordered": False}
        contract = lines_contract(out, "Write each repeated id once, exactly as it appears in %s." % data)
        solution = "uniq -d %s > %s" % (data, out)
    elif variant == 2:
        data = gf + "_pairs.csv"
        ids = record_ids(rng, d, rng.randint(12, 20))
        differ = set(rng.sample(ids, rng.randint(3, 5)))
        rows = []
        for i in ids:
            first = rng.choice(d["group_values"])
            second = rng.choice([g for g in d["group_values"] if g != first]) if i in differ else first
            rows.append("%s,%s,%s" % (i, first, second))
        text = "".join(r + "\n" for r in rows)
        instruction = ("%s has no header line; each line holds a %s id, its %s in the register and its %s on the "
                       "approval. Write the lines whose two %s values differ to conflicts.txt, unchanged."
                       % (data, d["entity"], gf, gf, gf))
        out, value = "conflicts.txt", [r for r in rows if r.split(",")[0] in differ]
        check = {"type": "lines", "name": "conflicting lines", "path": out, "expected": value, "ordered": False}
        contract = lines_contract(out, "Write each conflicting line exactly as it is in %s." % data)
        solution = "awk -F, '$2!=$3' %s > %s" % (data, out)
    else:
        data = n["reg"] + "_audit.txt"
        ids = record_ids(rng, d, rng.randint(14, 22))
        flagged = set(rng.sample(ids, rng.randint(3, 6)))
        rows = ["%s %s" % (i, rng.choice(LABELS) if i in flagged else "ok") for i in ids]
        text = "".join(r + "\n" for r in rows)
        instruction = ("Each line of %s is a %s id and its audit result. Write every line that does not contain the "
                       "word ok to findings.txt, unchanged." % (data, d["entity"]))
        out, value = "findings.txt", [r for r in rows if not r.endswith(" ok")]
        check = {"type": "lines", "name": "audit findings", "path": out, "expected": value, "ordered": False}
        contract = lines_contract(out, "Write each line exactly as it is in %s." % data)
        solution = "grep -v ok %s > %s" % (data, out)
    return assemble(params, instruction, {data: text}, contract, [check], {out: value}, solution, check["type"])


# ---- level 1: a join of two sources

def threshold_cents(rng, lo, hi, taken=()):
    """A threshold in tenths, never a whole number of the unit, between 55% and 75% of the range."""
    span = hi - lo
    choices = [c for c in range(lo + span * 55 // 100, lo + span * 75 // 100 + 1)
               if c % 10 == 0 and c % 100 and c not in taken]
    return rng.choice(choices)


def nonround(rng, a, b):
    """A value in cents in [a, b] that is not a whole number of the unit: answer values never
    equal a whole number the contract prints (the 100 of the hundredths rule)."""
    for _ in range(100):
        v = rng.randint(a, b)
        if v % 100:
            return v
    raise ValueError("no fractional value in [%d, %d]" % (a, b))


def level1(rng, seed, params):
    d = params["domain"]
    n = names(d)
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    reg_file, appr_file = n["reg"] + ".csv", n["appr"] + ".csv"
    lo, hi = cents_range(d)
    ids = record_ids(rng, d, rng.randint(14, 22))
    register = {i: (rng.choice(d["group_values"]), nonround(rng, lo, hi)) for i in ids}
    columns = "%s has the columns %s, %s and %s; %s has the columns %s and %s. Neither is sorted." % (
        reg_file, idf, gf, nf, appr_file, idf, gf)
    if seed % 2 == 0:
        approved = sorted(rng.sample(ids, rng.randint(9, 13)))
        differ = set(rng.sample(approved, rng.randint(2, 4)))
        approvals = [(i, rng.choice([g for g in d["group_values"] if g != register[i][0]]) if i in differ
                      else register[i][0]) for i in approved]
        out, expected = "conflicts.txt", sorted(differ)
        instruction = ("Write the %s values whose %s in %s differs from their %s in %s to %s, one per line. %s"
                       % (idf, gf, appr_file, gf, reg_file, out, columns))
        rule = "Write each id once, exactly as it appears in the sources."
        solution = ("awk -F, 'NR == FNR { g[$1] = $2; next } FNR > 1 && ($1 in g) && g[$1] != $2 { print $1 }' "
                    "%s %s > %s" % (reg_file, appr_file, out))
        parameters = {}
    else:
        threshold = threshold_cents(rng, lo, hi)
        on, below, *above = rng.sample(ids, 5)
        register[on] = (register[on][0], threshold)  # exactly on the threshold: needs an approval
        register[below] = (register[below][0], nonround(rng, max(lo, threshold - 300), threshold - 1))
        for i in above:
            register[i] = (register[i][0], nonround(rng, threshold + 1, hi))
        high = [i for i in ids if register[i][1] >= threshold]
        missing = {on} | set(rng.sample([i for i in high if i != on], rng.randint(1, 2)))
        approvals = [(i, register[i][0]) for i in ids if i not in missing and (i in high or rng.random() < 0.2)]
        out, expected = "missing_approval.txt", sorted(missing)
        t_text = decimal_text(threshold)
        instruction = ("Every %s whose %s is %s %s or more needs a row in %s. Write the %s values of %s that need one "
                       "but have none to %s, one per line. %s"
                       % (d["entity"], nf, t_text, d["unit"], appr_file, idf, reg_file, out, columns))
        rule = "A value exactly on %s needs an approval too; write each id once, as it appears in %s." % (
            t_text, reg_file)
        solution = ("awk -F, 'NR == FNR { a[$1]; next } FNR > 1 && $3 >= %s && !($1 in a) { print $1 }' %s %s > %s"
                    % (t_text, appr_file, reg_file, out))
        parameters = {"approval_threshold": float(t_text)}
    rows = [(i, register[i][0], decimal_text(register[i][1])) for i in ids]
    rng.shuffle(rows)
    rng.shuffle(approvals)
    environment = {reg_file: csv_text([idf, gf, nf], rows), appr_file: csv_text([idf, gf], approvals)}
    check = {"type": "lines", "name": "ids in %s" % out, "path": out, "expected": expected, "ordered": False}
    contract = lines_contract(out, rule)
    contract["parameters"] = parameters
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, "lines")


# ---- levels 2 to 5: the audit

# dossiers: a register index naming one dossier per record, and a limits table per group; dirty:
# level 4's dirt; dated: several dated readings per id; default: a `*` row in the limits table;
# approvals_only: only the approval list makes an unknown id `unregistered`; priority: one row
# per record, its issue chosen by PRIORITY.
FEATURES = {
    2: dict(records=(16, 20), dossiers=False, dirty=False, dated=False, default=False, approvals_only=False,
            priority=False),
    3: dict(records=(20, 26), dossiers=True, dirty=False, dated=False, default=False, approvals_only=False,
            priority=False),
    4: dict(records=(28, 34), dossiers=True, dirty=True, dated=False, default=False, approvals_only=False,
            priority=False),
    5: dict(records=(220, 260), dossiers=True, dirty=True, dated=True, default=True, approvals_only=True,
            priority=True),
}

# Each case is one record (or one unknown id) whose findings a reading of some rule changes.
BASE_CASES = ["tie", "beyond", "far", "on_threshold", "reg_high_log_low", "reg_low_log_high", "multi", "conflict",
              "conflict_needed", "missing_log", "unreg_log", "unreg_appr", "unreg_both", "approved_high"]
DIRTY_CASES = ["draft_log", "draft_appr", "empty_only", "approved_high"]
DATED_CASES = ["latest_within", "latest_beyond", "latest_empty", "missing_log_high", "default_tie",
               "default_within", "default_on_threshold", "unreg_log"]
CLEAN_CASES = ["exact", "within", "approved_high", "exact"]
NOISY_CASES = ["beyond", "far", "missing_log", "conflict", "missing_log_high", "multi"]


class Audit:
    """The canonical sources: what the files say once ids, groups and units are normalized."""

    def __init__(self):
        self.register = {}  # id -> (group, cents)
        self.readings = {}  # id -> [cents or None (an empty reading)], oldest first
        self.approvals = []  # (id, group)
        self.drafts = {}  # id -> (group, cents): dossiers the index does not name


def tolerance_choices(lo, hi):
    span = hi - lo
    base = max([t for t in NICE_TOLERANCES if t <= span // 100] or [NICE_TOLERANCES[0]])
    k = NICE_TOLERANCES.index(base)
    return NICE_TOLERANCES[max(0, k - 1):k + 2], base


def make_limits(rng, d, f):
    """{group: (tolerance, threshold)} for every group value, and the groups the table lists."""
    lo, hi = cents_range(d)
    choices, base = tolerance_choices(lo, hi)
    groups = list(d["group_values"])
    if not f["dossiers"]:
        limit = (base, threshold_cents(rng, lo, hi))
        return {g: limit for g in groups}, groups
    listed = sorted(rng.sample(groups, 3)) if f["default"] else groups
    taken, limits = [], {}
    for g in listed + (["*"] if f["default"] else []):
        limits[g] = (rng.choice(choices), threshold_cents(rng, lo, hi, taken))
        taken.append(limits[g][1])
    for g in groups:
        if g not in limits:
            limits[g] = limits["*"]
    return limits, listed


def near(rng, reg, low, high, strict=True):
    """A logged value `low`..`high` cents away from `reg`, positive; with `strict`, neither the value
    nor the difference is a whole number of the unit."""
    for _ in range(200):
        mag = rng.randint(low, high)
        sign = rng.choice([-1, 1]) if reg - mag > 0 else 1
        value = reg + sign * mag
        if not strict or (value % 100 and mag % 100):
            return value
    raise ValueError("no logged value %d..%d cents from %d" % (low, high, reg))


def plant(rng, audit, case, rid, group, limits, d):
    """Adds one case to the audit; returns nothing. `group` is the record's group."""
    lo, hi = cents_range(d)
    tol, thr = limits[group]
    low = nonround(rng, lo + 3 * tol, thr - 3 * tol)
    high = nonround(rng, thr + 3 * tol, hi - 3 * tol)
    other = rng.choice([g for g in d["group_values"] if g != group])
    small = max(1, min(9, tol // 2))

    def register(value, readings, approval=None):
        audit.register[rid] = (group, value)
        if readings is not None:
            audit.readings[rid] = readings
        if approval:
            audit.approvals.append((rid, approval))

    if case == "exact":
        value = rng.choice([low, high])
        register(value, [value], group if value >= thr else None)
    elif case == "within":
        value = rng.choice([low, high])
        register(value, [near(rng, value, 1, tol - 1)], group if value >= thr else None)
    elif case == "approved_high":
        register(high, [near(rng, high, 1, tol - 1)], group)
    elif case in ("tie", "default_tie"):
        register(low, [near(rng, low, tol, tol, strict=False)])
    elif case == "beyond":
        register(low, [near(rng, low, tol + 1, 2 * tol)])
    elif case == "far":
        register(low, [near(rng, low, 4 * tol, 8 * tol)])
    elif case in ("on_threshold", "default_on_threshold"):
        register(thr, [near(rng, thr, 1, tol - 1)])
    elif case == "reg_high_log_low":
        a = rng.randint(1, small)
        register(thr + a, [thr - rng.randint(1, max(1, min(9, tol - a - 1)))])
    elif case == "reg_low_log_high":
        a = rng.randint(1, small)
        register(thr - a, [thr + rng.randint(0, max(0, min(9, tol - a - 1)))])
    elif case == "multi":
        register(high, [near(rng, high, tol + 1, 3 * tol)])
    elif case == "conflict":
        register(low, [near(rng, low, 1, tol - 1)], other)
    elif case == "conflict_needed":
        # Under the limits of the approval's group (where one has a higher threshold) no approval is needed.
        higher = [g for g in d["group_values"] if limits[g][1] > thr]
        if higher:
            other = rng.choice(higher)
            high = nonround(rng, thr, limits[other][1] - 1)
        register(high, [near(rng, high, 1, tol - 1)], other)
    elif case == "missing_log":
        register(low, None)
    elif case == "missing_log_high":
        register(high, None)
    elif case == "empty_only":
        register(low, [None])
    elif case == "default_within":
        register(low, [near(rng, low, 1, tol - 1)])
    elif case == "latest_within":
        register(low, [near(rng, low, tol + 1, 3 * tol), near(rng, low, 1, tol - 1)])
    elif case == "latest_beyond":
        register(low, [near(rng, low, 1, tol - 1), near(rng, low, tol + 1, 3 * tol)])
    elif case == "latest_empty":
        register(low, [near(rng, low, 1, tol - 1), None])
    elif case == "unreg_log":
        audit.readings[rid] = [nonround(rng, lo, hi)]
    elif case == "unreg_appr":
        audit.approvals.append((rid, group))
    elif case == "unreg_both":
        audit.readings[rid] = [nonround(rng, lo, hi)]
        audit.approvals.append((rid, group))
    elif case in ("draft_log", "draft_appr"):
        audit.drafts[rid] = (group, low)
        if case == "draft_log":
            audit.readings[rid] = [near(rng, low, 1, tol - 1)]
        else:
            audit.approvals.append((rid, group))
    else:
        raise ValueError("unknown case %r" % case)


def logged_values(audit):
    """The counted reading of each id: the latest one with a value."""
    logged = {}
    for rid, values in audit.readings.items():
        present = [v for v in values if v is not None]
        if present:
            logged[rid] = present[-1]
    return logged


def audit_findings(audit, limits, f):
    """{id: [issue, ...]} in the order the rules are checked; ids without findings are absent."""
    logged = logged_values(audit)
    found = {}
    for rid in sorted(audit.register):
        group, value = audit.register[rid]
        tol, thr = limits[group]
        issues = []
        if rid not in logged:
            issues.append("missing_log")
        elif abs(logged[rid] - value) > tol:
            issues.append("value_mismatch")
        groups = [g for i, g in audit.approvals if i == rid]
        if value >= thr and group not in groups:
            issues.append("missing_approval")
        if any(g != group for g in groups):
            issues.append("group_conflict")
        if issues:
            found[rid] = issues
    named = {i for i, _ in audit.approvals}
    if not f["approvals_only"]:
        named |= set(logged)
    for rid in sorted(named - set(audit.register)):
        found[rid] = ["unregistered"]
    return found, logged


def money(cents):
    return None if cents is None else float(decimal_text(cents))


def expected_rows(audit, found, logged, f, idf, reg_col, log_col):
    rows = []
    for rid in sorted(found):
        reg = audit.register.get(rid)
        issues = found[rid]
        if f["priority"]:
            issues = [min(issues, key=PRIORITY.index)]
        for issue in issues:
            row = {idf: rid, "issue": issue}
            if f["priority"]:
                row["findings"] = len(found[rid])
            row[reg_col] = money(reg[1]) if reg else None
            row[log_col] = money(logged.get(rid))
            row["difference"] = money(logged[rid] - reg[1]) if issue == "value_mismatch" else None
            rows.append(row)
    return rows


def build_audit(rng, d, f):
    limits, listed = make_limits(rng, d, f)
    cases = list(BASE_CASES)
    if f["dirty"]:
        cases += DIRTY_CASES
    if f["dated"]:
        cases += DATED_CASES
    total = rng.randint(*f["records"])
    fillers = total - len(cases)
    noisy = fillers // 5 if f["priority"] else 0
    cases += [rng.choice(NOISY_CASES) for _ in range(noisy)]
    cases += [rng.choice(CLEAN_CASES) for _ in range(fillers - noisy)]
    ids = record_ids(rng, d, len(cases))
    rng.shuffle(ids)
    audit = Audit()
    unlisted = [g for g in d["group_values"] if g not in listed]
    below_top = [g for g in listed if any(limits[h][1] > limits[g][1] for h in d["group_values"])]
    for rid, case in zip(ids, cases):
        if case.startswith("default_"):
            group = rng.choice(unlisted)
        elif case == "conflict_needed" and below_top:
            group = rng.choice(below_top)
        elif case in BASE_CASES or case in DIRTY_CASES or case in DATED_CASES:
            group = rng.choice(listed)
        else:
            group = rng.choice(d["group_values"])
        plant(rng, audit, case, rid, group, limits, d)
    if f["dated"]:
        # Older readings of ordinary records: any value, only the latest counts.
        lo, hi = cents_range(d)
        for rid in sorted(audit.register):
            values = audit.readings.get(rid)
            if values and len(values) == 1 and values[0] is not None and rng.random() < 0.3:
                values.insert(0, rng.choice([nonround(rng, lo, hi), None]))
    return audit, limits, listed


# ---- rendering the sources

def id_forms(rid, dirty):
    forms = [rid.lower(), " " + rid, rid + " ", " " + rid.lower() + " "]
    if dirty:
        bare = rid.replace("-", "")
        forms += [bare, bare.lower(), " " + bare]
    return forms


def shown_ids(rng, ids, eligible, dirty):
    """How a secondary source writes each of `ids` (its rows in order): mostly as registered, some dirty.
    Two of the `eligible` rows (rows that decide a record's findings) are dirty for sure: one in lower
    case and one, from level 4, without its hyphen."""
    shown = [rid if rng.random() < 0.6 else rng.choice(id_forms(rid, dirty)) for rid in ids]
    lower, bare = rng.sample(eligible, 2)
    shown[lower] = ids[lower].lower()
    if dirty:
        shown[bare] = ids[bare].replace("-", "")
    return shown


def log_date(day):
    return "2024-%02d-%02d" % (3 + day // 30, 1 + day % 30)


def render(rng, d, f, audit, limits, listed):
    """The workspace files of the audit, dirty where the level says so."""
    n = names(d)
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    env = {}
    if f["dossiers"]:
        for rid, (group, cents) in sorted(audit.register.items()) + sorted(audit.drafts.items()):
            env["%s/%s.txt" % (n["reg"], rid)] = "%s: %s\n%s: %s\n%s: %s\n" % (
                idf, rid, gf, group, nf, decimal_text(cents))
        index = [(rid, "%s/%s.txt" % (n["reg"], rid)) for rid in sorted(audit.register)]
        rng.shuffle(index)
        env[n["reg"] + "_index.csv"] = csv_text([idf, "file"], index)
        table = [(g, decimal_text(limits[g][0]), decimal_text(limits[g][1])) for g in listed]
        if f["default"]:
            table.append(("*", decimal_text(limits["*"][0]), decimal_text(limits["*"][1])))
        env[n["limits"]] = csv_text([gf, "tolerance", "approval_threshold"], table)
    else:
        rows = [(rid, g, decimal_text(c)) for rid, (g, c) in sorted(audit.register.items())]
        rng.shuffle(rows)
        env[n["reg"] + ".csv"] = csv_text([idf, gf, nf], rows)
    env.update(render_log(rng, d, f, audit))
    env.update(render_approvals(rng, d, f, audit, limits))
    return env


def render_log(rng, d, f, audit):
    n = names(d)
    idf, nf = d["id_field"], d["numeric_field"]
    rows = []  # (id, cents or None, day, counted)
    for rid in sorted(audit.readings):
        values = audit.readings[rid]
        days = sorted(rng.sample(range(120), len(values)))
        last = max([k for k, v in enumerate(values) if v is not None], default=None)
        rows += [(rid, v, day, k == last) for k, (v, day) in enumerate(zip(values, days))]
    rng.shuffle(rows)
    # Rows whose reading decides a registered record's findings.
    deciding = [k for k, row in enumerate(rows) if row[3] and row[0] in audit.register]
    shown = shown_ids(rng, [row[0] for row in rows], deciding, f["dirty"])
    if not f["dirty"]:
        return {n["log"] + ".csv": csv_text([idf, nf], [(s, decimal_text(row[1])) for s, row in zip(shown, rows)])}
    # Two crews' files with different columns; the second writes some readings in hundredths.
    in_a, scaled_one = rng.sample(deciding, 2)
    dated = ["date"] if f["dated"] else []
    a_rows, b_rows = [], []
    for k, ((rid, cents, day, _), s) in enumerate(zip(rows, shown)):
        date = [log_date(day)] if f["dated"] else []
        if k != scaled_one and (k == in_a or rng.random() < 0.55):
            a_rows.append([s] + date + ["" if cents is None else decimal_text(cents)])
            continue
        scaled = cents is not None and (k == scaled_one or rng.random() < 0.35)
        text = "" if cents is None else (str(cents) if scaled else decimal_text(cents))
        b_rows.append(date + [text, HUNDREDTHS if scaled else d["unit"], s])
    return {
        "%s/%s.csv" % (n["log"], n["crew_a"]): csv_text([idf] + dated + [nf], a_rows),
        "%s/%s.csv" % (n["log"], n["crew_b"]): csv_text(dated + ["reading", "unit", "id"], b_rows),
    }


def render_approvals(rng, d, f, audit, limits):
    n = names(d)
    approvals = list(audit.approvals)
    rng.shuffle(approvals)
    deciding = [k for k, (rid, _) in enumerate(approvals) if rid in audit.register]
    shown = shown_ids(rng, [rid for rid, _ in approvals], deciding, f["dirty"])
    groups = [g for _, g in approvals]
    if f["dirty"]:
        groups = [g if rng.random() < 0.7 else rng.choice([g.upper(), g.capitalize()]) for g in groups]
        # One approval a record needs, in another letter case.
        needed = [k for k, (rid, g) in enumerate(approvals) if rid in audit.register
                  and audit.register[rid][0] == g and audit.register[rid][1] >= limits[g][1]]
        k = rng.choice(needed)
        groups[k] = approvals[k][1].capitalize()
    return {n["appr"] + ".csv": csv_text([d["id_field"], d["group_field"]], list(zip(shown, groups)))}


# ---- the contract

def audit_rules(d, f, limits):
    n = names(d)
    idf, gf, nf, unit = d["id_field"], d["group_field"], d["numeric_field"], d["unit"]
    appr = "`%s.csv`" % n["appr"]
    log = "the field log" if f["dirty"] else "`%s.csv`" % n["log"]
    if f["dossiers"]:
        register = ("The register is `%s_index.csv`: it names one dossier per record in `%s/`, and each dossier "
                    "holds the record's `%s`, `%s` and `%s` as `name: value` lines. It is authoritative"
                    % (n["reg"], n["reg"], idf, gf, nf))
    else:
        register = "The register `%s.csv` is authoritative" % n["reg"]
    rules = ["%s: its ids are the %s on record, and its `%s` and `%s` are the values every rule below uses; %s and "
             "%s are checked against it." % (register, d["entity_plural"], gf, nf, log, appr)]
    if f["dirty"]:
        rules += [
            "Only the dossiers the index names are register records; any other file in `%s/` is a draft and is "
            "ignored (an id that only a draft names is absent from the register)." % n["reg"],
            "The field log is two files with different columns: `%s/%s.csv` has `%s` and `%s` (in %s); `%s/%s.csv` "
            "has `id` (the `%s`), `reading` (the `%s`) and `unit`. Rows of both files count."
            % (n["log"], n["crew_a"], idf, nf, unit, n["log"], n["crew_b"], idf, nf),
            "A `unit` of `%s` means the reading is in hundredths of the unit (%s): divide it by 100; any other "
            "unit is %s." % (HUNDREDTHS, unit, unit),
            "A log row with an empty value is ignored, as if it were not there.",
        ]
    forms = "in lower case, with spaces around them" + (", or without the hyphen after `%s`" % d["id_prefix"]
                                                          if f["dirty"] else "")
    rules.append("Ids in %s and %s may be written %s: compare ids after normalizing them to the register's form "
                 "(upper case, trimmed%s), and write them in that form." % (
                     log, appr, forms, ", hyphen restored" if f["dirty"] else ""))
    if f["dirty"]:
        rules.append("`%s` values are compared ignoring letter case." % gf)
    if f["dated"]:
        rules.append("Log rows carry a `date`: when an id has several rows (in either file), only its latest-dated "
                     "row with a value counts; an empty row never counts, even when it is the latest.")
    rules.append("Every register record needs a row in %s; a record without one is `missing_log`." % log)
    if f["dossiers"]:
        thr_text = "the `approval_threshold`"
        limits_rule = "Tolerance and approval threshold come from `%s`, by the record's registered `%s`, in %s." % (
            n["limits"], gf, unit)
        if f["default"]:
            limits_rule += " Any `%s` that the table does not list uses its `*` row." % gf
        rules.append(limits_rule)
        rules.append("A record is `value_mismatch` when its logged `%s` differs from its registered one by more than "
                     "the `tolerance`; a difference exactly equal to the tolerance is no mismatch." % nf)
    else:
        tol, thr = limits[d["group_values"][0]]
        thr_text = "%s %s" % (decimal_text(thr), unit)
        tol_text = decimal_text(tol)
        rules.append("A record is `value_mismatch` when its logged `%s` differs from its registered one by more than "
                     "%s %s; a difference of exactly %s is no mismatch." % (nf, tol_text, unit, tol_text))
    rules += [
        "A record whose registered `%s` is %s or more (exactly on it included) needs a row in %s under its own `%s`; "
        "without one it is `missing_approval`. The logged value never decides this, and an approval filed under "
        "another `%s` does not count." % (nf, thr_text, appr, gf, gf),
        "A record that has a row in %s whose `%s` differs from the register's is `group_conflict`." % (appr, gf),
    ]
    if f["approvals_only"]:
        rules.append("An id absent from the register is `unregistered` when %s names it (one finding however many "
                     "rows name it); ids that only the field log names are readings from elsewhere and are not "
                     "reported." % appr)
    else:
        rules.append("An id named in %s or %s but absent from the register is `unregistered`: one finding however "
                     "many rows name it." % (log, appr))
    reg_col, log_col = "registered_" + nf, "logged_" + nf
    if f["priority"]:
        rules.append("Write one row per id with at least one finding, keyed by `%s` and `issue`: `issue` is its "
                     "finding that comes first in the order %s, and `findings` is how many findings it has in all."
                     % (idf, ", ".join("`%s`" % p for p in PRIORITY)))
    else:
        rules.append("Write one row per finding, keyed by `%s` and `issue`: a record with several findings gets one "
                     "row for each; an id with no finding gets none." % idf)
    rules.append("`%s` is the register's value (missing for `unregistered`); `%s` is the log's counted value "
                 "whenever the log has one for the id, whatever the issue (missing otherwise); `difference` is "
                 "logged minus registered on `value_mismatch` rows and missing on every other row."
                 % (reg_col, log_col))
    return rules


# ---- the oracle

def audit_solution(d, f, limits, writer):
    """The oracle of levels 2-5 (oracles/cross_source_audit/audit.py): the register file and one tolerance and
    threshold at level 2, the dossiers and the limits table from level 3, the crews' log files when dirty."""
    n = names(d)
    nf = d["numeric_field"]
    tol, thr = limits[d["group_values"][0]]
    fixed, dirty = not f["dossiers"], f["dirty"]
    crew_logs = ["%s/%s.csv" % (n["log"], n["crew_a"]), "%s/%s.csv" % (n["log"], n["crew_b"])]
    return python_oracle(
        "cross_source_audit", "audit", writer, KEY=d["id_field"], GROUP=d["group_field"], VALUE=nf,
        PREFIX=d["id_prefix"] if dirty else None, REG_COL="registered_" + nf, LOG_COL="logged_" + nf,
        REGISTER=n["reg"] + ".csv" if fixed else None, INDEX=None if fixed else n["reg"] + "_index.csv",
        TOLERANCE=decimal_text(tol) if fixed else None, THRESHOLD=decimal_text(thr) if fixed else None,
        LIMITS=None if fixed else n["limits"], DEFAULT=None if fixed else f["default"],
        LOG=None if dirty else n["log"] + ".csv", CREW_LOGS=crew_logs if dirty else None,
        APPROVALS=n["appr"] + ".csv", DIRTY=dirty, APPROVALS_ONLY=f["approvals_only"],
        PRIORITY=PRIORITY if f["priority"] else None)


def audit_level(level):
    f = FEATURES[level]

    def build_audit_level(rng, seed, params):
        d = params["domain"]
        n = names(d)
        idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
        audit, limits, listed = build_audit(rng, d, f)
        found, logged = audit_findings(audit, limits, f)
        reg_col, log_col = "registered_" + nf, "logged_" + nf
        columns = [idf, "issue"] + (["findings"] if f["priority"] else []) + [reg_col, log_col, "difference"]
        expected = expected_rows(audit, found, logged, f, idf, reg_col, log_col)
        fmt = deliverable_format(seed)
        out = records_deliverable(fmt, STEM, [idf, "issue"], columns, expected, split_column="issue",
                                  split_values=LABELS)
        environment = render(rng, d, f, audit, limits, listed)
        contract = {
            "deliverable": {"paths": out["paths"], "format": fmt, "schema": out["schema"], "columns": columns},
            "rules": audit_rules(d, f, limits) + out["rules"],
            "parameters": {"tolerance": 0.001},
            "labels": list(LABELS),
        }
        if not f["dossiers"]:
            tol, thr = limits[d["group_values"][0]]
            contract["parameters"].update(match_tolerance=float(decimal_text(tol)),
                                          approval_threshold=float(decimal_text(thr)))
        if f["dossiers"]:
            register = "the register index `%s_index.csv` with the dossiers it names in `%s/`" % (n["reg"], n["reg"])
            limits_text = ", and `%s` gives each %s's tolerance and approval threshold" % (n["limits"], gf)
        else:
            register = "the register `%s.csv`" % n["reg"]
            limits_text = ""
        log = ("the field log in `%s/`" % n["log"]) if f["dirty"] else ("the field log `%s.csv`" % n["log"])
        if fmt == "files":
            target = "one CSV per issue in `%s/`" % STEM
        else:
            target = " and ".join("`%s`" % p for p in out["paths"])
        instruction = (
            "Audit the %s on record against the other sources: %s is checked against %s and the approval list "
            "`%s.csv`%s. Report every finding under the rules in CONTRACT.md, followed exactly, and write the "
            "findings to %s." % (d["entity_plural"], register, log, n["appr"], limits_text, target))
        solution = audit_solution(d, f, limits, out["writer"])
        key = {"findings": expected}
        return assemble(params, instruction, environment, contract, out["checks"], key, solution, fmt)

    return build_audit_level


LEVELS = (level0, level1) + tuple(audit_level(level) for level in (2, 3, 4, 5))
build = family(__name__, LEVELS)
