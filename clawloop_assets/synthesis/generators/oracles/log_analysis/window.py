"""Oracle of log_analysis level 2: the entries of FILES (a repeated line
counted once) inside the window from START (inclusive) to END (exclusive),
summarized per component: its ERROR entries, the earliest one's id, the mean
value (halves rounded up) and the alert status. Written with
write_deliverable. Runs in the workspace."""

import re
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
FILES = ['app.log.1', 'app.log']
GROUP = 'component'
VALUE = 'value'
MEAN = 'mean_value'
THRESHOLD = 3
WINDOW_START = '2024-01-01T00:00:00Z'
WINDOW_END = '2024-01-02T00:00:00Z'
# ---- end of parameters
START = datetime.strptime(WINDOW_START, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=timezone.utc)
END = datetime.strptime(WINDOW_END, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=timezone.utc)
LINE = re.compile(r'^(\S+) (DEBUG|INFO|WARN|ERROR) ([a-z]+) ([A-Z]{2,4}-\d{4}) (.+) ' + VALUE + r'=(\d+\.\d+)$')

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


seen, stats = set(), {}
for path in FILES:
    with open(path) as handle:
        for line in handle.read().splitlines():
            if line in seen:
                continue
            seen.add(line)
            m = LINE.match(line)
            if m is None:
                continue
            t = datetime.strptime(m.group(1), '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=timezone.utc)
            if not START <= t < END:
                continue
            s = stats.setdefault(m.group(3), {'errors': [], 'values': []})
            if m.group(2) == 'ERROR':
                s['errors'].append((t, m.group(4)))
            if m.group(6):
                s['values'].append(Decimal(m.group(6)))

result = []
for comp in sorted(stats):
    s = stats[comp]
    n = len(s['errors'])
    first = min(s['errors'], key=lambda e: (e[0], e[1]))[1] if s['errors'] else None
    mean = (sum(s['values']) / len(s['values'])).quantize(Decimal('0.01'), ROUND_HALF_UP) if s['values'] else None
    result.append({GROUP: comp, 'errors': n, 'first_error_id': first, MEAN: mean,
                   'status': 'alert' if n >= THRESHOLD else 'ok'})
write_deliverable(result)
