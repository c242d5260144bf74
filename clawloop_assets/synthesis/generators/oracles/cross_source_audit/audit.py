"""Oracle of cross_source_audit levels 2-5: the register (REGISTER, or from
level 3 the dossiers INDEX names) checked against the field log and the
approval list APPROVALS. Tolerance and approval threshold are TOLERANCE and
THRESHOLD, or from level 3 each group's row of the LIMITS table (its `*` row
for an unlisted group when DEFAULT). The field log is LOG, or when DIRTY
(levels 4-5) the two crews' files of CREW_LOGS (the second with its own
columns and units), where an empty reading never counts and of an id's
readings the latest-dated one does; DIRTY also matches ids without their
hyphen and approval groups in any letter case. Ids absent from the register are reported when the
approval list names them, or the field log unless APPROVALS_ONLY. One row
per finding, or with PRIORITY (level 5) one per id: its first finding in
that order. Written with write_deliverable. Runs in the workspace."""

import csv
from decimal import Decimal

# ---- parameters (the generator writes the task's values here)
KEY = 'id'
GROUP = 'group'
VALUE = 'value'
PREFIX = 'ID'
REG_COL = 'registered_value'
LOG_COL = 'logged_value'
REGISTER = 'register.csv'
INDEX = None
TOLERANCE = '0.05'
THRESHOLD = '100.00'
LIMITS = None
DEFAULT = None
LOG = 'field_log.csv'
CREW_LOGS = None
APPROVALS = 'approvals.csv'
DIRTY = False
APPROVALS_ONLY = False
PRIORITY = None
# ---- end of parameters

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def norm(raw):
    key = raw.strip().upper()
    if DIRTY and '-' not in key:
        key = key[:len(PREFIX)] + '-' + key[len(PREFIX):]
    return key


register = {}
if INDEX:
    with open(INDEX, newline='') as f:
        files = [row['file'] for row in csv.DictReader(f)]
    for path in files:
        fields = {}
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(':')
                fields[name.strip()] = value.strip()
        register[fields[KEY]] = (fields[GROUP], Decimal(fields[VALUE]))
else:
    with open(REGISTER, newline='') as f:
        for row in csv.DictReader(f):
            register[row[KEY]] = (row[GROUP], Decimal(row[VALUE]))

limits = {}
if LIMITS:
    with open(LIMITS, newline='') as f:
        for row in csv.DictReader(f):
            limits[row[GROUP]] = (Decimal(row['tolerance']), Decimal(row['approval_threshold']))


def limits_for(group):
    if not LIMITS:
        return Decimal(TOLERANCE), Decimal(THRESHOLD)
    if DEFAULT:
        return limits.get(group, limits['*'])
    return limits[group]


readings = {}


def reading(raw_key, raw_value, unit, date):
    if not raw_value.strip():
        return
    value = Decimal(raw_value.strip())
    if unit.strip() == 'hundredths':
        value = value / 100
    readings.setdefault(norm(raw_key), []).append((date, value))


if LOG:
    logged = {}
    with open(LOG, newline='') as f:
        for row in csv.DictReader(f):
            logged[norm(row[KEY])] = Decimal(row[VALUE])
else:
    crew_a, crew_b = CREW_LOGS
    with open(crew_a, newline='') as f:
        for row in csv.DictReader(f):
            reading(row[KEY], row[VALUE], '', row.get('date', ''))
    with open(crew_b, newline='') as f:
        for row in csv.DictReader(f):
            reading(row['id'], row['reading'], row['unit'], row.get('date', ''))
    logged = {key: max(rows)[1] for key, rows in readings.items()}

approved = {}
with open(APPROVALS, newline='') as f:
    for row in csv.DictReader(f):
        approved.setdefault(norm(row[KEY]), []).append(row[GROUP].strip().lower() if DIRTY else row[GROUP].strip())

found = {}
for key in sorted(register):
    group, value = register[key]
    tol, threshold = limits_for(group)
    issues = []
    if key not in logged:
        issues.append('missing_log')
    elif abs(logged[key] - value) > tol:
        issues.append('value_mismatch')
    groups = approved.get(key, [])
    if value >= threshold and group not in groups:
        issues.append('missing_approval')
    if any(g != group for g in groups):
        issues.append('group_conflict')
    if issues:
        found[key] = issues
named = set(approved)
if not APPROVALS_ONLY:
    named |= set(logged)
for key in sorted(named):
    if key not in register:
        found[key] = ['unregistered']


def finding(key, issue):
    reg = register.get(key)
    return {KEY: key, 'issue': issue, REG_COL: reg[1] if reg else None, LOG_COL: logged.get(key),
            'difference': logged[key] - reg[1] if issue == 'value_mismatch' else None}


result = []
for key in sorted(found):
    if PRIORITY:
        first = finding(key, min(found[key], key=PRIORITY.index))
        first['findings'] = len(found[key])
        result.append(first)
    else:
        for issue in found[key]:
            result.append(finding(key, issue))
write_deliverable(result)
