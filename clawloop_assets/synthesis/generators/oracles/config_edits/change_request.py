"""Oracle of config_edits levels 2-5: the change request applied to each
configuration file in scope, as plain line edits of INI and .env files
(comments kept) and JSON loaded and written back; each contract rule is one
recognizable line. Limits (`max_...`) are scaled by FACTOR and rounded by
MODE (a decimal rounding mode's name), OLD renamed to NEW, DEPRECATED
removed, log_level set to LEVEL, schema_version set to VERSION (a file
already at VERSION is left alone), and the required keys added where a file
does not set them.

Level 2 gives the required keys in REQUIRED and edits every file of config/;
from level 3 (REQUIRED None) the required keys come from shared/defaults.ini
and the files in scope from services.csv. Levels 4-5: OLD_MS, a setting in
milliseconds, is renamed too (divided by MS_PER_S), and when DIRTY a required
key with an empty value counts as missing and a listed file that does not
exist is skipped. Level 5: with ORDER a log level is only ever raised, when
CAPPED limits are capped by the `[caps]` of shared/defaults.ini (one already
above its cap left alone), and when LAST_WINS only the last assignment of a
key in an .env file is kept. Runs in the workspace."""

import configparser
import csv
import json
import os
from decimal import Decimal

# ---- parameters (the generator writes the task's values here)
FACTOR_TEXT = '1.25'
MODE = 'ROUND_HALF_UP'
VERSION = 3
OLD = 'timeout_s'
NEW = 'request_timeout_s'
DEPRECATED = 'legacy_sync'
LEVEL = 'WARN'
REQUIRED = None
OLD_MS = None
MS_PER_S = None
ORDER = None
DIRTY = False
CAPPED = False
LAST_WINS = False
# ---- end of parameters
FACTOR = Decimal(FACTOR_TEXT)

if REQUIRED is None:  # the required keys in shared/defaults.ini, the files in scope in services.csv
    REF = configparser.ConfigParser(interpolation=None)
    REF.optionxform = str
    REF.read('shared/defaults.ini')
    REQUIRED = {k.lower(): v for k, v in REF['required'].items()}
    if CAPPED:
        CAPS = {k.lower(): Decimal(v) for k, v in REF['caps'].items()}
    FILES = []
    with open('services.csv', newline='') as f:
        for row in csv.DictReader(f):
            if row['config_file'].strip() not in FILES:
                FILES.append(row['config_file'].strip())
else:
    FILES = sorted(os.path.join('config', n) for n in os.listdir('config')
                   if n.endswith(('.json', '.ini', '.env')))


def plain(d):
    return int(d) if d == d.to_integral_value() else float(d)


def scaled(name, value):
    old = Decimal(str(value))
    if CAPPED:
        cap = CAPS[name]
        if old > cap:
            return value  # an approved exception stays as it is
        new = min(old * FACTOR, cap)
    else:
        new = old * FACTOR
    return int(new.to_integral_value(rounding=MODE))


def edit(key, value, env):
    """(key, value) after the change, or None when the key goes."""
    name = key.lower()
    if name == DEPRECATED:
        return None
    if name == OLD:
        return (NEW.upper() if env else NEW), value
    if name == OLD_MS:
        return (NEW.upper() if env else NEW), plain(Decimal(str(value)) / MS_PER_S)
    if name.startswith('max_'):
        return key, scaled(name, value)
    if name == 'schema_version':
        return key, VERSION
    if name == 'log_level':
        if ORDER:
            return key, value if ORDER.index(value) >= ORDER.index(LEVEL) else LEVEL
        return key, LEVEL
    if name in REQUIRED:
        if DIRTY and not str(value).strip():
            return None  # an empty value counts as missing
        return key, value  # a file that sets it keeps its own value
    return key, value


def typed(text):
    return plain(Decimal(text)) if text.replace('.', '', 1).isdigit() else text


def edit_json(path):
    with open(path) as f:
        data = json.load(f)
    if data.get('schema_version') == VERSION:
        return  # migrated before

    def walk(node):
        out = {}
        for key, value in node.items():
            pair = (key, walk(value)) if isinstance(value, dict) else edit(key, value, False)
            if pair:
                out[pair[0]] = pair[1]
        return out
    data = walk(data)
    present = {k.lower() for k in data}
    for key, default in REQUIRED.items():
        if key not in present:
            data[key] = typed(default)
    with open(path, 'w') as f:
        f.write(json.dumps(data, indent=2) + '\n')


def edit_lines(path, env):
    with open(path) as f:
        lines = f.read().splitlines()
    settings = [(i, t.strip().partition('=')) for i, t in enumerate(lines)
                if t.strip() and not t.strip().startswith(('#', ';', '['))]
    if any(k.strip().lower() == 'schema_version' and v.strip() == str(VERSION) for _, (k, _, v) in settings):
        return  # migrated before
    last = {k.strip().lower(): i for i, (k, _, v) in settings}
    out, section, present, end = [], None, set(), None
    for i, line in enumerate(lines):
        text = line.strip()
        if not text:
            out.append(line)
            continue
        if text.startswith(('#', ';')):
            out.append(line)  # a comment stays as it is
            continue
        if text.startswith('['):
            section = text[1:-1].strip()
            out.append(line)
            continue
        key, _, value = text.partition('=')
        key, value = key.strip(), value.strip()
        if LAST_WINS and env and last[key.lower()] != i:
            continue  # the last assignment of a key is the one in effect
        pair = edit(key, value, env)
        if pair is None:
            continue
        out.append(('%s=%s' if env else '%s = %s') % pair)
        if env or section == 'service':
            present.add(pair[0].lower())
            end = len(out)
    added = [('%s=%s' % (k.upper(), v)) if env else ('%s = %s' % (k, v))
             for k, v in REQUIRED.items() if k not in present]
    end = len(out) if end is None else end
    out[end:end] = added
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')


for path in FILES:
    if DIRTY and not os.path.exists(path):
        continue  # listed, but there is no such file: not created
    if path.endswith('.json'):
        edit_json(path)
    else:
        edit_lines(path, path.endswith('.env'))
