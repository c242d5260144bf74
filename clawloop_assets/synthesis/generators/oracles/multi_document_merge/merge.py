"""Oracle of multi_document_merge levels 2-5: documents (CSV, JSON or
`field: value` text, each with its source, revision and date) merged field
by field in rising precedence: revision, then source rank, then (when DATED)
date. Level 2 merges the whole documents DOCS, ranked by the source ORDER,
and keeps the ids the REGISTER source lists; from level 3 index.csv lists
the documents and ids, sources.csv ranks the sources. An empty value never
overrides, retired records are left out, values are rounded half up on
output. When DIRTY (levels 4-5) drafts are not merged, ids are zero-padded
and values are scaled by their source's `scale`; the sources of ALIASES
name fields otherwise. Level 5 adds decimal COMMAS, LOWER_GROUPS and the
LAST_REVISION column. Written with write_deliverable. Runs in the
workspace."""

import csv
import json
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
ID = 'id'
GROUP = 'group'
VALUE = 'value'
DOCS = None
ORDER = None
REGISTER = None
ALIASES = None
DIRTY = False
DATED = False
COMMAS = False
LOWER_GROUPS = False
LAST_REVISION = False
# ---- end of parameters
STATUS = 'status'
FIELDS = [GROUP, VALUE, STATUS]

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def read_doc(path):
    """A document's header (source, revision, date) and its records as {field: text}: a field the document
    does not mention is missing, an empty one is ''."""
    with open(path, encoding='utf-8') as handle:
        text = handle.read()
    if path.endswith('.json'):
        data = json.loads(text, parse_float=str, parse_int=str)
        records = data['records'] if 'records' in data else [data['record']]
        head = {name: str(data[name]) for name in ('source', 'revision', 'date')}
        return head, [{k: '' if v is None else str(v) for k, v in r.items()} for r in records]
    if path.endswith('.csv'):
        head, body = {}, []
        for line in text.splitlines():
            if line.startswith('#'):
                name, _, value = line[1:].partition(':')
                head[name.strip()] = value.strip()
            else:
                body.append(line)
        return head, [dict(row) for row in csv.DictReader(body)]
    blocks = []
    for block in text.split('\n\n'):
        fields = {}
        for line in block.splitlines():
            if line.strip():
                name, _, value = line.partition(':')
                fields[name.strip()] = value.strip()
        if fields:
            blocks.append(fields)
    return blocks[0], blocks[1:]


def canon(raw):
    key = raw.strip().upper()
    if DIRTY:
        prefix, _, number = key.partition('-')
        key = '%s-%04d' % (prefix, int(number))
    return key


if DOCS:
    RANK = {source: number for number, source in enumerate(ORDER, 1)}  # ORDER: the source order for revision ties
    paths = DOCS
else:
    with open('sources.csv', newline='') as handle:
        table = list(csv.DictReader(handle))
    RANK = {r['source'].strip(): int(r['rank']) for r in table}
    if DIRTY:
        SCALE = {r['source'].strip(): Decimal(r['scale']) for r in table}
    with open('index.csv', newline='') as handle:
        index = list(csv.DictReader(handle))
    listed = {canon(r[ID]) for r in index}
    paths = sorted({r['file'].strip() for r in index})
docs = []
for path in paths:
    head, records = read_doc(path)
    if DIRTY and head['revision'] == 'draft':
        continue  # a draft is not merged
    docs.append({'source': head['source'], 'revision': int(head['revision']), 'date': head['date'],
                 'records': records})
if REGISTER:
    listed = {canon(r[ID]) for doc in docs if doc['source'] == REGISTER for r in doc['records']}
docs.sort(key=lambda d: (d['revision'], -RANK[d['source']], d['date'] if DATED else ''))
merged = {}
for doc in docs:
    for record in doc['records']:
        if ALIASES:
            record = {ALIASES.get(doc['source'], {}).get(k.strip(), k.strip()): v
                      for k, v in record.items()}
        key = canon(record[ID])
        row = merged.setdefault(key, {})
        if LAST_REVISION:
            row['last_revision'] = doc['revision']  # documents come in rising precedence
        for field in FIELDS:
            if field not in record:
                continue  # not mentioned: an older document's value stands
            value = record[field].strip()
            if not value:
                continue  # an empty value gives no value
            if field == VALUE:
                if COMMAS:
                    value = value.replace(',', '.')
                value = Decimal(value)
                if DIRTY:
                    value = value * SCALE[doc['source']]
            if field == GROUP and LOWER_GROUPS:
                value = value.lower()
            row[field] = value
result = []
for key in sorted(merged):
    row = merged[key]
    if key not in listed:
        continue
    if row.get(STATUS) == 'retired':
        continue
    value = row.get(VALUE)
    if value is not None:
        value = value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP)
    entry = {ID: key, GROUP: row.get(GROUP), VALUE: value, STATUS: row.get(STATUS)}
    if LAST_REVISION:
        entry['last_revision'] = row['last_revision']
    result.append(entry)
write_deliverable(result)
