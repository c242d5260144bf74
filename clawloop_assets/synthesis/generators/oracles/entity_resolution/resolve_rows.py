"""Oracle of entity_resolution level 2: resolves the rows of DATA into
entities (ids in canonical form, swapped id and group fields exchanged, the
same id in another group another entity), each with its latest and mean
value, written with write_deliverable. Runs in the workspace."""

import csv
import re
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
DATA = 'records.csv'
ID = 'id'
GROUP = 'group'
VALUE = 'value'
LATEST = 'latest_value'
MEAN = 'mean_value'
# ---- end of parameters

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer

ID_RE = re.compile(r'([A-Za-z]+)[ _-]*(\d+)')


def canonical(raw):
    m = ID_RE.fullmatch(raw.strip())
    return '%s-%04d' % (m.group(1).upper(), int(m.group(2)))


entities = {}
with open(DATA, newline='') as f:
    for pos, row in enumerate(csv.DictReader(f)):
        raw_id, raw_group = row[ID], row[GROUP]
        if ID_RE.fullmatch(raw_group.strip()):
            raw_id, raw_group = raw_group, raw_id
        key = canonical(raw_id)
        g = raw_group.strip().lower()
        ent = (key, g)
        entities.setdefault(ent, []).append((row['recorded_on'].strip(), pos, Decimal(row[VALUE].strip()), g))
result = []
for ent, recs in sorted(entities.items()):
    latest = max(recs, key=lambda r: (r[0], r[1]))
    mean = sum(r[2] for r in recs) / len(recs)
    result.append({ID: ent[0], GROUP: latest[3], 'records': len(recs), LATEST: latest[2],
                   MEAN: mean.quantize(Decimal('0.01'), ROUND_HALF_UP)})
write_deliverable(result)
