"""Oracle of ledger_reconciliation levels 3-5: source A is an index of detail
files (entries summed per id, voided ones skipped), source B rows keyed by
reference codes mapped to ids by ref_map.csv (B_cents.csv in hundredths);
the ids whose amounts do not match within the tolerance are written with
write_deliverable. Runs in the workspace."""

import csv
import os
from decimal import Decimal

# ---- parameters (the generator writes the task's values here)
A = 'a'
B = 'b'
KEY = 'id'
VALUE = 'amount'
TOLERANCE = '0.05'
STATUS_A = 'only_in_a'
STATUS_B = 'only_in_b'
A_COL = 'a_amount'
B_COL = 'b_amount'
# ---- end of parameters
TOL = Decimal(TOLERANCE)

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


a = {}
with open(A + '_index.csv', newline='') as f:
    for row in csv.DictReader(f):
        with open(row['file']) as detail:
            for line in detail.read().splitlines():
                name, _, value = line.partition(': ')
                if name == 'entry' and not value.endswith(' void'):
                    a[row[KEY]] = a.get(row[KEY], Decimal(0)) + Decimal(value)
with open('ref_map.csv', newline='') as f:
    owner = {row['ref'].strip().upper(): row[KEY] for row in csv.DictReader(f)}
b = {}


def add(ref, amount):
    ref = ref.strip().upper()
    if ref in owner:
        b[owner[ref]] = b.get(owner[ref], Decimal(0)) + amount


with open(B + '.csv', newline='') as f:
    for row in csv.DictReader(f):
        add(row['ref'], Decimal(row[VALUE]))
if os.path.exists(B + '_cents.csv'):
    with open(B + '_cents.csv', newline='') as f:
        for row in csv.DictReader(f):
            add(row['reference'], Decimal(row[VALUE + '_cents']) / 100)
result = []
for key in sorted(set(a) | set(b)):
    if key not in b:
        result.append({KEY: key, 'status': STATUS_A, A_COL: a[key], B_COL: None, 'difference': None})
    elif key not in a:
        result.append({KEY: key, 'status': STATUS_B, A_COL: None, B_COL: b[key], 'difference': None})
    elif abs(b[key] - a[key]) > TOL:
        result.append({KEY: key, 'status': 'amount_mismatch', A_COL: a[key], B_COL: b[key], 'difference': b[key] - a[key]})
write_deliverable(result)
