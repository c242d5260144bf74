"""Oracle of log_analysis levels 3-5: the entries of the log files index.csv
lists (a repeated entry counted once, continuation lines skipped, three
timestamp forms when dirty) paired into runs per id and task, summarized per
component: runs, total minutes, overruns of its limit, ERROR entries and the
id of the longest run; with a WINDOW (level 5) only runs starting and errors
inside it count, and each component gets its mean value and alert status.
Written with write_deliverable. Runs in the workspace."""

import csv
import re
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
LIMITS = 'component_limits.csv'
GROUP = 'component'
VALUE = 'value'
TIMESTAMP = r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ'
WINDOW = None
THRESHOLD = None
MEAN = None
# ---- end of parameters
INDEX = 'index.csv'
LINE = re.compile(r'^(?P<ts>' + TIMESTAMP + r') (?P<level>DEBUG|INFO|WARN|ERROR) (?P<comp>[a-z]+) (?P<id>[A-Z]{2,4}-\d{4}) '
                  r'(?P<msg>.+?)(?: ' + VALUE + r'=(?P<value>\S+))?$')
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Without a window every moment is inside it.
START, END = datetime.min.replace(tzinfo=timezone.utc), datetime.max.replace(tzinfo=timezone.utc)
if WINDOW:
    START, END = (datetime.strptime(w, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=timezone.utc) for w in WINDOW)

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def moment(ts):
    if ts.isdigit():
        return EPOCH + timedelta(milliseconds=int(ts))
    if ts.endswith('Z'):
        return datetime.strptime(ts, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=timezone.utc)
    return datetime.strptime(ts, '%Y-%m-%d %H:%M:%S %z').astimezone(timezone.utc)


with open(INDEX, newline='') as handle:
    files = [row['log_file'] for row in csv.DictReader(handle)]
with open(LIMITS, newline='') as handle:
    limits = {row[GROUP]: int(row['limit_minutes']) for row in csv.DictReader(handle)}

entries = set()
for path in files:
    with open(path) as handle:
        for raw in handle.read().splitlines():
            if raw[:1].isspace():
                continue
            m = LINE.match(raw)
            if m is None:
                continue
            value = Decimal(m['value']) if m['value'] else None
            entries.add((moment(m['ts']), m['id'], m['level'], m['comp'], m['msg'], value))

runs, errors, comps, open_starts = [], {}, set(), {}
for t, ident, level, comp, msg, value in sorted(entries, key=lambda e: (e[1], e[0])):
    comps.add(comp)
    task, _, verb = msg.rpartition(' ')
    if level == 'ERROR' and START <= t < END:
        errors[comp] = errors.get(comp, 0) + 1
    if verb == 'started':
        open_starts[ident, task] = t
    elif verb == 'finished' and (ident, task) in open_starts:
        runs.append((comp, ident, open_starts.pop((ident, task)), t, value))

result = []
for comp in sorted(comps):
    mine = [r for r in runs if r[0] == comp and START <= r[2] < END]
    seconds = [int((r[3] - r[2]).total_seconds()) for r in mine]
    longest = min(mine, key=lambda r: (r[2] - r[3], r[1]))[1] if mine else None
    row = {GROUP: comp, 'runs': len(mine),
           'total_minutes': (Decimal(sum(seconds)) / 60).quantize(Decimal('0.01'), ROUND_HALF_UP),
           'overruns': sum(1 for s in seconds if s > limits[comp] * 60),
           'errors': errors.get(comp, 0), 'longest_id': longest}
    if MEAN:
        values = [r[4] for r in mine if r[4] is not None]
        row[MEAN] = (sum(values) / len(values)).quantize(Decimal('0.01'), ROUND_HALF_UP) if values else None
        row['status'] = 'alert' if row['errors'] >= THRESHOLD else 'ok'
    result.append(row)
write_deliverable(result)
