"""Oracle of rate_table_calculation level 2: every record of DATA charged by
the bands of its category (RATES: the upper limit, None for the last band,
the rate and the flat fee of each band), its category's SURCHARGES (in
percent) and the MINIMUM_CHARGE, under the four readings the contract
declares (INCLUSIVE_UPPER, PRICING, MIN_BEFORE_SURCHARGE, ROUND_LINES); a
record of a category without rates is not charged. The records and total
charge of each category are written with write_deliverable. Runs in the
workspace."""

import csv
from decimal import ROUND_HALF_UP, Decimal

# ---- parameters (the generator writes the task's values here)
DATA = 'records.csv'
GROUP = 'group'
VALUE = 'value'
RATES = {'a': [('10.00', '1.1', '2.00'), (None, '0.9', '3.00')]}
SURCHARGES = {'a': '0'}
MINIMUM_CHARGE = '5.00'
INCLUSIVE_UPPER = True
PRICING = 'whole'
MIN_BEFORE_SURCHARGE = True
ROUND_LINES = True
# ---- end of parameters
CENT = Decimal('0.01')
TABLE = {g: [(None if u is None else Decimal(u), Decimal(r), Decimal(f)) for u, r, f in bands]
         for g, bands in RATES.items()}
MINIMUM = Decimal(MINIMUM_CHARGE)

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


charges = {}
with open(DATA, newline='') as f:
    for row in csv.DictReader(f):
        group = row[GROUP].strip()
        if group not in TABLE:
            continue  # no rate: not charged
        q = Decimal(row[VALUE].strip())
        charges.setdefault(group, []).append(price(TABLE[group], q, q, MINIMUM, Decimal(SURCHARGES[group])))
result = [{GROUP: g, 'records': len(cs), 'total_charge': total_of(cs)} for g, cs in sorted(charges.items())]
write_deliverable(result)
