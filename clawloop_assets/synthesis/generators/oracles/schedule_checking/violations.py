"""Oracle of schedule_checking levels 2-5: every violation of the schedule's
rules among its slots: `duplicate` and `overlap` (or, with CAPACITY,
`over_capacity` by a sweep in start order) pairs, `short_gap` pairs closer
than the turnaround, minutes `outside_hours`, and per entity and date a
`daily_max` total above DAILY_MAX_TEXT. Level 2 reads the slots from DATA
with one set of opening hours (OPEN to CLOSE, in minutes of the day) and
turnaround MIN_GAP; from level 3 INDEX names each entity's slot file and
the RULES table gives each resource's hours, turnaround (and capacity).
When DIRTY (levels 4-5) cancelled and repeated rows are skipped, some files
give full date-times, some values in hundredths (divided by SCALE), an
empty value adds nothing, and resource names are trimmed and lower-cased.
Written with write_deliverable. Runs in the workspace."""

import csv
import datetime
from decimal import Decimal

# ---- parameters (the generator writes the task's values here)
IDF = 'id'
GF = 'resource'
NF = 'value'
DATA = 'slots.csv'
OPEN = 480
CLOSE = 1080
MIN_GAP = 15
INDEX = None
RULES = None
CAPACITY = False
DIRTY = False
SCALE = None
DAILY_MAX_TEXT = '10.00'
# ---- end of parameters
DAILY_MAX = Decimal(DAILY_MAX_TEXT)

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def clock(hhmm):
    hours, minutes = hhmm.strip().split(':')
    return int(hours) * 60 + int(minutes)


def moment(day, hhmm):
    return datetime.date.fromisoformat(day.strip()).toordinal() * 1440 + clock(hhmm)


def stamp(text):
    moment_ = datetime.datetime.fromisoformat(text.strip())
    return moment_.date().toordinal() * 1440 + moment_.hour * 60 + moment_.minute


def times(row):
    """A slot's start and end in minutes: full date-times (`start_at`, `end_at`), or times of day on `date`."""
    if DIRTY and 'start_at' in row:
        return stamp(row['start_at']), stamp(row['end_at'])
    start, end = moment(row['date'], row['start']), moment(row['date'], row['end'])
    if end < start:
        end += 1440  # crosses midnight: ends on the next day
    return start, end


def norm(name):
    return name.strip().lower()


rules = {}
if RULES:
    with open(RULES, newline='') as f:
        for row in csv.DictReader(f):
            rule = {'open': clock(row['opens']), 'close': clock(row['closes']), 'gap': int(row['turnaround_min'])}
            if CAPACITY:
                rule['capacity'] = int(row['capacity'])
            rules[row[GF].strip().lower()] = rule


def rule_for(resource):
    """The opening hours and turnaround (and capacity) of a resource as a slot row names it."""
    if RULES:
        return rules[resource.strip().lower()]
    return {'open': OPEN, 'close': CLOSE, 'gap': MIN_GAP}


if INDEX:
    with open(INDEX, newline='') as f:
        files = {row['file']: row[IDF] for row in csv.DictReader(f)}
else:
    files = {DATA: None}  # one file, whose rows name their entity
seen = set()
slots = []
for path in sorted(files):
    entity = files[path]
    with open(path, newline='') as f:
        for row in csv.DictReader(f):
            if DIRTY:
                if row.get('status', 'booked').strip() != 'booked':
                    continue  # cancelled
                if row['slot_id'] in seen:
                    continue  # the same slot listed again
                seen.add(row['slot_id'])
                if NF + '_hundredths' in row:
                    text = row[NF + '_hundredths'].strip()
                    value = Decimal(text) / SCALE if text else None
                else:
                    text = row[NF].strip()
                    value = Decimal(text) if text else None
                if value is None:
                    value = Decimal(0)  # an empty value adds nothing to the daily total
                resource = norm(row[GF])
            else:
                value = Decimal(row[NF])
                resource = row[GF]
            start, end = times(row)
            slot = {'id': row['slot_id'], 'entity': entity or row[IDF], 'resource': resource, 'start': start,
                    'end': end, 'value': value}
            slot.update(rule_for(row[GF]))
            slots.append(slot)

result = []


def report(label, subject, related, value):
    result.append({'violation': label, 'subject': subject, 'related': related, 'value': value})


for a in slots:
    for b in slots:
        if a['resource'] != b['resource'] or not a['id'] < b['id']:
            continue
        first, second = a['id'], b['id']
        shared = min(a['end'], b['end']) - max(a['start'], b['start'])
        if (a['entity'], a['start'], a['end']) == (b['entity'], b['start'], b['end']):
            report('duplicate', first, second, shared)
        elif shared > 0:
            if not CAPACITY:  # with capacities, overlaps are judged by capacity below
                report('overlap', first, second, shared)
        elif -shared < a['gap']:
            report('short_gap', first, second, -shared)

if CAPACITY:
    lines = {}
    for s in sorted(slots, key=lambda s: (s['start'], s['id'])):
        lines.setdefault(s['resource'], []).append(s)
    for resource, line in sorted(lines.items()):
        for i, s in enumerate(line):
            running = sum(1 for t in line[:i] if t['end'] > s['start'])
            if running >= s['capacity']:
                report('over_capacity', s['id'], resource, running + 1)

for s in slots:
    inside = 0
    for day in range(s['start'] // 1440, s['end'] // 1440 + 1):
        inside += max(0, min(s['end'], day * 1440 + s['close']) - max(s['start'], day * 1440 + s['open']))
    outside = s['end'] - s['start'] - inside
    if outside > 0:
        report('outside_hours', s['id'], s['resource'], outside)
totals = {}
for s in slots:
    key = (s['entity'], s['start'] // 1440)
    totals[key] = totals.get(key, Decimal(0)) + s['value']
for (entity, day), total in sorted(totals.items()):
    if total > DAILY_MAX:
        report('daily_max', entity, datetime.date.fromordinal(day).isoformat(), total)
write_deliverable(result)
