#!/usr/bin/env python3
"""Generator family `rate_table_calculation` (analysis track).

build(seed, params) -> task: domain records that carry a quantity (the
domain's numeric field, in its unit) and a category (its group field), a rate
table that turns each quantity into a charge in credits, an instruction, the
answer contract, the answer key computed from the generated data, and an
oracle solution. Stdlib-only, with generator_common.py beside it: it runs in
the sandbox as
`python3 -I /generator/rate_table_calculation.py --params P --seed N --out /out`.

A rate table gives each category numbered quantity bands, each with a rate
(credits per unit) and a flat fee; the category terms add a minimum charge
and a surcharge in percent. The hidden decisions each contract declares, and
the data always makes matter: which side of a band limit a quantity exactly
on it belongs to; whole-quantity (one band prices all of it) or marginal
(band by band) pricing; the minimum applied before or after the surcharge;
rounding each charge before summing or only the total (halves up); what
becomes of a category with no rates; and, with dirty data, quantities in
hundredths of the unit converted before banding.

Levels: 0 = one shell step on a rate list or a charge list (look up a rate,
sum the charges, sort the rates, count one category's records); 1 = charges
as quantity times a flat rate per category, per record or totalled per
category, into a CSV; 2 = banded rates with fees, a minimum and a surcharge
stated in the contract, totals per category in the rotating deliverable
format; 3 = the multi-hop layout: an index of entities and detail files,
each entity's usage lines priced by a separate rate table and category terms
table, one total per entity; 4 = level 3 on dirty data: detail files the
index does not list, JSON and CSV detail files with differing columns,
quantities in hundredths of the unit, lines without a quantity, void lines;
5 = level 4 with hundreds of lines, three bands, dated rate versions (a line
on an effective date takes the new version) and corrected lines (a repeated
line number: the last row counts).
"""

import datetime
import json
import math
import os
import sys
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

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

CENT = Decimal("0.01")
TOLERANCE = 0.001
# Round numbers of charges in credits, so every band's fee is a multiple of a quarter.
TARGET_CHARGE = Decimal(40)
HUNDREDTHS = 100
INDEX, RATE_TABLE, TERMS = "index.csv", "rate_table.csv", "category_terms.csv"
# The correct reading of every rule; a level's alternatives are these with one value changed.
CORRECT = {
    "no_rate": "null", "unindexed": False, "missing_zero": False, "void_charged": False,
    "hundredths": "convert", "date_inclusive": True, "dupes": "last", "half_up": True,
}
MAX_ATTEMPTS = 60


# ---- money, bands and prices

def cents(n):
    return Decimal(n).scaleb(-2)


def plain(value):
    """A Decimal as plain text (never in exponent notation)."""
    return format(value, "f")


def money_text(value):
    return plain(value.quantize(CENT))


def rounded(value, cfg):
    return value.quantize(CENT, rounding=ROUND_HALF_UP if cfg["half_up"] else ROUND_HALF_EVEN)


def nice_rate(value):
    """`value` (a positive Decimal) to two significant digits (and at least
    one decimal) whose last is odd and not 5, so a planted quantity can put a
    charge exactly on half a cent."""
    exponent = min(value.adjusted() - 1, -1)
    mantissa = max(int(value.scaleb(-exponent).to_integral_value()), 11)
    while mantissa % 2 == 0 or mantissa % 5 == 0:
        mantissa += 1
    return Decimal(mantissa).scaleb(exponent)


def band_index(bands, q, cfg):
    for index, (limit, _, _) in enumerate(bands):
        if limit is None or (q <= limit if cfg["inclusive"] else q < limit):
            return index
    raise AssertionError("the last band has no limit")


def price(bands, q, band_q, minimum, surcharge, cfg):
    """The unrounded charge of one quantity `q` (banded at `band_q`)."""
    _, rate, fee = bands[band_index(bands, band_q, cfg)]
    if cfg["pricing"] == "whole":
        base = rate * q
    else:
        base, low = Decimal(0), Decimal(0)
        for limit, band_rate, _ in bands:
            top = q if limit is None else min(q, limit)
            if top > low:
                base += band_rate * (top - low)
            if limit is None:
                break
            low = limit
    base += fee
    factor = 1 + surcharge / 100
    if cfg["min_first"]:
        return max(base, minimum) * factor
    return max(base * factor, minimum)


def total_of(charges, cfg):
    if cfg["round_lines"]:
        return sum((rounded(c, cfg) for c in charges), Decimal(0))
    return rounded(sum(charges, Decimal(0)), cfg)


def band_limits(rng, domain, count):
    """`count - 1` increasing band limits (cents) at round values inside the range."""
    lo, hi = cents_range(domain)
    span = hi - lo
    step = 10 ** max(0, len(str(span)) - 2)
    spots = [(0.35, 0.6)] if count == 2 else [(0.25, 0.4), (0.55, 0.75)]
    limits = []
    for low, high in spots:
        limit = int(round((lo + rng.uniform(low, high) * span) / step)) * step
        limits.append(max(limit, (limits[-1] + step) if limits else lo + step))
    return limits


def draw_bands(rng, domain, limits):
    lo, hi = cents_range(domain)
    base_rate = TARGET_CHARGE / cents((lo + hi) // 2)
    rates, fees = [], []
    for _ in range(len(limits) + 1):
        rate = nice_rate(base_rate * Decimal(rng.randint(60, 150)) / 100)
        while rates and rate == rates[-1]:
            rate = nice_rate(rate * Decimal("1.2"))
        fee = Decimal(rng.randint(4, 48) * 25).scaleb(-2)
        while fee in fees:
            fee += Decimal("0.75")
        rates.append(rate)
        fees.append(fee)
    return [(cents(limit) if i < len(limits) else None, rates[i], fees[i]) for i, limit in
            enumerate(limits + [None])]


def new_version(rng, bands):
    """The bands of a later rate version: same limits, other rates and fees."""
    changed = []
    for limit, rate, fee in bands:
        new_rate = nice_rate(rate * Decimal(rng.randint(112, 135)) / 100)
        if new_rate == rate:
            new_rate = nice_rate(rate * Decimal("1.4"))
        changed.append((limit, new_rate, fee + Decimal(rng.randint(1, 8) * 25).scaleb(-2)))
    return changed


def minimum_for(domain, bands):
    """A minimum charge above the banded charge of the lowest eighth of the range."""
    lo, hi = cents_range(domain)
    _, rate, fee = bands[0]
    at = fee + rate * cents(lo + (hi - lo) // 8)
    return (at * 2).to_integral_value(rounding=ROUND_CEILING) / 2


def differs(expected, other, key):
    """Whether two deliverables (lists of records) disagree beyond the tolerance."""
    a = {tuple(r[k] for k in key): r for r in expected}
    b = {tuple(r[k] for k in key): r for r in other}
    if set(a) != set(b):
        return True
    for k, record in a.items():
        for column, value in record.items():
            theirs = b[k][column]
            if (value is None) != (theirs is None):
                return True
            if isinstance(value, (int, float)) and value is not None and abs(value - theirs) > TOLERANCE + 1e-9:
                return True
            if isinstance(value, str) and value != theirs:
                return True
    return False


def plant_half_cent(rng, domain, charge_of, rest, cfg):
    """A quantity (cents) whose charge, plus `rest` when only totals are
    rounded, rounds differently half up and half to even; None if none is near."""
    lo, hi = cents_range(domain)
    extra = Decimal(0) if cfg["round_lines"] else rest

    def value(n):
        return charge_of(n) + extra

    def splits(n):
        v = value(n)
        return v.quantize(CENT, rounding=ROUND_HALF_UP) != v.quantize(CENT, rounding=ROUND_HALF_EVEN)

    # Near an anchor the charge is affine in n (one band, above the minimum):
    # solve a + b*t = half a cent (mod one cent) in integers, then test the
    # few solutions nearby with the real charge.
    for _ in range(12):
        anchor = rng.randint(lo, hi - 1)
        a_value = value(anchor)
        slope = value(anchor + 1) - a_value
        digits = max(0, -a_value.as_tuple().exponent, -slope.as_tuple().exponent)
        if digits < 3:
            continue
        scale = 10 ** digits
        a, b, cent = int(a_value * scale), int(slope * scale), scale // 100
        g = math.gcd(b, cent)
        if b == 0 or (cent // 2 - a) % g:
            continue
        period = cent // g
        t0 = ((cent // 2 - a) // g * pow(b // g, -1, period)) % period if period > 1 else 0
        for j in (0, 1, -1, 2, -2, 3, -3):
            n = anchor + t0 + j * period
            if lo <= n <= hi and splits(n):
                return n
    return None


def hidden_choices(rng):
    """The per-task readings of the rules the contract declares."""
    return {
        "inclusive": rng.random() < 0.5,
        "pricing": rng.choice(["whole", "marginal"]),
        "min_first": rng.random() < 0.5,
        "round_lines": rng.random() < 0.5,
    }


def alternatives(cfg, names):
    """Each rule read the other way: {name: cfg with that one reading changed}."""
    flips = {
        "inclusive": {"inclusive": not cfg["inclusive"]},
        "pricing": {"pricing": "marginal" if cfg["pricing"] == "whole" else "whole"},
        "min_first": {"min_first": not cfg["min_first"]},
        "round_lines": {"round_lines": not cfg["round_lines"]},
        "half_even": {"half_up": False},
        "no_rate_zero": {"no_rate": "zero"},
        "no_rate_omit": {"no_rate": "omit"},
        "unindexed": {"unindexed": True},
        "missing_zero": {"missing_zero": True},
        "void_charged": {"void_charged": True},
        "hundredths_raw": {"hundredths": "raw"},
        "hundredths_band_raw": {"hundredths": "band_raw"},
        "date_exclusive": {"date_inclusive": False},
        "dupes_first": {"dupes": "first"},
        "dupes_both": {"dupes": "both"},
    }
    return {name: dict(cfg, **flips[name]) for name in names}


def rule_texts(d, cfg, unit_of_charge):
    """The contract's sentences for the four rng-chosen readings."""
    nf = d["numeric_field"]
    inclusive = (
        "A band includes its upper limit: a %s exactly on a band limit belongs to the lower band." % nf
        if cfg["inclusive"] else
        "A band includes its lower limit but not its upper limit: a %s exactly on a band limit belongs to the "
        "higher band." % nf
    )
    pricing = (
        "Pricing is by whole quantity: the whole %s is charged at the rate of the one band it falls in (not band by "
        "band), plus that band's flat fee." % nf
        if cfg["pricing"] == "whole" else
        "Pricing is marginal: each part of the %s is charged at the rate of the band that part lies in (the first "
        "band's rate up to its limit, the next band's rate from there to its own limit, and so on), plus the flat fee "
        "of the band the whole %s falls in." % (nf, nf)
    )
    minimum = (
        "The minimum is applied before the surcharge: the surcharge is added to the larger of the banded charge and "
        "the minimum charge."
        if cfg["min_first"] else
        "The surcharge is applied before the minimum: the banded charge plus its surcharge is raised to the minimum "
        "charge when it is below it."
    )
    rounding = (
        "Round each %s to cents (two decimals, halves rounded up) before adding; a total is the sum of the rounded "
        "charges." % unit_of_charge
        if cfg["round_lines"] else
        "Keep each %s unrounded; round only each total to cents (two decimals, halves rounded up)." % unit_of_charge
    )
    return [inclusive, pricing, minimum, rounding]


# ---- the oracle's readings of the four rules, shared by levels 2 to 5

def reading_values(cfg):
    """The oracle scripts' parameters for the four readings the contract declares."""
    return {"INCLUSIVE_UPPER": cfg["inclusive"], "PRICING": cfg["pricing"], "MIN_BEFORE_SURCHARGE": cfg["min_first"],
            "ROUND_LINES": cfg["round_lines"]}


# ---- level 0: one shell step

def draw_rate_list(rng, groups):
    values = rng.sample(range(50, 1000), len(groups))
    return [(g, decimal_text(v)) for g, v in zip(groups, values)]


def level0(rng, seed, params):
    d = params["domain"]
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    groups = list(d["group_values"])
    variant = level0_variant(seed)
    if variant == 0:
        rates = draw_rate_list(rng, groups)
        rng.shuffle(rates)
        target, value = rng.choice(rates)
        out = "rate.txt"
        environment = {"rates.csv": csv_text([gf, "rate"], rates)}
        instruction = "rates.csv gives the rate of each %s. Write the rate listed for %s to %s." % (gf, target, out)
        solution = "grep ^%s, rates.csv | cut -d, -f2 > %s" % (target, out)
        check = {"type": "number", "name": "rate of %s" % target, "path": out, "expected": float(value), "tolerance": 0}
        schema, key = "a single number", float(value)
    elif variant == 1:
        ids = record_ids(rng, d, rng.randint(10, 16))
        charges = [rng.randint(300, 60000) for _ in ids]
        out = "total.txt"
        environment = {"charges.csv": csv_text([idf, "charge"], [(i, decimal_text(c)) for i, c in zip(ids, charges)])}
        instruction = (
            "charges.csv lists the charge in credits of each %s (column charge, after a header line). Write the sum "
            "of all the charges to %s." % (d["entity"], out)
        )
        solution = "awk -F, 'NR>1{s+=$2}END{print s}' charges.csv > %s" % out
        total = float(decimal_text(sum(charges)))
        check = {"type": "number", "name": "sum of the charges", "path": out, "expected": total,
                 "tolerance": TOLERANCE}
        schema, key = "a single number", total
    elif variant == 2:
        rates = draw_rate_list(rng, groups)
        rng.shuffle(rates)
        out = "sorted.txt"
        lines = ["%s %s" % pair for pair in rates]
        environment = {"rates.txt": "".join(line + "\n" for line in lines)}
        instruction = (
            "Each line of rates.txt holds a %s and its rate. Write the lines of rates.txt to %s, sorted by rate from "
            "the lowest to the highest." % (gf, out)
        )
        solution = "sort -k2 -g rates.txt > %s" % out
        expected = ["%s %s" % pair for pair in sorted(rates, key=lambda pair: Decimal(pair[1]))]
        check = {"type": "lines", "name": "rates by rate", "path": out, "expected": expected, "ordered": True}
        schema, key = "the lines of rates.txt, one per line, in sorted order", expected
    else:
        target, *others = rng.sample(groups, 4)
        per_group = {target: rng.randint(10, 14)}
        per_group.update({g: rng.randint(2, 6) for g in others})
        names = [g for g, n in per_group.items() for _ in range(n)]
        rng.shuffle(names)
        lo, hi = cents_range(d)
        ids = record_ids(rng, d, len(names))
        data = d["record_file"] + ".csv"
        rows = [(i, g, decimal_text(rng.randint(lo, hi))) for i, g in zip(ids, names)]
        out = "count.txt"
        environment = {data: csv_text([idf, gf, nf], rows)}
        instruction = "Write the number of %s in %s whose %s is %s to %s." % (d["entity_plural"], data, gf, target, out)
        solution = "grep -c ,%s, %s > %s" % (target, data, out)
        check = {"type": "number", "name": "%s count" % target, "path": out, "expected": per_group[target],
                 "tolerance": 0}
        schema, key = "a single integer", per_group[target]
    contract = {
        "deliverable": {"path": out, "format": check["type"], "schema": schema},
        "rules": ["Surrounding whitespace in %s is ignored; write nothing else into it." % out],
        "parameters": {},
        "labels": [],
    }
    return assemble(params, instruction, environment, contract, [check], {out: key}, solution, check["type"])


# ---- level 1: quantity times a flat rate

def level1(rng, seed, params):
    d = params["domain"]
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    data = d["record_file"] + ".csv"
    groups = sorted(rng.sample(d["group_values"], rng.randint(3, 5)))
    # Whole-number rates: every charge is exact to the cent, so nothing is left to a rounding rule.
    rates = dict(zip(groups, rng.sample(range(2, 10), len(groups))))
    lo, hi = cents_range(d)
    names = groups + [rng.choice(groups) for _ in range(rng.randint(8, 14))]
    rng.shuffle(names)
    ids = record_ids(rng, d, len(names))
    quantities = [rng.randint(lo, hi) for _ in names]
    rows = [(i, g, decimal_text(q)) for i, g, q in zip(ids, names, quantities)]
    rate_rows = [(g, rates[g]) for g in groups]
    rng.shuffle(rate_rows)
    environment = {data: csv_text([idf, gf, nf], rows), "rates.csv": csv_text([gf, "rate"], rate_rows)}
    join = "awk -F, 'NR==FNR{if(FNR>1)r[$1]=$2;next} FNR>1"
    if seed % 2 == 0:
        out, key, column = "charges.csv", idf, "charge"
        expected = [{idf: i, column: float(decimal_text(q * rates[g]))} for i, g, q in zip(ids, names, quantities)]
        what = "one row per %s giving its charge: its %s times the rate of its %s" % (d["entity"], nf, gf)
        body = "%s{printf \"%%s,%%.2f\\n\",$1,$3*r[$2]}' rates.csv %s" % (join, data)
    else:
        out, key, column = gf + "_totals.csv", gf, "total_charge"
        totals = {}
        for g, q in zip(names, quantities):
            totals[g] = totals.get(g, 0) + q * rates[g]
        expected = [{gf: g, column: float(decimal_text(totals[g]))} for g in sorted(totals)]
        what = ("one row per %s giving the total charge of its %s: the sum of each one's %s times the rate of the %s"
                % (gf, d["entity_plural"], nf, gf))
        body = ("%s{t[$2]+=$3*r[$2]} END{for(g in t)printf \"%%s,%%.2f\\n\",g,t[g]}' rates.csv %s" % (join, data))
    solution = "{ echo '%s,%s'; %s; } > %s" % (key, column, body, out)
    instruction = (
        "%s lists %s with their %s and %s (%s, in %s); rates.csv gives the rate in credits per %s of each %s. "
        "Write %s with the header line `%s,%s` and %s."
        % (data, d["entity_plural"], gf, nf, d["numeric_label"], d["unit"], d["unit"], gf, out, key, column, what)
    )
    check = {
        "type": "csv_records", "name": "%s per %s" % (column, key), "path": out, "key": [key],
        "columns": {key: {"kind": "text"}, column: {"kind": "number", "tolerance": TOLERANCE}},
        "expected": expected,
    }
    contract = {
        "deliverable": {"path": out, "format": "csv", "schema": "CSV with header `%s,%s`, one row per %s" % (
            key, column, key)},
        "rules": [
            "A charge is the %s times the rate of the %s in rates.csv, in credits." % (nf, gf),
            "Numbers are written as plain decimals.",
            "Rows may be in any order; numbers are compared with an absolute tolerance of %s." % TOLERANCE,
        ],
        "parameters": {"tolerance": TOLERANCE},
        "labels": [],
    }
    return assemble(params, instruction, environment, contract, [check], {out: expected}, solution, "csv")


# ---- level 2: banded rates stated in the contract, totals per category

def level2_expected(d, records, rates, cfg):
    gf = d["group_field"]
    charges = {}
    for record in records:
        g = record["group"]
        if g not in rates:
            if cfg["no_rate"] == "zero":
                charges.setdefault(g, []).append(Decimal(0))
            continue
        terms = rates[g]
        q = cents(record["q"])
        charges.setdefault(g, []).append(price(terms["bands"], q, q, terms["minimum"], terms["surcharge"], cfg))
    return [{gf: g, "records": len(cs), "total_charge": float(total_of(cs, cfg))} for g, cs in sorted(charges.items())]


def level2_attempt(rng, d, cfg):
    lo, hi = cents_range(d)
    span = hi - lo
    groups = list(d["group_values"])
    no_rate = rng.choice(groups)
    rated = sorted(g for g in groups if g != no_rate)
    surcharged = sorted(rng.sample(rated, rng.randint(1, 2)))
    surcharge = Decimal(rng.choice([5, 8, 10, 12, 15, 20, 25]))
    rates = {}
    for g in rated:
        rates[g] = {"bands": draw_bands(rng, d, band_limits(rng, d, 2)),
                    "surcharge": surcharge if g in surcharged else Decimal(0)}
    minimum = max(minimum_for(d, rates[g]["bands"]) for g in rated)
    for g in rated:
        rates[g]["minimum"] = minimum
    records = [{"group": g, "q": rng.randint(lo, hi)} for g in rated for _ in range(rng.randint(2, 4))]
    on_limit = rng.choice(rated)
    records.append({"group": on_limit, "q": int(rates[on_limit]["bands"][0][0] * 100)})
    records.append({"group": rng.choice(surcharged), "q": lo + rng.randint(0, span // 20)})
    records += [{"group": no_rate, "q": rng.randint(lo, hi)} for _ in range(rng.randint(2, 3))]
    # One record of a category without surcharge is placed so that half-up and half-even rounding disagree.
    half_group = rng.choice([g for g in rated if g not in surcharged])
    half = {"group": half_group, "q": lo}
    terms = rates[half_group]
    rest = sum((price(terms["bands"], cents(r["q"]), cents(r["q"]), minimum, terms["surcharge"], cfg)
                for r in records if r["group"] == half_group), Decimal(0))
    n = plant_half_cent(rng, d, lambda n: price(terms["bands"], cents(n), cents(n), minimum, Decimal(0), cfg), rest, cfg)
    if n is None:
        return None
    half["q"] = n
    records.append(half)
    rng.shuffle(records)
    return records, rates, no_rate, surcharged, surcharge, minimum


def level2(rng, seed, params):
    d = params["domain"]
    gf, idf, nf, unit = d["group_field"], d["id_field"], d["numeric_field"], d["unit"]
    data = d["record_file"] + ".csv"
    cfg = dict(CORRECT, **hidden_choices(rng), no_rate="omit")
    for _ in range(MAX_ATTEMPTS):
        drawn = level2_attempt(rng, d, cfg)
        if drawn is None:
            continue
        records, rates, no_rate, surcharged, surcharge, minimum = drawn
        expected = level2_expected(d, records, rates, cfg)
        others = alternatives(cfg, ["inclusive", "pricing", "min_first", "round_lines", "half_even", "no_rate_zero"])
        if all(differs(expected, level2_expected(d, records, rates, alt), [gf]) for alt in others.values()):
            break
    else:
        raise RuntimeError("no level-2 data where every rule matters after %d attempts" % MAX_ATTEMPTS)
    ids = record_ids(rng, d, len(records))
    rows = [(i, r["group"], decimal_text(r["q"])) for i, r in zip(ids, records)]

    fmt = deliverable_format(seed)
    columns = [gf, "records", "total_charge"]
    out = records_deliverable(fmt, gf + "_charges", [gf], columns, expected, number_tolerance=TOLERANCE,
                              split_column=gf, split_values=sorted(d["group_values"]))
    parameters = {"minimum_charge": float(minimum), "surcharge_pct": float(surcharge), "tolerance": TOLERANCE}
    table_rules = []
    for g in sorted(rates):
        (limit, rate1, fee1), (_, rate2, fee2) = rates[g]["bands"]
        table_rules.append(
            "`%s`: band 1 up to %s %s at %s credits per %s plus a flat fee of %s credits; band 2 above %s %s at %s "
            "credits per %s plus a flat fee of %s credits." % (
                g, plain(limit), unit, plain(rate1), unit, money_text(fee1), plain(limit), unit, plain(rate2), unit,
                money_text(fee2)))
        parameters.update({"%s_band_limit" % g: float(limit), "%s_band_1_rate" % g: float(rate1),
                           "%s_band_1_fee" % g: float(fee1), "%s_band_2_rate" % g: float(rate2),
                           "%s_band_2_fee" % g: float(fee2)})
    shown = " and ".join("`%s`" % g for g in surcharged)
    rules = (
        ["Each %s in %s is charged by the rates of its %s below; all charges are in credits." % (d["entity"], data, gf)]
        + table_rules
        + ["%s %s a surcharge of %s percent; the other %s values carry none." % (
            shown, "carries" if len(surcharged) == 1 else "carry", plain(surcharge), gf),
           "Every charged %s pays at least the minimum charge of %s credits." % (d["entity"], money_text(minimum))]
        + rule_texts(d, cfg, "%s's charge" % d["entity"])
        + ["A %s whose %s has no rates above is not charged: it is left out, and that %s gets no record."
           % (d["entity"], gf, gf),
           "`records` is the number of charged %s of the %s; `total_charge` is their total charge." % (
               d["entity_plural"], gf)]
        + out["rules"]
    )
    contract = {
        "deliverable": {"paths": out["paths"], "format": fmt, "schema": out["schema"], "columns": columns},
        "rules": rules,
        "parameters": parameters,
        "labels": [],
    }
    instruction = (
        "%s lists %s with their %s and their %s (column %s, in %s). Charge every %s with the rate table in "
        "CONTRACT.md and total the charges per %s, following the rules in CONTRACT.md exactly. Write the result to "
        "%s." % (data, d["entity_plural"], gf, d["numeric_label"], nf, unit, d["entity"], gf, ", ".join(out["paths"]))
    )
    table = {g: [(None if limit is None else plain(limit), plain(rate), plain(fee)) for limit, rate, fee in t["bands"]]
             for g, t in sorted(rates.items())}
    solution = python_oracle("rate_table_calculation", "charges", out["writer"], DATA=data, GROUP=gf, VALUE=nf,
                             RATES=table, SURCHARGES={g: plain(t["surcharge"]) for g, t in sorted(rates.items())},
                             MINIMUM_CHARGE=money_text(minimum), INDEX=None, RATE_TABLE=None, TERMS=None,
                             DETAIL_DIR=None, ID=None, HUNDREDTHS=None, **reading_values(cfg))
    environment = {data: csv_text([idf, gf, nf], rows)}
    return assemble(params, instruction, environment, contract, out["checks"], {"records": expected}, solution, fmt)


# ---- levels 3 to 5: index, detail files, rate table and category terms

SHAPES = {
    # entities, lines per entity, bands, dirty data, dated versions and corrected lines
    3: {"entities": (8, 11), "lines": (2, 4), "bands": 2, "dirty": False, "dated": False},
    4: {"entities": (10, 13), "lines": (2, 5), "bands": 2, "dirty": True, "dated": False},
    5: {"entities": (45, 60), "lines": (4, 9), "bands": 3, "dirty": True, "dated": True},
}
YEAR = 2024


def day_text(rng):
    return (datetime.date(YEAR, 1, 2) + datetime.timedelta(days=rng.randint(0, 360))).isoformat()


def version_for(terms, date, cfg):
    chosen = None
    for start, bands in terms["versions"]:
        if start <= date if cfg["date_inclusive"] else start < date:
            if chosen is None or start > chosen[0]:
                chosen = (start, bands)
    return chosen[1]


def usable_lines(entity, cfg):
    """(q, band_q, date) of every line the reading `cfg` charges."""
    if cfg["dupes"] == "both":
        kept = list(entity["lines"])
    else:
        latest = {}
        for line in entity["lines"]:
            if cfg["dupes"] == "last" or line["no"] not in latest:
                latest[line["no"]] = line
        kept = list(latest.values())
    usable = []
    for line in kept:
        if line["status"] == "void" and not cfg["void_charged"]:
            continue
        if line["q"] is None:
            if not cfg["missing_zero"]:
                continue
            q = band_q = Decimal(0)
        elif entity["hundredths"]:
            raw = Decimal(line["q"])
            if cfg["hundredths"] == "raw":
                q = band_q = raw
            else:
                q = raw / HUNDREDTHS
                band_q = raw if cfg["hundredths"] == "band_raw" else q
        else:
            q = band_q = cents(line["q"])
        usable.append((q, band_q, line["date"]))
    return usable


def line_charges(entity, rates, cfg):
    terms = rates[entity["group"]]
    return [price(version_for(terms, date, cfg), q, band_q, terms["minimum"], terms["surcharge"], cfg)
            for q, band_q, date in usable_lines(entity, cfg)]


def entity_expected(d, entities, rates, cfg):
    idf, gf = d["id_field"], d["group_field"]
    result = []
    for entity in entities:
        if not entity["indexed"] and not cfg["unindexed"]:
            continue
        usable = usable_lines(entity, cfg)
        row = {idf: entity["id"], gf: entity["group"], "lines": len(usable), "total_charge": None}
        if entity["group"] not in rates:
            if cfg["no_rate"] == "omit":
                continue
            if cfg["no_rate"] == "zero":
                row["total_charge"] = 0.0
        else:
            row["total_charge"] = float(total_of(line_charges(entity, rates, cfg), cfg))
        result.append(row)
    return sorted(result, key=lambda r: r[idf])


def draw_rates(rng, d, groups, shape):
    rates = {}
    surcharges = [Decimal(0)] + [Decimal(rng.choice([5, 8, 10, 12, 15, 20, 25]))] + [
        Decimal(rng.choice([0, 0, 5, 10, 15, 20])) for _ in groups[2:]]
    rng.shuffle(surcharges)
    for g, surcharge in zip(groups, surcharges):
        bands = draw_bands(rng, d, band_limits(rng, d, shape["bands"]))
        versions = [("", bands)]
        if shape["dated"]:
            start = (datetime.date(YEAR, 3, 1) + datetime.timedelta(days=rng.randint(0, 200))).isoformat()
            versions = [("%d-10-01" % (YEAR - 1), bands), (start, new_version(rng, bands))]
        rates[g] = {"versions": versions, "minimum": minimum_for(d, bands), "surcharge": surcharge}
    return rates


def new_entity(rng, d, group, count, shape, **extra):
    lo, hi = cents_range(d)
    lines = [{"no": n + 1, "q": rng.randint(lo, hi), "status": "ok", "date": day_text(rng) if shape["dated"] else ""}
             for n in range(count)]
    entity = {"group": group, "fmt": "json", "hundredths": False, "status": False, "indexed": True, "lines": lines}
    entity.update(extra)
    return entity


def entity_attempt(rng, d, shape, cfg):
    lo, hi = cents_range(d)
    span = hi - lo
    groups = list(d["group_values"])
    no_rate = rng.choice(groups)
    rated = sorted(g for g in groups if g != no_rate)
    rates = draw_rates(rng, d, rated, shape)
    surcharged = [g for g in rated if rates[g]["surcharge"] > 0]
    plain_groups = [g for g in rated if rates[g]["surcharge"] == 0]
    low_lines, high_lines = shape["lines"]

    def lines_count():
        return rng.randint(low_lines, high_lines)

    entities = []
    # A quantity exactly on a band limit.
    boundary = new_entity(rng, d, rng.choice(rated), lines_count(), shape)
    limits = [b[0] for b in rates[boundary["group"]]["versions"][0][1] if b[0] is not None]
    rng.choice(boundary["lines"])["q"] = int(rng.choice(limits) * 100)
    entities.append(boundary)
    # A surcharged line below the minimum charge.
    small = new_entity(rng, d, rng.choice(surcharged), lines_count(), shape)
    rng.choice(small["lines"])["q"] = lo + rng.randint(0, span // 20)
    entities.append(small)
    # Entities whose category has no rates.
    entities += [new_entity(rng, d, no_rate, lines_count(), shape) for _ in range(1 if shape["entities"][0] < 20 else 3)]
    if shape["dirty"]:
        missing = new_entity(rng, d, rng.choice(rated), max(2, lines_count()), shape)
        missing["lines"][-1]["q"] = None
        void = new_entity(rng, d, rng.choice(rated), max(2, lines_count()), shape, status=True)
        void["lines"][-1]["status"] = "void"
        # Hundredths of the unit, with a quantity in the first band: banding the raw number moves it.
        hundredths = new_entity(rng, d, rng.choice(rated), lines_count(), shape, hundredths=True)
        first_limit = int(rates[hundredths["group"]]["versions"][0][1][0][0] * 100)
        hundredths["lines"][0]["q"] = rng.randint(lo + span // 5, max(lo + span // 5, first_limit - 1))
        entities += [missing, void, hundredths]
        entities += [new_entity(rng, d, rng.choice(rated), lines_count(), shape, indexed=False)
                     for _ in range(rng.randint(1, 3))]
    if shape["dated"]:
        corrected = new_entity(rng, d, rng.choice(rated), lines_count(), shape)
        again = dict(rng.choice(corrected["lines"]))
        again["q"] = rng.randint(lo, hi)
        corrected["lines"].append(again)
        on_date = new_entity(rng, d, rng.choice(rated), lines_count(), shape)
        rng.choice(on_date["lines"])["date"] = rates[on_date["group"]]["versions"][1][0]
        entities += [corrected, on_date]
    total = rng.randint(*shape["entities"])
    while sum(1 for e in entities if e["indexed"]) < total - 1:
        group = no_rate if rng.random() < 0.05 else rng.choice(rated)
        entities.append(new_entity(rng, d, group, lines_count(), shape))
    if shape["dirty"]:
        for entity in entities:
            entity["fmt"] = rng.choice(["json", "csv"])
            entity["status"] = entity["status"] or rng.random() < 0.4
            if not entity["hundredths"] and entity["group"] != no_rate and rng.random() < 0.2:
                entity["hundredths"] = True
        entities[0]["fmt"], entities[1]["fmt"] = "json", "csv"
        for entity in entities[3:]:
            if entity["indexed"] and entity["group"] in rated and rng.random() < 0.3:
                entity["status"] = True
                entity["lines"].append(dict(rng.choice(entity["lines"]), no=len(entity["lines"]) + 1,
                                            status="void", q=rng.randint(lo, hi)))
    # The last: an entity of a category without surcharge placed so that half-up and half-even disagree.
    half = new_entity(rng, d, rng.choice(plain_groups), lines_count(), shape)
    terms = rates[half["group"]]
    line = half["lines"][-1]
    rest = sum(line_charges(dict(half, lines=half["lines"][:-1]), rates, cfg), Decimal(0))
    bands = version_for(terms, line["date"], cfg)

    def charge_of(n):
        return price(bands, cents(n), cents(n), terms["minimum"], Decimal(0), cfg)

    n = plant_half_cent(rng, d, charge_of, rest, cfg)
    if n is None:
        return None
    line["q"] = n
    entities.append(half)
    rng.shuffle(entities)
    ids = record_ids(rng, d, len(entities))
    for entity, ident in zip(entities, ids):
        entity["id"] = ident
    return entities, rates, no_rate


def detail_file(d, entity, shape, rng):
    """The text of one entity's detail file: JSON, or CSV with its own column order."""
    idf, gf, nf = d["id_field"], d["group_field"], d["numeric_field"]
    field = nf + "_hundredths" if entity["hundredths"] else nf
    if entity["fmt"] == "json":
        items = []
        for line in entity["lines"]:
            item = {"line": line["no"]}
            if line["q"] is not None:
                item[field] = line["q"] if entity["hundredths"] else float(cents(line["q"]))
            elif rng.random() < 0.5:
                item[field] = None
            if entity["status"]:
                item["status"] = line["status"]
            if shape["dated"]:
                item["date"] = line["date"]
            items.append(item)
        # One line object per text line: readable, and small at level 5.
        body = ",\n".join("    " + json.dumps(item) for item in items)
        return '{\n  %s: %s,\n  %s: %s,\n  "lines": [\n%s\n  ]\n}\n' % (
            json.dumps(idf), json.dumps(entity["id"]), json.dumps(gf), json.dumps(entity["group"]), body)
    header = ["line", gf, field] + (["status"] if entity["status"] else []) + (["date"] if shape["dated"] else [])
    if shape["dirty"]:
        rng.shuffle(header)
    rows = []
    for line in entity["lines"]:
        quantity = "" if line["q"] is None else (str(line["q"]) if entity["hundredths"] else decimal_text(line["q"]))
        values = {"line": line["no"], gf: entity["group"], field: quantity, "status": line["status"],
                  "date": line["date"]}
        rows.append([values[c] for c in header])
    return csv_text(header, rows)


def entity_level(rng, seed, params, level):
    d = params["domain"]
    gf, idf, nf, unit = d["group_field"], d["id_field"], d["numeric_field"], d["unit"]
    entity, plural = d["entity"], d["entity_plural"]
    shape = SHAPES[level]
    detail_dir = d["record_file"]
    cfg = dict(CORRECT, **hidden_choices(rng))
    names = ["inclusive", "pricing", "min_first", "round_lines", "half_even", "no_rate_zero", "no_rate_omit"]
    if shape["dirty"]:
        names += ["unindexed", "missing_zero", "void_charged", "hundredths_raw", "hundredths_band_raw"]
    if shape["dated"]:
        names += ["date_exclusive", "dupes_first", "dupes_both"]
    for _ in range(MAX_ATTEMPTS):
        drawn = entity_attempt(rng, d, shape, cfg)
        if drawn is None:
            continue
        entities, rates, no_rate = drawn
        expected = entity_expected(d, entities, rates, cfg)
        if all(differs(expected, entity_expected(d, entities, rates, alt), [idf])
               for alt in alternatives(cfg, names).values()):
            break
    else:
        raise RuntimeError("no level-%d data where every rule matters after %d attempts" % (level, MAX_ATTEMPTS))

    environment = {}
    index_rows = []
    for e in entities:
        path = "%s/%s.%s" % (detail_dir, e["id"], e["fmt"])
        environment[path] = detail_file(d, e, shape, rng)
        if e["indexed"]:
            index_rows.append((e["id"], path))
    rng.shuffle(index_rows)
    environment[INDEX] = csv_text([idf, "file"], index_rows)
    rate_rows, term_rows = [], []
    for g in sorted(rates):
        for start, bands in rates[g]["versions"]:
            for number, (limit, rate, fee) in enumerate(bands, start=1):
                row = [g, number, "" if limit is None else plain(limit), plain(rate), money_text(fee)]
                rate_rows.append(row[:1] + [start] + row[1:] if shape["dated"] else row)
        term_rows.append((g, money_text(rates[g]["minimum"]), plain(rates[g]["surcharge"])))
    if shape["dirty"]:
        rng.shuffle(rate_rows)
    rate_header = [gf] + (["effective_from"] if shape["dated"] else []) + ["band", "up_to", "rate", "flat_fee"]
    environment[RATE_TABLE] = csv_text(rate_header, rate_rows)
    environment[TERMS] = csv_text([gf, "minimum_charge", "surcharge_pct"], term_rows)

    fmt = deliverable_format(seed)
    columns = [idf, gf, "lines", "total_charge"]
    out = records_deliverable(fmt, "charges", [idf], columns, expected, number_tolerance=TOLERANCE,
                              split_column=gf, split_values=sorted(d["group_values"]))
    parameters = {"tolerance": TOLERANCE}
    versions_rule = (
        "%s gives the bands of each %s, numbered from 1 upwards: `up_to` is the band's upper limit in %s (empty "
        "for the last band, which has none), `rate` is in credits per %s and `flat_fee` in credits. %s gives each "
        "%s's `minimum_charge` (credits per line) and `surcharge_pct` (a percentage, zero for none)."
        % (RATE_TABLE, gf, unit, unit, TERMS, gf)
    )
    rules = [
        "%s lists every %s to charge and its detail file under `%s/`; a detail file gives the %s's %s and its usage "
        "lines, each with a `line` number and a %s in %s." % (INDEX, entity, detail_dir, entity, gf, nf, unit),
        versions_rule,
    ]
    if shape["dated"]:
        rules.append(
            "%s holds several versions of each %s's bands, each valid from its `effective_from` date: a line is "
            "priced with the latest version whose `effective_from` is on or before the line's `date`, so a line dated "
            "on an effective date takes the new version." % (RATE_TABLE, gf))
    rules += [
        "Every usage line is charged on its own: its banded charge, with the minimum charge and the surcharge of "
        "its %s applied in the order below; all charges are in credits." % gf,
    ] + rule_texts(d, cfg, "line's charge") + [
        "A %s whose %s has no rates in %s is still listed, with an empty `total_charge` (null in JSON)."
        % (entity, gf, RATE_TABLE),
        "`lines` is the number of the %s's usage lines that are charged (for a %s without rates: that would be "
        "charged); `total_charge` is the total of its line charges." % (entity, entity),
    ]
    if shape["dirty"]:
        rules += [
            "Only the %s listed in %s are charged; any other file in `%s/` is ignored." % (plural, INDEX, detail_dir),
            "A detail file is JSON (an object with `%s`, `%s` and a `lines` array) or CSV (one row per line, with the "
            "`%s` column; columns may come in any order)." % (idf, gf, gf),
            "Some detail files give the quantity as `%s_hundredths`, a whole number of hundredths of a %s: divide it "
            "by %d to get the %s in %s before choosing its band and pricing it." % (nf, unit, HUNDREDTHS, nf, unit),
            "A line with no %s (the field missing, null or empty) is skipped: it is neither charged nor counted." % nf,
            "A line whose `status` is `void` is skipped; a line with status `ok` or without a status is charged.",
        ]
        parameters["hundredths_divisor"] = HUNDREDTHS
    if shape["dated"]:
        rules.append("A line number that appears more than once in one detail file was corrected: only its last row "
                     "counts.")
    rules += out["rules"]
    contract = {
        "deliverable": {"paths": out["paths"], "format": fmt, "schema": out["schema"], "columns": columns},
        "rules": rules,
        "parameters": parameters,
        "labels": sorted(d["group_values"]),
    }
    instruction = (
        "%s lists the %s to charge and the detail file of each, under %s/. Price every usage line (%s, in %s) "
        "with the bands in %s and the terms in %s, total the charges of each %s, and write the result to %s. Follow "
        "the rules in CONTRACT.md exactly."
        % (INDEX, plural, detail_dir, d["numeric_label"], unit, RATE_TABLE, TERMS, entity, ", ".join(out["paths"]))
    )
    solution = python_oracle("rate_table_calculation", "charges", out["writer"], INDEX=INDEX, RATE_TABLE=RATE_TABLE,
                             TERMS=TERMS, DETAIL_DIR=detail_dir, ID=idf, GROUP=gf, VALUE=nf, HUNDREDTHS=HUNDREDTHS,
                             DATA=None, RATES=None, SURCHARGES=None, MINIMUM_CHARGE=None, **reading_values(cfg))
    return assemble(params, instruction, environment, contract, out["checks"], {"records": expected}, solution, fmt)


LEVELS = (level0, level1, level2) + numbered_levels(entity_level, (3, 4, 5))
build = family(__name__, LEVELS)
