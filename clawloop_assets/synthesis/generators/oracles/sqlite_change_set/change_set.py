"""Oracle of sqlite_change_set levels 2-5: the change set applied to TABLE
of DB the way the contract says, the tables rewritten. Changes are applied
in (batch, seq) order; keys are matched trimmed and in capital letters (a
change with an empty key is skipped); an update sets only the fields it
gives, and an update of a key that is not in the table is skipped or
inserted as MISSING_UPDATE says; values are rounded half up to hundredths.

Level 2 reads one CHANGE_FILE (CSV or JSON, by its extension). From level 3
(CHANGE_FILE None) changes/index.csv lists the batch files, group codes are
resolved through CODES, and SUMMARY (records and TOTAL per group) is
rewritten. Levels 4-5, when DIRTY: only accepted batches count, JSON batches
name their fields differently, and a value given in hundredths is divided
by HUNDREDTHS. Level 5: with SOFT_DELETE a delete retires the row (a
retired row counts as absent), and AUDIT gets one row per change with its
outcome. Runs in the workspace."""

import csv
import json
import os
import sqlite3
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
DB = 'records.db'
TABLE = 'records'
KEY = 'id'
GROUP = 'group'
VALUE = 'value'
CHANGE_FILE = 'changes.csv'
CODES = None
SUMMARY = None
TOTAL = None
HUNDREDTHS = None
MISSING_UPDATE = 'skip'
DIRTY = False
SOFT_DELETE = False
AUDIT = None
# ---- end of parameters
GROUP_FIELD = GROUP + '_code' if CODES else GROUP


def given(value):
    return value is not None and str(value).strip() != ''


def norm(key):
    return key.strip().upper()


def stored(value, scale):
    return (Decimal(str(value).strip()) / scale).quantize(Decimal('0.01'), ROUND_HALF_UP)


def read_batch(path):
    if path.endswith('.json'):
        with open(path) as f:
            items = json.load(f)
    else:
        with open(path, newline='') as f:
            items = list(csv.DictReader(f))
    out = []
    for item in items:
        if DIRTY and path.endswith('.json'):
            item = dict(item, op=item['action'], **{KEY: item['key'], GROUP_FIELD: item.get('code')})
        scale = HUNDREDTHS if VALUE + '_hundredths' in item else 1
        value = item.get(VALUE + '_hundredths', item.get(VALUE))
        out.append({'seq': int(item['seq']), 'op': item['op'], 'key': item[KEY], 'group': item.get(GROUP_FIELD),
                    'value': value, 'scale': scale})
    return out


con = sqlite3.connect(DB)
codes = dict(con.execute('SELECT code, %s FROM %s' % (GROUP, CODES))) if CODES else {}
if CHANGE_FILE:
    batches = [(1, CHANGE_FILE)]
else:
    batches = []
    with open('changes/index.csv', newline='') as f:
        for row in csv.DictReader(f):
            if DIRTY and row['status'].strip() != 'accepted':
                continue
            batches.append((int(row['batch']), os.path.join('changes', row['file'].strip())))
changes = []
for batch, path in batches:
    changes += [(batch, c['seq'], c) for c in read_batch(path)]
changes.sort(key=lambda x: (x[0], x[1]))
if SOFT_DELETE:
    query = 'SELECT %s, %s, %s, status FROM %s' % (KEY, GROUP, VALUE, TABLE)
else:  # no status column: every row is active
    query = "SELECT %s, %s, %s, 'active' FROM %s" % (KEY, GROUP, VALUE, TABLE)
rows = {k: {GROUP: g, VALUE: None if v is None else Decimal(str(v)), 'status': s} for k, g, v, s in con.execute(query)}
log = []
for batch, seq, c in changes:
    key = norm(c['key']) if given(c['key']) else None
    fields = {}
    if given(c['group']):
        fields[GROUP] = codes[c['group'].strip()] if CODES else c['group'].strip()
    if given(c['value']):
        fields[VALUE] = stored(c['value'], c['scale'])
    present = key in rows and rows[key]['status'] == 'active'
    outcome = 'applied'
    if key is None:
        outcome = 'skipped'
    elif c['op'] == 'delete':
        if not present:
            outcome = 'skipped'
        elif SOFT_DELETE:
            rows[key]['status'] = 'retired'
        else:
            del rows[key]
    elif c['op'] == 'insert' or (not present and MISSING_UPDATE == 'insert'):
        rows[key] = {GROUP: fields.get(GROUP), VALUE: fields.get(VALUE), 'status': 'active'}
    elif present:
        rows[key].update(fields)
    else:
        outcome = 'skipped'
    log.append((batch, seq, key, c['op'], outcome))
summary = {}
for r in rows.values():
    if r['status'] != 'active':
        continue
    s = summary.setdefault(r[GROUP], [0, Decimal(0)])
    s[0] += 1
    if r[VALUE] is not None:
        s[1] += r[VALUE]

con.execute('DELETE FROM %s' % TABLE)
if SOFT_DELETE:
    con.executemany('INSERT INTO %s (%s, %s, %s, status) VALUES (?, ?, ?, ?)' % (TABLE, KEY, GROUP, VALUE),
                    [(k, r[GROUP], None if r[VALUE] is None else float(r[VALUE]), r['status'])
                     for k, r in sorted(rows.items())])
else:
    con.executemany('INSERT INTO %s (%s, %s, %s) VALUES (?, ?, ?)' % (TABLE, KEY, GROUP, VALUE),
                    [(k, r[GROUP], None if r[VALUE] is None else float(r[VALUE])) for k, r in sorted(rows.items())])
if SUMMARY:
    con.execute('DELETE FROM %s' % SUMMARY)
    con.executemany('INSERT INTO %s (%s, records, %s) VALUES (?, ?, ?)' % (SUMMARY, GROUP, TOTAL),
                    [(g, n, float(t)) for g, (n, t) in summary.items()])
if AUDIT:
    con.executemany('INSERT INTO %s (batch, seq, %s, op, outcome) VALUES (?, ?, ?, ?, ?)' % (AUDIT, KEY), log)
con.commit()
