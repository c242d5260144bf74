"""Oracle of entity_resolution levels 3-5: index.csv lists the entry cards
(text or JSON) of each id; ids are read in canonical form and followed
through renumbered.csv, void cards and cards of another register skipped,
amounts scaled by their source's factor (sources.csv, when SCALED); each
entity's group and last date come from its latest card, its total is
rounded half up to PLACES. Written with write_deliverable. Runs in the
workspace."""

import csv
import json
import re
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
PREFIX = 'ID'
ID = 'id'
GROUP = 'group'
VALUE = 'value'
TOTAL = 'total_value'
LAST = None
PLACES_TEXT = '0.01'
SCALED = False
# ---- end of parameters
PLACES = Decimal(PLACES_TEXT)

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer

ID_RE = re.compile(r'([A-Za-z]+)[ _-]*(\d+)')
renumbered = {}
with open('renumbered.csv', newline='') as f:
    for row in csv.DictReader(f):
        renumbered[row['old_' + ID].strip()] = row['new_' + ID].strip()
FACTORS = {}
if SCALED:
    with open('sources.csv', newline='') as f:
        for row in csv.DictReader(f):
            FACTORS[row['source'].strip()] = Decimal(row['factor'].strip())


def read_card(path):
    if path.endswith('.json'):
        with open(path) as f:
            raw = json.load(f, parse_float=Decimal)
        return {'source': raw.get('source'), 'status': raw.get('status'), 'group': raw.get('group'),
                'date': raw.get('date'), 'amount': raw.get('amount')}
    fields = {}
    with open(path) as f:
        for line in f:
            name, _, value = line.partition(':')
            fields[name.strip()] = value.strip()
    return {'source': fields.get('source'), 'status': fields.get('status'), 'group': fields.get(GROUP),
            'date': fields.get('recorded_on'), 'amount': fields.get(VALUE)}


entities = {}
with open('index.csv', newline='') as f:
    for pos, row in enumerate(csv.DictReader(f)):
        m = ID_RE.fullmatch(row[ID].strip())
        if m.group(1).upper() != PREFIX:
            continue
        key = '%s-%04d' % (PREFIX, int(m.group(2)))
        while key in renumbered:
            key = renumbered[key]
        card = read_card(row['file'].strip())
        if card['status'] == 'void':
            continue
        amount = None
        if card['amount'] is not None and str(card['amount']).strip():
            amount = Decimal(str(card['amount']).strip()) * FACTORS.get(card['source'], Decimal(1))
        entities.setdefault(key, []).append((card['date'].strip(), pos, card['group'].strip().lower(), amount))
result = []
for key, cards in sorted(entities.items()):
    latest = max(cards, key=lambda c: (c[0], c[1]))
    total = sum((c[3] for c in cards if c[3] is not None), Decimal(0))
    record = {ID: key, GROUP: latest[2], 'records': len(cards), TOTAL: total.quantize(PLACES, ROUND_HALF_UP)}
    if LAST:
        record[LAST] = latest[0]
    result.append(record)
write_deliverable(result)
