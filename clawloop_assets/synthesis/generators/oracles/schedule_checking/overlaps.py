"""Oracle of schedule_checking level 1 (even seeds): the slot_id of every slot
in DATA that overlaps another slot on the same GROUP value (start and end are
date-times of one format, compared as text), one per line in OUT. Runs in
the workspace."""

import csv

# ---- parameters (the generator writes the task's values here)
DATA = 'slots.csv'
GROUP = 'resource'
OUT = 'overlapping.txt'
# ---- end of parameters

with open(DATA, newline='') as f:
    rows = list(csv.DictReader(f))
hits = sorted({a['slot_id'] for a in rows for b in rows if a is not b and a[GROUP] == b[GROUP]
               and a['start'] < b['end'] and b['start'] < a['end']})
with open(OUT, 'w') as f:
    f.write(''.join(i + '\n' for i in hits))
