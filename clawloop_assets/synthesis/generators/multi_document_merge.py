#!/usr/bin/env python3
"""Generator family `multi_document_merge` (analysis track).

build(seed, params) -> task: several documents (CSV, JSON, `field: value`
text blocks) that each describe part of the same domain records at some
revision, an instruction, the answer contract, the answer key computed from
the generated documents, and an oracle solution. Stdlib-only, with
generator_common.py beside it: it runs in the sandbox as
`python3 -I /generator/multi_document_merge.py --params P --seed N --out /out`.

Levels: 0 = one shell step on two small files (stack two CSVs under one
header, join two sorted CSVs on the id, paste two column files side by side,
or the sorted union of two id lists); 1 = two documents into one CSV (the
newer export wins whole rows, or CSV rows completed from `field: value`
blocks); 2 = three whole documents (CSV, JSON, text) with a revision and a
date each: the newest revision wins field by field, revision ties by a
stated source order, empty values never override, ids in mixed case, a
register that decides which records exist, retired records dropped, half-up
rounding on output, in the rotating deliverable format; 3 = multi-hop:
index.csv (ids and file names, no values), one small document per record
version under documents/, sources.csv ranking the sources, stale unlisted
files; 4 = level 3 on dirty data: draft documents, values missing
everywhere, one source with other field names, one source in hundredths of
the unit, ids without zero padding; 5 = level 4 with hundreds of records, a
fourth source writing decimal commas, same-source ties broken by date, group
values in mixed case and a `last_revision` column.
"""

import csv
import datetime
import io
import json
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

STATUS = "status"
KEPT = ("active", "on_hold")
RETIRED = "retired"
EMPTY = ""  # a value written as empty; a field a document does not mention is absent from its dict
INITIALS = ("AB", "CK", "DM", "EL", "FR", "GS", "HT", "JW")
NOTES = ("checked on site", "copied from the paper form", "second count", "entered late", "confirmed by phone")
FIRST_DAY = datetime.date(2024, 1, 8).toordinal()
EXTENSION = {"csv": "csv", "json": "json", "text": "txt"}
TOLERANCE = 0.001


# ---- level 0: one shell step

def level0(rng, seed, params):
    d = params["domain"]
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    text, number = {"kind": "text"}, {"kind": "number", "tolerance": TOLERANCE}
    variant = level0_variant(seed)
    if variant == 0:
        first, second = rng.randint(3, 6), rng.randint(3, 6)
        ids = record_ids(rng, d, first + second)
        rng.shuffle(ids)
        rows = [(i, rng.choice(d["group_values"]), decimal_text(rng.randint(lo, hi))) for i in ids]
        environment = {"first.csv": csv_text([idf, gf, nf], rows[:first]),
                       "second.csv": csv_text([idf, gf, nf], rows[first:])}
        out, columns = "all.csv", [idf, gf, nf]
        expected = [{idf: i, gf: g, nf: float(v)} for i, g, v in rows]
        instruction = (
            "first.csv and second.csv list %s under the same header line. Write all.csv with that header line once, "
            "followed by the data rows of both files." % d["entity_plural"])
        solution = "awk 'NR==1||FNR>1' first.csv second.csv > all.csv"
    elif variant == 1:
        ids = record_ids(rng, d, rng.randint(5, 9))
        groups = {i: rng.choice(d["group_values"]) for i in ids}
        values = {i: decimal_text(rng.randint(lo, hi)) for i in ids}
        environment = {"groups.csv": csv_text([idf, gf], [(i, groups[i]) for i in ids]),
                       "values.csv": csv_text([idf, nf], [(i, values[i]) for i in ids])}
        out, columns = "joined.csv", [idf, gf, nf]
        expected = [{idf: i, gf: groups[i], nf: float(values[i])} for i in ids]
        instruction = (
            "groups.csv gives the %s of each %s and values.csv its %s; both start with a header line, list the same "
            "%s values and are sorted by %s. Write joined.csv, with the header line `%s,%s,%s`, joining the two files "
            "on %s." % (gf, d["entity"], nf, idf, idf, idf, gf, nf, idf))
        solution = "join --header -t, groups.csv values.csv > joined.csv"
    elif variant == 2:
        ids = record_ids(rng, d, rng.randint(5, 9))
        rng.shuffle(ids)
        values = [decimal_text(rng.randint(lo, hi)) for _ in ids]
        environment = {"ids.txt": "".join(line + "\n" for line in [idf] + ids),
                       "values.txt": "".join(line + "\n" for line in [nf] + values)}
        out, columns = "merged.csv", [idf, nf]
        expected = [{idf: i, nf: float(v)} for i, v in zip(ids, values)]
        instruction = (
            "ids.txt lists %s values and values.txt the %s of the same %s, line by line in the same order, each "
            "file starting with a header line. Write merged.csv where each line is the line of ids.txt and the line "
            "of values.txt at the same position, joined by a comma." % (idf, nf, d["entity_plural"]))
        solution = "paste -d, ids.txt values.txt > merged.csv"
    else:
        ids = record_ids(rng, d, rng.randint(8, 14))
        shared = rng.sample(ids, rng.randint(2, 4))
        rest = [i for i in ids if i not in shared]
        cut = rng.randint(2, len(rest) - 2)
        first, second = sorted(shared + rest[:cut]), sorted(shared + rest[cut:])
        environment = {"first.txt": "".join(i + "\n" for i in first), "second.txt": "".join(i + "\n" for i in second)}
        out = "all_ids.txt"
        instruction = (
            "first.txt and second.txt each list %s values, one per line. Write all_ids.txt with every id found in "
            "either file, sorted, once each." % idf)
        solution = "sort -u first.txt second.txt > all_ids.txt"
        check = {"type": "lines", "name": "ids in %s" % out, "path": out, "expected": sorted(ids), "ordered": True}
        contract = {
            "deliverable": {"path": out, "format": "lines", "schema": "one id per line, in sorted order"},
            "rules": ["Write each id once, exactly as it appears in the files; blank lines and surrounding spaces "
                      "are ignored."],
            "parameters": {},
            "labels": [],
        }
        return assemble(params, instruction, environment, contract, [check], {out: sorted(ids)}, solution, "lines")
    rules = {c: number if c == nf else text for c in columns}
    check = {"type": "csv_records", "name": "records in %s" % out, "path": out, "key": [idf], "columns": rules,
             "expected": expected}
    contract = {
        "deliverable": {"path": out, "format": "csv", "columns": columns,
                        "schema": "CSV with header `%s`, one row per %s" % (",".join(columns), d["entity"])},
        "rules": ["Rows may be in any order; numbers are compared with an absolute tolerance of %s." % TOLERANCE],
        "parameters": {"tolerance": TOLERANCE},
        "labels": list(d["group_values"]),  # the vocabulary of a column: naming it reveals no pairing
    }
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, "csv")


# ---- level 1: two documents, a few steps

def level1(rng, seed, params):
    d = params["domain"]
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    older, newer = d["ledger_sources"]
    lo, hi = cents_range(d)
    ids = record_ids(rng, d, rng.randint(9, 13))
    rng.shuffle(ids)
    columns = [idf, gf, nf]
    if seed % 2 == 0:
        a_file, b_file = older + ".csv", newer + ".csv"
        both, a_only, b_only = ids[:4], ids[4:6], ids[6:]
        a_rows = {i: (rng.choice(d["group_values"]), decimal_text(rng.randint(lo, hi))) for i in both + a_only}
        b_rows = {i: (rng.choice(d["group_values"]), decimal_text(rng.randint(lo, hi))) for i in both + b_only}
        for i in both:  # the newer row differs in its value, so which file wins is visible
            while b_rows[i][1] == a_rows[i][1]:
                b_rows[i] = (b_rows[i][0], decimal_text(rng.randint(lo, hi)))
        merged = dict(a_rows)
        merged.update(b_rows)
        environment = {a_file: csv_text(columns, [(i,) + a_rows[i] for i in a_rows]),
                       b_file: csv_text(columns, [(i,) + b_rows[i] for i in b_rows])}
        expected = [{idf: i, gf: merged[i][0], nf: float(merged[i][1])} for i in sorted(merged)]
        instruction = (
            "%s and %s are two exports of the same %s, with the same columns; %s is the newer one. Merge them into "
            "merged.csv following CONTRACT.md." % (a_file, b_file, d["entity_plural"], b_file))
        rules = ["One row per %s found in either file." % idf,
                 "An %s found in both files takes its entire row from %s, the newer export." % (idf, b_file)]
        solution = python_oracle("multi_document_merge", "newer_export", FILES=[a_file, b_file], ID=idf,
                                 COLUMNS=columns)
    else:
        a_file, b_file = older + ".csv", newer + ".txt"
        listed, without, extra = ids[:-3], ids[-3:-1], ids[-1:]
        groups = {i: rng.choice(d["group_values"]) for i in listed}
        values = {i: decimal_text(rng.randint(lo, hi)) for i in listed + extra if i not in without}
        blocks = [(i, values[i]) for i in values]
        rng.shuffle(blocks)
        environment = {a_file: csv_text([idf, gf], [(i, groups[i]) for i in listed]),
                       b_file: "\n".join("%s: %s\n%s: %s\n" % (idf, i, nf, v) for i, v in blocks)}
        expected = [{idf: i, gf: groups[i], nf: float(values[i]) if i in values else None} for i in sorted(listed)]
        instruction = (
            "%s lists %s with their %s; %s gives the %s of %s in blocks of `field: value` lines separated by blank "
            "lines. Merge them into merged.csv following CONTRACT.md."
            % (a_file, d["entity_plural"], gf, b_file, nf, d["entity_plural"]))
        rules = ["One row per %s listed in %s; a block of %s whose %s is not in %s is left out."
                 % (idf, a_file, b_file, idf, a_file),
                 "An %s of %s with no block in %s keeps an empty %s." % (idf, a_file, b_file, nf)]
        solution = python_oracle("multi_document_merge", "value_blocks", A=a_file, B=b_file, ID=idf, GROUP=gf,
                                 VALUE=nf)
    text, number = {"kind": "text"}, {"kind": "number", "tolerance": TOLERANCE}
    check = {"type": "csv_records", "name": "merged records", "path": "merged.csv", "key": [idf],
             "columns": {idf: text, gf: text, nf: number}, "expected": expected}
    contract = {
        "deliverable": {"path": "merged.csv", "format": "csv", "columns": columns,
                        "schema": "CSV with header `%s`, one row per %s" % (",".join(columns), d["entity"])},
        "rules": rules + [
            "Write values as the files give them; a missing value is an empty field.",
            "Rows may be in any order; numbers are compared with an absolute tolerance of %s." % TOLERANCE],
        "parameters": {"tolerance": TOLERANCE},
        "labels": list(d["group_values"]),  # the vocabulary of a column: naming it reveals no pairing
    }
    return assemble(params, instruction, environment, contract, [check], {"merged.csv": expected}, solution, "csv")


# ---- levels 2 to 5: documents with revisions, merged field by field

def context(rng, params, level):
    d = params["domain"]
    names = [d["ledger_sources"][0], d["ledger_sources"][1], d["file_stems"][0] + "_notes"]
    if level >= 5:
        names.append(d["file_stems"][1] + "_sheet")
    if len(set(names)) != len(names):
        raise ValueError("source names collide: %r" % (names,))
    formats = rng.sample(["csv", "json", "text"], 3) + ([rng.choice(["csv", "text"])] if level >= 5 else [])
    ranks = list(range(1, len(names) + 1))
    rng.shuffle(ranks)
    sources = {n: {"name": n, "format": f, "rank": r, "scale": 1, "alias": False, "comma": False}
               for n, f, r in zip(names, formats, ranks)}
    if level >= 4:
        plain = list(names)
        if level >= 5:
            comma = rng.choice([n for n in names if sources[n]["format"] != "json"])
            sources[comma]["comma"] = True
            plain.remove(comma)
        alias, scaled = rng.sample(plain, 2)
        sources[alias]["alias"] = True
        sources[scaled]["scale"] = Decimal("0.01")
    value_alias = "_".join(d["numeric_label"].lower().split())
    if value_alias == d["numeric_field"]:
        value_alias = d["numeric_field"] + "_value"
    lo, hi = cents_range(d)
    return {
        "level": level, "d": d, "idf": d["id_field"], "gf": d["group_field"], "nf": d["numeric_field"],
        "names": names, "sources": sources, "slots": list(range(lo + 1, hi - 1, 3)),
        "aliases": {d["group_field"]: d["group_field"] + "_name", d["numeric_field"]: value_alias},
    }


def new_ids(rng, d, count):
    """Canonical ids, two of them with a number under 1000 (so dropping the zero padding changes them)."""
    numbers = rng.sample(range(1000, 10000), count - 2) + rng.sample(range(1, 1000), 2)
    rng.shuffle(numbers)
    return ["%s-%04d" % (d["id_prefix"], n) for n in numbers]


def numeric_values(rng, ctx, count, half_first=False):
    """`count` values in thousandths of the unit whose two-decimal roundings all differ. With half_first the
    first one ends in 5 after an even hundredth: rounding half up and half to even disagree on it."""
    picked = rng.sample(ctx["slots"], count)  # slots three cents apart
    values = [c * 10 + rng.randint(0, 9) for c in picked]
    if half_first:
        values[0] = (picked[0] - picked[0] % 2) * 10 + 5
    return values


def new_versions(rng, ctx, sources, revisions, days, half_first=False):
    """Versions of one record, highest precedence first, every field given and every value different."""
    count = len(sources)
    values = numeric_values(rng, ctx, count, half_first)
    groups = rng.sample(ctx["d"]["group_values"], 5)
    return [{"source": sources[n], "revision": revisions[n], "day": days[n], "listed": True, "id": None,
             "fields": {ctx["gf"]: groups[n % 5], ctx["nf"]: values[n], STATUS: rng.choice(KEPT)}}
            for n in range(count)]


def unset(ctx, version, field, absent=True):
    """Take a value away: absent (not mentioned) or written empty. A multi-record CSV cannot leave one record's
    field out, so there it is always empty."""
    if absent and not (ctx["level"] == 2 and ctx["sources"][version["source"]]["format"] == "csv"):
        del version["fields"][field]
    else:
        version["fields"][field] = EMPTY


def roughen(rng, ctx, versions):
    """Random gaps in every version but the lowest, which keeps a full set of fields."""
    for version in versions[:-1]:
        for field in (ctx["gf"], ctx["nf"], STATUS):
            draw = rng.random()
            if draw < 0.22:
                unset(ctx, version, field)
            elif draw < 0.32:
                unset(ctx, version, field, absent=False)


def written_id(rng, ctx, rid, force=None):
    """How a document or the index spells an id: as is, or (sometimes, or when forced) in lower case, padded
    with spaces, and from level 4 without the zero padding of its number."""
    prefix, number = rid.split("-")
    unpadded = prefix + "-" + number.lstrip("0")
    if force == "case":
        return rng.choice([rid.lower(), " " + rid.lower(), rid.lower() + " "])
    if force == "unpadded":
        return rng.choice([unpadded, unpadded.lower(), " " + unpadded])
    if rng.random() >= 0.3:
        return rid
    options = [rid.lower(), " " + rid, rid + " ", " " + rid.lower()]
    if ctx["level"] >= 4 and unpadded != rid:
        options += [unpadded, unpadded, unpadded.lower()]
    return rng.choice(options)


def precedence(ctx, version):
    rank = ctx["sources"][version["source"]]["rank"]
    return (version["revision"], -rank, version["day"] if ctx["level"] >= 5 else 0)


def merged_table(ctx, records):
    """The answer: each included record merged field by field over its documents."""
    idf, gf, nf, level = ctx["idf"], ctx["gf"], ctx["nf"], ctx["level"]
    expected = []
    for record in sorted(records, key=lambda r: r["id"]):
        if level == 2:
            included = any(v["source"] == ctx["register"] for v in record["versions"])
        else:
            included = record["indexed"]
        versions = [v for v in record["versions"] if v["listed"] and v["revision"] is not None]
        if not included or not versions:
            continue
        versions.sort(key=lambda v: precedence(ctx, v))
        keys = [precedence(ctx, v) for v in versions]
        if len(set(keys)) != len(keys):
            raise AssertionError("two documents of %s have the same precedence" % record["id"])
        row = {}
        for version in versions:
            for field, value in version["fields"].items():
                if value != EMPTY:
                    row[field] = value
        if row.get(STATUS) == RETIRED:
            continue
        if gf not in row or STATUS not in row:
            raise AssertionError("record %s has no %s or status" % (record["id"], gf))
        value = row.get(nf)
        out = {idf: record["id"], gf: row[gf], STATUS: row[STATUS],
               nf: None if value is None else float(Decimal(value).scaleb(-3).quantize(Decimal("0.01"),
                                                                                     rounding=ROUND_HALF_UP))}
        if level >= 5:
            out["last_revision"] = versions[-1]["revision"]
        expected.append(out)
    return expected


# ---- writing the documents

def day_text(day):
    return datetime.date.fromordinal(FIRST_DAY + day).isoformat()


def written_value(ctx, version, field, for_json):
    """A field's value as the document's source writes it (None for an empty value in JSON)."""
    value = version["fields"][field]
    source = ctx["sources"][version["source"]]
    if value == EMPTY:
        return None if for_json else ""
    if field == ctx["nf"]:
        number = Decimal(value).scaleb(-1 if source["scale"] != 1 else -3)
        if for_json:
            return float(number)
        return str(number).replace(".", ",") if source["comma"] else str(number)
    if field == ctx["gf"]:
        return {"upper": value.upper(), "title": value.title()}.get(version.get("group_case"), value)
    return value


def field_name(ctx, source, field):
    return ctx["aliases"][field] if ctx["sources"][source]["alias"] and field in ctx["aliases"] else field


def record_pairs(ctx, version, for_json=False):
    """(name, written value) of one version: the id, its fields in a fixed order, a dropped field now and then."""
    pairs = [(ctx["idf"], version["id"])]
    for field in (ctx["gf"], ctx["nf"], STATUS):
        if field in version["fields"]:
            pairs.append((field_name(ctx, version["source"], field), written_value(ctx, version, field, for_json)))
    pairs += version.get("extra", [])
    return pairs


def revision_text(revision):
    return "draft" if revision is None else revision


def csv_document(ctx, source, revision, day, versions, columns):
    out = io.StringIO()
    out.write("# source: %s\n# revision: %s\n# date: %s\n" % (source, revision_text(revision), day_text(day)))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for version in versions:
        pairs = dict(record_pairs(ctx, version))
        writer.writerow([pairs.get(c, "") for c in columns])
    return out.getvalue()


def json_document(ctx, source, revision, day, versions, single):
    records = [dict(record_pairs(ctx, v, for_json=True)) for v in versions]
    document = {"source": source, "revision": revision_text(revision), "date": day_text(day)}
    if single:
        document["record"] = records[0]
    else:
        document["records"] = records
    return json.dumps(document, indent=2) + "\n"


def text_document(ctx, source, revision, day, versions):
    blocks = ["source: %s\nrevision: %s\ndate: %s\n" % (source, revision_text(revision), day_text(day))]
    for version in versions:
        blocks.append("".join("%s: %s\n" % (k, v) if v != "" else "%s:\n" % k for k, v in record_pairs(ctx, version)))
    return "\n".join(blocks)


def add_extras(rng, version, fmt):
    """Fields the merged table drops: who entered the row, a note."""
    extra = []
    if fmt != "text" and rng.random() < 0.6:
        extra.append(("entered_by", rng.choice(INITIALS)))
    if fmt != "csv" and rng.random() < 0.4:
        extra.append(("note", rng.choice(NOTES)))
    version["extra"] = extra


def single_document(rng, ctx, version):
    source = ctx["sources"][version["source"]]
    fmt = source["format"]
    add_extras(rng, version, fmt)
    if fmt == "csv":
        columns = [name for name, _ in record_pairs(ctx, version)]
        return csv_document(ctx, source["name"], version["revision"], version["day"], [version], columns)
    if fmt == "json":
        return json_document(ctx, source["name"], version["revision"], version["day"], [version], single=True)
    return text_document(ctx, source["name"], version["revision"], version["day"], [version])


# ---- the contract and the oracle

def common_rules(ctx, layout):
    nf = ctx["nf"]
    where = ("its records are under `records`" if layout == "whole" else "its record is under `record`")
    blocks = ("the other blocks are records" if layout == "whole" else "the second block is the record")
    return [
        "Every document states its `source`, `revision` and `date`: in `# name: value` lines above the CSV "
        "header, as top-level keys of the JSON object (%s), or in the first block of a text file (blocks are "
        "separated by a blank line, one `field: value` per line; %s)." % (where, blocks),
        "Merge field by field: a field the winning document does not mention is taken from the next document "
        "in precedence that has it, and so on.",
        "An empty value (an empty CSV cell, a JSON null, a `field:` line with nothing after it) gives no value: it "
        "never overrides a value from another document.",
        "A record whose merged `status` is `retired` is left out. `status` merges like any other field, so a "
        "`retired` in an older document is overridden by a newer status.",
        "Keep `%s` at full precision while merging; round it only on output, to two decimals, halves away from "
        "zero." % nf,
        "Fields that are not columns of the deliverable (such as `entered_by` and `note`) are dropped.",
    ]


def oracle(ctx, writer, documents):
    """The oracle of levels 2-5 (oracles/multi_document_merge/merge.py). `documents`: level 2's files, their source
    order for revision ties and the register; None from level 3, which reads index.csv and sources.csv."""
    level = ctx["level"]
    files, order, register = documents or (None, None, None)
    aliases = {s: {ctx["aliases"][f]: f for f in ctx["aliases"]} for s in ctx["names"] if ctx["sources"][s]["alias"]}
    return python_oracle("multi_document_merge", "merge", writer, ID=ctx["idf"], GROUP=ctx["gf"], VALUE=ctx["nf"],
                         DOCS=files, ORDER=order, REGISTER=register, ALIASES=aliases or None, DIRTY=level >= 4,
                         DATED=level >= 5, COMMAS=level >= 5, LOWER_GROUPS=level >= 5, LAST_REVISION=level >= 5)


def merge_task(rng, seed, params, ctx, records, environment, instruction, rules, documents=None):
    d, idf, gf, nf = ctx["d"], ctx["idf"], ctx["gf"], ctx["nf"]
    fmt = deliverable_format(seed)
    columns = [idf, gf, nf, STATUS] + (["last_revision"] if ctx["level"] >= 5 else [])
    expected = merged_table(ctx, records)
    out = records_deliverable(fmt, "merged_" + d["record_file"], [idf], columns, expected, TOLERANCE,
                              split_column=gf, split_values=list(d["group_values"]))
    contract = {
        "deliverable": {"paths": out["paths"], "format": fmt, "schema": out["schema"], "columns": columns},
        "rules": rules + out["rules"],
        # The report rule states its minimum word count: a parameter, so a value that happens to equal it is no leak.
        "parameters": dict({"tolerance": TOLERANCE}, **({"report_min_words": 12} if fmt == "report" else {})),
        "labels": list(KEPT) + [RETIRED] + list(d["group_values"]),
    }
    where = "the directory `%s/`" % ("merged_" + d["record_file"]) if fmt == "files" else ", ".join(
        "`%s`" % p for p in out["paths"])
    instruction = instruction + " Write the merged table to %s as CONTRACT.md describes." % where
    solution = oracle(ctx, out["writer"], documents)
    key = {"records": expected}
    return assemble(params, instruction, environment, contract, out["checks"], key, solution, fmt)


# ---- level 2: three whole documents

def level2(rng, seed, params):
    ctx = context(rng, params, 2)
    d, idf, gf, nf = ctx["d"], ctx["idf"], ctx["gf"], ctx["nf"]
    sources = ctx["sources"]
    register = ctx["names"][0]
    ctx["register"] = register
    top = rng.choice(ctx["names"])
    tied = sorted((n for n in ctx["names"] if n != top), key=lambda n: sources[n]["rank"])
    order = [top] + tied  # precedence, highest first
    revision = {top: rng.randint(9, 40)}
    revision[tied[0]] = revision[tied[1]] = revision[top] - rng.randint(1, 7)
    top_day = rng.randint(0, 60)
    later = rng.sample(range(top_day + 5, 330), 2)
    day = {top: top_day, tied[0]: later[0], tied[1]: later[1]}  # the highest revision has the earliest date

    fillers = rng.randint(6, 8)
    ids = new_ids(rng, d, 9 + fillers)
    records = []

    def add(names, half_first=False):
        names = sorted(set(names), key=order.index)
        versions = new_versions(rng, ctx, names, [revision[n] for n in names], [day[n] for n in names], half_first)
        record = {"id": ids.pop(), "versions": versions}
        records.append(record)
        return record

    def with_register(names):
        return list(names) + [register]

    add(with_register([top, tied[0]]))  # the date would pick tied[0], the revision picks top
    tie = add(with_register(tied))  # a revision tie decided by the source order
    if tie["versions"][0]["source"] == top:
        unset(ctx, tie["versions"][0], nf)
    gap = add(order)  # the newest document does not mention the value
    unset(ctx, gap["versions"][0], nf)
    empty = add(order)  # the newest document leaves it empty
    unset(ctx, empty["versions"][0], nf, absent=False)
    retired = add(with_register(rng.sample(ctx["names"], rng.randint(1, 2))))
    retired["versions"][0]["fields"][STATUS] = RETIRED
    revived = add(with_register(rng.sample(ctx["names"], 2)))
    revived["versions"][-1]["fields"][STATUS] = RETIRED
    add(with_register(rng.sample(ctx["names"], rng.randint(1, 3))), half_first=True)
    add([n for n in ctx["names"] if n != register][:rng.randint(1, 2)])  # not in the register
    cased = add(with_register(rng.sample(ctx["names"], 2)))
    for _ in range(fillers):
        record = add(with_register(rng.sample(ctx["names"], rng.randint(1, 3))))
        roughen(rng, ctx, record["versions"])
    for record in records:
        for version in record["versions"]:
            version["id"] = written_id(rng, ctx, record["id"])
    for version in cased["versions"]:
        if version["source"] == register:
            version["id"] = written_id(rng, ctx, cased["id"], force="case")

    environment, files = {}, []
    for name in ctx["names"]:
        fmt = sources[name]["format"]
        path = "%s.%s" % (name, EXTENSION[fmt])
        files.append(path)
        versions = [v for r in records for v in r["versions"] if v["source"] == name]
        rng.shuffle(versions)
        for version in versions:
            add_extras(rng, version, fmt)
        if fmt == "csv":
            text = csv_document(ctx, name, revision[name], day[name], versions, [idf, gf, nf, STATUS, "entered_by"])
        elif fmt == "json":
            text = json_document(ctx, name, revision[name], day[name], versions, single=False)
        else:
            text = text_document(ctx, name, revision[name], day[name], versions)
        environment[path] = text
    ranked = sorted(ctx["names"], key=lambda n: sources[n]["rank"])
    rules = [
        "Documents take precedence by revision: the higher revision wins. The date only says when a file was "
        "exported and never decides.",
        "Two documents with the same revision rank in this source order, the first wins: %s."
        % ", ".join("`%s`" % n for n in ranked),
        "Ids are matched after trimming surrounding spaces and ignoring letter case; write them in upper case.",
        "`%s` is the register: only ids it lists get a row; an id found only in other documents is left out."
        % files[0],
    ] + common_rules(ctx, "whole")
    instruction = (
        "%s, %s and %s each describe part of the same %s, at some revision: some records are missing from a "
        "document, some fields are missing or outdated. Merge them into one consolidated table with one row per %s, "
        "following the rules in CONTRACT.md exactly." % (files[0], files[1], files[2], d["entity_plural"], d["entity"]))
    return merge_task(rng, seed, params, ctx, records, environment, instruction, rules, (files, ranked, register))


# ---- levels 3 to 5: an index, one document per record version, a source table

def multi_hop(rng, seed, params, level):
    ctx = context(rng, params, level)
    d, idf, gf, nf = ctx["d"], ctx["idf"], ctx["gf"], ctx["nf"]
    sources, names = ctx["sources"], ctx["names"]
    fillers = {3: rng.randint(6, 8), 4: rng.randint(6, 8), 5: rng.randint(190, 230)}[level]
    ids = new_ids(rng, d, 24 + fillers)
    reserved = next(i for i in ids if i.split("-")[1].startswith("0"))  # loses its zero padding at level 4
    records = []

    def ranked(chosen):
        return sorted(chosen, key=lambda n: sources[n]["rank"])

    def add(chosen, revisions=None, days=None, half_first=False, rid=None):
        """A record whose listed versions come from `chosen` sources, highest precedence first."""
        count = len(chosen)
        revisions = revisions or sorted(rng.sample(range(1, 60), count), reverse=True)
        days = days or rng.sample(range(0, 330), count)
        rid = rid or next(i for i in ids if i != reserved)
        ids.remove(rid)
        record = {"id": rid, "indexed": True, "versions": new_versions(rng, ctx, chosen, revisions, days, half_first)}
        records.append(record)
        return record

    def pick(count, first=None):
        rest = [n for n in names if n != first]
        return ([first] if first else []) + rng.sample(rest, count - (1 if first else 0))

    dated = add(pick(2))  # the higher revision has the earlier date
    for version, day in zip(dated["versions"], sorted(v["day"] for v in dated["versions"])):
        version["day"] = day
    tie_sources = ranked(pick(2))
    tie_revision = rng.randint(5, 59)
    add(tie_sources, revisions=[tie_revision, tie_revision])  # equal revisions: the rank decides
    gap = add(pick(rng.randint(2, 3)))
    unset(ctx, gap["versions"][0], nf)
    empty = add(pick(rng.randint(2, 3)))
    unset(ctx, empty["versions"][0], nf, absent=False)
    retired = add(pick(rng.randint(1, 3)))
    retired["versions"][0]["fields"][STATUS] = RETIRED
    revived = add(pick(rng.randint(2, 3)))
    revived["versions"][-1]["fields"][STATUS] = RETIRED
    add(pick(rng.randint(1, 3)), half_first=True)
    cased = add(pick(rng.randint(1, 3)))
    stale = add(pick(rng.randint(2, 3)))  # an unlisted copy above every listed version
    stale["versions"][0]["listed"] = False
    orphan = add(pick(rng.randint(1, 2)))  # a record with documents but no line in the index
    orphan["indexed"] = False
    for version in orphan["versions"]:
        version["listed"] = False
    plants = {"cased": cased}
    if level >= 4:
        drafted = add(pick(rng.randint(1, 3)))
        drafted["versions"].append(draft_version(rng, ctx, drafted))
        valueless = add(pick(rng.randint(1, 3)))
        for version in valueless["versions"]:
            unset(ctx, version, nf, absent=rng.random() < 0.5)
        valueless["versions"].append(draft_version(rng, ctx, valueless))
        plants["unpadded"] = add(pick(rng.randint(1, 3)), rid=reserved)
        renamed = next(n for n in names if sources[n]["alias"])
        rescaled = next(n for n in names if sources[n]["scale"] != 1)
        for holder in (renamed, rescaled):
            add(pick(rng.randint(2, 3), first=holder))  # the renamed or rescaled source wins the value
    if level >= 5:
        twin_source = rng.choice(names)
        twin_revision = rng.randint(5, 59)
        twin_days = sorted(rng.sample(range(0, 330), 2), reverse=True)
        twins = add([twin_source, twin_source], revisions=[twin_revision] * 2, days=twin_days)
        below = new_versions(rng, ctx, pick(1), [twin_revision - rng.randint(1, 4)], [rng.randint(0, 330)])[0]
        below["fields"][nf] = fresh_value(rng, ctx, twins["versions"])
        twins["versions"].append(below)
        comma = next(n for n in names if sources[n]["comma"])
        add(pick(rng.randint(1, 3), first=comma))
        shouting = add(pick(rng.randint(1, 3)))
        shouting["versions"][0]["group_case"] = rng.choice(["upper", "title"])
    for _ in range(fillers):
        record = add(pick(rng.randint(1, min(3, len(names)))) if level < 5 else filler_sources(rng, names))
        roughen(rng, ctx, record["versions"])
        if level >= 5:
            spice(rng, ctx, record)
    for record in records:
        for version in record["versions"]:
            version["id"] = written_id(rng, ctx, record["id"])
        record["index_id"] = written_id(rng, ctx, record["id"])
    plants["cased"]["index_id"] = written_id(rng, ctx, cased["id"], force="case")
    plants["cased"]["versions"][0]["id"] = written_id(rng, ctx, cased["id"], force="case")
    if level >= 4:
        plants["unpadded"]["index_id"] = written_id(rng, ctx, plants["unpadded"]["id"], force="unpadded")

    # one file per version, under shuffled numbers; the index lists the listed ones
    versions = [(r, v) for r in records for v in r["versions"]]
    numbers = rng.sample(range(1000, 10000), len(versions))
    environment, index_rows = {}, []
    for (record, version), number in zip(versions, numbers):
        path = "documents/doc_%d.%s" % (number, EXTENSION[sources[version["source"]]["format"]])
        environment[path] = single_document(rng, ctx, version)
        if version["listed"]:
            index_rows.append((record["index_id"], path))
    rng.shuffle(index_rows)
    environment["index.csv"] = csv_text([idf, "file"], index_rows)
    header = ["source", "rank"] + (["scale"] if level >= 4 else [])
    table = [[n, sources[n]["rank"]] + ([sources[n]["scale"]] if level >= 4 else []) for n in names]
    environment["sources.csv"] = csv_text(header, table)

    rules = [
        "index.csv lists every document of the merge (`file`) with the %s of its record; a file in `documents/` "
        "that index.csv does not list is a stale copy and is ignored." % idf,
        "The table has one row per %s listed in index.csv, apart from the records left out by the rules below."
        % idf,
        "Each record merges its own documents, which take precedence by revision: the higher revision wins. %s"
        % ("The date decides only between two documents of the same source with the same revision: the later "
           "date wins." if level >= 5 else "The date only says when a document was written and never decides."),
        "With equal revisions, the source with the lower `rank` in sources.csv wins.",
        "Ids (in index.csv and in the documents) are matched after trimming surrounding spaces and ignoring letter "
        "case; write them in upper case.",
    ] + common_rules(ctx, "single")
    if level >= 4:
        alias = next(n for n in names if sources[n]["alias"])
        scaled = next(n for n in names if sources[n]["scale"] != 1)
        rules += [
            "A document whose revision is `draft` is not merged.",
            "Documents of the source `%s` call the fields `%s` (meaning `%s`) and `%s` (meaning `%s`)."
            % (alias, ctx["aliases"][gf], gf, ctx["aliases"][nf], nf),
            "sources.csv gives each source's `scale`: a document's `%s` times the scale of its source is the value "
            "in %s. Compare, merge and round the converted values; `%s` writes it in hundredths." % (nf, d["unit"],
                                                                                                   scaled),
            "An id may lack the zero padding of its number: an id is the prefix, a hyphen and the number written "
            "with four digits, zero-padded; write ids that way.",
            "A record with no `%s` in any merged document keeps an empty `%s`; it is not left out." % (nf, nf),
        ]
    if level >= 5:
        comma = next(n for n in names if sources[n]["comma"])
        rules += [
            "Documents of the source `%s` write decimals with a comma instead of a point." % comma,
            "Values of `%s` are matched and written in lower case." % gf,
            "`last_revision` is the highest revision among the documents merged into the record (drafts and "
            "unlisted files do not count).",
        ]
    instruction = (
        "The %s are described by many small documents under documents/, each one version of one %s from one "
        "source, none complete on its own. index.csv lists which documents belong to which %s (%s and file name) "
        "and sources.csv describes the sources. Merge the documents of each %s into one consolidated record, "
        "following the rules in CONTRACT.md exactly." % (d["entity_plural"], d["entity"], d["entity"], idf,
                                                          d["entity"]))
    return merge_task(rng, seed, params, ctx, records, environment, instruction, rules)


def fresh_value(rng, ctx, versions):
    """A value whose rounding differs from those of all `versions` (three cents away from each)."""
    taken = [v["fields"][ctx["nf"]] // 10 for v in versions if isinstance(v["fields"].get(ctx["nf"]), int)]
    while True:
        cents = rng.choice(ctx["slots"])
        if all(abs(cents - t) >= 3 for t in taken):
            return cents * 10 + rng.randint(0, 9)


def draft_version(rng, ctx, record):
    """A draft above the record's versions, holding a value no other version has."""
    version = new_versions(rng, ctx, [rng.choice(ctx["names"])], [None], [rng.randint(0, 330)])[0]
    version["fields"][ctx["nf"]] = fresh_value(rng, ctx, record["versions"])
    return version


def filler_sources(rng, names):
    """Level 5: one to four listed versions, from distinct sources."""
    return rng.sample(names, rng.choice([1, 2, 2, 3, 3, 4]))


def spice(rng, ctx, record):
    """Level 5 fillers: now and then a twin of the same source and revision, a draft, a stale copy, a retired
    status, a value missing everywhere, a group written in capitals."""
    versions = record["versions"]
    if rng.random() < 0.06:
        twin = new_versions(rng, ctx, [versions[0]["source"]], [versions[0]["revision"]],
                            [rng.choice([x for x in range(0, 330) if x != versions[0]["day"]])])[0]
        twin["fields"][ctx["nf"]] = fresh_value(rng, ctx, versions)
        versions.insert(0, twin)
    if rng.random() < 0.08:
        versions.append(draft_version(rng, ctx, record))
    if rng.random() < 0.05:
        stale = new_versions(rng, ctx, [rng.choice(ctx["names"])], [versions[0]["revision"] + 1 + rng.randint(0, 3)],
                             [rng.randint(0, 330)])[0]
        stale["listed"] = False
        versions.append(stale)
    if rng.random() < 0.05:
        versions[0]["fields"][STATUS] = RETIRED
    if rng.random() < 0.03:
        for version in versions:
            version["fields"].pop(ctx["nf"], None)
    if rng.random() < 0.1:
        versions[0]["group_case"] = rng.choice(["upper", "title"])


LEVELS = (level0, level1, level2) + numbered_levels(multi_hop, (3, 4, 5))
build = family(__name__, LEVELS)
