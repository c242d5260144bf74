"""Oracle of multi_document_merge level 1 (odd seeds): the rows of A (id and
group) completed with the VALUE of their id from B's blocks of `field: value`
lines; a block whose id A does not list is left out, an id without a block
keeps an empty value. Writes merged.csv. Runs in the workspace."""

import csv

# ---- parameters (the generator writes the task's values here)
A = 'records.csv'
B = 'values.txt'
ID = 'id'
GROUP = 'group'
VALUE = 'value'
# ---- end of parameters

values = {}
with open(B) as handle:
    blocks = handle.read().split('\n\n')
for block in blocks:
    fields = dict(line.split(':', 1) for line in block.splitlines() if ':' in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if ID in fields:
        values[fields[ID]] = fields.get(VALUE, '')
with open(A, newline='') as handle, open('merged.csv', 'w', newline='') as out:
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow([ID, GROUP, VALUE])
    for row in csv.DictReader(handle):
        key = row[ID].strip()
        writer.writerow([key, row[GROUP].strip(), values.get(key, '')])
