"""Oracle of file_reorganization levels 3-5: each file manifest.csv lists moves
to `<group>/<YYYY>/` (its record's group in register.csv, the year of its
`closed` date); name collisions go to the record id that sorts first, the
others get `_<record id>`; .tmp files in the inbox are deleted. Runs in the
workspace."""

import csv
import glob
import os

# ---- parameters (the generator writes the task's values here)
KEY = 'record_id'
GROUP = 'group'
# ---- end of parameters

with open('register.csv', newline='') as f:
    records = {row[KEY]: row for row in csv.DictReader(f)}


def year(date):
    return date[-4:] if '/' in date else date[:4]


targets = {}
with open('manifest.csv', newline='') as f:
    for row in csv.DictReader(f):
        if not os.path.isfile(row['file']):
            continue
        record = records[row[KEY]]
        group = record[GROUP].strip().lower() or 'unassigned'
        folder = os.path.join(group, year(record['closed']))
        targets.setdefault(os.path.join(folder, os.path.basename(row['file'])), []).append((row[KEY], row['file']))
for target, claims in sorted(targets.items()):
    for rank, (key, path) in enumerate(sorted(claims)):
        dest = target
        if rank:
            stem, ext = target.rsplit('.', 1)
            dest = '%s_%s.%s' % (stem, key, ext)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.rename(path, dest)
for path in glob.glob('inbox/**/*.tmp', recursive=True):
    os.remove(path)
