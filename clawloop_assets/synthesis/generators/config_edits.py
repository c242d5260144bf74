#!/usr/bin/env python3
"""Generator family `config_edits` (terminal track).

build(seed, params) -> task: the configuration files of a few services
named from the domain (JSON, INI and KEY=value .env files), a change request,
the answer contract, `config_values` checks that list every key of every
configuration file (changed and unchanged) plus the keys that must be gone,
`contains` checks that the comment lines are still there, and an oracle
solution. Stdlib-only, with generator_common.py beside it: it runs in the
sandbox as `python3 -I /generator/config_edits.py --params P --seed N --out /out`.

Levels: 0 = one sed command on one file (rename an .env key, set an INI
value, delete an INI key, change a JSON value); 1 = rename and delete, or set
and add, in the INI and .env files of one service; 2 = a change request over
every file of config/ (scale limits with a stated rounding, rename a key,
remove a deprecated key, add a required key only where it is missing, set the
log level where one is set, bump the schema version; a file already at that
version is left alone; .env keys upper case; comments kept); 3 = the same
with services.csv as the index of the files in scope (a retired service is
not listed), the required keys and their defaults in shared/defaults.ini (a
reference, never edited); 4 = level 3 on dirty data (key names in mixed
case, a timeout in milliseconds, a required key with an empty value,
commented-out settings, backup copies, an index row for a file that does
not exist); 5 = level 4 on a dozen and more services (hundreds of keys) with
limit caps and approved exceptions, a log level that is only ever raised, a
name with `max` inside that is no limit, and .env files that set a key twice.
"""

import json
import os
import sys
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import assemble, csv_text, family, level0_variant, numbered_levels, python_oracle  # noqa: E402

FORMATS = ("json", "ini", "env")
LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
# name -> (decimal rounding constant, how the contract says it)
ROUNDINGS = {
    "half_up": ("ROUND_HALF_UP", "rounded to the nearest whole number, an exact half going up"),
    "up": ("ROUND_CEILING", "rounded up to the next whole number (a whole result stays as it is)"),
    "down": ("ROUND_FLOOR", "rounded down to the whole number below (a whole result stays as it is)"),
}
DECIMAL_MODES = {"ROUND_HALF_UP": ROUND_HALF_UP, "ROUND_CEILING": ROUND_CEILING, "ROUND_FLOOR": ROUND_FLOOR}
# Quarter factors: scaled values end in .25, .5 and .75, so every rounding rule decides some value.
FACTORS = ("1.25", "1.75", "2.25", "0.75")
# (old name, new name, the old name of the same setting given in milliseconds)
RENAMES = (
    ("timeout_s", "request_timeout_s", "timeout_ms"),
    ("poll_interval_s", "sync_interval_s", "poll_interval_ms"),
    ("idle_timeout_s", "idle_close_after_s", "idle_timeout_ms"),
)
DEPRECATED = ("legacy_sync", "compat_mode", "old_auth")
FILE_NAMES = {"json": "service.json", "ini": "settings.ini", "env": "runtime.env"}
DECOY = "backoff_max_s"
COMMENTS = (
    "values agreed with the operations team",
    "reviewed before the busy season",
    "keep in step with the shared defaults",
    "owned by the platform group",
    "edit by change request only",
)
MS_PER_S = 1000


# ---- the configuration model: a file is a list of items in order
#   ("key", section, key, value)  a setting; section is None at the top of a JSON or .env file
#   ("comment", section, text)    a comment line (INI and .env only)

def setting(section, key, value):
    return ("key", section, key, value)


def comment(section, text):
    return ("comment", section, text)


def json_value(value):
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def render(fmt, items):
    if fmt == "json":
        data = {}
        for item in items:
            if item[0] == "key":
                target = data if item[1] is None else data.setdefault(item[1], {})
                target[item[2]] = json_value(item[3])
        return json.dumps(data, indent=2) + "\n"
    lines, current = [], None
    for item in items:
        if fmt == "ini" and item[1] != current:
            lines += ([""] if lines else []) + ["[%s]" % item[1]]
            current = item[1]
        if item[0] == "comment":
            lines.append(item[2])
        else:
            lines.append(("%s=%s" if fmt == "env" else "%s = %s") % (item[2], item[3]))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def key_path(fmt, section, key):
    return key if section is None or fmt == "env" else "%s.%s" % (section, key)


def expected_values(fmt, items):
    values = {}
    for item in items:
        if item[0] == "key":
            value = item[3]
            values[key_path(fmt, item[1], item[2])] = json_value(value) if not isinstance(value, str) else value
    return dict(sorted(values.items()))


def comment_lines(items):
    return [item[2] for item in items if item[0] == "comment"]


def canonical(name, fmt):
    return name.upper() if fmt == "env" else name


def mixed_case(name):
    return "_".join(part.capitalize() for part in name.split("_"))


# ---- the change request applied to the model (the gold end state)

def scaled(cr, name, value):
    old = Decimal(value)
    cap = cr["caps"].get(name)
    if cap is not None and old > cap:
        return old  # an approved exception stays as it is
    new = old * cr["factor"]
    if cap is not None and new > cap:
        new = Decimal(cap)
    return new.to_integral_value(rounding=DECIMAL_MODES[ROUNDINGS[cr["rounding"]][0]])


def raised_level(cr, value):
    if cr["at_least"] and LOG_LEVELS.index(value) >= LOG_LEVELS.index(cr["level"]):
        return value
    return cr["level"]


def migrate(cr, fmt, items):
    """(items after the change request, paths that must be gone)."""
    if any(i[0] == "key" and i[2].lower() == "schema_version" and i[3] == cr["version"] for i in items):
        return items, []  # migrated before
    last = {}
    for index, item in enumerate(items):
        if item[0] == "key":
            last[item[2].lower()] = index
    out, absent = [], []
    for index, item in enumerate(items):
        if item[0] != "key":
            out.append(item)
            continue
        _, section, key, value = item
        name = key.lower()
        if fmt == "env" and last[name] != index:
            continue  # an earlier assignment of a key set again below
        if name == cr["dep"]:
            absent.append(key_path(fmt, section, key))
            continue
        if name == cr["old"]:
            absent.append(key_path(fmt, section, key))
            item = setting(section, canonical(cr["new"], fmt), value)
        elif name == cr["old_ms"]:
            absent.append(key_path(fmt, section, key))
            item = setting(section, canonical(cr["new"], fmt), Decimal(value) / MS_PER_S)
        elif name.startswith("max_"):
            item = setting(section, key, scaled(cr, name, value))
        elif name == "schema_version":
            item = setting(section, key, cr["version"])
        elif name == "log_level":
            item = setting(section, key, raised_level(cr, value))
        elif name in cr["required"] and value == "":
            continue  # an empty value counts as missing
        out.append(item)
    home = {"json": None, "ini": "service", "env": None}[fmt]
    present = {i[2].lower() for i in out if i[0] == "key" and (fmt == "env" or i[1] == home)}
    added = [setting(home, canonical(k, fmt), v) for k, v in cr["required"].items() if k not in present]
    if fmt == "ini":
        at = max(n for n, i in enumerate(out) if i[1] == "service") + 1
        out = out[:at] + added + out[at:]
    else:
        out = out + added
    if not any(i[0] == "key" and i[2].lower() == "log_level" for i in items):
        absent.append(key_path(fmt, "service", canonical("log_level", fmt)))
    return out, absent


# ---- levels 0 and 1: one service, explicit steps

def small_service(rng, d, svc):
    limit = "max_" + d["record_file"]
    return {
        "host": "%s.%s.internal" % (svc, d["id_prefix"].lower()),
        "port": rng.randint(8000, 8999),
        "limit": (limit, rng.randint(12, 400)),
        "workers": rng.randint(12, 64),
        "timeout": rng.randint(10, 120),
        "data_dir": "/srv/%s/%s" % (d["record_file"], svc),
        "alert": alert_value(rng, d),
    }


def alert_key(d):
    # A prefix, never a suffix: a field named max_... would read as a limit.
    return "threshold_" + d["numeric_field"]


def alert_value(rng, d):
    low, high = d["numeric_range"]
    return Decimal(rng.randint(int(low * 10) + 1, int(high * 10))) / 10


def small_contract(path, fmt, rules, labels=(), parameters=None):
    return {
        "deliverable": {"path": path, "format": fmt, "schema": "the same file, edited in place"},
        "rules": list(rules) + ["Every other line of the file stays exactly as it is."],
        "parameters": dict(parameters or {}),
        "labels": list(labels),
    }


def config_check(path, fmt, items, absent=()):
    check = {"type": "config_values", "name": "keys of %s" % path, "path": path, "format": fmt,
             "expected": expected_values(fmt, items)}
    if absent:
        check["absent"] = sorted(set(absent))
    return check


def comments_check(path, items):
    return {"type": "contains", "name": "comments of %s" % path, "path": path, "min_words": 1,
            "expected": comment_lines(items)}


def level0(rng, seed, params):
    d = params["domain"]
    svc = rng.choice(d["group_values"])
    s = small_service(rng, d, svc)
    variant = level0_variant(seed)
    labels = []
    if variant == 0:
        old, new, low, high = rng.choice((("TIMEOUT", "TIMEOUT_S", 10, 120), ("WORKERS", "WORKER_COUNT", 2, 32),
                                          ("RETRIES", "RETRY_LIMIT", 2, 9)))
        path, fmt = svc + ".env", "env"
        before = [comment(None, "# runtime overrides for %s" % svc), setting(None, "PORT", s["port"]),
                  setting(None, old, rng.randint(low, high)), setting(None, s["limit"][0].upper(), s["limit"][1]),
                  setting(None, "DATA_DIR", s["data_dir"])]
        after = [setting(None, new, i[3]) if i[0] == "key" and i[2] == old else i for i in before]
        absent = [old]
        instruction = "In %s, rename the key %s to %s and keep its value." % (path, old, new)
        solution = "sed -i 's/^%s=/%s=/' %s" % (old, new, path)
        rule = "Only the name of the key changes; its value stays the same."
    elif variant == 1:
        target = rng.choice(("DEBUG", "WARN", "ERROR"))
        path, fmt = svc + ".ini", "ini"
        before = [setting("server", "host", s["host"]), setting("server", "port", s["port"]),
                  setting("logging", "level", "INFO"), setting("logging", "file", "/var/log/%s.log" % svc),
                  setting("storage", "data_dir", s["data_dir"])]
        after = [setting("logging", "level", target) if i[2] == "level" else i for i in before]
        absent, labels = [], [target]
        instruction = "In %s, set the key level of the [logging] section to %s." % (path, target)
        solution = "sed -i 's/^level = .*/level = %s/' %s" % (target, path)
        rule = "Only the value of that one key changes."
    elif variant == 2:
        dep = rng.choice(DEPRECATED)
        path, fmt = svc + ".ini", "ini"
        before = [setting("server", "host", s["host"]), setting("server", "port", s["port"]),
                  setting("server", dep, "on"), setting("limits", s["limit"][0], s["limit"][1]),
                  setting("limits", "max_workers", s["workers"])]
        after = [i for i in before if i[2] != dep]
        absent = ["server." + dep]
        instruction = "Delete the %s setting from %s; it is no longer used." % (dep, path)
        solution = "sed -i '/^%s =/d' %s" % (dep, path)
        rule = "The whole line of that setting goes; nothing else is removed."
    else:
        target = rng.choice(("DEBUG", "WARN", "ERROR"))
        path, fmt = svc + ".json", "json"
        before = [setting("service", "host", s["host"]), setting("service", "port", s["port"]),
                  setting("service", "log_level", "INFO"), setting("limits", s["limit"][0], s["limit"][1]),
                  setting("alerts", alert_key(d), s["alert"])]
        after = [setting("service", "log_level", target) if i[2] == "log_level" else i for i in before]
        absent, labels = [], [target]
        instruction = "In %s the log level is INFO; change it to %s." % (path, target)
        solution = "sed -i 's/\"INFO\"/\"%s\"/' %s" % (target, path)
        rule = "Only that one value changes; the file stays valid JSON."
    contract = small_contract(path, fmt, [rule], labels)
    check = config_check(path, fmt, after, absent)
    return assemble(params, instruction, {path: render(fmt, before)}, contract, [check], {path: check["expected"]},
                    solution, "tree")


def level1(rng, seed, params):
    d = params["domain"]
    svc = rng.choice(d["group_values"])
    s = small_service(rng, d, svc)
    old, new, _ = rng.choice(RENAMES)
    dep = rng.choice(DEPRECATED)
    level = rng.choice(("DEBUG", "WARN", "ERROR"))
    start = rng.choice([v for v in LOG_LEVELS if v != level])
    ini_path, env_path = svc + ".ini", svc + ".env"
    ini = [comment(None, "# %s service %s" % (d["entity"], svc)),
           setting("service", "host", s["host"]), setting("service", "port", s["port"]),
           setting("service", "log_level", start), setting("service", dep, "on"),
           setting("limits", s["limit"][0], s["limit"][1]), setting("limits", "max_workers", s["workers"]),
           setting("network", old, s["timeout"]), setting("storage", "data_dir", s["data_dir"])]
    env = [comment(None, "# runtime overrides for %s" % svc),
           setting(None, "LOG_LEVEL", rng.choice(LOG_LEVELS[:1] + (start,))),
           setting(None, old.upper(), rng.randint(10, 120)), setting(None, dep.upper(), "on"),
           setting(None, "PORT", s["port"] + 1)]
    if env[1][3] == level:
        env[1] = setting(None, "LOG_LEVEL", start)
    parameters, labels = {}, []
    if seed % 2 == 0:
        ini_after = [setting(i[1], new, i[3]) if i[2] == old else i for i in ini if i[2] != dep]
        env_after = [setting(None, new.upper(), i[3]) if i[2] == old.upper() else i for i in env if i[2] != dep.upper()]
        absent_ini, absent_env = ["network." + old, "service." + dep], [old.upper(), dep.upper()]
        instruction = (
            "The %s service is configured by %s and %s. In both files, rename the key %s to %s (written %s and %s in "
            "the .env file) keeping its value, and delete the deprecated %s setting (%s in the .env file)."
            % (svc, ini_path, env_path, old, new, old.upper(), new.upper(), dep, dep.upper())
        )
        solution = (
            "sed -i -e 's/^%s =/%s =/' -e '/^%s =/d' %s\n"
            "sed -i -e 's/^%s=/%s=/' -e '/^%s=/d' %s"
            % (old, new, dep, ini_path, old.upper(), new.upper(), dep.upper(), env_path)
        )
        rules = ["A renamed key keeps its value and its place.", "A deleted setting loses its whole line."]
    else:
        days = rng.randint(14, 90)
        ini_after = [setting("service", "log_level", level) if i[2] == "log_level" else i for i in ini]
        at = max(n for n, i in enumerate(ini_after) if i[1] == "service") + 1
        ini_after = ini_after[:at] + [setting("service", "retention_days", days)] + ini_after[at:]
        env_after = [setting(None, "LOG_LEVEL", level) if i[2] == "LOG_LEVEL" else i for i in env]
        env_after.append(setting(None, "RETENTION_DAYS", days))
        absent_ini, absent_env = [], []
        parameters, labels = {"retention_days": days}, [level]
        instruction = (
            "The %s service is configured by %s and %s. In both files, set the log level (log_level, LOG_LEVEL in the "
            ".env file) to %s, and add the setting retention_days with the value %d: in the [service] section of "
            "%s and as RETENTION_DAYS in %s."
            % (svc, ini_path, env_path, level, days, ini_path, env_path)
        )
        solution = (
            "sed -i -e 's/^log_level = .*/log_level = %s/' -e '/^\\[service\\]/a retention_days = %d' %s\n"
            "sed -i 's/^LOG_LEVEL=.*/LOG_LEVEL=%s/' %s\n"
            "echo 'RETENTION_DAYS=%d' >> %s"
            % (level, days, ini_path, level, env_path, days, env_path)
        )
        rules = ["Keys in the .env file are upper case; in the INI file lower case."]
    contract = {
        "deliverable": {"paths": [ini_path, env_path], "format": "config",
                        "schema": "the same two files, edited in place"},
        "rules": rules + ["Every other line of both files, comments included, stays exactly as it is."],
        "parameters": parameters,
        "labels": labels,
    }
    checks = [config_check(ini_path, "ini", ini_after, absent_ini),
              config_check(env_path, "env", env_after, absent_env)]
    environment = {ini_path: render("ini", ini), env_path: render("env", env)}
    key = {c["path"]: c["expected"] for c in checks}
    return assemble(params, instruction, environment, contract, checks, key, solution, "tree")


# ---- levels 2 to 5: a change request over many services

def limit_names(d):
    names = ["max_" + d["record_file"], "max_connections", "max_batch", "max_queue", "max_workers"]
    return [n for i, n in enumerate(names) if n not in names[:i]]


def quarter_value(rng, factor, residue, modulus, low, high):
    """A value in [low, high] whose product with `factor` (k/4, k odd) has the wanted
    fraction: residue of value * k modulo `modulus`."""
    k = int(factor * 4)
    candidates = [v for v in range(low, high + 1) if (v * k) % modulus == residue]
    return rng.choice(candidates)


def service_base(rng, d, svc):
    return {
        "host": "%s.%s.internal" % (svc, d["id_prefix"].lower()),
        "port": rng.randint(8000, 8999),
        "retry_count": rng.randint(1, 6),
        "data_dir": "/srv/%s/%s" % (d["record_file"], svc),
        "alert": alert_value(rng, d),
    }


def build_file(rng, d, cr, svc, fmt, role):
    """The items of one configuration file of service `svc` as it is before the change."""
    base = role["base"]
    migrated = role.get("migrated", False)
    version = cr["version"] if migrated else cr["old_version"]
    limits = [(name, rng.randint(10, 300)) for name in role["limits"]]
    mixed = role.get("mixed", ())
    limits = [(mixed_case(n) if "limit" in mixed and i == 0 else n, v) for i, (n, v) in enumerate(limits)]
    if migrated:
        tkey, tvalue = cr["new"], rng.randint(5, 120)
    elif role.get("ms"):
        tkey, tvalue = cr["old_ms"], rng.randint(2, 119) * 1000 + rng.randint(1, 9) * 100  # a tenth of a second
    else:
        tkey, tvalue = cr["old"], rng.randint(5, 120)
    if "old" in mixed:
        tkey = mixed_case(tkey)
    note = rng.choice(COMMENTS)
    required = role.get("required", {})
    if fmt == "json":
        items = [setting(None, "schema_version", version), setting("service", "host", base["host"]),
                 setting("service", "port", base["port"])]
        if role.get("log"):
            items.append(setting("service", "log_level", role["log"]))
        items += [setting("limits", n, v) for n, v in limits]
        if role.get("timeout", True):
            items.append(setting("network", tkey, tvalue))
        items.append(setting("network", "retry_count", base["retry_count"]))
        if role.get("decoy"):
            items.append(setting("network", DECOY, rng.randint(10, 90)))
        items += [setting("storage", "data_dir", base["data_dir"]),
                  setting("alerts", alert_key(d), base["alert"])]
        if role.get("dep"):
            items.append(setting(None, cr["dep"], True))
        items += [setting(None, k, v) for k, v in required.items()]
        return items
    if fmt == "ini":
        items = [comment(None, "# %s service %s: %s" % (d["entity"], svc, note)),
                 setting("service", "schema_version", version), setting("service", "host", base["host"]),
                 setting("service", "port", base["port"])]
        if role.get("log"):
            items.append(setting("service", "log_level", role["log"]))
        if role.get("dep"):
            items.append(setting("service", cr["dep"], "on"))
        items += [setting("service", k, v) for k, v in required.items()]
        items.append(comment("limits", "# limits of the %s %s" % (svc, d["group_field"])))
        if role.get("commented"):
            name = rng.choice(cr["limit_names"])
            items.append(comment("limits", "%s %s = %d" % (rng.choice("#;"), name, rng.randint(301, 999))))
        items += [setting("limits", n, v) for n, v in limits]
        if role.get("timeout", True):
            items.append(setting("network", tkey, tvalue))
        items.append(setting("network", "retry_count", base["retry_count"]))
        if role.get("decoy"):
            items.append(setting("network", DECOY, rng.randint(10, 90)))
        items += [setting("storage", "data_dir", base["data_dir"]),
                  setting("alerts", alert_key(d), base["alert"])]
        return items
    items = [comment(None, "# runtime overrides for %s: %s" % (svc, note)), setting(None, "SCHEMA_VERSION", version)]
    if role.get("dup"):
        name, value = limits[0]
        first = value + rng.choice((-1, 1)) * rng.randint(3, 9)
        items.append(setting(None, name.upper(), first if first > 0 else value + 5))
    if role.get("log"):
        items.append(setting(None, "LOG_LEVEL", role["log"]))
    if role.get("commented"):
        items.append(comment(None, "# %s=%d" % (rng.choice(cr["limit_names"]).upper(), rng.randint(301, 999))))
    items += [setting(None, n.upper(), v) for n, v in limits]
    if role.get("timeout", True):
        items.append(setting(None, tkey.upper(), tvalue))
    items.append(setting(None, "PORT", base["port"]))
    if role.get("decoy"):
        items.append(setting(None, DECOY.upper(), rng.randint(10, 90)))
    if role.get("dep"):
        items.append(setting(None, cr["dep"].upper(), "on"))
    items += [setting(None, k.upper(), v) for k, v in required.items()]
    return items


def sets_a_key_twice(items):
    keys = [i[2].lower() for i in items if i[0] == "key"]
    return len(keys) != len(set(keys))


def set_value(items, index, value):
    kind, section, key, _ = items[index]
    items[index] = (kind, section, key, value)


def plan_services(rng, d, level):
    """(in-scope services, retired services) and the formats each one has."""
    if level == 5:
        names = ["%s_%s" % (g, s) for g in d["group_values"] for s in d["file_stems"]]
        chosen = rng.sample(names, rng.randint(14, 18))
        active, retired = chosen[:-2], chosen[-2:]
    else:
        count = {2: 3, 3: 4, 4: 4}[level]
        chosen = rng.sample(list(d["group_values"]), count + (1 if level >= 3 else 0))
        active, retired = chosen[:count], chosen[count:]
    formats = {}
    for svc in active + retired:
        formats[svc] = list(FORMATS) if level == 2 or rng.random() < 0.5 else sorted(rng.sample(FORMATS, 2))
    for fmt in FORMATS:  # at least two files of each format in scope
        for svc in active:
            if sum(fmt in formats[s] for s in active) >= 2:
                break
            if fmt not in formats[svc]:
                formats[svc] = sorted(formats[svc] + [fmt])
    if level >= 4 and all("env" in formats[s] for s in active):
        # one service without an .env file: the index lists one for it anyway
        svc = rng.choice(active)
        formats[svc] = [f for f in formats[svc] if f != "env"]
    return active, retired, formats


def change_request(rng, d, level):
    old, new, old_ms = rng.choice(RENAMES)
    level_target = rng.choice(("INFO", "WARN") if level == 5 else LOG_LEVELS)
    old_version = rng.randint(2, 7)
    required = {"retention_days": rng.randint(14, 90)}
    if level >= 3:
        required["keepalive_s"] = rng.randint(10, 60)
    names = limit_names(d)
    return {
        "factor": Decimal(rng.choice(FACTORS[:3] if level == 5 else FACTORS)),
        "rounding": rng.choice(sorted(ROUNDINGS)),
        "old": old, "new": new, "old_ms": old_ms if level >= 4 else None,
        "dep": rng.choice(DEPRECATED),
        "level": level_target, "at_least": level == 5,
        "old_version": old_version, "version": old_version + 1,
        "required": required,
        "caps": {n: rng.randint(70, 90) * 10 for n in names} if level == 5 else {},
        "limit_names": names,
    }


def path_of(level, svc, fmt):
    return "config/%s.%s" % (svc, fmt) if level == 2 else "services/%s/%s" % (svc, FILE_NAMES[fmt])


def change_task(rng, seed, params, level):
    d = params["domain"]
    cr = change_request(rng, d, level)
    active, retired, formats = plan_services(rng, d, level)
    bases = {svc: service_base(rng, d, svc) for svc in active + retired}
    files = [(svc, fmt) for svc in active for fmt in formats[svc]]
    migrated = rng.choice([f for f in files if f[1] != "env"])
    live = [f for f in files if f != migrated]
    by_fmt = {fmt: [f for f in live if f[1] == fmt] for fmt in FORMATS}
    roles = {}
    for f in files + [(svc, fmt) for svc in retired for fmt in formats[svc]]:
        count = rng.randint(2, 3) if f[1] != "env" else rng.randint(1, 2)
        roles[f] = {"base": bases[f[0]], "limits": rng.sample(cr["limit_names"], count),
                    "dep": rng.random() < 0.4, "log": rng.choice(LOG_LEVELS),
                    "timeout": f[1] != "env" or rng.random() < 0.7, "required": {}}
    target = cr["level"]
    for f in live:
        if rng.random() < 0.25:
            roles[f]["required"] = {k: v + rng.randint(1, 30) for k, v in cr["required"].items() if rng.random() < 0.6}
    # every rule decides something: a deprecated key in each format, a file with a
    # required key of its own, a file without a log level, levels below (and above) the target
    for fmt in FORMATS:
        roles[rng.choice(by_fmt[fmt])]["dep"] = True
    keeper = rng.choice(live)
    roles[keeper]["required"] = {k: v + rng.randint(1, 30) for k, v in cr["required"].items()}
    roles[rng.choice(by_fmt["env"])]["log"] = None
    for f in live:
        if f[1] == "env" and rng.random() < 0.3:
            roles[f]["log"] = None
    lower = [v for v in LOG_LEVELS if LOG_LEVELS.index(v) < LOG_LEVELS.index(target)]
    higher = [v for v in LOG_LEVELS if LOG_LEVELS.index(v) > LOG_LEVELS.index(target)]
    plain = by_fmt["json"] + by_fmt["ini"]
    first, second = rng.sample(plain, 2)
    roles[first]["log"] = rng.choice(lower or higher)
    roles[second]["log"] = rng.choice(higher or lower)
    roles[migrated].update({"migrated": True, "dep": False, "log": rng.choice(higher + [target]),
                            "required": {k: v + rng.randint(0, 30) for k, v in cr["required"].items()}})
    if level >= 4:
        ms_holder = rng.choice(live)
        roles[ms_holder]["ms"], roles[ms_holder]["timeout"] = True, True
        mixed_ini = rng.choice([f for f in by_fmt["ini"] if f != ms_holder] or by_fmt["ini"])
        roles[mixed_ini]["mixed"] = ("old", "limit") if mixed_ini != ms_holder else ("limit",)
        roles[rng.choice(by_fmt["json"])].setdefault("mixed", ("limit",))
        empty_holder = rng.choice([f for f in live if f[1] != "json" and f != keeper])
        roles[empty_holder]["required"] = dict(roles[empty_holder]["required"], retention_days="")
        for f in live:
            roles[f]["commented"] = f[1] != "json" and rng.random() < 0.5
        roles[rng.choice(by_fmt["ini"])]["commented"] = True
        roles[rng.choice(by_fmt["env"])]["commented"] = True
    if level == 5:
        roles[rng.choice(by_fmt["env"])]["dup"] = True
        for f in live:
            roles[f]["decoy"] = rng.random() < 0.3
        roles[rng.choice(plain)]["decoy"] = True
    items = {f: build_file(rng, d, cr, f[0], f[1], roles[f]) for f in roles}
    plant_limits(rng, cr, items, live, roles)
    return items, cr, active, retired, formats, migrated


def plant_limits(rng, cr, items, live, roles):
    """Limits whose scaled values end in .5 after an even number, in .25 and in
    .75 (so each rounding rule gives its own answer), and at level 5 one limit
    scaled past its cap and one already above it."""
    slots = [(f, n) for f in live if not roles[f].get("dup") for n, i in enumerate(items[f])
             if i[0] == "key" and i[2].lower().startswith("max_")]
    chosen = rng.sample(slots, 5 if cr["caps"] else 3)
    factor = cr["factor"]
    for (f, n), (residue, modulus) in zip(chosen, ((2, 8), (1, 4), (3, 4))):
        set_value(items[f], n, quarter_value(rng, factor, residue, modulus, 10, 300))
    if cr["caps"]:
        (f, n), (g, m) = chosen[3:]
        cap = cr["caps"][items[f][n][2].lower()]
        set_value(items[f], n, rng.randint(int((cap + 1) / factor) + 1, cap))
        cap = cr["caps"][items[g][m][2].lower()]
        set_value(items[g], m, cap + rng.randint(5, 120))


# ---- the oracle: what a careful solver writes from the workspace and the contract

def oracle(cr, level):
    """The solution script (oracles/config_edits/change_request.py): plain line edits of INI and .env files
    (comments kept), JSON loaded and written back; each contract rule is one recognizable line."""
    return python_oracle(
        "config_edits", "change_request", FACTOR_TEXT=str(cr["factor"]), MODE=ROUNDINGS[cr["rounding"]][0],
        VERSION=cr["version"], OLD=cr["old"], NEW=cr["new"], DEPRECATED=cr["dep"], LEVEL=cr["level"],
        REQUIRED={"retention_days": str(cr["required"]["retention_days"])} if level == 2 else None,
        OLD_MS=cr["old_ms"], MS_PER_S=MS_PER_S if level >= 4 else None, ORDER=list(LOG_LEVELS) if level == 5 else None,
        DIRTY=level >= 4, CAPPED=level == 5, LAST_WINS=level == 5)


# ---- levels 2 to 5: instruction, contract, checks

def change_contract(cr, level, d):
    factor = str(cr["factor"])
    old, new, dep = cr["old"], cr["new"], cr["dep"]
    rules = []
    if level == 2:
        rules.append("Every .json, .ini and .env file in config/ is in scope.")
    else:
        rules += [
            "Only the files listed in services.csv are in scope. A service directory the index does not list belongs "
            "to a retired service: leave its files alone.",
            "shared/defaults.ini is a reference: read it, never edit it.",
        ]
    if level >= 4:
        rules += [
            "An index row naming a file that does not exist is skipped: do not create that file. Backup copies "
            "(`*.bak`) are not configuration files in scope.",
            "Key names match without regard to letter case in every format (`%s` is the key `%s`). Renamed and "
            "added keys are written in the canonical case; every other key keeps the case it has."
            % (mixed_case(old), old),
        ]
    rules += [
        "In .env files every key is the upper-case form of its name (`%s`, `%s`); in JSON and INI files keys are "
        "lower case. Write renamed and added keys that way." % (old.upper(), new.upper()),
        "A limit is a key whose name begins with `max_`. Its new value is the old value times %s, %s."
        % (factor, ROUNDINGS[cr["rounding"]][1]),
    ]
    if level == 5:
        rules += [
            "Only a name that begins with `max_` is a limit: a name with `max` elsewhere in it (such as `%s`) is not."
            % DECOY,
            "The `[caps]` section of shared/defaults.ini gives the highest value each limit may take: a scaled value "
            "above its cap becomes the cap. A limit that is already above its cap before scaling is an approved "
            "exception: leave it unchanged.",
        ]
    rules.append("`%s` is renamed to `%s` in every format; the renamed key keeps its value and its place (its JSON "
                 "object or INI section)." % (old, new))
    if level >= 4:
        rules.append("A setting given in milliseconds as `%s` is renamed to `%s` too, its value divided by %d and "
                     "written as a plain decimal number of seconds." % (cr["old_ms"], new, MS_PER_S))
    rules.append("The deprecated key `%s` is removed wherever it is set." % dep)
    where = ("at the top level of a JSON file, in the `[service]` section of an INI file, and anywhere in an .env "
             "file")
    if level == 2:
        rules.append("`retention_days` belongs %s. Where a file does not set it, add it with the value %d; a file "
                     "that already sets it keeps its own value." % (where, cr["required"]["retention_days"]))
    else:
        rules.append("Every key of the `[required]` section of shared/defaults.ini belongs %s. Where a file does not "
                     "set it, add it with the value given there; a file that already sets it keeps its own value."
                     % where)
    if level >= 4:
        rules.append("A required key that is present with an empty value counts as missing.")
    if level == 5:
        rules.append("`log_level` is raised, never lowered. The levels in order are DEBUG, INFO, WARN, ERROR: a file "
                     "below %s gets %s, a file at or above it keeps its level." % (cr["level"], cr["level"]))
    else:
        rules.append("Every file that sets `log_level` gets %s." % cr["level"])
    rules += [
        "A file that does not set `log_level` is left without one.",
        "Every file in scope gets `schema_version` %d, except that a file whose `schema_version` is already %d has "
        "been migrated before: leave it exactly as it is." % (cr["version"], cr["version"]),
    ]
    if level == 5:
        rules.append("When an .env file sets the same key more than once, the last assignment is the one in effect: "
                     "keep only that line (changed like any other) and drop the earlier ones.")
    if level >= 4:
        rules.append("A line that starts with `#` or `;` is a comment, even when it looks like a setting.")
    rules.append("Every other key keeps its value, and every comment line stays in its file as it is.")
    parameters = {"factor": float(cr["factor"]), "schema_version": cr["version"]}
    if level == 2:
        parameters["retention_days"] = cr["required"]["retention_days"]
    if level >= 4:
        parameters["ms_per_s"] = MS_PER_S
    labels = list(LOG_LEVELS) if level == 5 else [cr["level"]]
    scope = "every configuration file in config/" if level == 2 else "the configuration files listed in services.csv"
    return {
        "deliverable": {"path": "config/" if level == 2 else "services/", "format": "config",
                        "schema": "%s, edited in place: JSON, INI and KEY=value .env files" % scope},
        "rules": rules,
        "parameters": parameters,
        "labels": labels,
    }


def change_instruction(cr, level, d):
    if level == 2:
        where = ("The %s services are configured by the files in config/: a JSON, an INI and an .env file per "
                 "service." % d["entity"])
        required = "make sure every file sets `retention_days`"
    else:
        where = ("The %s services are configured by the files that services.csv lists (one row per service and "
                 "file); shared/defaults.ini holds the shared defaults." % d["entity"])
        required = "make sure every file sets each key of the `[required]` section of shared/defaults.ini"
    log = ("raise `log_level` to at least %s" if level == 5 else "set `log_level` to %s") % cr["level"]
    return (
        "%s Apply this change request to them, following the rules in CONTRACT.md exactly: multiply every limit by "
        "%s; rename `%s` to `%s`; remove the deprecated key `%s`; %s; %s; and set `schema_version` to %d."
        % (where, cr["factor"], cr["old"], cr["new"], cr["dep"], required, log, cr["version"])
    )


def defaults_items(rng, d, cr, level):
    items = [comment(None, "# Shared defaults of every %s service: a reference, not a service's own file."
                     % d["entity"])]
    items += [setting("required", k, v) for k, v in cr["required"].items()]
    items += [setting("network", cr["old"], rng.randint(10, 60)), setting("network", "retry_count", rng.randint(1, 6))]
    if level == 5:
        items += [setting("caps", n, cr["caps"][n]) for n in cr["limit_names"]]
    else:
        items.append(comment("limits", "# baseline limits for a new service"))
        items += [setting("limits", n, rng.randint(20, 200)) for n in cr["limit_names"][:3]]
    return items


def change_level(rng, seed, params, level):
    d = params["domain"]
    items, cr, active, retired, formats, migrated = change_task(rng, seed, params, level)
    environment, checks = {}, []
    for (svc, fmt), before in items.items():
        path = path_of(level, svc, fmt)
        environment[path] = render(fmt, before)
        if svc in retired or (svc, fmt) == migrated:
            after, absent = before, []
        else:
            after, absent = migrate(cr, fmt, before)
        checks.append(config_check(path, fmt, after, absent))
        if comment_lines(before):
            checks.append(comments_check(path, before))
    if level >= 3:
        reference = defaults_items(rng, d, cr, level)
        environment["shared/defaults.ini"] = render("ini", reference)
        checks.append(config_check("shared/defaults.ini", "ini", reference))
        rows = [(svc, path_of(level, svc, fmt)) for svc in active for fmt in formats[svc]]
        if level >= 4:
            lacking = rng.choice([svc for svc in active if "env" not in formats[svc]])
            missing = path_of(level, lacking, "env")
            rows.append((lacking, missing))
            checks.append({"type": "tree", "name": "a listed file that does not exist is not created", "files": {},
                           "absent": [missing], "no_other_files": False})
            # backup copies of a few files (never of one that sets a key twice: no parser takes that)
            copies = [f for f in items if f[0] in active and f[1] != "json" and not sets_a_key_twice(items[f])]
            for svc, fmt in rng.sample(copies, 2):
                path = path_of(level, svc, fmt)
                environment[path + ".bak"] = environment[path]
                checks.append(config_check(path + ".bak", fmt, items[(svc, fmt)]))
        rng.shuffle(rows)
        environment["services.csv"] = csv_text(["service", "config_file"], rows)
    contract = change_contract(cr, level, d)
    instruction = change_instruction(cr, level, d)
    key = {c["path"]: c["expected"] for c in checks if c["type"] == "config_values"}
    return assemble(params, instruction, dict(sorted(environment.items())), contract, checks, key, oracle(cr, level),
                    "tree")


LEVELS = (level0, level1) + numbered_levels(change_level, (2, 3, 4, 5))
build = family(__name__, LEVELS)
