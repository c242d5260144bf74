"""Oracle of grouped_statistics level 2: the median of the valid rows' values
per group, rounded half up to one decimal, and its tier by two thresholds,
written to OUT as CSV or JSON. Runs in the workspace."""

import csv
import json
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
DATA = 'data.csv'
OUT = 'tiers.csv'
GROUP = 'group'
VALUE = 'value'
LOWER = '10'
UPPER = '20'
COLUMNS = ['group', 'records', 'median_value', 'tier']
# ---- end of parameters
T1, T2 = Decimal(LOWER), Decimal(UPPER)

groups = {}
with open(DATA, newline='') as f:
    for row in csv.DictReader(f):
        if row['status'].strip() != 'valid' or not row[VALUE].strip():
            continue
        groups.setdefault(row[GROUP], []).append(Decimal(row[VALUE]))
result = []
for g in sorted(groups):
    v = sorted(groups[g])
    n = len(v)
    m = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    tier = 'low' if m < T1 else ('medium' if m < T2 else 'high')
    result.append({GROUP: g, 'records': n, COLUMNS[2]: m.quantize(Decimal('0.1'), ROUND_HALF_UP), 'tier': tier})
if OUT.endswith('.csv'):
    with open(OUT, 'w', newline='') as f:
        w = csv.writer(f, lineterminator='\n')
        w.writerow(COLUMNS)
        for r in result:
            w.writerow([r[c] for c in COLUMNS])
else:
    with open(OUT, 'w') as f:
        json.dump([{c: (float(r[c]) if c == COLUMNS[2] else r[c]) for c in COLUMNS} for r in result], f, indent=2)
