"""The deliverable writer an oracle embeds (generator_common.records_deliverable):
write_deliverable(result) writes `result`, a list of dicts (Decimal values as
numbers), as the task's structured deliverable. Its names start with `_`, to
stay clear of the oracle's own."""

import csv as _csv
import json as _json
import os as _os
from decimal import Decimal as _Decimal

# ---- parameters (the generator writes the task's values here)
_FMT = 'json'
_STEM = 'result'
_COLUMNS = ['id', 'value']
_KEY = ['id']
_SPLIT = None
_VALUES = []
# ---- end of parameters


def _plain(value):
    if isinstance(value, _Decimal):
        return int(value) if value == value.to_integral_value() and value.as_tuple().exponent >= 0 else float(value)
    return value


def _write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = _csv.writer(handle, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in _COLUMNS])


def write_deliverable(result):
    fmt, stem = _FMT, _STEM
    if fmt == "csv":
        _write_csv(stem + ".csv", result)
    elif fmt == "files":
        _os.makedirs(stem, exist_ok=True)
        for value in _VALUES:
            _write_csv("%s/%s.csv" % (stem, value), [r for r in result if r[_SPLIT] == value])
    else:
        if fmt == "report":
            lines = ["# Findings", "", "This report lists %d records found by the rules of the contract." % len(result), ""]
            for r in result:
                name = " ".join(str(r[k]) for k in _KEY if r[k] not in (None, ""))
                lines.append("- %s: " % name + ", ".join("%s %s" % (c, r[c]) for c in _COLUMNS if c not in _KEY))
            with open(stem + ".md", "w") as handle:
                handle.write("\n".join(lines) + "\n")
        with open(stem + ".json", "w") as handle:
            _json.dump([{c: _plain(r[c]) for c in _COLUMNS} for r in result], handle, indent=2)
