#!/usr/bin/env python3
"""Generator family `log_analysis` (analysis track).

build(seed, params) -> task: timestamped log files of the domain (level,
component named by the domain's group values, entity id, message, the
domain's numeric field), an instruction, the answer contract, the answer key
computed from the generated entries, and an oracle solution. Stdlib-only, with
generator_common.py beside it: it runs in the sandbox as
`python3 -I /generator/log_analysis.py --params P --seed N --out /out`.

Levels: 0 = one grep/tail/cut step on one log; 1 = ERROR counts per
component, or the last sighting per entity, over a log and its rotated older
part; 2 = per-component ERROR summary in a time window over rotated logs with
malformed and repeated lines (bounds, a tie for the first error, half-up
means, an alert threshold, omitted components); 3 = multi-hop: an index of
per-entity log files, a limits table per component, runs paired from
started/finished entries, overruns and the longest run; 4 = level 3 on dirty
logs: unlisted files, three timestamp formats with UTC offsets and epoch
milliseconds, multi-line entries, lines missing their id; 5 = level 4 with
hundreds of entries, a window on run starts, restarts, missing values, a
half-up mean and an alert threshold.
"""

import datetime
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
    numbered_levels,
    python_oracle,
    record_ids,
    records_deliverable,
)

HOUR, MINUTE = 3600, 60
UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
# What a line of each level says about its task.
VERBS = {"DEBUG": "queued", "INFO": "checked", "WARN": "slow", "ERROR": "failed"}
# Local-time offsets (minutes east of UTC) of the files written in local time.
OFFSETS = (60, 120, 330, -180, -240, -300)
# The contract shows window bounds as timestamps: their year is a number in the
# text, so it is picked to differ from every number of the answer.
YEARS = (2021, 2022, 2023, 2024, 2025)
STATUS = ["alert", "ok"]
# Timestamp formats, one per file: ISO UTC, local time with offset, epoch milliseconds.
ISO, LOCAL, MILLIS = "iso", "local", "millis"
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


# ---- time and lines

class Clock:
    """Renders seconds counted from midnight UTC of one day."""

    def __init__(self, year, month, day):
        self.base = datetime.datetime(year, month, day, tzinfo=UTC)

    def stamp(self, t, fmt=ISO, offset=0):
        moment = self.base + datetime.timedelta(seconds=t)
        if fmt == ISO:
            return moment.strftime(ISO_FORMAT)
        if fmt == LOCAL:
            local = moment + datetime.timedelta(minutes=offset)
            sign = "+" if offset >= 0 else "-"
            return local.strftime("%Y-%m-%d %H:%M:%S") + " %s%02d%02d" % (sign, abs(offset) // 60, abs(offset) % 60)
        return str(int((moment - EPOCH).total_seconds()) * 1000)


def new_day(rng):
    # One-digit months: the month of a window bound is then no number worth auditing.
    return rng.randint(1, 9), rng.randint(10, 28)


def pick_year(rng, answer_numbers):
    numbers = {Decimal(str(n)) for n in answer_numbers}
    years = list(YEARS)
    rng.shuffle(years)
    return next(y for y in years if Decimal(y) not in numbers)


def numbers_of(records):
    return [v for r in records for v in r.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]


def log_line(stamp, level, comp, ident, msg, nf=None, cents=None):
    parts = [stamp, level, comp] + ([ident] if ident else []) + [msg]
    if cents is not None:
        parts.append("%s=%s" % (nf, decimal_text(cents)))
    return " ".join(parts)


def half_up(value, places="0.01"):
    return value.quantize(Decimal(places), rounding=ROUND_HALF_UP)


def simple_contract(out, fmt, schema, rules, parameters=None):
    return {"deliverable": {"path": out, "format": fmt, "schema": schema}, "rules": rules,
            "parameters": parameters or {}, "labels": []}


def records_contract(deliverable, columns, rules, parameters, labels):
    # The report format's rules state its minimum word count: a number the contract
    # must state, so it is a parameter (the leakage audit would otherwise flag an
    # answer value equal to it).
    parameters = dict(parameters)
    for check in deliverable["checks"]:
        if "min_words" in check:
            parameters["report_min_words"] = check["min_words"]
    return {
        "deliverable": {"path": deliverable["paths"][0], "paths": deliverable["paths"], "format": deliverable["format"],
                        "schema": deliverable["schema"], "columns": columns},
        "rules": rules + deliverable["rules"],
        "parameters": parameters,
        "labels": labels,
    }


# ---- level 0: one command on one log

def simple_entries(rng, d, levels):
    """Lines (t, level, comp, id, msg, cents) in time order, one per level given."""
    lo, hi = cents_range(d)
    comps = rng.sample(d["group_values"], rng.randint(3, 5))
    ids = record_ids(rng, d, rng.randint(len(comps) + 2, 9))
    owner = {ident: comps[n % len(comps)] for n, ident in enumerate(ids)}
    rng.shuffle(levels)
    times = sorted(rng.sample(range(6 * HOUR, 20 * HOUR), len(levels)))
    rows = []
    for t, level in zip(times, levels):
        ident = rng.choice(ids)
        rows.append((t, level, owner[ident], ident, "%s %s" % (rng.choice(d["file_stems"]), VERBS[level]),
                     rng.randint(lo, hi)))
    return rows


def level0(rng, seed, params):
    d = params["domain"]
    log = d["record_file"] + ".log"
    variant = level0_variant(seed)
    levels = ["ERROR"] * rng.randint(10, 14) + ["WARN"] * rng.randint(3, 6)
    levels += ["INFO"] * rng.randint(12, 20) + ["DEBUG"] * rng.randint(2, 5)
    rows = simple_entries(rng, d, levels)
    clock = Clock(pick_year(rng, []), *new_day(rng))
    lines = [log_line(clock.stamp(t), level, comp, ident, msg, d["numeric_field"], cents)
             for t, level, comp, ident, msg, cents in rows]
    fields = "Each line of %s holds a timestamp, a level, a %s, an id, a message and a reading." % (
        log, d["group_field"])
    if variant == 0:
        out, value = "errors.txt", sum(1 for row in rows if row[1] == "ERROR")
        instruction = "Count the lines of %s whose level is ERROR and write the count to %s." % (log, out)
        check = {"type": "number", "name": "ERROR line count", "path": out, "expected": value, "tolerance": 0}
        solution, schema = "grep -c ERROR %s > %s" % (log, out), "a single integer"
    elif variant == 1:
        out, value = "last.txt", lines[-1]
        instruction = "%s is in time order. Write its most recent entry, the whole last line, to %s." % (log, out)
        check = {"type": "text", "name": "last entry", "path": out, "expected": value}
        solution, schema = "tail -n 1 %s > %s" % (log, out), "one line of the log"
    elif variant == 2:
        out, value = "warnings.txt", [line for line in lines if line.split()[1] == "WARN"]
        instruction = "Write every line of %s whose level is WARN to %s, in the order they appear in the log." % (
            log, out)
        check = {"type": "lines", "name": "WARN lines", "path": out, "expected": value, "ordered": True}
        solution, schema = "grep WARN %s > %s" % (log, out), "lines of the log, in log order"
    else:
        out, value = d["group_field"] + ".txt", sorted({row[2] for row in rows})
        instruction = "The third space-separated field of each line of %s is the %s. Write every %s that occurs, " \
                      "once each, sorted, one per line, to %s." % (log, d["group_field"], d["group_field"], out)
        check = {"type": "lines", "name": "%s names" % d["group_field"], "path": out, "expected": value,
                 "ordered": True}
        solution, schema = "cut -d' ' -f3 %s | sort -u > %s" % (log, out), "one name per line, sorted"
    rule = "Surrounding whitespace and blank lines in %s are ignored; write nothing else into it." % out
    contract = simple_contract(out, check["type"], schema, [rule])
    instruction = fields + " " + instruction
    return assemble(params, instruction, {log: "\n".join(lines) + "\n"}, contract, [check], {out: value}, solution,
                    check["type"])


# ---- level 1: a log and its rotated older part

def level1(rng, seed, params):
    d = params["domain"]
    log = d["record_file"] + ".log"
    old = log + ".1"
    gf, idf = d["group_field"], d["id_field"]
    levels = ["ERROR"] * rng.randint(6, 10) + ["WARN"] * rng.randint(3, 6) + ["INFO"] * rng.randint(14, 22)
    rows = simple_entries(rng, d, levels)
    comps = sorted({row[2] for row in rows})
    # One component never fails, so "only components with an error" decides a row.
    calm = rng.choice(comps)
    for n, (t, level, comp, ident, msg, cents) in enumerate(rows):
        if comp == calm and level == "ERROR":
            rows[n] = (t, "INFO", comp, ident, msg.rsplit(" ", 1)[0] + " " + VERBS["INFO"], cents)
    cut = len(rows) // 2 + rng.randint(-2, 2)
    # One id logs only in the older part: its last sighting is there.
    early = rows[rng.randint(0, cut - 1)][3]
    later = [row for row in rows[cut:] if row[3] != early]
    older = rows[:cut]
    clock = Clock(pick_year(rng, []), *new_day(rng))

    def text(part):
        return "".join(log_line(clock.stamp(t), lv, c, i, m, d["numeric_field"], v) + "\n"
                       for t, lv, c, i, m, v in part)

    environment = {old: text(older), log: text(later)}
    kept = older + later
    both = "%s is the current log and %s its rotated older part; both are in time order and each line holds a " \
           "timestamp, a level, the %s, the %s, a message and a reading." % (log, old, gf, idf)
    if seed % 2 == 0:
        out, column = gf + "_errors.csv", "errors"
        counts = {}
        for row in kept:
            if row[1] == "ERROR":
                counts[row[2]] = counts.get(row[2], 0) + 1
        expected = [{gf: c, column: n} for c, n in sorted(counts.items())]
        instruction = "%s Write %s with the header line `%s,%s` and one row per %s giving how many ERROR lines it " \
                      "has across both files." % (both, out, gf, column, gf)
        awk = "awk '$2 == \"ERROR\" {n[$3]++} END {for (c in n) print c \",\" n[c]}'"
        solution = "{ echo '%s,%s'; cat %s %s | %s; } > %s" % (gf, column, old, log, awk, out)
        key, rules = gf, ["Only a %s with at least one ERROR line gets a row." % gf]
        columns = {gf: {"kind": "text"}, column: {"kind": "number", "tolerance": 0}}
    else:
        out, column = "last_seen.csv", "last_seen"
        last = {}
        for row in kept:
            last[row[3]] = clock.stamp(row[0])
        expected = [{idf: i, column: t} for i, t in sorted(last.items())]
        instruction = "%s Write %s with the header line `%s,%s` and one row per %s that occurs in either file, " \
                      "giving the timestamp of its most recent line." % (both, out, idf, column, idf)
        solution = "{ echo '%s,%s'; cat %s %s | awk '{t[$4] = $1} END {for (i in t) print i \",\" t[i]}'; } > %s" % (
            idf, column, old, log, out)
        key, rules = idf, ["`%s` is the timestamp exactly as written in the log." % column]
        columns = {idf: {"kind": "text"}, column: {"kind": "text"}}
    check = {"type": "csv_records", "name": "%s per %s" % (column, key), "path": out, "key": [key],
             "columns": columns, "expected": expected}
    contract = simple_contract(out, "csv", "CSV with header `%s,%s`, one row per %s" % (key, column, key),
                               rules + ["Rows may be in any order."])
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, "csv")


# ---- level 2: stated rules over rotated logs with malformed and repeated lines

def level2(rng, seed, params):
    d = params["domain"]
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    log = d["record_file"] + ".log"
    old = log + ".1"
    lo, hi = cents_range(d)
    stems = d["file_stems"]
    ws = rng.choice([8, 9, 10]) * HOUR
    we = ws + rng.choice([6, 7, 8]) * HOUR
    first, last = 6 * HOUR, we + 2 * HOUR
    empty, quiet, tie, thresh, rounding = rng.sample(d["group_values"], 5)
    threshold = rng.randint(3, 4)
    ids = record_ids(rng, d, 12)
    rng.shuffle(ids)
    members = {empty: ids[0:2], quiet: ids[2:4], tie: ids[4:7], thresh: ids[7:9], rounding: ids[9:12]}
    used = {ws, we}
    events = []

    def moment(a, b):
        while True:
            t = rng.randrange(a, b)
            if t not in used:
                used.add(t)
                return t

    def add(t, level, comp, ident=None, cents=None, bad=None):
        ident = ident or rng.choice(members[comp])
        cents = rng.randint(lo, hi) if cents is None and bad != "cut" else cents
        msg = "%s %s" % (rng.choice(stems), VERBS[level])
        event = {"t": t, "level": level, "comp": comp, "id": ident, "msg": msg, "cents": cents, "bad": bad}
        events.append(event)
        return event

    def outside():
        return moment(first, ws) if rng.random() < 0.5 else moment(we + 1, last)

    def quiet_level():
        return rng.choice(["DEBUG", "INFO", "INFO", "WARN"])

    # Outside the window: nothing there counts.
    add(outside(), "ERROR", empty)
    for _ in range(rng.randint(2, 4)):
        add(outside(), rng.choice(list(VERBS)), empty)
    for comp in (quiet, tie, thresh, rounding):
        add(outside(), "ERROR", comp)
        for _ in range(rng.randint(0, 2)):
            add(outside(), quiet_level(), comp)
    # quiet: entries in the window but no error; its only ERROR is exactly on the (exclusive) end.
    for _ in range(rng.randint(3, 5)):
        add(moment(ws + 1, we), quiet_level(), quiet)
    add(we, "ERROR", quiet)
    # thresh: exactly `threshold` errors, the first exactly on the (inclusive) start; one of them
    # is the last line before the rotation and repeated at the top of the current log.
    add(ws, "ERROR", thresh)
    third = (we - ws) // 3
    repeated = add(moment(ws + third, ws + 2 * third), "ERROR", thresh)
    for _ in range(threshold - 2):
        add(moment(ws + 1, we), "ERROR", thresh)
    for _ in range(rng.randint(2, 4)):
        add(moment(ws + 1, we), quiet_level(), thresh)
    # tie: its first errors in the window share one second; the larger id is written first.
    t_tie = moment(ws + 60, ws + third)
    small, large = sorted(rng.sample(members[tie], 2))
    add(t_tie, "ERROR", tie, large)
    add(t_tie, "ERROR", tie, small)
    for _ in range(rng.randint(0, 2)):
        add(moment(t_tie + 1, we), "ERROR", tie)
    for _ in range(rng.randint(1, 3)):
        add(moment(ws + 1, we), quiet_level(), tie)
    # Malformed lines in the window: one cut short (no reading), one without its id.
    add(moment(t_tie + 1, we), "ERROR", tie, bad="cut")
    add(moment(ws + 1, we), "ERROR", rng.choice([quiet, thresh, rounding]), bad="noid")
    # rounding: an even number of readings whose mean ends in an exact half cent after an
    # even cent, so half-up and half-to-even round it differently.
    n = rng.choice([2, 4])
    values = [rng.randint(lo, hi) for _ in range(n - 1)]
    start = rng.randint(lo, hi - 2 * n)
    values.append(start + (n // 2 - sum(values) - start) % (2 * n))
    for cents in values:
        add(moment(ws + 1, we), rng.choice(list(VERBS)), rounding, cents=cents)

    # Gold: well-formed entries inside [ws, we), each once.
    stats = {}
    for e in events:
        if e["bad"] is None and ws <= e["t"] < we:
            s = stats.setdefault(e["comp"], {"errors": [], "values": []})
            s["values"].append(e["cents"])
            if e["level"] == "ERROR":
                s["errors"].append((e["t"], e["id"]))
    mean_col = "mean_" + nf
    expected = []
    for comp in sorted(stats):
        s = stats[comp]
        errors = len(s["errors"])
        mean = Decimal(sum(s["values"])) / len(s["values"]) / 100
        expected.append({gf: comp, "errors": errors, "first_error_id": min(s["errors"])[1] if s["errors"] else None,
                         mean_col: float(half_up(mean)), "status": "alert" if errors >= threshold else "ok"})
    assert empty not in stats and len(stats[thresh]["errors"]) == threshold
    assert min(stats[tie]["errors"]) == (t_tie, small)
    assert sum(values) % (2 * n) == n // 2

    clock = Clock(pick_year(rng, numbers_of(expected)), *new_day(rng))
    events.sort(key=lambda e: e["t"])  # stable: the tie keeps the larger id first

    def text(e):
        stamp = clock.stamp(e["t"])
        if e["bad"] == "cut":
            return "%s %s %s %s %s" % (stamp, e["level"], e["comp"], e["id"], e["msg"][:-3])
        ident = None if e["bad"] == "noid" else e["id"]
        return log_line(stamp, e["level"], e["comp"], ident, e["msg"], nf, e["cents"])

    rotation = repeated["t"] + 1
    older = [text(e) for e in events if e["t"] < rotation]
    newer = older[-rng.randint(1, 3):] + [text(e) for e in events if e["t"] >= rotation]
    environment = {old: "\n".join(older) + "\n", log: "\n".join(newer) + "\n"}

    fmt = deliverable_format(seed)
    columns = [gf, "errors", "first_error_id", mean_col, "status"]
    deliverable = records_deliverable(fmt, gf + "_errors", [gf], columns, expected,
                                      split_column="status", split_values=STATUS)
    ws_text, we_text = clock.stamp(ws), clock.stamp(we)
    rules = [
        "Only entries whose timestamp lies in the window from `%s` (inclusive) to `%s` (exclusive) count; "
        "all timestamps are UTC." % (ws_text, we_text),
        "A well-formed line has six fields: timestamp, level, %s, %s, message, and `%s=<value>` at its end. "
        "Any other line is malformed and ignored: it counts nowhere." % (gf, idf, nf),
        "%s is the rotated older part of %s and the two overlap: a line that appears in both files is one entry, "
        "counted once." % (old, log),
        "`errors` is the number of ERROR entries of the %s in the window." % gf,
        "`first_error_id` is the %s of the earliest ERROR entry of the %s in the window; among entries with the "
        "same timestamp the smallest %s wins. It is empty (null) when the %s has no ERROR entry in the window."
        % (idf, gf, idf, gf),
        "`%s` is the mean %s over all entries of the %s in the window, whatever their level, computed on the "
        "unrounded values and rounded to two decimals only on output, halves rounded up." % (mean_col, nf, gf),
        "`status` is `alert` when `errors` is at least %d (exactly %d is `alert`), otherwise `ok`."
        % (threshold, threshold),
        "Every %s with at least one entry in the window gets a record, even with no errors; a %s with no entry "
        "in the window is omitted." % (gf, gf),
    ]
    parameters = {"window_start": ws_text, "window_end": we_text, "alert_threshold": threshold, "tolerance": 0.001}
    contract = records_contract(deliverable, columns, rules, parameters, list(STATUS))
    instruction = (
        "%s is the current log of the %s and %s its rotated older part. Each line holds a timestamp, a level, "
        "the %s, the %s, a message and the %s (%s, `%s=`). Summarize the ERROR entries and the mean %s of each %s "
        "in the time window, following the rules in CONTRACT.md exactly, and write %s."
        % (log, d["entity_plural"], old, gf, idf, d["numeric_label"], d["unit"], nf, d["numeric_label"], gf,
           " and ".join(deliverable["paths"]))
    )
    solution = python_oracle("log_analysis", "window", deliverable["writer"], FILES=[old, log], GROUP=gf, VALUE=nf,
                             MEAN=mean_col, THRESHOLD=threshold, WINDOW_START=ws_text, WINDOW_END=we_text)
    key = {p: expected for p in deliverable["paths"]}
    return assemble(params, instruction, environment, contract, deliverable["checks"], key, solution, fmt)


# ---- levels 3 to 5: per-entity log files, an index and a limits table

def make_ops(rng, d, n_random, groups, failing=False):
    """The ops of one entity in time order, times relative to its first op.
    `groups` are lists of forced op specs, each kept together at a random place."""
    lo, hi = cents_range(d)
    specs = [[{"kind": "failed" if failing or rng.random() < 0.2 else "done"}] for _ in range(n_random)]
    for group in groups:
        specs.insert(rng.randint(0, len(specs)), group)
    ops, t = [], 0
    for spec in [s for group in specs for s in group]:
        kind = spec["kind"]
        dur = spec.get("dur") or (rng.randint(2 * MINUTE, 30 * MINUTE) if kind == "failed"
                                  else rng.randint(5 * MINUTE, 80 * MINUTE))
        op = {"task": spec.get("task") or rng.choice(d["file_stems"]), "kind": kind, "rel": t, "dur": dur,
              "value": rng.randint(lo, hi), "tag": spec.get("tag"), "noid": spec.get("noid", False),
              "cont": spec.get("cont", rng.choice([0, 0, 1, 2])),
              "mid": rng.choice([None, "WARN", "DEBUG"]) if kind == "done" else None,
              "again": rng.randint(2 * MINUTE, dur // 2) if kind == "restart" else None}
        ops.append(op)
        t += dur + rng.randint(3 * MINUTE, 40 * MINUTE)
    return ops


def entity_entries(entity):
    """The entity's entries in time order: dicts with t, level, task, verb, value, op."""
    out = []
    for op in entity["ops"]:
        s = entity["start"] + op["rel"]

        def entry(t, level, verb, value=None, noid=False):
            out.append({"t": t, "level": level, "task": op["task"], "verb": verb, "value": value, "noid": noid,
                        "op": op})

        entry(s, "INFO", "started")
        if op["kind"] == "restart":
            entry(s + op["again"], "INFO", "started")
        if op["mid"]:
            entry(s + op["dur"] // 2, op["mid"], "slow" if op["mid"] == "WARN" else "checkpoint")
        if op["kind"] == "failed":
            entry(s + op["dur"], "ERROR", "failed")
        else:
            entry(s + op["dur"], "INFO", "finished", op["value"], op["noid"])
    return out


def find_op(entity, tag):
    return next(op for op in entity["ops"] if op["tag"] == tag)


def summarize(entities, limits, window):
    """Gold per component over the listed entities: runs (latest open start of the same
    task), errors, overruns, longest run, mean value; `window` bounds run starts and errors."""
    stats = {}
    for entity in entities:
        if not entity["listed"]:
            continue
        s = stats.setdefault(entity["comp"], {"runs": [], "errors": 0})
        open_starts = {}
        for e in entity_entries(entity):
            if e["noid"]:
                continue
            inside = window is None or window[0] <= e["t"] < window[1]
            if e["level"] == "ERROR" and inside:
                s["errors"] += 1
            if e["verb"] == "started":
                open_starts[e["task"]] = e["t"]
            elif e["verb"] == "finished" and e["task"] in open_starts:
                start = open_starts.pop(e["task"])
                if window is None or window[0] <= start < window[1]:
                    s["runs"].append({"id": entity["id"], "start": start, "dur": e["t"] - start, "op": e["op"]})
    return stats


def gold_records(stats, limits, gf, mean_col, threshold):
    expected = []
    for comp in sorted(stats):
        runs = stats[comp]["runs"]
        longest = min(runs, key=lambda r: (-r["dur"], r["id"]))["id"] if runs else None
        row = {gf: comp, "runs": len(runs),
               "total_minutes": float(half_up(Decimal(sum(r["dur"] for r in runs)) / 60)),
               "overruns": sum(1 for r in runs if r["dur"] > limits[comp] * MINUTE),
               "errors": stats[comp]["errors"], "longest_id": longest}
        if mean_col:
            values = [r["op"]["value"] for r in runs if r["op"]["value"] is not None]
            row[mean_col] = float(half_up(Decimal(sum(values)) / len(values) / 100)) if values else None
            row["status"] = "alert" if row["errors"] >= threshold else "ok"
        expected.append(row)
    return expected


def log_summary(rng, seed, params, level):
    d = params["domain"]
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    dirty, large = level >= 4, level == 5
    unused, idle, *normal = rng.sample(d["group_values"], 5)
    comp_a, comp_b, comp_c = normal
    limits = {c: rng.randint(25, 60) for c in d["group_values"]}
    per_normal = (8, 11) if large else (2, 3)
    sizes = {c: rng.randint(*per_normal) for c in normal}
    sizes[idle] = rng.randint(2, 3) if large else rng.randint(1, 2)
    ids = record_ids(rng, d, sum(sizes.values()) + (1 if dirty else 0))
    rng.shuffle(ids)
    pools = {}
    for comp in [idle] + normal:
        pools[comp], ids = ids[:sizes[comp]], ids[sizes[comp]:]
    distractor_id = ids[0] if dirty else None
    ws = rng.choice([9, 10]) * HOUR
    we = ws + rng.choice([6, 7, 8]) * HOUR
    window = (ws, we) if large else None

    # Plants: (host component, forced op groups, anchor). Each host is its own entity at
    # level 5, where an anchor puts the tagged op's start at a time the window makes matter.
    d_tie = rng.randint(85 * MINUTE, 95 * MINUTE)  # longer than any other run
    inside = (ws + 10 * MINUTE, we - 2 * HOUR)
    plants = {
        "tie_small": (comp_a, [[{"kind": "done", "dur": d_tie, "tag": "tie"}]], ("tie", inside)),
        "tie_large": (comp_a, [[{"kind": "done", "dur": d_tie, "tag": "tie"}]], ("tie", inside)),
        "limit": (comp_b, [[{"kind": "done", "dur": limits[comp_b] * MINUTE, "tag": "limit"}]], ("limit", inside)),
        "refail": (comp_c, [[{"kind": "failed", "task": "*", "tag": "refail", "cont": 2},
                             {"kind": "done", "task": "*"}]], ("refail", (ws + 10 * MINUTE, we - 4 * HOUR))),
        "dup": (None, [[{"kind": "failed", "tag": "dup", "cont": 0}]], ("dup", inside)),
        "span": (None, [[{"kind": "done", "dur": rng.randint(20 * MINUTE, 70 * MINUTE), "tag": "span"}]],
                 ("span", inside)),
    }
    if dirty:
        plants["noid"] = (None, [[{"kind": "done", "noid": True, "tag": "noid"}]], ("noid", inside))
    if large:
        plants["at_start"] = (None, [[{"kind": "failed"}, {"kind": "done", "tag": "at_start"}]],
                              ("at_start", (ws, ws + 1)))
        plants["at_end"] = (None, [[{"kind": "done", "tag": "at_end"}]], ("at_end", (we, we + 1)))
        dur = rng.randint(30 * MINUTE, 70 * MINUTE)
        plants["over_end"] = (None, [[{"kind": "done", "dur": dur, "tag": "over_end"}]],
                              ("over_end", (we - dur + 5 * MINUTE, we - 5 * MINUTE)))
        plants["restart"] = (None, [[{"kind": "restart", "tag": "restart"}]], ("restart", inside))

    # Hosts: a distinct entity per plant at level 5; at levels 3 and 4 the tie needs two
    # entities and the two rotation plants (dup, span) two more.
    hosts = {}
    free = {c: list(pools[c]) for c in normal}
    small_id, large_id = sorted(rng.sample(pools[comp_a], 2))
    hosts["tie_small"], hosts["tie_large"] = small_id, large_id
    free[comp_a] = [i for i in free[comp_a] if i not in (small_id, large_id)]
    for name in ("limit", "refail", "dup", "span", "noid", "at_start", "at_end", "over_end", "restart"):
        if name not in plants:
            continue
        comp = plants[name][0]
        if large:
            comp = comp or rng.choice([c for c in normal if free[c]])
            hosts[name] = free[comp].pop(rng.randrange(len(free[comp])))
        elif name == "span":
            # Its own entity: the rotation plants and the epoch-milliseconds one each set the files.
            taken = (hosts["dup"], hosts["refail"])
            hosts[name] = rng.choice([i for i in pools[comp_b] + pools[comp_c] if i not in taken])
        elif comp:
            hosts[name] = rng.choice(pools[comp])
        else:
            hosts[name] = rng.choice([i for i in pools[comp_a] + pools[comp_b] + pools[comp_c] if i != hosts["refail"]])
    forced = {}
    for name, host in hosts.items():
        groups = [[dict(spec) for spec in group] for group in plants[name][1]]
        task = rng.choice(d["file_stems"])
        for spec in groups[0]:
            if spec.get("task") == "*":
                spec["task"] = task
        forced.setdefault(host, []).extend(groups)

    n_ops = (4, 7) if large else (3, 5)
    entities = []
    for comp in [idle] + normal:
        for ident in pools[comp]:
            ops = make_ops(rng, d, rng.randint(*n_ops), forced.get(ident, []), failing=comp == idle)
            start = rng.randint(ws - 3 * HOUR, ws + HOUR) if large else rng.randint(6 * HOUR, 9 * HOUR)
            entities.append({"id": ident, "comp": comp, "ops": ops, "listed": True, "start": start})
    if dirty:
        comp = rng.choice(normal)
        ops = make_ops(rng, d, rng.randint(3, 4), [[{"kind": "done"}, {"kind": "failed"}]])
        entities.append({"id": distractor_id, "comp": comp, "ops": ops, "listed": False,
                         "start": rng.randint(ws - HOUR, ws + HOUR)})
    by_id = {e["id"]: e for e in entities}
    if large:
        for name, host in hosts.items():
            tag, (a, b) = plants[name][2]
            entity = by_id[host]
            entity["start"] = rng.randrange(a, b) - find_op(entity, tag)["rel"]
        idle_entity = by_id[rng.choice(pools[idle])]
        idle_entity["start"] = rng.randrange(*inside) - idle_entity["ops"][-1]["rel"]
        lure = by_id[distractor_id]
        lure["start"] = rng.randrange(*inside) - lure["ops"][0]["rel"]

    stats = summarize(entities, limits, window)
    mean_col = "mean_" + nf if large else None
    threshold = None
    if large:
        # A missing value in comp_b, then an even count of values whose mean is an exact
        # half cent after an even cent (half-up and half-to-even disagree).
        runs_b = stats[comp_b]["runs"]
        free_ops = [r["op"] for r in runs_b if r["op"]["tag"] is None]
        rng.shuffle(free_ops)
        free_ops.pop()["value"] = None
        if sum(1 for r in runs_b if r["op"]["value"] is not None) % 2:
            free_ops.pop()["value"] = None
        values = [r["op"]["value"] for r in runs_b if r["op"]["value"] is not None]
        n, target = len(values), free_ops[-1]
        base = rng.randint(lo, hi - 2 * n)
        target["value"] = base + (n // 2 - (sum(values) - target["value"]) - base) % (2 * n)
        threshold = rng.choice(sorted({s["errors"] for s in stats.values() if s["errors"]}))
        stats = summarize(entities, limits, window)
    expected = gold_records(stats, limits, gf, mean_col, threshold)
    check_plants(stats, limits, comp_a, comp_b, small_id, large_id, d_tie, large)

    clock = Clock(pick_year(rng, numbers_of(expected)), *new_day(rng))
    environment, index_rows = render_logs(rng, d, entities, {hosts[k]: k for k in ("refail", "dup", "span")}, clock,
                                          dirty)
    # The tie's larger id is listed first, so "first found" is not "smallest".
    first_small = next(n for n, row in enumerate(index_rows) if row[0] == small_id)
    first_large = next(n for n, row in enumerate(index_rows) if row[0] == large_id)
    if first_small < first_large:
        index_rows[first_small], index_rows[first_large] = index_rows[first_large], index_rows[first_small]
    environment["index.csv"] = csv_text([idf, "log_file"], index_rows)
    limits_file = gf + "_limits.csv"
    environment[limits_file] = csv_text([gf, "limit_minutes"], sorted(limits.items()))

    fmt = deliverable_format(seed)
    columns = [gf, "runs", "total_minutes", "overruns", "errors", "longest_id"]
    if large:
        columns += [mean_col, "status"]
        deliverable = records_deliverable(fmt, gf + "_runs", [gf], columns, expected,
                                          split_column="status", split_values=STATUS)
    else:
        deliverable = records_deliverable(fmt, gf + "_runs", [gf], columns, expected,
                                          split_column=gf, split_values=sorted(d["group_values"]))
    rules, parameters = summary_rules(d, limits_file, dirty, large, clock, window, threshold)
    contract = records_contract(deliverable, columns, rules, parameters, list(STATUS) if large else [])
    instruction = (
        "index.csv lists the log files of each %s (%s, log_file) under logs/; a rotated older part of a log ends in "
        "`.log.1`. Each log entry carries a timestamp, a level, the %s, the %s and a message; a finished task also "
        "reports its %s (%s, `%s=`). %s gives the longest expected run of a task per %s, in minutes. Pair the "
        "started and finished entries into runs and summarize the runs and the errors of each %s, following the "
        "rules in CONTRACT.md exactly, and write %s."
        % (d["entity"], idf, gf, idf, d["numeric_label"], d["unit"], nf, limits_file, gf, gf,
           " and ".join(deliverable["paths"]))
    )
    solution = summary_solution(d, limits_file, dirty, large, clock, window, threshold, mean_col, deliverable["writer"])
    key = {p: expected for p in deliverable["paths"]}
    return assemble(params, instruction, environment, contract, deliverable["checks"], key, solution, fmt)


def check_plants(stats, limits, comp_a, comp_b, small_id, large_id, d_tie, large):
    """The planted cases are where the generator put them (a generator bug fails loudly)."""
    tie_runs = [r for r in stats[comp_a]["runs"] if r["dur"] == max(x["dur"] for x in stats[comp_a]["runs"])]
    assert sorted(r["id"] for r in tie_runs) == [small_id, large_id] and tie_runs[0]["dur"] == d_tie
    assert any(r["dur"] == limits[comp_b] * MINUTE for r in stats[comp_b]["runs"])
    if large:
        values = [r["op"]["value"] for r in stats[comp_b]["runs"] if r["op"]["value"] is not None]
        assert len(values) % 2 == 0 and sum(values) % (2 * len(values)) == len(values) // 2
        assert len(values) < len(stats[comp_b]["runs"])


def render_logs(rng, d, entities, roles, clock, dirty):
    """{path: text} of every log file, and the index rows (id, file) of the listed ones.
    `roles` names the entities whose files carry a plant: refail (epoch milliseconds at
    level 4 and up), dup (an ERROR repeated across the rotation), span (a run across it)."""
    nf = d["numeric_field"]
    files, rows = {}, []
    for entity in entities:
        entries = entity_entries(entity)
        role = roles.get(entity["id"])
        fmts = [rng.choice([ISO, ISO, LOCAL, MILLIS]) if dirty else ISO for _ in range(2)]
        offsets = [rng.choice(OFFSETS), rng.choice(OFFSETS)]
        rotated, overlap = entity["listed"] and rng.random() < 0.5, rng.randint(0, 2)
        cut = rng.randint(2, len(entries) - 2)
        if role == "refail" and dirty:
            fmts = [MILLIS, MILLIS]
        elif role == "dup":
            # The failed task's ERROR ends the older part and is repeated at the top of the current one.
            rotated, overlap = True, rng.randint(1, 2)
            cut = next(n for n, e in enumerate(entries) if e["op"]["tag"] == "dup" and e["level"] == "ERROR") + 1
            fmts[1], offsets[1] = fmts[0], offsets[0]
        elif role == "span":
            # The run starts in the older part and finishes in the current one, which at
            # level 4 and up is written in UTC while the older part is in local time.
            rotated, overlap = True, 0
            cut = next(n for n, e in enumerate(entries) if e["op"]["tag"] == "span") + 1
            if dirty:
                fmts = [LOCAL, ISO]
        if fmts[0] != fmts[1] or (fmts[0] == LOCAL and offsets[0] != offsets[1]):
            overlap = 0  # a repeated line is only repeated by the same writer

        def text(part, fmt, offset):
            lines = []
            for e in part:
                stamp = clock.stamp(e["t"], fmt, offset)
                ident = None if e["noid"] else entity["id"]
                lines.append(log_line(stamp, e["level"], entity["comp"], ident, "%s %s" % (e["task"], e["verb"]),
                                      nf, e["value"]))
                if dirty and e["level"] == "ERROR":
                    for k in range(1, e["op"]["cont"] + 1):
                        retry = clock.stamp(e["t"] - 45 * k, fmt, offset)
                        lines.append("    " + log_line(retry, "ERROR", entity["comp"], entity["id"],
                                                       "%s retry failed" % e["task"]))
            return "".join(line + "\n" for line in lines)

        name = "logs/%s.log" % entity["id"]
        if rotated:
            files[name + ".1"] = text(entries[:cut], fmts[0], offsets[0])
            files[name] = text(entries[cut - overlap:], fmts[1], offsets[1])
            parts = [name + ".1", name]
        else:
            files[name] = text(entries, fmts[1], offsets[1])
            parts = [name]
        if entity["listed"]:
            rows += [(entity["id"], part) for part in parts]
    rng.shuffle(rows)
    return files, rows


def summary_rules(d, limits_file, dirty, large, clock, window, threshold):
    gf, idf, nf, entity = d["group_field"], d["id_field"], d["numeric_field"], d["entity"]
    rules = [
        "Read exactly the log files that index.csv lists. A %s's log may be split into a rotated older part "
        "(`.log.1`) and the current part (`.log`)." % entity,
        "An entry is one line: timestamp, level, %s, %s, message, and `%s=<value>` at the end when the entry "
        "reports a value." % (gf, idf, nf),
        "A run is a `<task> started` entry and a later `<task> finished` entry of the same %s and task; a finished "
        "entry pairs with the latest still-open start of that task, and the run lasts from that start to the "
        "finished entry." % entity,
        "A start that is never paired (the task failed, or was started again before it finished) is not a run "
        "and counts nowhere.",
        "An entry that appears in both parts of a rotated log (same time, level, %s, %s and message) is one entry."
        % (gf, idf),
        "`runs` counts the runs of the %s; `total_minutes` is the sum of their durations in minutes, rounded to "
        "two decimals only on output." % gf,
        "`overruns` counts the runs that last longer than the %s's `limit_minutes` in %s; a run of exactly the "
        "limit is not an overrun." % (gf, limits_file),
        "`errors` counts the ERROR entries of the %s." % gf,
        "`longest_id` is the %s of the %s's longest run; when runs tie, the smallest %s wins. It is empty (null) "
        "when the %s has no run." % (idf, gf, idf, gf),
        "Every %s with at least one %s listed in index.csv gets a record, even with no run (runs 0, total_minutes "
        "0, overruns 0); a %s of %s with no listed %s is omitted." % (gf, entity, gf, limits_file, entity),
    ]
    parameters = {"tolerance": 0.001}
    if dirty:
        rules += [
            "Log files under logs/ that index.csv does not list are not read.",
            "Each file writes its timestamps in one of three formats: `YYYY-MM-DDTHH:MM:SSZ` (UTC), "
            "`YYYY-MM-DD HH:MM:SS +HHMM` (local time followed by its offset from UTC, `+` east, `-` west), or Unix "
            "epoch milliseconds. Convert every timestamp to UTC before comparing or subtracting times.",
            "A line that starts with whitespace continues the entry above it (a retry trace); it is not an entry.",
            "A line that lacks any of timestamp, level, %s, %s or message is malformed and ignored, even though its "
            "file name names the %s." % (gf, idf, entity),
        ]
    if large:
        ws_text, we_text = clock.stamp(window[0]), clock.stamp(window[1])
        mean_col = "mean_" + nf
        rules += [
            "Only runs that start inside the window from `%s` (inclusive) to `%s` (exclusive) count, wherever they "
            "finish; `errors` counts only the ERROR entries inside the window." % (ws_text, we_text),
            "`%s` is the mean %s over the finished entries of the counted runs of the %s; a finished entry without "
            "a value still makes a run but is left out of the mean. Compute it on the unrounded values and round "
            "to two decimals only on output, halves rounded up; it is empty (null) when there is no value."
            % (mean_col, nf, gf),
            "`status` is `alert` when `errors` is at least %d (exactly %d is `alert`), otherwise `ok`."
            % (threshold, threshold),
        ]
        parameters.update({"window_start": ws_text, "window_end": we_text, "alert_threshold": threshold})
    return rules, parameters


def summary_solution(d, limits_file, dirty, large, clock, window, threshold, mean_col, writer):
    """The oracle of levels 3-5 (oracles/log_analysis/runs.py): the window, threshold and mean only at level 5."""
    ts = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}|\d{13}" if dirty \
        else r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    return python_oracle("log_analysis", "runs", writer, LIMITS=limits_file, GROUP=d["group_field"],
                         VALUE=d["numeric_field"], TIMESTAMP=ts,
                         WINDOW=[clock.stamp(window[0]), clock.stamp(window[1])] if large else None,
                         THRESHOLD=threshold if large else None, MEAN=mean_col if large else None)


LEVELS = (level0, level1, level2) + numbered_levels(log_summary, (3, 4, 5))
build = family(__name__, LEVELS)
