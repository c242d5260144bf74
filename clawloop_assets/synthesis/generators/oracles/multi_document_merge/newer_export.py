"""Oracle of multi_document_merge level 1 (even seeds): two exports of the
same records with the same COLUMNS, FILES older first; an id found in both
takes its whole row from the newer one. Writes merged.csv. Runs in the
workspace."""

import csv

# ---- parameters (the generator writes the task's values here)
FILES = ['old.csv', 'new.csv']
ID = 'id'
COLUMNS = ['id', 'group', 'value']
# ---- end of parameters

rows = {}
for path in FILES:  # the newer file last: its rows replace the older ones
    with open(path, newline='') as handle:
        for row in csv.DictReader(handle):
            rows[row[ID].strip()] = row
with open('merged.csv', 'w', newline='') as handle:
    writer = csv.writer(handle, lineterminator='\n')
    writer.writerow(COLUMNS)
    for key in sorted(rows):
        writer.writerow([rows[key][c].strip() for c in COLUMNS])
