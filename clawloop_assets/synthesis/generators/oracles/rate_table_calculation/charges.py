"""Oracle of rate_table_calculation levels 2-5, under the four readings the
contract declares (INCLUSIVE_UPPER, PRICING, MIN_BEFORE_SURCHARGE,
ROUND_LINES).

Level 2 (DATA set): every record of DATA charged by the bands of its
category (RATES: the upper limit, None for the last band, the rate and the
flat fee of each band), its category's SURCHARGES (in percent) and the
MINIMUM_CHARGE; a record of a category without rates is not charged; the
records and total charge of each category.

Levels 3-5 (DATA None): each entity INDEX lists charged by the usage lines of
its detail file (JSON or CSV, under DETAIL_DIR), each line priced with the
bands of its category in RATE_TABLE (the version in effect on the line's
date, where versions are dated) and the minimum charge and surcharge in
TERMS. A repeated line number counts its last row; void lines and lines
without a quantity are skipped; a quantity in hundredths is divided by
HUNDREDTHS. An entity of a category without rates is listed with an empty
total.

Written with write_deliverable. Runs in the workspace."""

import csv
import json
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
DATA = 'records.csv'
RATES = {'a': [('10.00', '1.1', '2.00'), (None, '0.9', '3.00')]}
SURCHARGES = {'a': '0'}
MINIMUM_CHARGE = '5.00'
INDEX = None
RATE_TABLE = None
TERMS = None
DETAIL_DIR = None
ID = None
HUNDREDTHS = None
GROUP = 'group'
VALUE = 'value'
INCLUSIVE_UPPER = True
PRICING = 'whole'
MIN_BEFORE_SURCHARGE = True
ROUND_LINES = True
# ---- end of parameters
CENT = Decimal('0.01')

# ---- deliverable writer (the generator puts the task's write_deliverable here)


def write_deliverable(result):
    raise NotImplementedError('the generator puts the deliverable writer here')
# ---- end of deliverable writer


def rnd(value):
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def band_of(bands, q):
    for index, (limit, rate, fee) in enumerate(bands):
        if limit is None or (q <= limit if INCLUSIVE_UPPER else q < limit):
            return index


def price(bands, q, band_q, minimum, surcharge):
    limit, rate, fee = bands[band_of(bands, band_q)]
    if PRICING == 'whole':
        base = rate * q
    else:
        base, low = Decimal(0), Decimal(0)
        for band_limit, band_rate, _ in bands:
            top = q if band_limit is None else min(q, band_limit)
            if top > low:
                base += band_rate * (top - low)
            if band_limit is None:
                break
            low = band_limit
    base += fee
    factor = 1 + surcharge / 100
    if MIN_BEFORE_SURCHARGE:
        return max(base, minimum) * factor
    return max(base * factor, minimum)


def total_of(charges):
    return sum(rnd(c) for c in charges) if ROUND_LINES else rnd(sum(charges))


def category_totals():
    """Level 2: the records of DATA, charged per category."""
    table = {g: [(None if u is None else Decimal(u), Decimal(r), Decimal(f)) for u, r, f in bands]
             for g, bands in RATES.items()}
    minimum = Decimal(MINIMUM_CHARGE)
    charges = {}
    with open(DATA, newline='') as f:
        for row in csv.DictReader(f):
            group = row[GROUP].strip()
            if group not in table:
                continue  # no rate: not charged
            q = Decimal(row[VALUE].strip())
            charges.setdefault(group, []).append(price(table[group], q, q, minimum, Decimal(SURCHARGES[group])))
    return [{GROUP: g, 'records': len(cs), 'total_charge': total_of(cs)} for g, cs in sorted(charges.items())]


def entity_totals():
    """Levels 3-5: each entity of INDEX, charged by the lines of its detail file."""
    hundredths_field = VALUE + '_hundredths'
    versions, terms = {}, {}
    with open(RATE_TABLE, newline='') as f:
        for row in csv.DictReader(f):
            up_to = row['up_to'].strip()
            band = (int(row['band']), Decimal(up_to) if up_to else None, Decimal(row['rate']), Decimal(row['flat_fee']))
            effective = (row.get('effective_from') or '').strip()
            versions.setdefault(row[GROUP].strip(), {}).setdefault(effective, []).append(band)
    with open(TERMS, newline='') as f:
        for row in csv.DictReader(f):
            terms[row[GROUP].strip()] = (Decimal(row['minimum_charge']), Decimal(row['surcharge_pct']))

    def bands_on(group, date):
        table = versions[group]
        start = max(e for e in table if e <= date)
        return [band[1:] for band in sorted(table[start])]

    def detail(path):
        if path.endswith('.json'):
            with open(path) as f:
                doc = json.load(f, parse_float=Decimal)
            return doc[GROUP], doc['lines']
        with open(path, newline='') as f:
            rows = list(csv.DictReader(f))
        return rows[0][GROUP], rows

    with open(INDEX, newline='') as f:
        entries = [(row[ID].strip(), row['file'].strip()) for row in csv.DictReader(f)]
    result = []
    for ident, path in entries:
        group, items = detail(path)
        group = group.strip()
        latest = {}
        for item in items:
            latest[str(item['line']).strip()] = item  # a repeated line number: its last row counts
        usable = []
        for item in latest.values():
            if str(item.get('status') or '').strip() == 'void':
                continue
            value, hundredths = item.get(VALUE), item.get(hundredths_field)
            if value not in (None, ''):
                q = band_q = Decimal(str(value).strip())
            elif hundredths not in (None, ''):
                q = band_q = Decimal(str(hundredths).strip()) / HUNDREDTHS
            else:
                continue  # no quantity: skipped
            usable.append((q, band_q, str(item.get('date') or '').strip()))
        if group not in versions:
            result.append({ID: ident, GROUP: group, 'lines': len(usable), 'total_charge': None})
            continue
        minimum, surcharge = terms[group]
        charges = [price(bands_on(group, date), q, band_q, minimum, surcharge) for q, band_q, date in usable]
        result.append({ID: ident, GROUP: group, 'lines': len(charges), 'total_charge': total_of(charges)})
    return result


write_deliverable(category_totals() if DATA is not None else entity_totals())
