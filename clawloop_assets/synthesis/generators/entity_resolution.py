#!/usr/bin/env python3
"""Generator family `entity_resolution` (analysis track).

build(seed, params) -> task: records of domain entities entered several
times with variations (id case, spaces, separators and zero padding, label
case, a swapped field), near-duplicates the matching rules keep apart, an
instruction, the answer contract, the answer key computed from the generated
entities, and an oracle solution. Stdlib-only, with generator_common.py
beside it: it runs in the sandbox as
`python3 -I /generator/entity_resolution.py --params P --seed N --out /out`.

Levels: 0 = one `sort`/`uniq`/`tr` step on an id list (count distinct ids,
distinct ids in upper case, repeated ids, ids listed once); 1 = entries per
id or total per id on a CSV whose ids differ in case and spaces; 2 = one
CSV resolved under stated rules (id normalization with separators and zero
padding, label case, swapped fields, same id in another group is another
entity, latest value with a date tie broken by file order, mean rounded
half up on output, single entries kept), in the rotating deliverable format;
3 = an index of entry cards (ids and file names only), one card per entry,
a renumbering table, the group taken from the latest card; 4 = level 3 on
dirty data (two sources with different layouts and unit factors, void
cards, ids of another register, cards without an amount); 5 = level 4 with
hundreds of cards, renumbering chains, totals rounded half up to one decimal
only on output, near-duplicate ids, ids whose cards are all void, and the
date of the latest card.
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
    dump_json,
    family,
    level0_variant,
    numbered_levels,
    python_oracle,
    records_deliverable,
)

TOLERANCE = 0.001
# How an id may be written; "unpadded" drops the leading zeros of the number.
ID_STYLES = ("canonical", "lower", "spaced", "joined", "space", "underscore", "unpadded")
GROUP_STYLES = ("plain", "title", "upper", "spaced")


# ---- shared pieces

def canonical_id(prefix, number):
    return "%s-%04d" % (prefix, number)


def written_id(prefix, number, style):
    digits = "%04d" % number
    return {
        "canonical": "%s-%s" % (prefix, digits),
        "lower": "%s-%s" % (prefix.lower(), digits),
        "spaced": " %s-%s " % (prefix, digits),
        "joined": prefix + digits,
        "space": "%s %s" % (prefix.lower(), digits),
        "underscore": "%s_%s" % (prefix.capitalize(), digits),
        "unpadded": "%s %d" % (prefix.lower(), number),
    }[style]


def written_group(group, style):
    return {"plain": group, "title": group.capitalize(), "upper": group.upper(), "spaced": " %s " % group}[style]


def any_id_style(rng):
    return rng.choice(("canonical", "canonical") + ID_STYLES)


def any_group_style(rng):
    return rng.choice(("plain", "plain", "plain") + GROUP_STYLES)


def id_numbers(rng, count, small=1, exclude=()):
    """`count` distinct id numbers; the first `small` are under 1000, so their
    padded form has leading zeros that an unpadded spelling drops."""
    taken = set(exclude)
    numbers = []
    while len(numbers) < count:
        n = rng.randint(1, 999) if len(numbers) < small else rng.randint(1, 9999)
        if n not in taken:
            taken.add(n)
            numbers.append(n)
    return numbers


def day_text(year, day):
    return (datetime.date(year, 1, 1) + datetime.timedelta(days=day)).isoformat()


def cents_where(rng, lo, hi, accept):
    while True:
        cents = rng.randint(lo, hi)
        if accept(cents):
            return cents


def id_rule(prefix):
    return ("Ids are matched after trimming surrounding spaces, ignoring letter case, dropping any space, hyphen or "
            "underscore between the prefix letters and the number, and reading the number without its leading zeros "
            "(`%s %s`, `%s%s` and `%s-%s` are one id). Write every id in its canonical form: the prefix in upper case, "
            "a hyphen, and the number padded with zeros to four digits."
            % (prefix.lower(), "7", prefix, "0007", prefix, "0007"))


def deliverable_words(out, gf):
    paths = out["paths"]
    if out["format"] == "files":
        return "one CSV per %s in the directory %s/" % (gf, paths[0].rsplit("/", 1)[0])
    if out["format"] == "report":
        return "%s, with its sidecar %s" % (paths[0], paths[1])
    return paths[0]


def structured_task(params, fmt, stem, instruction, environment, rules, key, columns, expected, oracle, values):
    """The task with its deliverable in `fmt`; its solution runs oracles/entity_resolution/<oracle>.py with `values`."""
    d = params["domain"]
    out = records_deliverable(fmt, stem, key, columns, expected, TOLERANCE, split_column=d["group_field"],
                              split_values=list(d["group_values"]))
    parameters = {"tolerance": TOLERANCE}
    for check in out["checks"]:
        if "min_words" in check:
            # The report rule states its word count: a number the contract must state, not an answer value.
            parameters["report_min_words"] = check["min_words"]
    contract = {
        "deliverable": {"paths": out["paths"], "format": fmt, "schema": out["schema"], "columns": list(columns)},
        "rules": rules + out["rules"],
        "parameters": parameters,
        "labels": [],
    }
    instruction = instruction % {"out": deliverable_words(out, d["group_field"])}
    solution = python_oracle("entity_resolution", oracle, out["writer"], **values)
    return assemble(params, instruction, environment, contract, out["checks"], {stem: expected}, solution, fmt)


# ---- level 0: one command on an id list

def level0(rng, seed, params):
    d = params["domain"]
    prefix, plural = d["id_prefix"], d["entity_plural"]
    data = d["record_file"] + ".txt"
    numbers = id_numbers(rng, rng.randint(14, 20), small=0)
    repeated = numbers[: rng.randint(4, 7)]
    variant = level0_variant(seed)
    lines = [canonical_id(prefix, n) for n in numbers] + [canonical_id(prefix, n) for n in repeated]
    if variant == 1:
        # The same id again, in lower case: only case tells the copies apart.
        lines += [canonical_id(prefix, n).lower() for n in repeated + numbers[-3:]]
    rng.shuffle(lines)
    ids = sorted(canonical_id(prefix, n) for n in numbers)
    if variant == 0:
        out, value = "answer.txt", len(numbers)
        instruction = ("%s lists %s ids, one per line, and some ids are listed more than once. Write the number of "
                       "distinct ids in %s to answer.txt." % (data, d["entity"], data))
        solution = "sort -u %s | wc -l > answer.txt" % data
        check = {"type": "number", "name": "distinct ids", "path": out, "expected": value, "tolerance": 0}
        schema, rules = "a single integer", ["Surrounding whitespace in answer.txt is ignored; write nothing else into it."]
    else:
        if variant == 1:
            out, value = "unique.txt", ids
            instruction = ("%s lists %s ids, one per line; the same id is sometimes written in lower case. Write each "
                           "distinct id once, in upper case, to unique.txt, one per line." % (data, d["entity"]))
            solution = "tr a-z A-Z < %s | sort -u > unique.txt" % data
        elif variant == 2:
            out, value = "repeated.txt", sorted(canonical_id(prefix, n) for n in repeated)
            instruction = ("Write the ids that are listed more than once in %s to repeated.txt, one per line, each "
                           "id once. %s lists %s ids." % (data, data, plural))
            solution = "sort %s | uniq -d > repeated.txt" % data
        else:
            out, value = "single.txt", sorted(canonical_id(prefix, n) for n in numbers[len(repeated):])
            instruction = ("Write the ids that are listed exactly once in %s to single.txt, one per line. %s lists "
                           "%s ids." % (data, data, plural))
            solution = "sort %s | uniq -u > single.txt" % data
        check = {"type": "lines", "name": "ids in %s" % out, "path": out, "expected": value, "ordered": False}
        schema = "one id per line, in any order"
        rules = ["Blank lines and surrounding spaces are ignored; write each id once and nothing else."]
    contract = {"deliverable": {"path": out, "format": check["type"], "schema": schema}, "rules": rules,
                "parameters": {}, "labels": []}
    return assemble(params, instruction, {data: "".join(line + "\n" for line in lines)}, contract, [check],
                    {out: value}, solution, check["type"])


# ---- level 1: entries or totals per id, ids differing in case and spaces

def level1(rng, seed, params):
    d = params["domain"]
    prefix, idf, nf = d["id_prefix"], d["id_field"], d["numeric_field"]
    data = d["record_file"] + ".csv"
    lo, hi = cents_range(d)
    numbers = id_numbers(rng, rng.randint(6, 9), small=0)
    counts = {n: rng.randint(1, 4) for n in numbers}
    counts[numbers[0]] = rng.randint(3, 4)
    styles = ("canonical", "canonical", "lower", "spaced")
    rows = []
    for n in numbers:
        for k in range(counts[n]):
            # The first planted entity is written three ways, so matching as written splits it.
            style = ("canonical", "lower", "spaced", "lower")[k] if n == numbers[0] else rng.choice(styles)
            text = written_id(prefix, n, style)
            rows.append((text.lower() if style == "spaced" and rng.random() < 0.5 else text, rng.randint(lo, hi)))
    rng.shuffle(rows)
    table = csv_text([idf, nf], [(text, decimal_text(cents)) for text, cents in rows])
    about = ("%s has one row per entry with columns %s and %s. The same %s is often entered several times, its id "
             "sometimes written in lower case or with spaces around it: those rows are one %s."
             % (data, idf, nf, d["entity"], d["entity"]))
    if seed % 2 == 0:
        column, out, tolerance = "entries", d["record_file"] + "_entries.csv", 0
        expected = [{idf: canonical_id(prefix, n), column: counts[n]} for n in sorted(numbers)]
        what = "how many rows of %s it has" % data
        solution = ("awk -F, 'NR > 1 { k = toupper($1); gsub(/ /, \"\", k); n[k]++ } END { print \"%s,%s\"; "
                    "for (k in n) print k \",\" n[k] }' %s > %s" % (idf, column, data, out))
    else:
        column, out, tolerance = "total_" + nf, d["record_file"] + "_totals.csv", TOLERANCE
        totals = {}
        for text, cents in rows:
            n = int(text.strip().split("-")[1])
            totals[n] = totals.get(n, 0) + cents
        expected = [{idf: canonical_id(prefix, n), column: float(decimal_text(totals[n]))} for n in sorted(numbers)]
        what = "the sum of its %s" % nf
        solution = ("awk -F, 'NR > 1 { k = toupper($1); gsub(/ /, \"\", k); t[k] += $2 } END { print \"%s,%s\"; "
                    "for (k in t) printf \"%%s,%%.2f\\n\", k, t[k] }' %s > %s" % (idf, column, data, out))
    instruction = ("%s Write %s with the header line `%s,%s` and one row per %s: its id in upper case without "
                   "spaces, and %s." % (about, out, idf, column, d["entity"], what))
    check = {
        "type": "csv_records", "name": "%s per %s" % (column, idf), "path": out, "key": [idf],
        "columns": {idf: {"kind": "text"}, column: {"kind": "number", "tolerance": tolerance}},
        "expected": expected,
    }
    contract = {
        "deliverable": {"path": out, "format": "csv",
                        "schema": "CSV with header `%s,%s`, one row per %s" % (idf, column, d["entity"])},
        "rules": [
            "Ids are matched after trimming spaces and ignoring letter case, and written in upper case.",
            "Rows may be in any order; numbers are compared with an absolute tolerance of %s." % (tolerance or "0 (exact)"),
        ],
        "parameters": {"tolerance": tolerance},
        "labels": [],
    }
    return assemble(params, instruction, {data: table}, contract, [check], {out: expected}, solution, "csv")


# ---- level 2: one CSV under stated rules

def new_entity(rng, number, group, count, lo, hi):
    days = rng.sample(range(365), count)
    amounts = rng.sample(range(lo, hi + 1), count)
    rows = [{"day": days[k], "cents": amounts[k], "id_style": any_id_style(rng), "group_style": any_group_style(rng),
             "swapped": False} for k in range(count)]
    return {"n": number, "group": group, "rows": rows}


def level2(rng, seed, params):
    d = params["domain"]
    prefix, idf, gf, nf = d["id_prefix"], d["id_field"], d["group_field"], d["numeric_field"]
    lo, hi = cents_range(d)
    groups = list(d["group_values"])
    year = rng.randint(2019, 2024)
    numbers = id_numbers(rng, 8 + rng.randint(4, 6))

    def pick():
        return rng.choice(groups)

    zero = new_entity(rng, numbers[0], pick(), rng.randint(2, 3), lo, hi)
    zero["rows"][0]["id_style"], zero["rows"][1]["id_style"] = "canonical", "unpadded"
    # The same id in two groups: two entities under the rules.
    g1, g2 = rng.sample(groups, 2)
    split_a = new_entity(rng, numbers[1], g1, 2, lo, hi)
    split_b = new_entity(rng, numbers[1], g2, rng.randint(1, 2), lo, hi)
    # The two latest rows share a date: file order decides.
    tie = new_entity(rng, numbers[2], pick(), rng.randint(3, 4), lo, hi)
    last_day = max(r["day"] for r in tie["rows"])
    tie["rows"].sort(key=lambda r: r["day"])
    tie["rows"][-2]["day"] = last_day
    tie["rows"][0]["group_style"] = rng.choice(["title", "upper"])
    # The latest row is not the last one in the file (arranged below).
    order = new_entity(rng, numbers[3], pick(), rng.randint(2, 3), lo, hi)
    # Two rows whose mean ends in half a cent after an even cent: half up and half even differ.
    half = new_entity(rng, numbers[4], pick(), 2, lo, hi)
    first = half["rows"][0]["cents"]
    half["rows"][1]["cents"] = cents_where(rng, lo, hi, lambda c: (first + c) % 2 == 1 and (first + c) // 2 % 2 == 0)
    swap = new_entity(rng, numbers[5], pick(), rng.randint(2, 3), lo, hi)
    swap["rows"][-1]["swapped"] = True
    entities = [zero, split_a, split_b, tie, order, half, swap]
    entities += [new_entity(rng, n, pick(), 1, lo, hi) for n in numbers[6:8]]
    entities += [new_entity(rng, n, pick(), rng.randint(1, 4), lo, hi) for n in numbers[8:]]

    placed = [(e, row) for e in entities for row in e["rows"]]
    rng.shuffle(placed)
    mine = [i for i, (e, _) in enumerate(placed) if e is order]
    latest_at = max(mine, key=lambda i: placed[i][1]["day"])
    if latest_at == mine[-1]:
        placed[mine[0]], placed[latest_at] = placed[latest_at], placed[mine[0]]
    for pos, (_, row) in enumerate(placed):
        row["pos"] = pos

    table = []
    for e, row in placed:
        id_text = written_id(prefix, e["n"], row["id_style"])
        group_text = written_group(e["group"], row["group_style"])
        if row["swapped"]:
            id_text, group_text = group_text, id_text
        table.append((id_text, group_text, day_text(year, row["day"]), decimal_text(row["cents"])))

    latest_col, mean_col = "latest_" + nf, "mean_" + nf
    expected = []
    for e in entities:
        latest = max(e["rows"], key=lambda r: (r["day"], r["pos"]))
        mean = Decimal(sum(r["cents"] for r in e["rows"])) / len(e["rows"]) / 100
        expected.append({idf: canonical_id(prefix, e["n"]), gf: e["group"], "records": len(e["rows"]),
                         latest_col: float(decimal_text(latest["cents"])),
                         mean_col: float(mean.quantize(Decimal("0.01"), ROUND_HALF_UP))})
    expected.sort(key=lambda r: (r[idf], r[gf]))

    data = d["record_file"] + ".csv"
    rules = [
        id_rule(prefix),
        "`%s` values are matched after trimming spaces and ignoring letter case, and written in lower case." % gf,
        "A row whose `%s` holds a %s name and whose `%s` holds an id was entered with the two fields swapped: read "
        "it with them exchanged." % (idf, gf, gf),
        "Rows with the same id and the same %s are one %s. Rows with the same id but a different %s are different "
        "%s: each gets its own record." % (gf, d["entity"], gf, d["entity_plural"]),
        "`records` is the number of rows of the %s. Every %s is reported, including one entered only once."
        % (d["entity"], d["entity"]),
        "`%s` is the %s of the row with the latest `recorded_on`; when several rows share that date, the one further "
        "down the file wins." % (latest_col, nf),
        "`%s` is the mean %s over all rows of the %s, computed unrounded and rounded only on output to two decimals, "
        "halves rounded up (away from zero)." % (mean_col, nf, d["entity"]),
    ]
    instruction = (
        "%s holds entries of %s: each row gives a %s's %s, its %s, the date it was recorded (recorded_on) and the %s "
        "(%s, column %s). The same %s was often entered several times and written differently each time. Resolve the "
        "rows into %s following the rules in CONTRACT.md exactly and write the result to %%(out)s."
        % (data, d["entity_plural"], d["entity"], idf, gf, d["numeric_label"], d["unit"], nf, d["entity"],
           d["entity_plural"])
    )
    values = {"DATA": data, "ID": idf, "GROUP": gf, "VALUE": nf, "LATEST": latest_col, "MEAN": mean_col}
    environment = {data: csv_text([idf, gf, "recorded_on", nf], table)}
    columns = [idf, gf, "records", latest_col, mean_col]
    return structured_task(params, deliverable_format(seed), d["record_file"] + "_resolved", instruction, environment,
                           rules, [idf, gf], columns, expected, "resolve_rows", values)


# ---- levels 3 to 5: an index of entry cards, renumbered ids, dirty sources

# The scaled source writes amounts in units of 10 ** -shift of the domain unit (its factor).
FACTOR_SHIFTS = (1, 2, 3)


def amount_text(cents, shift):
    """`cents` (hundredths of the unit) written in units of 10 ** -shift of the unit."""
    return str(Decimal(cents * 10 ** max(shift - 2, 0)).scaleb(min(shift - 2, 0)))


def foreign_prefix(prefix):
    return prefix[::-1] if prefix[::-1] != prefix else prefix[0] + ("X" if prefix[0] != "X" else "Y")


def new_card(rng, number, day, group, cents):
    return {"number": number, "style": any_id_style(rng), "day": day, "group": group, "gstyle": any_group_style(rng),
            "cents": cents, "source": 0, "void": False}


def card_world(rng, d, level):
    """The entities of levels 3-5 with their cards, renumbering and distractors:
    {"entities": [{"n", "chain", "cards"}], "order": [(entity, card), with None for a card of another
    register], "scaled": the source whose amounts need their factor (None below level 4)}."""
    lo, hi = cents_range(d)
    groups = list(d["group_values"])
    big = level == 5
    # Level 5 fills up to hundreds of cards; the others add a handful of plain entities.
    cards_wanted = rng.randint(220, 250) if big else 0
    fillers = rng.randint(5, 7)
    zero_n = rng.randint(1, 999)
    near_n = zero_n * 10 if big else None
    numbers = id_numbers(rng, 40 + 2 * max(fillers, cards_wanted), small=0,
                         exclude=[zero_n] + ([near_n] if big else []))
    pool = iter(numbers)
    entities = []

    def entity(count, number=None, days=None, groups_of=None, chain=0):
        n = number if number is not None else next(pool)
        days = days or rng.sample(range(365), count)
        cards = [new_card(rng, n, days[k], groups_of[k] if groups_of else rng.choice(groups), rng.randint(lo, hi))
                 for k in range(count)]
        e = {"n": n, "chain": [next(pool) for _ in range(chain)], "cards": cards}
        entities.append(e)
        return e

    zero = entity(rng.randint(2, 3), number=zero_n)
    zero["cards"][0]["style"], zero["cards"][1]["style"] = "canonical", "unpadded"
    # The group moves: the latest card (not the last listed) names another group than the others.
    g_old, g_new = rng.sample(groups, 2)
    move = entity(3, days=sorted(rng.sample(range(365), 3)), groups_of=[g_old, g_old, g_new])
    move["cards"][2]["gstyle"] = rng.choice(["title", "upper"])
    # The two latest cards share a date and name different groups: index order decides.
    days = sorted(rng.sample(range(1, 365), 2))
    entity(3, days=[days[0], days[1], days[1]], groups_of=[rng.choice(groups)] + rng.sample(groups, 2))
    renum_all = entity(rng.randint(1, 3), chain=1)
    for card in renum_all["cards"]:
        card["number"] = renum_all["chain"][0]
    renum_mix = entity(rng.randint(2, 3), chain=1)
    renum_mix["cards"][0]["number"] = renum_mix["chain"][0]
    entity(1)
    entity(1)
    entity(rng.randint(1, 3), chain=1)  # retired id listed, never used on a card
    foreign = []
    if level >= 4:
        # A void card with an amount, the latest of its entity: counting it changes the records and the total.
        count = rng.randint(2, 3)
        void = entity(count, days=rng.sample(range(330), count))
        extra = new_card(rng, void["n"], rng.randint(max(c["day"] for c in void["cards"]) + 1, 364),
                         rng.choice(groups), rng.randint(lo, hi))
        extra["void"] = True
        void["cards"].append(extra)
        missing = entity(rng.randint(2, 3))
        missing["cards"][rng.randrange(len(missing["cards"]))]["cents"] = None
        for target in rng.sample(entities[:-2], rng.randint(1, 2)):
            card = new_card(rng, target["n"], rng.randrange(365), rng.choice(groups), rng.randint(lo, hi))
            foreign.append(card)
    if big:
        chain = entity(rng.randint(2, 3), chain=2)
        chain["cards"][0]["number"] = chain["chain"][0]
        # Two amounts ending in 3 hundredths: rounding each before summing loses a tenth.
        entity(2)["cards"][:] = [new_card(rng, None, rng.randrange(365), rng.choice(groups),
                                          cents_where(rng, lo, hi, lambda c: c % 10 == 3)) for _ in range(2)]
        half = entity(rng.randint(1, 2))
        base = sum(c["cents"] for c in half["cards"][1:])
        half["cards"][0]["cents"] = cents_where(rng, lo, hi, lambda c: (base + c) % 100 in (5, 25, 45, 65, 85))
        void_only = entity(rng.randint(1, 2))
        for card in void_only["cards"]:
            card["void"] = True
        entity(rng.randint(1, 3), number=near_n)
    while fillers > 0 or sum(len(e["cards"]) for e in entities) < cards_wanted:
        fillers -= 1
        entity(rng.choice([1, 1, 2, 2, 3, 3, 4, 5]), chain=1 if rng.random() < 0.05 else 0)
    for e in entities:
        for card in e["cards"]:
            if card["number"] is None:
                card["number"] = e["n"]

    order = [(e, card) for e in entities for card in e["cards"]] + [(None, card) for card in foreign]
    rng.shuffle(order)
    mine = [i for i, (e, _) in enumerate(order) if e is move]
    if mine[-1] == [i for i in mine if order[i][1]["day"] == max(c["day"] for c in move["cards"])][0]:
        order[mine[0]], order[mine[-1]] = order[mine[-1]], order[mine[0]]
    if level >= 4:
        scaled = rng.randrange(2)
        for _, card in order:
            card["source"] = rng.randrange(2)
        zero["cards"][0]["source"] = scaled  # at least one counted amount needs its factor
    else:
        scaled = None
    return {"entities": entities, "order": order, "scaled": scaled}


def card_text(d, card, level, year, sources, shifts):
    date = day_text(year, card["day"])
    group = written_group(card["group"], card["gstyle"])
    amount = "" if card["cents"] is None else amount_text(card["cents"], shifts[card["source"]])
    if level >= 4 and card["source"] == 1:
        body = {"source": sources[1], "status": "void" if card["void"] else "entered", "group": group, "date": date}
        if card["cents"] is not None:
            number = Decimal(amount)
            body["amount"] = int(number) if number == number.to_integral_value() else float(number)
        return dump_json(body)
    lines = []
    if level >= 4:
        lines += ["source: %s" % sources[0], "status: %s" % ("void" if card["void"] else "entered")]
    lines += ["%s: %s" % (d["group_field"], group), "recorded_on: %s" % date, ("%s: %s" % (d["numeric_field"], amount))]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def card_level(rng, seed, params, level):
    d = params["domain"]
    prefix, idf, gf, nf = d["id_prefix"], d["id_field"], d["group_field"], d["numeric_field"]
    folder, plural, entity_word = d["record_file"], d["entity_plural"], d["entity"]
    sources = list(d["ledger_sources"])
    year = rng.randint(2019, 2024)
    world = card_world(rng, d, level)
    scaled = world["scaled"]
    shifts = [0, 0]
    if scaled is not None:
        shifts[scaled] = rng.choice(FACTOR_SHIFTS)
    other = foreign_prefix(prefix)

    environment, index_rows = {}, []
    for pos, (e, card) in enumerate(world["order"]):
        card["pos"] = pos
        json_card = level >= 4 and card["source"] == 1
        name = "%s/entry_%03d.%s" % (folder, pos + 1, "json" if json_card else "txt")
        environment[name] = card_text(d, card, level, year, sources, shifts)
        index_rows.append((name, written_id(other if e is None else prefix, card["number"], card["style"])))
    renumbered = []
    for e in world["entities"]:
        ids = e["chain"] + [e["n"]]
        renumbered += [(canonical_id(prefix, a), canonical_id(prefix, b)) for a, b in zip(ids, ids[1:])]
    rng.shuffle(renumbered)
    environment["index.csv"] = csv_text(["file", idf], index_rows)
    environment["renumbered.csv"] = csv_text(["old_" + idf, "new_" + idf], renumbered)
    if level >= 4:
        factors = [str(Decimal(1).scaleb(-shift)) for shift in shifts]
        environment["sources.csv"] = csv_text(["source", "factor"], list(zip(sources, factors)))

    total_col = "total_" + nf
    last_col = "last_recorded" if level == 5 else None
    places = Decimal("0.1") if level == 5 else Decimal("0.01")
    expected = []
    for e in world["entities"]:
        cards = [c for c in e["cards"] if not c["void"]]
        if not cards:
            continue
        latest = max(cards, key=lambda c: (c["day"], c["pos"]))
        total = Decimal(sum(c["cents"] for c in cards if c["cents"] is not None)).scaleb(-2)
        record = {idf: canonical_id(prefix, e["n"]), gf: latest["group"], "records": len(cards),
                  total_col: float(total.quantize(places, ROUND_HALF_UP))}
        if last_col:
            record[last_col] = day_text(year, latest["day"])
        expected.append(record)
    expected.sort(key=lambda r: r[idf])

    rules = [
        id_rule(prefix),
        "index.csv lists every card once, with the id written on it; a card belongs to the %s of that id. Ids in "
        "renumbered.csv are already canonical." % entity_word,
        "An id in the `old_%s` column of renumbered.csv was retired and replaced by the id in `new_%s`: its cards "
        "belong to the %s of the new id, which is reported under the new id." % (idf, idf, entity_word),
        "All cards of the same id are one %s, even when their %s differs." % (entity_word, gf),
        "`%s` of a %s is the one on its card with the latest `recorded_on`; when several cards share that date, the "
        "card listed later in index.csv wins. It is matched after trimming spaces and ignoring letter case, and "
        "written in lower case." % (gf, entity_word),
        "`records` is the number of cards of the %s; every %s is reported, including one with a single card."
        % (entity_word, entity_word),
    ]
    if level >= 4:
        rules += [
            "Only ids with the prefix `%s` belong to this register; index rows whose id has another prefix are "
            "ignored." % prefix,
            "Cards from %s are text files of `field: value` lines (`source`, `status`, `%s`, `recorded_on`, `%s`); "
            "cards from %s are JSON objects whose keys `source`, `status`, `group`, `date` and `amount` hold the same "
            "fields." % (sources[0], gf, nf, sources[1]),
            "A card whose `status` is `void` is ignored entirely: it is not a card of any %s." % entity_word,
            "A card's amount times the `factor` of its source in sources.csv is its %s in %s." % (nf, d["unit"]),
            "A card without an amount still counts in `records` and may supply the %s; it adds nothing to the total."
            % gf,
        ]
    if level == 5:
        rules += [
            "A replacement id may itself have been retired later: follow renumbered.csv until an id that is not "
            "retired.",
            "An id whose cards are all void gets no record.",
            "`%s` is the sum of the %s of the %s's cards in %s, computed unrounded and rounded only on output to one "
            "decimal, halves rounded up (away from zero)." % (total_col, nf, entity_word, d["unit"]),
            "`%s` is the latest `recorded_on` among the %s's cards, written YYYY-MM-DD." % (last_col, entity_word),
        ]
    else:
        rules.append("`%s` is the sum of the %s of the %s's cards in %s, to two decimals."
                     % (total_col, nf, entity_word, d["unit"]))

    about = (
        "index.csv lists the entry cards of %s kept in %s/: each row gives a card's file and the %s written on it. A "
        "card holds the %s, the date it was recorded (recorded_on) and the %s (%s, field %s). The same %s often has "
        "several cards, its id written in different ways, and renumbered.csv maps retired ids to the ids that "
        "replaced them." % (plural, folder, idf, gf, d["numeric_label"], d["unit"], nf, entity_word)
    )
    if level >= 4:
        about += (" The cards come from two sources, %s and %s, with different layouts; sources.csv gives the unit "
                  "factor of each source. Some cards are void, some lack an amount, and index.csv also lists cards of "
                  "another register." % (sources[0], sources[1]))
    instruction = about + (" Resolve the cards into %s following the rules in CONTRACT.md exactly and write the result "
                           "to %%(out)s." % plural)
    values = {"PREFIX": prefix, "ID": idf, "GROUP": gf, "VALUE": nf, "TOTAL": total_col, "LAST": last_col,
              "PLACES_TEXT": str(places), "SCALED": level >= 4}
    columns = [idf, gf, "records", total_col] + ([last_col] if last_col else [])
    return structured_task(params, deliverable_format(seed), folder + "_resolved", instruction, environment, rules,
                           [idf, gf], columns, expected, "cards", values)


LEVELS = (level0, level1, level2) + numbered_levels(card_level, (3, 4, 5))
build = family(__name__, LEVELS)
