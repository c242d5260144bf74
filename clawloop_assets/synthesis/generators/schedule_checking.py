#!/usr/bin/env python3
"""Generator family `schedule_checking` (analysis track).

build(seed, params) -> task: slots (bookings) of the domain's entities on
resources named by the domain's group values (a start and an end, the
resource, the entity id, and the domain's numeric field per slot), scheduling
constraints, an instruction, the answer contract, the answer key computed from
the generated slots, and an oracle solution. Stdlib-only, with
generator_common.py beside it: it runs in the sandbox as
`python3 -I /generator/schedule_checking.py --params P --seed N --out /out`.

Levels: 0 = one shell step on slots.csv (the slots on one resource, how many
there are on one resource, the resources in use, the slot that starts first);
1 = the slots that overlap another on the same resource, or the slots outside
their resource's opening hours (a second file); 2 = every violation of stated
rules (overlap, short turnaround gap, duplicate booking, outside opening hours,
per-entity daily maximum of the numeric field) with the hidden decisions
planted: touching slots, a gap exactly at the minimum, a chain of short gaps,
a slot crossing midnight, inclusive opening hours, a daily total exactly at the
maximum, pairs reported once by id order, duplicates; the deliverable rotates
through JSON, CSV, one CSV per violation and a report with a JSON sidecar;
3 = the same rules over an index of entities and file names, one slot file per
entity, and a per-resource rules table (opening hours, turnaround); 4 = level 3
on dirty data: cancelled rows, a stale file the index does not list, files
without a status column, full date-times in some files, values in hundredths
in some files, empty values, resource names in mixed case and spaces, a
repeated row; 5 = level 4 with capacities per resource (over-capacity by a
sweep in start order, ties by id, duplicates counted) over a week of hundreds
of slots.
"""

import os
import sys
from datetime import date

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

DAY = 1440
LABELS = ["overlap", "short_gap", "duplicate", "outside_hours", "daily_max"]
CAPACITY_LABELS = ["over_capacity", "short_gap", "duplicate", "outside_hours", "daily_max"]
COLUMNS = ["violation", "subject", "related", "value"]
KEY = ["violation", "subject", "related"]
STEM = "violations"
WIDEST = 280  # minutes: no planted pair cluster spans more
HUNDREDTHS = 100


# ---- times

def clock(minute):
    return "%02d:%02d" % divmod(minute % DAY, 60)


def date_text(minute):
    return date.fromordinal(minute // DAY).isoformat()


def stamp_text(minute):
    return "%sT%s" % (date_text(minute), clock(minute))


def first_day(rng):
    return date(2024, rng.randint(1, 11), rng.randint(1, 18)).toordinal()


def length(rng, low=30, high=120):
    return rng.randrange(low, high + 5, 5)


def slot_ids(rng, domain, count):
    ids = ["%s-S%04d" % (domain["id_prefix"], n) for n in sorted(rng.sample(range(1, 10000), count))]
    rng.shuffle(ids)
    return ids


# ---- levels 0 and 1: small flat files

def simple_slots(rng, domain, resources, days, per_cell, overlaps=0, hours=None):
    """Slots on `resources` over `days` days, none touching and (but for
    `overlaps` planted pairs) none overlapping. With `hours` ({resource:
    (open, close)}) the slots keep clear of the opening and closing minute."""
    base = first_day(rng)
    drafts = []
    for resource in resources:
        for k in range(days):
            opens, closes = hours[resource] if hours else (7 * 60, 20 * 60)
            cursor = (base + k) * DAY + opens + rng.randrange(10, 70, 5)
            for _ in range(rng.randint(*per_cell)):
                start = cursor
                end = start + length(rng, 30, 90)
                drafts.append([resource, start, end])
                cursor = end + rng.randrange(20, 80, 5)
    for pair in rng.sample(range(len(drafts)), overlaps):
        resource, start, end = drafts[pair]
        drafts.append([resource, end - rng.randrange(5, end - start, 5), end + length(rng, 15, 60)])
    ids = slot_ids(rng, domain, len(drafts))
    entities = record_ids(rng, domain, max(4, len(drafts) // 3))
    return [{"id": ids[i], "entity": rng.choice(entities), "resource": r, "start": s, "end": e}
            for i, (r, s, e) in enumerate(drafts)]


def lines_contract(out, schema="one slot_id per line, in any order"):
    return {
        "deliverable": {"path": out, "format": "lines", "schema": schema},
        "rules": ["Write each value once, exactly as it appears in the data; blank lines and surrounding spaces are ignored."],
        "parameters": {},
        "labels": [],
    }


def level0(rng, seed, params):
    d = params["domain"]
    gf, idf = d["group_field"], d["id_field"]
    data = "slots.csv"
    resources = rng.sample(d["group_values"], rng.randint(3, 4))
    slots = simple_slots(rng, d, resources, 2, (1, 3))
    rng.shuffle(slots)
    # the first start is unique: move the earliest slot a little earlier
    earliest = min(slots, key=lambda s: (s["start"], s["id"]))
    earliest["start"] -= 5
    header = ["slot_id", idf, gf, "start", "end"]
    rows = [(s["id"], s["entity"], s["resource"], stamp_text(s["start"]), stamp_text(s["end"])) for s in slots]
    environment = {data: csv_text(header, rows)}
    target = rng.choice(resources)
    variant = level0_variant(seed)
    if variant == 0:
        out = "count.txt"
        value = sum(1 for s in slots if s["resource"] == target)
        instruction = "Write how many slots in %s are booked on the %s %s to %s." % (data, gf, target, out)
        check = {"type": "number", "name": "slots on %s" % target, "path": out, "expected": value, "tolerance": 0}
        contract = lines_contract(out, "a single integer")
        contract["deliverable"]["format"] = "number"
        contract["rules"] = ["Surrounding whitespace in %s is ignored; write nothing else into it." % out]
        solution = "grep -c ',%s,' %s > %s" % (target, data, out)
    elif variant == 1:
        out = "in_use.txt"
        value = sorted(set(resources))
        instruction = "Write each %s that has a slot in %s to %s, one per line, without repeats." % (gf, data, out)
        check = {"type": "lines", "name": "%s values in use" % gf, "path": out, "expected": value, "ordered": False}
        contract = lines_contract(out, "one %s per line, in any order" % gf)
        solution = "cut -d, -f3 %s | sed 1d | sort -u > %s" % (data, out)
    elif variant == 2:
        out = "booked.txt"
        value = sorted(s["id"] for s in slots if s["resource"] == target)
        instruction = "Write the slot_id of every slot in %s booked on the %s %s to %s, one per line." % (data, gf, target, out)
        check = {"type": "lines", "name": "slots on %s" % target, "path": out, "expected": value, "ordered": False}
        contract = lines_contract(out)
        solution = "grep ',%s,' %s | cut -d, -f1 > %s" % (target, data, out)
    else:
        out = "first.txt"
        value = earliest["id"]
        instruction = "Write the slot_id of the slot in %s that starts first to %s." % (data, out)
        check = {"type": "text", "name": "first slot", "path": out, "expected": value}
        contract = lines_contract(out, "one slot_id")
        contract["deliverable"]["format"] = "text"
        contract["rules"] = ["Surrounding whitespace in %s is ignored; write nothing else into it." % out]
        solution = "sort -t, -k4 %s | head -n1 | cut -d, -f1 > %s" % (data, out)
    instruction += " Its columns are slot_id, %s, %s, start and end." % (idf, gf)
    return assemble(params, instruction, environment, contract, [check], {out: value}, solution, check["type"])


def level1(rng, seed, params):
    d = params["domain"]
    gf, idf = d["group_field"], d["id_field"]
    data = d["record_file"] + "_slots.csv"
    resources = rng.sample(d["group_values"], rng.randint(3, 4))
    if seed % 2 == 0:
        out = "overlapping.txt"
        slots = simple_slots(rng, d, resources, 2, (2, 3), overlaps=rng.randint(2, 3))
        rng.shuffle(slots)
        expected = sorted({a["id"] for a in slots for b in slots if a is not b and a["resource"] == b["resource"]
                           and a["start"] < b["end"] and b["start"] < a["end"]})
        header = ["slot_id", idf, gf, "start", "end"]
        rows = [(s["id"], s["entity"], s["resource"], stamp_text(s["start"]), stamp_text(s["end"])) for s in slots]
        environment = {data: csv_text(header, rows)}
        instruction = (
            "%s lists slots booked for %s, with columns %s; start and end are date-times. Write the slot_id of every "
            "slot that overlaps at least one other slot on the same %s to %s, one per line."
            % (data, d["entity_plural"], ", ".join(header), gf, out)
        )
        solution = python_oracle("schedule_checking", "overlaps", DATA=data, GROUP=gf, OUT=out)
    else:
        out = "outside_hours.txt"
        hours_file = gf + "_hours.csv"
        hours = {r: (rng.choice([6, 7, 8]) * 60 + rng.choice([0, 30]), rng.choice([17, 18, 19, 20]) * 60) for r in resources}
        slots = simple_slots(rng, d, resources, 2, (1, 2), hours=hours)
        early, late = rng.sample(slots, 2)
        opens = early["start"] // DAY * DAY + hours[early["resource"]][0]
        early["start"], early["end"] = opens - rng.randrange(10, 90, 5), opens + rng.randrange(10, 60, 5)
        closes = late["start"] // DAY * DAY + hours[late["resource"]][1]
        late["start"], late["end"] = closes - rng.randrange(20, 90, 5), closes + rng.randrange(10, 90, 5)
        for s in slots:
            if s is not late and s["end"] >= s["end"] // DAY * DAY + hours[s["resource"]][1]:
                s["end"] = s["end"] // DAY * DAY + hours[s["resource"]][1] - rng.randrange(5, 30, 5)
                s["start"] = min(s["start"], s["end"] - 15)
        rng.shuffle(slots)
        expected = sorted(s["id"] for s in slots if clock(s["start"]) < clock(hours[s["resource"]][0])
                          or clock(s["end"]) > clock(hours[s["resource"]][1]))
        header = ["slot_id", idf, gf, "date", "start", "end"]
        rows = [(s["id"], s["entity"], s["resource"], date_text(s["start"]), clock(s["start"]), clock(s["end"]))
                for s in slots]
        listed = sorted(resources + rng.sample([g for g in d["group_values"] if g not in resources], 1))
        environment = {
            data: csv_text(header, rows),
            hours_file: csv_text([gf, "opens", "closes"], [(r, clock(hours[r][0]), clock(hours[r][1])) if r in hours
                                                            else (r, "08:00", "18:00") for r in listed]),
        }
        instruction = (
            "%s lists slots booked for %s, with columns %s (times are HH:MM). %s gives the opening hours of each %s "
            "(columns %s, opens, closes). Write the slot_id of every slot that starts before its %s opens or ends "
            "after it closes to %s, one per line." % (data, d["entity_plural"], ", ".join(header), hours_file, gf, gf,
                                                       gf, out)
        )
        solution = (
            "awk -F, 'NR == FNR { o[$1] = $2; c[$1] = $3; next } FNR > 1 && ($5 < o[$3] || $6 > c[$3]) { print $1 }'"
            " %s %s > %s" % (hours_file, data, out)
        )
    check = {"type": "lines", "name": "slot ids in %s" % out, "path": out, "expected": expected, "ordered": False}
    return assemble(params, instruction, environment, lines_contract(out), [check], {out: expected}, solution, "lines")


# ---- levels 2 to 5: a planned week of slots with planted cases

class Planner:
    """Lays clusters of slots out per (resource, day) cell: anchored clusters
    at opening (head) or closing (tail) time, free ones in between, every
    cluster at least `buffer` minutes (more than any turnaround) away from the
    next, so only the planted cases interact."""

    def __init__(self, rng, base, days, rules, buffer):
        self.rng, self.base, self.days, self.rules, self.buffer = rng, base, days, rules, buffer
        self.cells = {(r, k): {"head": None, "tail": None, "middle": []} for r in sorted(rules) for k in range(days)}

    def bounds(self, key):
        rule, cell = self.rules[key[0]], self.cells[key]
        lo, hi = rule["open"], rule["close"]
        if cell["head"]:
            lo = max(lo, rule["open"] + max(s["e"] for s in cell["head"]) + self.buffer)
        if cell["tail"]:
            hi = min(hi, rule["close"] + min(s["s"] for s in cell["tail"]) - self.buffer)
        return lo, hi

    def fits(self, key, span=None):
        lo, hi = self.bounds(key)
        spans = [cluster_span(c) for c in self.cells[key]["middle"]] + ([span] if span is not None else [])
        return sum(spans) + self.buffer * max(0, len(spans) - 1) <= hi - lo

    def keys(self, resources, days):
        return [key for key in sorted(self.cells) if key[0] in resources and key[1] in days]

    def anchor(self, where, cluster, resources, days):
        keys = [k for k in self.keys(resources, days) if self.cells[k][where] is None]
        rng_keys = [k for k in keys if self._anchor_fits(k, where, cluster)]
        key = self.rng.choice(rng_keys)
        self.cells[key][where] = cluster
        return key

    def _anchor_fits(self, key, where, cluster):
        self.cells[key][where] = cluster
        ok = self.fits(key)
        self.cells[key][where] = None
        return ok

    def middle_key(self, span, resources, days):
        return self.rng.choice([k for k in self.keys(resources, days) if self.fits(k, span)])

    def middle(self, cluster, resources, days):
        key = self.middle_key(cluster_span(cluster), resources, days)
        self.cells[key]["middle"].append(cluster)
        return key

    def lay_out(self):
        """Absolute start and end for every draft; returns the drafts."""
        placed = []
        for key in sorted(self.cells):
            resource, k = key
            rule, cell = self.rules[resource], self.cells[key]
            day = (self.base + k) * DAY
            for where, anchor in (("head", rule["open"]), ("tail", rule["close"])):
                for s in cell[where] or []:
                    s.update(start=day + anchor + s["s"], end=day + anchor + s["e"], resource=resource)
                    placed.append(s)
            lo, hi = self.bounds(key)
            clusters = list(cell["middle"])
            self.rng.shuffle(clusters)
            free = (hi - lo - sum(cluster_span(c) for c in clusters) - self.buffer * max(0, len(clusters) - 1)) // 5
            cuts = sorted(self.rng.randint(0, free) for _ in range(len(clusters)))
            cursor, previous = day + lo, 0
            for cut, cluster in zip(cuts, clusters):
                cursor += (cut - previous) * 5
                previous = cut
                for s in cluster:
                    s.update(start=cursor + s["s"], end=cursor + s["e"], resource=resource)
                    placed.append(s)
                cursor += cluster_span(cluster) + self.buffer
        return placed


def cluster_span(cluster):
    return max(s["e"] for s in cluster) - min(s["s"] for s in cluster)


def draft(s, e, **extra):
    item = {"s": s, "e": e, "entity": None, "cents": None, "cancelled": False, "stale": False, "repeated": False,
            "missing": False, "dirty": False, "statusless": False, "iso": False, "hundredths": False, "must_hhmm": False,
            "first_larger": False, "scenario": None}
    item.update(extra)
    return item


def pair_cluster(rng, kind, gap):
    """Two or three slots whose relation is the planted case `kind`."""
    a, b = length(rng), length(rng)
    if kind == "touching":
        return [draft(0, a, first_larger=True), draft(a, a + b)]
    if kind == "exact_gap":
        return [draft(0, a), draft(a + gap, a + gap + b)]
    if kind == "short":
        g = rng.randrange(5, gap, 5)
        return [draft(0, a), draft(a + g, a + g + b)]
    if kind in ("overlap", "cancelled", "stale"):
        a, b = length(rng, 40), length(rng, 40)
        shared = rng.randrange(5, min(a, b), 5)
        second = draft(a - shared, a - shared + b, cancelled=kind == "cancelled", stale=kind == "stale")
        return [draft(0, a), second]
    if kind == "duplicate":
        return [draft(0, a), draft(0, a)]
    if kind == "chain":
        total = rng.randrange(5, gap, 5)  # the gap from the first to the third slot, under the minimum
        g1 = rng.randrange(0, total - 4, 5)
        g2 = total - 5 - g1
        return [draft(0, a), draft(a + g1, a + g1 + 5), draft(a + g1 + 5 + g2, a + g1 + 5 + g2 + b)]
    if kind == "tie":
        while b == a:
            b = length(rng)
        return [draft(0, a), draft(0, b)]
    if kind == "triple":
        a = length(rng, 60, 120)
        sb = rng.randrange(5, a - 20, 5)
        eb = sb + length(rng, 40, 90)
        sc = rng.randrange(sb + 5, min(a, eb), 5)
        return [draft(0, a), draft(sb, eb), draft(sc, sc + length(rng, 20, 60))]
    raise ValueError(kind)


def anchored(rng, kind):
    if kind == "at_open":
        return [draft(0, length(rng))]
    if kind == "before_open":
        return [draft(-rng.randrange(15, 95, 5), rng.randrange(10, 65, 5))]
    if kind == "at_close":
        return [draft(-length(rng), 0)]
    if kind == "after_close":
        return [draft(-rng.randrange(10, 65, 5), rng.randrange(15, 95, 5))]
    raise ValueError(kind)


class World:
    """The planned slots of one task, their files' schemas, and the gold answer."""

    def __init__(self, rng, d, level):
        self.rng, self.d, self.level = rng, d, level
        self.capacity = level >= 5
        self.dirty = level >= 4
        lo, hi = cents_range(d)
        self.lo, self.hi = lo, hi
        self.daily_max = lo + hi
        days = {2: 3, 3: 4, 4: 5, 5: 7}[level]
        self.base = first_day(rng)
        resources = sorted(rng.sample(d["group_values"], 4 if level < 5 else 5))
        self.listed = sorted(d["group_values"])  # the rules table lists every value
        if level == 2:
            rule = {"open": rng.choice([6, 7, 8]) * 60, "close": rng.choice([18, 19, 20, 21]) * 60,
                    "gap": rng.choice([15, 20, 25, 30]), "capacity": 1}
            self.rules = {r: dict(rule) for r in self.listed}
        else:
            self.rules = {r: {"open": rng.choice([360, 390, 420, 450, 480]), "close": rng.choice([1080, 1110, 1140, 1200, 1260]),
                              "gap": rng.choice([10, 15, 20, 25, 30]), "capacity": 1} for r in self.listed}
        if self.capacity:
            for r in rng.sample(resources, rng.randint(1, 2)):
                self.rules[r]["capacity"] = 2
        single = [r for r in resources if self.rules[r]["capacity"] == 1]
        double = [r for r in resources if self.rules[r]["capacity"] == 2]
        planner = Planner(rng, self.base, days, {r: self.rules[r] for r in resources}, 40)
        every_day = list(range(days))
        pool_size = {2: 9, 3: 11, 4: 13, 5: 40}[level]
        times = 2 if level == 5 else 1
        dedicated = 3 * times
        entities = record_ids(rng, d, pool_size + dedicated + 1)
        rng.shuffle(entities)
        self.stale_entity = entities.pop()
        exact_entities, over_entities, cross_entities = (entities[:times], entities[times:2 * times],
                                                         entities[2 * times:3 * times])
        self.pool = sorted(entities[dedicated:])
        self.entities = sorted(entities)

        def pick(cluster):
            for s in cluster:
                s["entity"] = rng.choice(self.pool)
            return cluster

        # Planted pair cases. Under capacities the pairs that overlap or touch
        # sit on capacity-one resources, where they decide the answer.
        kinds = ["touching", "exact_gap", "short", "overlap", "duplicate", "chain"]
        if level >= 3:
            kinds += ["overlap"]
        if self.dirty:
            kinds += ["cancelled", "stale"]
        if self.capacity:
            kinds += ["touching", "exact_gap", "short", "overlap", "tie", "triple"]
        self.planted = {}
        on_single = ("touching", "overlap", "duplicate", "cancelled", "stale", "tie")
        for kind in kinds:
            on = double if kind == "triple" else (single if kind in on_single else resources)
            key = planner.middle_key(WIDEST, on, every_day)
            cluster = pick(pair_cluster(rng, kind, self.rules[key[0]]["gap"]))
            for s in cluster:
                s["scenario"] = kind
            if kind == "duplicate":
                cluster[1]["entity"] = cluster[0]["entity"]
            if kind == "stale":
                cluster[1]["entity"] = self.stale_entity
            planner.cells[key]["middle"].append(cluster)
            self.planted.setdefault(kind, []).append(cluster)
        # Anchored cases at opening and closing time.
        for kind in ["at_open", "before_open"] * times:
            cluster = pick(anchored(rng, kind))
            cluster[0]["scenario"] = kind
            planner.anchor("head", cluster, resources, every_day)
        for kind in ["at_close", "after_close"] * times:
            cluster = pick(anchored(rng, kind))
            cluster[0]["scenario"] = kind
            planner.anchor("tail", cluster, resources, every_day)
        # Daily totals: exactly at the maximum, above it, and above it only
        # through a slot that crosses midnight (counted on its start date).
        D = self.daily_max
        for entity in exact_entities:
            a = rng.randint(lo, hi)
            day = rng.randrange(days)
            for n, cents in enumerate([a, D - a]):
                s = draft(0, length(rng), entity=entity, cents=cents, scenario="daily_exact", hundredths=True,
                          repeated=self.dirty and n == 0)
                planner.middle([s], resources, [day])
        for entity in over_entities:
            k = rng.randint(1, hi - lo)
            a = rng.randint(lo + k, hi)
            day = rng.randrange(days)
            for cents in [a, D + k - a]:
                s = draft(0, length(rng), entity=entity, cents=cents, scenario="daily_over", iso=self.dirty)
                planner.middle([s], resources, [day])
        for entity in cross_entities:
            x = rng.randint(lo + 1, hi)
            c = rng.randint(D - x + 1, hi)
            day = rng.randrange(days - 1)
            start = rng.randrange(22 * 60, 23 * 60 + 35, 5)
            end = DAY + rng.randrange(30, 95, 5)
            cross = draft(0, 0, entity=entity, cents=c, scenario="crossing", must_hhmm=True)
            keys = [k for k in planner.keys(resources, [day]) if planner.cells[k]["tail"] is None]
            key = rng.choice(keys)
            close = self.rules[key[0]]["close"]
            cross.update(s=start - close, e=end - close)
            planner.cells[key]["tail"] = [cross]
            planner.middle([draft(0, length(rng), entity=entity, cents=x, scenario="daily_cross")], resources, [day])
        # Background: clear of everything else, one to a few per cell.
        per_cell = {2: (1, 2), 3: (1, 2), 4: (1, 3), 5: (4, 6)}[level]
        for key in sorted(planner.cells):
            for _ in range(rng.randint(*per_cell)):
                s = draft(0, length(rng, 20, 90) if level == 5 else length(rng), entity=rng.choice(self.pool))
                if planner.fits(key, s["e"]):
                    planner.cells[key]["middle"].append([s])
        self.slots = planner.lay_out()
        for s in self.slots:
            if s["cents"] is None:
                # the lower half of the range: two such slots stay within the daily maximum
                s["cents"] = rng.randint(lo, (lo + hi) // 2)
        # Ids: the earlier of a touching pair gets the larger id, so "by id"
        # and "by start" name the pair differently.
        ids = slot_ids(rng, d, len(self.slots))
        for s, i in zip(self.slots, ids):
            s["id"] = i
        for cluster in self.planted.get("touching", []):
            first, second = cluster
            if first["id"] < second["id"]:
                first["id"], second["id"] = second["id"], first["id"]
        if self.dirty:
            self.plant_dirt()

    def plant_dirt(self):
        rng = self.rng
        overlap = self.planted["overlap"][0]
        overlap[1]["missing"] = True  # an empty value on a slot that still overlaps
        for s in self.slots:
            if rng.random() < 0.12:
                s["dirty"] = True
            if not s["scenario"] and rng.random() < 0.05:
                s["missing"] = True
        # a resource name written otherwise on one slot of a touching pair, the other written plainly
        touching = self.planted["touching"][0]
        touching[0]["dirty"], touching[1]["dirty"] = True, False
        # files: the first overlap's entity has no status column, so none of its rows may be cancelled
        self.statusless = {overlap[0]["entity"]}
        for cluster in self.planted["cancelled"]:
            cancelled = cluster[1]
            if cancelled["entity"] in self.statusless:
                cancelled["entity"] = rng.choice([e for e in self.pool if e not in self.statusless])
        holders = sorted({s["entity"] for s in self.slots if s["cancelled"]})
        for entity in self.pool:
            if entity not in holders and rng.random() < 0.2:
                self.statusless.add(entity)
        forced_iso = {s["entity"] for s in self.slots if s["iso"]}
        forced_hhmm = {s["entity"] for s in self.slots if s["must_hhmm"]}
        forced_hundredths = {s["entity"] for s in self.slots if s["hundredths"]}
        self.iso = {e for e in self.entities if e in forced_iso or (e not in forced_hhmm and rng.random() < 0.3)}
        self.hundredths = {e for e in self.entities if e in forced_hundredths or rng.random() < 0.25}

    def labels(self):
        return CAPACITY_LABELS if self.capacity else LABELS

    # -- the answer

    def live(self):
        return [s for s in self.slots if not s["cancelled"] and not s["stale"]]

    def gold(self):
        slots = self.live()
        found = []
        for a in slots:
            for b in slots:
                if a["resource"] != b["resource"] or not a["id"] < b["id"]:
                    continue
                shared = min(a["end"], b["end"]) - max(a["start"], b["start"])
                gap = self.rules[a["resource"]]["gap"]
                if (a["entity"], a["start"], a["end"]) == (b["entity"], b["start"], b["end"]):
                    found.append(("duplicate", a["id"], b["id"], shared))
                elif shared > 0:
                    if not self.capacity:
                        found.append(("overlap", a["id"], b["id"], shared))
                elif -shared < gap:
                    found.append(("short_gap", a["id"], b["id"], -shared))
        if self.capacity:
            lines = {}
            for s in sorted(slots, key=lambda s: (s["start"], s["id"])):
                lines.setdefault(s["resource"], []).append(s)
            for resource, line in sorted(lines.items()):
                for i, s in enumerate(line):
                    running = sum(1 for t in line[:i] if t["end"] > s["start"])
                    if running >= self.rules[resource]["capacity"]:
                        found.append(("over_capacity", s["id"], resource, running + 1))
        for s in slots:
            rule = self.rules[s["resource"]]
            inside = 0
            for day in range(s["start"] // DAY, s["end"] // DAY + 1):
                inside += max(0, min(s["end"], day * DAY + rule["close"]) - max(s["start"], day * DAY + rule["open"]))
            outside = s["end"] - s["start"] - inside
            if outside > 0:
                found.append(("outside_hours", s["id"], s["resource"], outside))
        totals = {}
        for s in slots:
            key = (s["entity"], s["start"] // DAY)
            totals[key] = totals.get(key, 0) + (0 if s["missing"] else s["cents"])
        for (entity, day), total in sorted(totals.items()):
            if total > self.daily_max:
                found.append(("daily_max", entity, date.fromordinal(day).isoformat(), float(decimal_text(total))))
        records = [dict(zip(COLUMNS, v)) for v in found]
        return sorted(records, key=lambda r: (r["violation"], r["subject"], r["related"]))

    # -- files

    def flat_file(self):
        d = self.d
        header = ["slot_id", d["id_field"], d["group_field"], "date", "start", "end", d["numeric_field"]]
        slots = list(self.slots)
        self.rng.shuffle(slots)
        rows = [(s["id"], s["entity"], s["resource"], date_text(s["start"]), clock(s["start"]), clock(s["end"]),
                 decimal_text(s["cents"])) for s in slots]
        return csv_text(header, rows)

    def rules_file(self):
        header = [self.d["group_field"], "opens", "closes", "turnaround_min"] + (["capacity"] if self.capacity else [])
        rows = []
        for r in self.listed:
            rule = self.rules[r]
            rows.append([r, clock(rule["open"]), clock(rule["close"]), rule["gap"]] + ([rule["capacity"]] if self.capacity else []))
        return csv_text(header, rows)

    def detail_files(self, folder):
        """{path: text} of one slot file per entity (plus a stale one when
        dirty), and the index rows (entity, path)."""
        rng, d = self.rng, self.d
        gf, nf = d["group_field"], d["numeric_field"]
        entities = list(self.entities)
        numbers = rng.sample(range(1, 100), len(entities) + 1)
        paths = {e: "%s/sheet_%02d.csv" % (folder, n) for e, n in zip(entities, numbers)}
        stale_path = "%s/sheet_%02d.csv" % (folder, numbers[-1])
        by_entity = {}
        for s in self.slots:
            owner = stale_path if s["stale"] else paths[s["entity"]]
            by_entity.setdefault(owner, []).append(s)
        files = {}
        for e in entities + ([None] if self.dirty else []):
            path = paths[e] if e else stale_path
            slots = by_entity.get(path, [])
            iso = self.dirty and e in self.iso
            hundredths = self.dirty and e in self.hundredths
            status = self.dirty and e not in self.statusless
            header = ["slot_id", gf] + (["start_at", "end_at"] if iso else ["date", "start", "end"])
            header += [nf + "_hundredths" if hundredths else nf] + (["status"] if status else [])
            rows = []
            for s in slots:
                name = s["resource"]
                if s["dirty"]:
                    name = rng.choice([name.upper(), name.capitalize(), " " + name, name + " ", " " + name.capitalize()])
                row = [s["id"], name]
                row += [stamp_text(s["start"]), stamp_text(s["end"])] if iso else [
                    date_text(s["start"]), clock(s["start"]), clock(s["end"])]
                if s["missing"]:
                    row.append("")
                else:
                    row.append(str(s["cents"]) if hundredths else decimal_text(s["cents"]))
                if status:
                    row.append("cancelled" if s["cancelled"] else "booked")
                rows.append(row)
                if s["repeated"]:
                    rows.append(list(row))
            rng.shuffle(rows)
            files[path] = csv_text(header, rows)
        index = [(e, paths[e]) for e in entities]
        rng.shuffle(index)
        return files, index


# ---- the oracle

def oracle(world, names, writer):
    """The oracle of levels 2-5 (oracles/schedule_checking/violations.py): one file and one set of hours and
    turnaround at level 2, an index and a rules table from level 3."""
    flat = world.level == 2
    rule = world.rules[world.listed[0]]
    return python_oracle(
        "schedule_checking", "violations", writer, IDF=names["idf"], GF=names["gf"], NF=names["nf"],
        DATA=names["data"] if flat else None, OPEN=rule["open"] if flat else None,
        CLOSE=rule["close"] if flat else None, MIN_GAP=rule["gap"] if flat else None,
        INDEX=None if flat else names["index"], RULES=None if flat else names["rules"], CAPACITY=world.capacity,
        DIRTY=world.dirty, SCALE=HUNDREDTHS if world.dirty else None, DAILY_MAX_TEXT=decimal_text(world.daily_max))


# ---- the contract

def contract_rules(world, names):
    d, level = world.d, world.level
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    rules = []
    time_rule = ("`start` and `end` are times of day (HH:MM) on `date`; a slot whose `end` is earlier than its `start` "
                 "crosses midnight and ends at that time on the next day.")
    if world.dirty:
        time_rule += (" Files with `start_at` and `end_at` columns give full date-times (YYYY-MM-DDTHH:MM) instead of "
                      "`date`, `start` and `end`.")
    rules.append(time_rule)
    if level >= 3:
        rules.append("%s maps each %s to the one file that holds its slots; every slot in that file belongs to that %s."
                     % (names["index"], idf, idf))
    if world.dirty:
        rules += [
            "Only the files listed in %s are read; any other file is stale and ignored." % names["index"],
            "Rows whose `status` is `cancelled` are ignored; a file without a `status` column holds only booked slots.",
            "A `slot_id` listed on several identical rows is one slot.",
            "%s names are compared after trimming surrounding spaces and ignoring letter case; write them in lower case."
            % gf,
            "Files with a `%s_hundredths` column instead of `%s` give the %s in hundredths of a %s: divide by %d."
            % (nf, nf, d["numeric_label"], d["unit"], HUNDREDTHS),
            "A slot with an empty `%s` (or `%s_hundredths`) adds nothing to the daily total but is still checked "
            "against every other rule." % (nf, nf),
        ]
    rules.append("Slots are half-open intervals from start to end: two slots on the same %s overlap when they share at "
                 "least one minute; a slot that ends exactly when another starts does not overlap it." % gf)
    if world.capacity:
        rules.append(
            "Each %s holds at most `capacity` slots at a time (from %s). Take the slots of one %s in order of start, ties "
            "by `slot_id` in text order: a slot is `over_capacity` when, at its start, at least `capacity` slots earlier "
            "in that order are still running (a slot that ends exactly at that start no longer runs). `subject`: its "
            "`slot_id`, `related`: the %s, `value`: the number of slots running at its start, itself included. There "
            "is no separate overlap violation." % (gf, names["rules"], gf, gf))
    else:
        rules.append("Two overlapping slots on the same %s are an `overlap`; `value`: the minutes they share." % gf)
    duplicate = ("Two slots on the same %s with different `slot_id` but the same %s, start and end are a `duplicate` "
                 "(`value`: the minutes they share) and nothing else between them" % (gf, idf))
    duplicate += "; both still count toward the capacity." if world.capacity else " (not also an `overlap`)."
    rules.append(duplicate)
    turnaround = ("%d minutes" % world.rules[world.listed[0]]["gap"] if level == 2
                  else "the `turnaround_min` of that %s in %s" % (gf, names["rules"]))
    rules.append(
        "Two slots on the same %s that do not overlap need a gap (the later start minus the earlier end) of at least "
        "%s: a smaller gap, zero included, is a `short_gap` with the gap in minutes as `value`; a gap of exactly the "
        "minimum is allowed. Every such pair counts, not only slots next to each other." % (gf, turnaround))
    rules.append("A violation between two slots is reported once: `subject` is the smaller `slot_id` and `related` the "
                 "larger one (compared as text).")
    if level == 2:
        rule = world.rules[world.listed[0]]
        hours = "Opening hours are %s to %s every day" % (clock(rule["open"]), clock(rule["close"]))
    else:
        hours = "Each %s is open every day from its `opens` to its `closes` time in %s" % (gf, names["rules"])
    rules.append(
        "%s. Opening hours include both ends: a slot may start exactly at opening time and end exactly at closing "
        "time. A slot with any minute outside opening hours is `outside_hours` (`subject`: its `slot_id`, `related`: "
        "its %s, `value`: its minutes outside opening hours on every day it touches, so a slot crossing midnight also "
        "counts its minutes after midnight)." % (hours, gf))
    dmax = decimal_text(world.daily_max)
    rules.append(
        "For each %s and date, the %s (`%s`, %s) of its slots that start on that date is summed, a slot crossing "
        "midnight counting on the date it starts; a total above %s %s is a `daily_max` (`subject`: the %s, `related`: "
        "the date as YYYY-MM-DD, `value`: the exact total). A total of exactly %s is allowed."
        % (d["entity"], d["numeric_label"], nf, d["unit"], dmax, d["unit"], idf, dmax))
    rules.append("Report every violation as one record and nothing else; `violation` is one of %s."
                 % ", ".join("`%s`" % label for label in world.labels()))
    return rules


def advanced(rng, seed, params, level):
    d = params["domain"]
    gf, idf, nf = d["group_field"], d["id_field"], d["numeric_field"]
    world = World(rng, d, level)
    expected = world.gold()
    fmt = deliverable_format(seed)
    labels = world.labels()
    dv = records_deliverable(fmt, STEM, KEY, COLUMNS, expected, number_tolerance=0.001, split_column="violation",
                             split_values=labels)
    names = {"idf": idf, "gf": gf, "nf": nf}
    environment = {}
    if level == 2:
        names["data"] = d["record_file"] + "_slots.csv"
        environment[names["data"]] = world.flat_file()
        where = (
            "%s lists the slots booked for %s, one per row: `slot_id`, the %s (`%s`), the %s it is booked on (`%s`), "
            "its `date`, `start` and `end` times, and the %s (`%s`, %s)."
            % (names["data"], d["entity_plural"], d["entity"], idf, gf, gf, d["numeric_label"], nf, d["unit"])
        )
    else:
        names["index"] = d["record_file"] + "_index.csv"
        names["rules"] = gf + "_rules.csv"
        files, index = world.detail_files(d["record_file"])
        environment.update(files)
        environment[names["index"]] = csv_text([idf, "file"], index)
        environment[names["rules"]] = world.rules_file()
        where = (
            "The slots booked for %s are spread over one file per %s in %s/; %s tells which file holds which %s "
            "(columns `%s`, `file`). Each slot has a `slot_id`, the %s it is booked on (`%s`), its times and the %s "
            "(`%s`, %s). %s gives each %s's opening hours (`opens`, `closes`), minimum turnaround in minutes "
            "(`turnaround_min`)%s."
            % (d["entity_plural"], d["entity"], d["record_file"], names["index"], d["entity"], idf, gf, gf,
               d["numeric_label"], nf, d["unit"], names["rules"], gf,
               " and `capacity`" if world.capacity else "")
        )
    rules = contract_rules(world, names) + dv["rules"]
    parameters = {"daily_max": float(decimal_text(world.daily_max)), "tolerance": 0.001}
    if level == 2:
        rule = world.rules[world.listed[0]]
        parameters.update(opening_hour=rule["open"] // 60, closing_hour=rule["close"] // 60, min_gap_minutes=rule["gap"])
    if world.dirty:
        parameters["hundredths_per_unit"] = HUNDREDTHS
    deliverable = {"paths": dv["paths"], "format": fmt, "schema": dv["schema"], "columns": COLUMNS}
    if len(dv["paths"]) == 1:
        deliverable["path"] = dv["paths"][0]
    contract = {"deliverable": deliverable, "rules": rules, "parameters": parameters, "labels": list(labels)}
    if fmt == "files":
        target = "the directory %s/ (one CSV per violation label)" % STEM
    else:
        target = " and ".join(dv["paths"])
    instruction = (
        "%s Check the schedule against the constraints in CONTRACT.md (overlaps, turnaround gaps, duplicate bookings, "
        "opening hours, the daily maximum of %s per %s%s) and list every violation in %s, following the contract "
        "exactly." % (where, d["numeric_label"], d["entity"], ", capacities" if world.capacity else "", target)
    )
    solution = oracle(world, names, dv["writer"])
    return assemble(params, instruction, environment, contract, dv["checks"], {STEM: expected}, solution, fmt)


LEVELS = (level0, level1) + numbered_levels(advanced, (2, 3, 4, 5))
build = family(__name__, LEVELS)
