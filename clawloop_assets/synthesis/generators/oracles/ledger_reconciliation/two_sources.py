"""Oracle of ledger_reconciliation level 2: the ids of sources A and B whose
amounts (B's rows summed per id) do not match within the tolerance, written
to OUT as CSV or JSON. Runs in the workspace."""

import csv
import json
from decimal import Decimal

# ---- parameters (the generator writes the task's values here)
A = 'a.csv'
B = 'b.csv'
OUT = 'reconciliation.csv'
KEY = 'id'
VALUE = 'amount'
STATUS_A = 'only_in_a'
STATUS_B = 'only_in_b'
TOLERANCE = '0.05'
COLUMNS = ['id', 'status', 'a_amount', 'b_amount', 'difference']
# ---- end of parameters
TOL = Decimal(TOLERANCE)


def load(path):
    totals = {}
    with open(path, newline='') as f:
        for row in csv.DictReader(f):
            key = row[KEY].strip().upper()
            totals[key] = totals.get(key, Decimal(0)) + Decimal(row[VALUE].strip())
    return totals


a, b = load(A), load(B)
result = []
for key in sorted(set(a) | set(b)):
    if key not in b:
        result.append({KEY: key, 'status': STATUS_A, COLUMNS[2]: a[key], COLUMNS[3]: None, 'difference': None})
    elif key not in a:
        result.append({KEY: key, 'status': STATUS_B, COLUMNS[2]: None, COLUMNS[3]: b[key], 'difference': None})
    elif abs(b[key] - a[key]) > TOL:
        result.append({KEY: key, 'status': 'amount_mismatch', COLUMNS[2]: a[key], COLUMNS[3]: b[key], 'difference': b[key] - a[key]})
if OUT.endswith('.csv'):
    with open(OUT, 'w', newline='') as f:
        w = csv.writer(f, lineterminator='\n')
        w.writerow(COLUMNS)
        for r in result:
            w.writerow(['' if r[c] is None else r[c] for c in COLUMNS])
else:
    with open(OUT, 'w') as f:
        json.dump([{c: (float(r[c]) if isinstance(r[c], Decimal) else r[c]) for c in COLUMNS} for r in result], f, indent=2)
