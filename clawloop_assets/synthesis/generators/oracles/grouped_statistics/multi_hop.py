"""Oracle of grouped_statistics levels 3-5: index.csv lists each record's
detail file (the latest revision counts), GROUP_codes.csv names the group
codes; the median of the valid records' values per group, rounded half up
to one decimal, and its tier (SMALL below MIN_RECORDS records) are written
with write_deliverable. Runs in the workspace."""

import csv
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
KEY = 'id'
GROUP = 'group'
VALUE = 'value'
LOWER = '10'
UPPER = '20'
MIN_RECORDS = 0
SMALL = 'small'
MEDIAN = 'median_value'
# ---- end of parameters
T1, T2 = Decimal(LOWER), Decimal(UPPER)

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def read_detail(path):
    with open(path) as f:
        return dict(line.split(': ', 1) if ': ' in line else (line.rstrip(':'), '') for line in f.read().splitlines())


with open(GROUP + '_codes.csv', newline='') as f:
    names = {row['code']: row[GROUP] for row in csv.DictReader(f)}
latest = {}
with open('index.csv', newline='') as f:
    for row in csv.DictReader(f):
        revision = int(row.get('revision') or 1)
        if row[KEY] not in latest or revision > latest[row[KEY]][0]:
            latest[row[KEY]] = (revision, row['file'])
groups = {}
for key, (revision, path) in sorted(latest.items()):
    record = {k.strip(): v.strip() for k, v in read_detail(path).items()}
    if record.get('status') != 'valid':
        continue
    if record.get(VALUE):
        value = Decimal(record[VALUE])
    elif record.get(VALUE + '_hundredths'):
        value = Decimal(record[VALUE + '_hundredths']) / 100
    else:
        continue
    groups.setdefault(names[record[GROUP + '_code']], []).append(value)
result = []
for g in sorted(groups):
    v = sorted(groups[g])
    n = len(v)
    m = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    tier = 'low' if m < T1 else ('medium' if m < T2 else 'high')
    if n < MIN_RECORDS:
        tier = SMALL
    result.append({GROUP: g, 'records': n, MEDIAN: m.quantize(Decimal('0.1'), ROUND_HALF_UP), 'tier': tier})
write_deliverable(result)
