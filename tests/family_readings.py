"""What tests/test_family_contract.py checks of each task family, as data: the
cases each family is built in, what its bundles hold, its level-0 and level-5
promises, and its contract readings. A reading is the oracle's solve.sh with
one rule of the contract read the other way (exact replacements, each
occurring once in solve.sh); the generator plants data where the two readings
differ, so each must make the real verifier score 0."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from clawloop_assets.synthesis.catalogs import load_domain_catalog

DOMAINS = load_domain_catalog()
BY_ID = {d.id: d for d in DOMAINS}
FORMATS = ("json", "csv", "files", "report")


@dataclass(frozen=True)
class Reading:
    domain: object
    level: int
    seed: int
    name: str
    edits: object  # [(exact text, replacement), ...], or a function of solve.sh giving them


@dataclass(frozen=True)
class Large:
    """Level 5 is large but small on disk: each of `counts(root, domain)` (a
    level-5 bundle or generator output) reaches `at_least`, and the bytes under
    `size_of` stay below `max_bytes`. `runs` are the (domain, seed) whose
    generator also runs in under a second of CPU time."""

    counts: Callable[[Path, object], dict[str, int]]
    at_least: dict[str, int]
    max_bytes: int | None = None
    size_of: tuple[str, ...] = ("",)
    runs: tuple = ()


@dataclass(frozen=True)
class Family:
    cases: list  # (domain, level, seed): builds and passes agent-free validation
    readings: list[Reading]
    format: str | None = None  # its one deliverable format; None: FORMATS[seed % 4] from level 2 up
    labels: frozenset[str] | None = None  # the contract's labels from level 2 up
    check_types: frozenset[str] | None = None  # the answer's checks, at least one, are all of these types
    max_bundle_bytes: int | None = None  # every bundle built
    level0_step: Callable[[str], str] | None = None  # the level-0 command, file names aside; None: no level 0 here
    level0_domains: Callable[[list], list] | None = None  # long names the level-0 command must still fit
    same_seed: tuple = ()  # (domain, level): seed 7 twice gives the same bytes, seed 8 others
    same_seed_database: bool = False  # ... and the database itself differs
    large: Large | None = None  # checked on every level-5 bundle built, and on `large.runs`
    solve_exits_0: bool = True  # a reading still yields a deliverable: the edited solve.sh exits 0


def pairs(edits):
    """(old, new, old, new, ...), or a function of solve.sh giving that, as pairs."""
    if callable(edits):
        return lambda solve: pairs(edits(solve))
    return list(zip(edits[::2], edits[1::2]))


def toggle(edits):
    """A reading of a rule the task draws one of two ways: whichever value
    solve.sh holds becomes the other."""
    correct, other = edits
    return lambda solve: [(correct, other) if correct in solve else (other, correct)]


def file_names(*extensions: str) -> Callable[[str], str]:
    pattern = re.compile(r"\S+\.(%s)\b" % "|".join(extensions))
    return lambda command: pattern.sub("FILE", command)


def one_reading_per_seed(table: dict, seeds, domain_of) -> list[Reading]:
    """Readings {name: (level, pairs)}, each on its own bundle per seed."""
    return [Reading(domain_of(level, seed), level, seed, name, edits)
            for name, (level, edits) in sorted(table.items()) for seed in seeds]


def by_level(tables: dict, bundles: dict) -> list[Reading]:
    """Readings {level: {name: flat edits}} on the bundle {level: (domain, seed)}."""
    return [Reading(bundles[level][0], level, bundles[level][1], name, pairs(edits))
            for level, table in sorted(tables.items()) for name, edits in sorted(table.items())]


def answer(root: Path) -> dict:
    return json.loads((root / "answer" / "answer.json").read_text())


def answer_checks(root: Path) -> list[dict]:
    return answer(root)["checks"]


def index_rows(root: Path, pattern: str) -> list[str]:
    """The rows of the environment's index file (the one `pattern` matches), header aside."""
    return next((root / "environment").glob(pattern)).read_text().splitlines()[1:]


def usage_lines(root: Path, domain) -> dict[str, int]:
    """rate_table_calculation: the usage lines of every detail file (JSON or CSV)."""
    lines = 0
    for path in (root / "environment").rglob("*"):
        if path.parent.name == "environment":
            continue
        text = path.read_text()
        lines += len(json.loads(text)["lines"]) if path.suffix == ".json" else len(text.splitlines()) - 1
    return {"usage lines": lines}


def sqlite_rows(root: Path, domain) -> dict[str, int]:
    """sqlite_change_set: the rows the answer expects in the record table and in the change log."""
    tables = {c["table"]: len(c["expected"]) for c in answer_checks(root)}
    return {"records": tables[domain.record_file], "change_log": tables["change_log"]}


# ---- config_edits

def _config_edits() -> Family:
    MODE_LINE = re.compile(r"MODE = '(ROUND_\w+)'")
    MODES = ("ROUND_HALF_UP", "ROUND_HALF_EVEN", "ROUND_CEILING", "ROUND_FLOOR")


    def other_rounding(k):
        """The k-th of the three rounding modes the contract does not state (half to
        even among them: Python's round, Decimal's default)."""
        def edits(solve):
            line = MODE_LINE.search(solve)
            other = [m for m in MODES if m != line.group(1)][k]
            return (line.group(0), line.group(0).replace(line.group(1), other))
        return edits


    COMMON = {
        "rounding read as another mode (first)": other_rounding(0),
        "rounding read as another mode (second)": other_rounding(1),
        "rounding read as another mode (third)": other_rounding(2),
        "limits left unrounded": ("return int(new.to_integral_value(rounding=MODE))", "return plain(new)"),
        "a migrated file migrated again": (
            "    if data.get('schema_version') == VERSION:", "    if False:",
            "    if any(k.strip().lower() == 'schema_version'",
            "    if False and any(k.strip().lower() == 'schema_version'"),
        "the deprecated key kept": ("    if name == DEPRECATED:\n        return None",
                                    "    if name == DEPRECATED:\n        return key, value"),
    }
    LEVEL2 = {
        **COMMON,
        "a required key a file sets reset to the default": (
            "        return key, value  # a file that sets it keeps its own value",
            "        return key, typed(REQUIRED[name])"),
        ".env keys written in lower case": ("return (NEW.upper() if env else NEW), value", "return NEW, value",
                                            "('%s=%s' % (k.upper(), v))", "('%s=%s' % (k, v))"),
        "comments dropped": ("            out.append(line)  # a comment stays as it is", "            pass"),
        "log_level added where a file sets none": ("REQUIRED = {'retention_days': ",
                                                   "REQUIRED = {'log_level': LEVEL, 'retention_days': "),
    }
    LEVEL3 = {
        "retired services edited too": (
            "for path in FILES:",
            "for path in FILES + sorted(os.path.join(r, n) for r, _, ns in os.walk('services') for n in ns "
            "if os.path.join(r, n) not in FILES):"),
        "the shared defaults edited too": ("for path in FILES:", "for path in FILES + ['shared/defaults.ini']:"),
        "a required key a file sets reset to the default": LEVEL2["a required key a file sets reset to the default"],
    }
    LEVEL4 = {
        "key names matched case-sensitively": ("    name = key.lower()",
                                               "    name = key.lower() if key.isupper() else key"),
        "milliseconds not converted": ("plain(Decimal(str(value)) / MS_PER_S)", "value"),
        "an empty required value kept": ("            return None  # an empty value counts as missing",
                                         "            return key, value"),
        "a listed file that does not exist created": (
            "        continue  # listed, but there is no such file: not created", "        open(path, 'w').close()"),
        "commented-out settings read as settings": (
            "        if text.startswith(('#', ';')):", "        if text.startswith(('#', ';')) and '=' not in text:",
            "        key, _, value = text.partition('=')", "        key, _, value = text.lstrip('#; ').partition('=')"),
        "backup copies edited too": ("for path in FILES:",
                                     "for path in FILES + [p + '.bak' for p in FILES if os.path.exists(p + '.bak')]:"),
    }
    LEVEL5 = {
        **{name: COMMON[name] for name in COMMON if name.startswith(("rounding", "a migrated"))},
        "log_level lowered too": (
            "            return key, value if ORDER.index(value) >= ORDER.index(LEVEL) else LEVEL",
            "            return key, LEVEL"),
        "caps ignored": ("        if old > cap:\n            return value  # an approved exception stays as it is\n",
                         "", "min(old * FACTOR, cap)", "old * FACTOR"),
        "a limit above its cap lowered to the cap": ("            return value  # an approved exception stays as it is",
                                                     "            return int(cap)"),
        "a scaled value above its cap kept": ("min(old * FACTOR, cap)", "old * FACTOR"),
        "a name with max inside read as a limit": ("    if name.startswith('max_'):", "    if 'max_' in name:",
                                                   "        cap = CAPS[name]",
                                                   "        cap = CAPS.get(name, Decimal('Infinity'))"),
        "the first assignment in an .env file wins": (
            "    last = {k.strip().lower(): i for i, (k, _, v) in settings}",
            "    last = {k.strip().lower(): i for i, (k, _, v) in reversed(settings)}"),
        "key names matched case-sensitively": LEVEL4["key names matched case-sensitively"],
    }
    READINGS = {2: LEVEL2, 3: LEVEL3, 4: LEVEL4, 5: LEVEL5}
    # The bundle each level's readings run on: (domain index, seed).
    READING_BUNDLES = {2: (3, 1), 3: (17, 2), 4: (29, 3), 5: (44, 0)}
    return Family(
        # Every level in three domains that shift with the level, seeds 0-3 in turn.
        cases=[(DOMAINS[(level * 11 + k * 21) % len(DOMAINS)], level, (level + k) % 4)
               for level in range(6) for k in range(3)],
        format="tree",
        check_types=frozenset({"config_values", "contains", "tree"}),
        level0_step=file_names("env", "ini", "json"),
        same_seed=((DOMAINS[5], 5),),
        # hundreds of keys, each one checked
        large=Large(lambda root, domain: {"keys": sum(len(c["expected"]) for c in answer_checks(root)
                                                       if c["type"] == "config_values")}, {"keys": 300}),
        readings=by_level(READINGS, {level: (DOMAINS[d], seed) for level, (d, seed) in READING_BUNDLES.items()}),
    )


# ---- cross_source_audit

def _cross_source_audit() -> Family:
    # Edits of the oracle's solve.sh, pairs of (exact text, replacement). The
    # generator plants, for every seed, data where the two readings differ: a
    # difference exactly at the tolerance, a value exactly on the threshold, values
    # on either side of the threshold in register and log, an approval under
    # another group for a record that needs one, records with several findings,
    # lower-case and padded ids, ids only a secondary source names, a record
    # without a log row.
    RULES = {
        "ids compared as written": ("    key = raw.strip().upper()", "    key = raw"),
        "a difference at the tolerance is a mismatch": ("abs(logged[key] - value) > tol",
                                                        "abs(logged[key] - value) >= tol"),
        "a value on the threshold needs no approval": ("if value >= threshold and", "if value > threshold and"),
        "the logged value decides approval": ("if value >= threshold and", "if logged.get(key, value) >= threshold and"),
        "an approval under another group counts": ("group not in groups", "not groups"),
        "a record without a log row is no finding": ("issues.append('missing_log')", "pass"),
        "ids absent from the register are not reported": ("found[key] = ['unregistered']", "pass"),
        "one row per record": ("for issue in found[key]:", "for issue in found[key][:1]:"),
        "difference taken the other way": ("logged[key] - reg[1]", "reg[1] - logged[key]"),
        "logged value only on mismatch rows": ("LOG_COL: logged.get(key),",
                                               "LOG_COL: logged.get(key) if issue == 'value_mismatch' else None,"),
    }
    # Level 3 reads the tolerance and threshold of each record's group from the limits table.
    LAYOUT_RULES = {name: RULES[name] for name in (
        "a difference at the tolerance is a mismatch", "a value on the threshold needs no approval",
        "the logged value decides approval", "an approval under another group counts")}
    LAYOUT_RULES["limits of the approval's group"] = ("tol, threshold = limits_for(group)",
                                                      "tol, threshold = limits_for(approved.get(key, [group])[0])")
    # Level 4's dirty data: drafts, hyphenless ids, the second log file with its
    # columns and units, empty readings, group names in another letter case.
    DIRTY_RULES = {
        "draft dossiers counted": ("files = [row['file'] for row in csv.DictReader(f)]",
                                   "files = sorted(__import__('glob').glob('*/*.txt'))"),
        "ids without their hyphen not matched": ("    if DIRTY and '-' not in key:\n", "    if False:\n"),
        "ids compared as written": ("    key = raw.strip().upper()", "    key = raw"),
        "the second log file ignored": ("        reading(row['id'], row['reading'], row['unit'], row.get('date', ''))",
                                        "        pass"),
        "hundredths read as the unit": ("        value = value / 100", "        pass"),
        "an empty reading counts as zero": ("    if not raw_value.strip():\n        return\n",
                                            "    if not raw_value.strip():\n        raw_value = '0'\n"),
        "group names compared with their case": ("row[GROUP].strip().lower()", "row[GROUP].strip()"),
        "one row per record": RULES["one row per record"],
    }
    # Level 5: dated readings, the `*` limits row, log-only ids, one row per
    # record by priority, plus level 4's dirt and level 2's ties.
    LARGE_RULES = {
        "the earliest reading counts": ("max(rows)[1]", "min(rows)[1]"),
        "the latest row counts even when empty": ("    if not raw_value.strip():\n        return\n",
                                                  "    if not raw_value.strip():\n        raw_value = '0'\n"),
        "an unlisted group has no limits": ("limits.get(group, limits['*'])",
                                            "limits.get(group, (Decimal(0), Decimal('Infinity')))"),
        "log-only ids reported": ("if not APPROVALS_ONLY:", "if True:"),
        "priority order reversed": ("key=PRIORITY.index", "key=lambda issue: -PRIORITY.index(issue)"),
        "priority order alphabetical": ("min(found[key], key=PRIORITY.index)", "min(found[key])"),
        "findings counts the reported issue only": ("first['findings'] = len(found[key])", "first['findings'] = 1"),
        "draft dossiers counted": DIRTY_RULES["draft dossiers counted"],
        "ids without their hyphen not matched": DIRTY_RULES["ids without their hyphen not matched"],
        "hundredths read as the unit": DIRTY_RULES["hundredths read as the unit"],
        "group names compared with their case": DIRTY_RULES["group names compared with their case"],
        "a difference at the tolerance is a mismatch": RULES["a difference at the tolerance is a mismatch"],
        "a value on the threshold needs no approval": RULES["a value on the threshold needs no approval"],
        "the logged value decides approval": RULES["the logged value decides approval"],
        "limits of the approval's group": LAYOUT_RULES["limits of the approval's group"],
    }
    # (name, domain, level, seed): formats differ across the four bundles.
    READING_BUNDLES = {
        "L2-json": ("apiary_hive_inventory", 2, 0),
        "L3-csv": ("tide_gauge_readings", 3, 1),
        "L4-files": ("film_archive_reels", 4, 2),
        "L5-report": ("lighthouse_lamp_inspections", 5, 3),
    }
    return Family(
        # Levels 0 and 1 in three domains; levels 2 to 5 in four, seeds 0-3 giving the
        # four deliverable formats. The domains shift with the level.
        cases=[(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, k)
               for level in range(6) for k in range(3 if level < 2 else 4)],
        labels=frozenset({"group_conflict", "missing_approval", "missing_log", "unregistered", "value_mismatch"}),
        level0_step=file_names("csv", "txt"),
        same_seed=((DOMAINS[5], 2), (DOMAINS[5], 5)),
        # hundreds of register records, the environment under 200 kB
        large=Large(lambda root, domain: {"register records": len(index_rows(root, "*_index.csv"))},
                    {"register records": 200}, max_bytes=200_000, size_of=("environment",), runs=((DOMAINS[7], 1),)),
        readings=[Reading(BY_ID[READING_BUNDLES[name][0]], READING_BUNDLES[name][1], READING_BUNDLES[name][2],
                          reading, pairs(edits))
                  for name, table in (("L2-json", RULES), ("L3-csv", LAYOUT_RULES), ("L4-files", DIRTY_RULES),
                                      ("L5-report", LARGE_RULES))
                  for reading, edits in sorted(table.items())],
    )


# ---- entity_resolution

def _entity_resolution() -> Family:
    # Each contract rule, read the other way: the oracle's solution with that one
    # decision changed (exact replacements, each occurring once). The generator
    # plants data where the two readings differ, so each must score 0.
    LEVEL2_READINGS = {
        "ids compared as written": ("key = canonical(raw_id)", "key = raw_id.strip().upper()"),
        "leading zeros of the number kept": ("'%s-%04d' % (m.group(1).upper(), int(m.group(2)))",
                                             "'%s-%s' % (m.group(1).upper(), m.group(2))"),
        "group compared as written": ("g = raw_group.strip().lower()", "g = raw_group.strip()"),
        "swapped rows skipped": ("            raw_id, raw_group = raw_group, raw_id\n", "            continue\n"),
        "same id in another group is the same entity": ("ent = (key, g)", "ent = (key,)"),
        "a date tie goes to the earlier row": ("key=lambda r: (r[0], r[1])", "key=lambda r: (r[0], -r[1])"),
        "latest is the last row of the file": ("key=lambda r: (r[0], r[1])", "key=lambda r: r[1]"),
        "mean halves rounded to even": ("mean.quantize(Decimal('0.01'), ROUND_HALF_UP)", "mean.quantize(Decimal('0.01'))"),
        "entities entered once omitted": ("for ent, recs in sorted(entities.items()):\n",
                                          "for ent, recs in sorted(entities.items()):\n"
                                          "    if len(recs) < 2:\n"
                                          "        continue\n"),
    }
    # Levels 3-5 share one oracle and one data builder: the card layout rules ...
    CARD_READINGS = {
        "renumbering ignored": ("        while key in renumbered:\n            key = renumbered[key]\n", ""),
        "ids compared as written": ("key = '%s-%04d' % (PREFIX, int(m.group(2)))", "key = row[ID].strip().upper()"),
        "group from the earliest card": ("latest = max(cards, key=lambda c: (c[0], c[1]))",
                                         "latest = min(cards, key=lambda c: (c[0], c[1]))"),
        "a date tie goes to the card listed earlier": ("key=lambda c: (c[0], c[1])", "key=lambda c: (c[0], -c[1])"),
        "group from the card listed last": ("key=lambda c: (c[0], c[1])", "key=lambda c: c[1]"),
        "group compared as written": ("card['group'].strip().lower()", "card['group'].strip()"),
        "entities with one card omitted": ("for key, cards in sorted(entities.items()):\n",
                                           "for key, cards in sorted(entities.items()):\n"
                                           "    if len(cards) < 2:\n"
                                           "        continue\n"),
    }
    # ... the dirty-data rules of levels 4 and 5 ...
    DIRTY_READINGS = {
        "unit factor ignored": (" * FACTORS.get(card['source'], Decimal(1))", ""),
        "void cards counted": ("        if card['status'] == 'void':\n            continue\n", ""),
        "ids of another register kept": ("        if m.group(1).upper() != PREFIX:\n            continue\n", ""),
        "a card without an amount is not a record": ("        entities.setdefault(key, [])",
                                                     "        if amount is None:\n"
                                                     "            continue\n"
                                                     "        entities.setdefault(key, [])"),
    }
    # ... and the decisions level 5 adds.
    LEVEL5_READINGS = {
        "renumbering followed one step only": ("while key in renumbered:", "if key in renumbered:"),
        "total halves rounded to even": ("total.quantize(PLACES, ROUND_HALF_UP)", "total.quantize(PLACES)"),
        "amounts rounded before summing": ("sum((c[3] for c in cards",
                                           "sum((c[3].quantize(PLACES, ROUND_HALF_UP) for c in cards"),
    }
    # Level 3 shares the card readings with level 5 (same oracle, same planting).
    READINGS = {2: LEVEL2_READINGS, 4: DIRTY_READINGS, 5: {**CARD_READINGS, **DIRTY_READINGS, **LEVEL5_READINGS}}
    # One bundle per level, each in another domain and deliverable format.
    READING_BUNDLES = {2: ("tide_gauge_readings", 1), 4: ("apiary_hive_inventory", 3), 5: ("sawmill_log_scaling", 2)}
    return Family(
        # Three or four domains per level (shifting with the level) and seeds 0-3:
        # both level-1 variants and, at levels 2-5, all four deliverable formats.
        cases=[(DOMAINS[(level * 11 + seed * 5) % len(DOMAINS)], level, seed)
               for level in range(6) for seed in range(3 if level < 2 else 4)],
        level0_step=file_names("csv", "txt"),
        # The level-0 command line holds the record file name: the longest one still fits.
        level0_domains=lambda domains: [max(domains, key=lambda d: len(d.record_file))],
        # build_candidate itself runs every generator twice and compares the bytes.
        same_seed=((DOMAINS[5], 3),),
        # hundreds of records (index cards), under a megabyte
        large=Large(lambda root, domain: {"cards": len([row for row in index_rows(root, "index.csv") if row])},
                    {"cards": 200}, max_bytes=1 << 20, runs=((DOMAINS[0], 0), (DOMAINS[30], 1))),
        readings=by_level(READINGS, {level: (BY_ID[d], seed) for level, (d, seed) in READING_BUNDLES.items()}),
    )


# ---- file_reorganization

def _file_reorganization() -> Family:
    READINGS = {
        "the year of the opened date": (3, [("year(record['closed'])", "year(record['opened'])")]),
        "files the manifest does not list filed too": (3, [
            ("for target, claims in sorted(targets.items()):",
             "for path in glob.glob('inbox/**/*_unfiled.*', recursive=True):\n"
             "    targets.setdefault(os.path.join('unassigned', os.path.basename(path)), []).append(('', path))\n"
             "for target, claims in sorted(targets.items()):")]),
        "group names kept as written": (4, [("record[GROUP].strip().lower() or 'unassigned'", "record[GROUP] or 'unassigned'")]),
        "records with no group left in the inbox": (4, [("        group = record[GROUP].strip().lower() or 'unassigned'\n",
                                                         "        group = record[GROUP].strip().lower()\n"
                                                         "        if not group:\n            continue\n")]),
        "day-first dates read from the front": (4, [("return date[-4:] if '/' in date else date[:4]", "return date[:4].strip('/')")]),
        ".tmp files kept": (4, [("    os.remove(path)\n", "    pass\n")]),
        "the later record id keeps the name": (5, [("sorted(claims)", "sorted(claims, reverse=True)")]),
    }
    return Family(
        cases=[(DOMAINS[(level * 29 + seed * 11) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(3)],
        format="tree",
        readings=one_reading_per_seed(READINGS, (0, 1), lambda level, seed: DOMAINS[(seed * 31 + level * 3) % len(DOMAINS)]),
        solve_exits_0=False,  # a reading that crashes the solve is judged on what it left
    )


# ---- grouped_statistics

def _grouped_statistics() -> Family:
    READINGS = {
        "group codes reported untranslated": (3, [("groups.setdefault(names[record[GROUP + '_code']], [])",
                                                   "groups.setdefault(record[GROUP + '_code'], [])")]),
        "detail files the index does not list counted": (4, [
            ("for key, (revision, path) in sorted(latest.items()):", "import glob\nfor path in sorted(glob.glob('records/*.txt')):")]),
        "hundredths taken as whole units": (4, [("Decimal(record[VALUE + '_hundredths']) / 100",
                                                 "Decimal(record[VALUE + '_hundredths'])")]),
        "a valid record without a value counted as zero": (4, [("    else:\n        continue\n",
                                                                "    else:\n        value = Decimal(0)\n")]),
        "the first revision counts": (5, [("revision > latest[row[KEY]][0]", "revision < latest[row[KEY]][0]")]),
        "small groups tiered like the others": (5, [("    if n < MIN_RECORDS:", "    if False:")]),
    }
    return Family(
        # Seeds 0-3 give the four deliverable formats; three domains per level.
        cases=[(DOMAINS[(level * 13 + seed * 7) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(4)],
        readings=one_reading_per_seed(READINGS, (0, 3), lambda level, seed: DOMAINS[(seed * 17 + level) % len(DOMAINS)]),
    )


# ---- ledger_reconciliation

def _ledger_reconciliation() -> Family:
    READINGS = {
        "reference codes not mapped to ids": (3, [("        b[owner[ref]] = b.get(owner[ref], Decimal(0)) + amount\n",
                                                   "        b[ref] = b.get(ref, Decimal(0)) + amount\n")]),
        "only the first entry of a detail file counts": (3, [
            ("a[row[KEY]] = a.get(row[KEY], Decimal(0)) + Decimal(value)", "a.setdefault(row[KEY], Decimal(value))")]),
        "a difference at the tolerance is a mismatch": (3, [("abs(b[key] - a[key]) > TOL", "abs(b[key] - a[key]) >= TOL")]),
        "detail files the index does not list counted": (4, [
            ("    for row in csv.DictReader(f):\n        with open(row['file']) as detail:",
             "    import glob\n    for path in sorted(glob.glob(A + '/*.txt')):\n"
             "        row = {KEY: open(path).readline().split(': ')[1].strip(), 'file': path}\n"
             "        with open(row['file']) as detail:")]),
        "cents taken as whole units": (4, [("Decimal(row[VALUE + '_cents']) / 100", "Decimal(row[VALUE + '_cents'])")]),
        "reference codes compared as written": (4, [("    ref = ref.strip().upper()\n", "")]),
        "unknown references reported": (4, [("    if ref in owner:\n        b[owner[ref]]", "    if True:\n        b[owner.get(ref, ref)]"),
                                            ("b.get(owner[ref], Decimal(0))", "b.get(owner.get(ref, ref), Decimal(0))")]),
        "voided entries counted": (5, [("and not value.endswith(' void')", "and value")]),
    }
    READINGS["voided entries counted"][1].append(("Decimal(value)\n", "Decimal(value.split()[0])\n"))
    return Family(
        cases=[(DOMAINS[(level * 19 + seed * 5) % len(DOMAINS)], level, seed) for level in (3, 4, 5) for seed in range(4)],
        readings=one_reading_per_seed(READINGS, (1, 2), lambda level, seed: DOMAINS[(seed * 23 + level) % len(DOMAINS)]),
    )


# ---- log_analysis

def _log_analysis() -> Family:
    READING_BUNDLES = {2: (DOMAINS[7], 1), 3: (DOMAINS[19], 2), 4: (DOMAINS[33], 3), 5: (DOMAINS[51], 0)}
    # Each reading is the oracle's solve.sh with exact replacements (old, new, ...).
    # The generator plants data where the two readings differ, for every seed.

    LEVEL2_READINGS = {
        "window start exclusive": ("if not START <= t < END:", "if not START < t < END:"),
        "window end inclusive": ("if not START <= t < END:", "if not START <= t <= END:"),
        "malformed lines counted": (r"([A-Z]{2,4}-\d{4}) (.+) ", r"(\S+) (.+?)(?: ",
                                    r"=(\d+\.\d+)$')", r"=(\d+\.\d+))?$')"),
        "repeated lines counted twice": ("if line in seen:", "if False:"),
        "first error by file order": ("key=lambda e: (e[0], e[1])", "key=lambda e: e[0]"),
        "mean halves to even": ("from decimal import ROUND_HALF_UP, Decimal",
                                "from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal",
                                "ROUND_HALF_UP) if s['values']", "ROUND_HALF_EVEN) if s['values']"),
        "exactly the threshold is ok": ("n >= THRESHOLD", "n > THRESHOLD"),
        "components with no entry in the window listed": (
            "            if not START <= t < END:\n                continue\n"
            "            s = stats.setdefault(m.group(3), {'errors': [], 'values': []})\n",
            "            s = stats.setdefault(m.group(3), {'errors': [], 'values': []})\n"
            "            if not START <= t < END:\n                continue\n"),
        "components without errors omitted": ("for comp in sorted(stats):",
                                              "for comp in sorted(c for c in stats if stats[c]['errors']):"),
    }
    # Levels 3 to 5: pairing, repeats across the rotation, limits, ties, omitted components.
    RUN_READINGS = {
        "the earliest open start pairs": ("open_starts[ident, task] = t", "open_starts.setdefault((ident, task), t)"),
        "unpaired starts are runs": ("\nresult = []\n",
                                     "\nruns += [(dict((e[1], e[3]) for e in entries)[i], i, t, t, None)"
                                     " for (i, task), t in open_starts.items()]\nresult = []\n"),
        "repeated entries counted twice": ("entries = set()", "entries = []", "entries.add((", "entries.append(("),
        "a run of exactly the limit overruns": ("s > limits[comp] * 60", "s >= limits[comp] * 60"),
        "ties go to the larger id": ("min(mine, key=lambda r: (r[2] - r[3], r[1]))",
                                     "max(mine, key=lambda r: (r[3] - r[2], r[1]))"),
        "every component of the limits table listed": ("for comp in sorted(comps):", "for comp in sorted(limits):"),
        "components without runs omitted": ("for comp in sorted(comps):",
                                            "for comp in sorted(c for c in comps if any(r[0] == c for r in runs)):"),
    }
    # Levels 4 and 5: the dirty data.
    DIRTY_READINGS = {
        "unlisted files read": ("files = [row['log_file'] for row in csv.DictReader(handle)]",
                                "files = sorted('logs/' + name for name in __import__('os').listdir('logs'))"),
        "local times read as UTC": ("datetime.strptime(ts, '%Y-%m-%d %H:%M:%S %z').astimezone(timezone.utc)",
                                    "datetime.strptime(ts[:19], '%Y-%m-%d %H:%M:%S').replace(tzinfo=timezone.utc)"),
        "epoch read as microseconds": ("timedelta(milliseconds=int(ts))", "timedelta(microseconds=int(ts))"),
        "continuation lines are entries": ("            if raw[:1].isspace():\n                continue\n",
                                           "            raw = raw.strip()\n"),
        "a line without its id belongs to its file": (
            "            m = LINE.match(raw)\n",
            "            m = LINE.match(raw) or LINE.match(re.sub(r' (DEBUG|INFO|WARN|ERROR) ([a-z]+) ',"
            " lambda g: g.group(0) + path.split('/')[-1].split('.')[0] + ' ', raw, count=1))\n"),
    }
    # Level 5: the window on run starts, missing values, the mean's rounding, the threshold.
    WINDOW_READINGS = {
        "run window start exclusive": ("START <= r[2] < END", "START < r[2] < END"),
        "run window end inclusive": ("START <= r[2] < END", "START <= r[2] <= END"),
        "runs counted by their finish": ("START <= r[2] < END", "START <= r[3] < END"),
        "errors outside the window counted": ("if level == 'ERROR' and START <= t < END:", "if level == 'ERROR':"),
        "a missing value counts as zero": ("values = [r[4] for r in mine if r[4] is not None]",
                                           "values = [r[4] or 0 for r in mine]"),
        "mean halves to even": ("from decimal import ROUND_HALF_UP, Decimal",
                                "from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal",
                                "ROUND_HALF_UP) if values", "ROUND_HALF_EVEN) if values"),
        "exactly the threshold is ok": ("row['errors'] >= THRESHOLD", "row['errors'] > THRESHOLD"),
    }
    READINGS = {2: LEVEL2_READINGS, 3: RUN_READINGS, 4: DIRTY_READINGS,
                5: {**RUN_READINGS, **DIRTY_READINGS, **WINDOW_READINGS}}
    return Family(
        # Every level on three more domains; from level 2 up the seeds cover the three
        # deliverable formats the reading bundle of the level does not (format = seed % 4),
        # then the reading bundles themselves.
        cases=[(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, seed)
               for level in range(6)
               for k, seed in enumerate([s for s in range(4) if level < 2 or s != READING_BUNDLES[level][1]][:3])]
        + [(domain, level, seed) for level, (domain, seed) in sorted(READING_BUNDLES.items())],
        level0_step=file_names("csv", "txt", "log"),
        level0_domains=lambda domains: sorted({max(domains, key=lambda d: len(d.record_file)),
                                               max(domains, key=lambda d: len(d.group_field))}, key=lambda d: d.id),
        same_seed=((DOMAINS[5], 5),),
        # hundreds of log entries (continuation lines aside), under a megabyte
        large=Large(lambda root, domain: {"entries": sum(1 for p in (root / "environment" / "logs").iterdir()
                                                         for line in p.read_text().splitlines()
                                                         if not line[:1].isspace())},
                    {"entries": 300}, max_bytes=1 << 20, runs=((DOMAINS[2], 3), (DOMAINS[40], 3))),
        readings=by_level(READINGS, READING_BUNDLES),
    )


# ---- multi_document_merge

def _multi_document_merge() -> Family:
    def domain_of(level: int, seed: int):
        return DOMAINS[0] if level == 0 and seed in (0, 3) else DOMAINS[(level * 9 + seed * 13 + 1) % len(DOMAINS)]

    # Each contract rule read the other way: the oracle's solve.sh with that one
    # decision changed must score 0.0 on the real verifier.
    SORT = "key=lambda d: (d['revision'],"
    COMMON_READINGS = {
        "the date decides, not the revision": (SORT, "key=lambda d: (d['date'],"),
        "a revision tie goes to the other source": ("-RANK[d['source']]", "RANK[d['source']]"),
        "the newest document replaces the whole record": ("row = merged.setdefault(key, {})", "row = merged[key] = {}"),
        "an empty value clears the field": ("continue  # an empty value gives no value",
                                            "row.pop(field, None)\n                continue"),
        "ids compared with their letter case": ("raw.strip().upper()", "raw.strip()"),
        "halves rounded to even": (", rounding=ROUND_HALF_UP)", ")"),
        "retired records kept": ("if row.get(STATUS) == 'retired':", "if False:"),
        "retired in any document is final": ("row[field] = value",
                                             "row[field] = 'retired' if row.get(field) == 'retired' else value"),
    }
    LEVEL2_READINGS = dict(COMMON_READINGS, **{
        "ids outside the register kept": ("if key not in listed:", "if False:"),
    })
    LEVEL3_READINGS = {
        "unlisted files merged": (
            "paths = sorted({r['file'].strip() for r in index})",
            "paths = sorted('documents/' + name for name in __import__('os').listdir('documents'))"),
    }
    LEVEL4_READINGS = {
        "drafts merged as the newest": ("continue  # a draft is not merged", "head['revision'] = '1000000'"),
        "the source scale ignored": (" * SCALE[doc['source']]", ""),
        "the other source's field names ignored": ("ALIASES.get(doc['source'], {}).get(k.strip(), k.strip())",
                                                   "k.strip()"),
        "ids left without zero padding": ("'%s-%04d' % (prefix, int(number))", "'%s-%s' % (prefix, number)"),
        "records without a value left out": ("if row.get(STATUS) == 'retired':",
                                             "if row.get(STATUS) == 'retired' or VALUE not in row:"),
    }
    LEVEL5_READINGS = dict(COMMON_READINGS, **LEVEL3_READINGS, **LEVEL4_READINGS, **{
        "a same-source tie goes to the earlier date": (", d['date'] if DATED",
                                                       ", [-ord(c) for c in d['date']] if DATED"),
        "a decimal comma read as a thousands separator": ("value.replace(',', '.')", "value.replace(',', '')"),
        "group values kept in their letter case": ("value = value.lower()", "value = value"),
        "last_revision the lowest, not the highest": ("row['last_revision'] = doc['revision']",
                                                      "row.setdefault('last_revision', doc['revision'])"),
    })
    READINGS_BY_LEVEL = {
        2: LEVEL2_READINGS,
        3: dict(COMMON_READINGS, **LEVEL3_READINGS),
        4: dict(COMMON_READINGS, **LEVEL3_READINGS, **LEVEL4_READINGS),
        5: LEVEL5_READINGS,
    }
    return Family(
        # Three domains per level (shifting with the level); seeds 0-3 at levels 2-5
        # cover the four deliverable formats (json, csv, files, report).
        cases=[(domain_of(level, seed), level, seed) for level in range(6) for seed in (range(4) if level != 1 else range(3))],
        level0_step=file_names("csv", "txt"),
        same_seed=((DOMAINS[5], 4),),
        # at least 150 merged records, under a megabyte
        large=Large(lambda root, domain: {"records": len(answer(root)["key"]["records"])}, {"records": 150},
                    max_bytes=1 << 20, runs=((domain_of(5, 1), 1),)),
        # seeds 0-3 over levels 2-5: each format once
        readings=by_level(READINGS_BY_LEVEL, {level: (domain_of(level, level - 2), level - 2) for level in READINGS_BY_LEVEL}),
    )


# ---- multi_module_refactor

def _multi_module_refactor() -> Family:
    # Each rule of the contract read the other way: the oracle with that one
    # decision changed must fail. Every level-2+ task moves functions whose old
    # module keeps other code, and every ticket level empties one module.
    READINGS = {
        "a re-export left in the old module": (2, [
            ('    write(src_path, left.rstrip("\\n") + "\\n")',
             '    write(src_path, left.rstrip("\\n") + "\\nfrom %s import %s\\n" % (dst, name))'),
            ("\ntidy(", "\n(lambda package: None)(")]),
        "the moved function's dependencies not imported": (2, [("add_imports(dst_text, imports)", "add_imports(dst_text, [])")]),
        "the moved code reformatted into a stub": (2, [(
            '    block = "".join(lines[node.lineno - 1: node.end_lineno])',
            '    block = "".join(lines[node.lineno - 1: node.lineno]) + "    return None\\n"')]),
        "the public API in __init__.py not kept": (3, [(
            "    for path in python_files():\n        text = read(path)\n        tree = ast.parse(text)\n        lines",
            "    for path in python_files():\n        if path.endswith('__init__.py'):\n            continue\n"
            "        text = read(path)\n        tree = ast.parse(text)\n        lines")]),
        "an emptied module kept": (3, [("    move(ticket[\"function\"], src, target, True)", "    move(ticket[\"function\"], src, target, False)")]),
        "cancelled tickets applied": (4, [('    if ticket.get("status") == "cancelled":', '    if False:')]),
        "module paths in tickets taken literally": (4, [('        target = target[:-3].replace("/", ".")', '        target = target')]),
        "tickets applied in file order": (5, [('key=lambda row: int(row["step"])', 'key=lambda row: 0')]),
    }
    return Family(
        cases=[(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, seed)
               for level in range(6) for k in range(3) for seed in ((k, k + 3) if level else (k,))],
        format="python",
        level0_step=lambda command: command.split()[0] + (" into" if command.endswith("/") else ""),
        same_seed=((DOMAINS[3], 5),),
        readings=one_reading_per_seed(READINGS, (0, 1), lambda level, seed: DOMAINS[(seed * 29 + level * 5) % len(DOMAINS)]),
        solve_exits_0=False,  # a reading that crashes the solve is judged on what it left
    )


# ---- rate_table_calculation

# The four readings each task draws: the oracle holds one value, the other
# reading is the other value (a toggle flips whichever of the two it finds).
RATE_TOGGLES = {
    "a quantity on a band limit in the other band": ("INCLUSIVE_UPPER = True", "INCLUSIVE_UPPER = False"),
    "the other pricing (whole quantity or marginal)": ("PRICING = 'whole'", "PRICING = 'marginal'"),
    "the minimum on the other side of the surcharge": ("MIN_BEFORE_SURCHARGE = True", "MIN_BEFORE_SURCHARGE = False"),
    "rounding lines instead of totals or back": ("ROUND_LINES = True", "ROUND_LINES = False"),
}


def _rate_table_calculation() -> Family:
    TOGGLES = RATE_TOGGLES
    HALF_EVEN = {"halves rounded to even": ("from decimal import ROUND_HALF_UP, Decimal",
                                            "from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal",
                                            "rounding=ROUND_HALF_UP", "rounding=ROUND_HALF_EVEN")}
    # Level 2: a category without rates is left out.
    CATEGORY_READINGS = {
        "a category without rates gets a zero row": (
            "                continue  # no rate: not charged\n",
            "                charges.setdefault(group, []).append(Decimal(0))\n                continue\n"),
    }
    # Levels 3-5: an entity without rates is listed with an empty total.
    ENTITY_READINGS = {
        "an entity without rates left out": (
            "            result.append({ID: ident, GROUP: group, 'lines': len(usable), 'total_charge': None})\n", ""),
        "an entity without rates totals zero": ("'lines': len(usable), 'total_charge': None}",
                                                "'lines': len(usable), 'total_charge': Decimal(0)}"),
    }
    # Levels 4-5: the dirty-data rules.
    DIRTY_READINGS = {
        "files the index does not list are charged": (
            "import json\n", "import json\nimport os\n",
            "entries = [(row[ID].strip(), row['file'].strip()) for row in csv.DictReader(f)]",
            "entries = [(os.path.splitext(n)[0], os.path.join(DETAIL_DIR, n)) for n in sorted(os.listdir(DETAIL_DIR))]"),
        "a line without a quantity is charged as zero": ("continue  # no quantity: skipped", "q = band_q = Decimal(0)"),
        "void lines are charged": ("== 'void':", "== 'never':"),
        "hundredths taken as whole units": ("q = band_q = Decimal(str(hundredths).strip()) / HUNDREDTHS",
                                            "q = band_q = Decimal(str(hundredths).strip())"),
        "hundredths banded before conversion": ("q = band_q = Decimal(str(hundredths).strip()) / HUNDREDTHS",
                                                "band_q = Decimal(str(hundredths).strip())\n"
                                                "                q = band_q / HUNDREDTHS"),
    }
    # Level 5: dated rate versions and corrected lines.
    DATED_READINGS = {
        "a line on an effective date keeps the old version": ("if e <= date", "if e < date"),
        "a corrected line is charged twice": ("latest[str(item['line']).strip()] = item", "latest[len(latest)] = item"),
        "a corrected line keeps its first row": ("latest[str(item['line']).strip()] = item",
                                                 "latest.setdefault(str(item['line']).strip(), item)"),
    }

    # One bundle per level with contract readings to test; together they draw
    # both values of every toggle (test_family_rate_table_calculation.py).
    READING_BUNDLES = {
        "L2": (2, "apiary_hive_inventory", 1),
        "L4": (4, "tide_gauge_readings", 0),
        "L5": (5, "sawmill_log_scaling", 0),
    }
    READINGS_BY_BUNDLE = {
        "L2": {**TOGGLES, **HALF_EVEN, **CATEGORY_READINGS},
        "L4": {**TOGGLES, **ENTITY_READINGS, **DIRTY_READINGS},
        "L5": {**TOGGLES, **HALF_EVEN, **ENTITY_READINGS, **DIRTY_READINGS, **DATED_READINGS},
    }
    return Family(
        # Levels 0 and 1 in three domains; levels 2 to 5 with seeds 0-3, which rotate
        # through the four deliverable formats, each seed in another domain.
        cases=[(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, k) for level in (0, 1) for k in range(3)]
        + [(DOMAINS[(level * 11 + seed * 17 + 5) % len(DOMAINS)], level, seed) for level in (2, 3, 4, 5) for seed in range(4)],
        max_bundle_bytes=1_000_000,
        level0_step=file_names("csv", "txt"),
        same_seed=((DOMAINS[5], 5),),
        # hundreds of usage lines, well under a megabyte; DOMAINS[2] has the widest value range
        large=Large(usage_lines, {"usage lines": 200}, max_bytes=1_000_000, runs=((DOMAINS[2], 1),)),
        readings=[Reading(BY_ID[READING_BUNDLES[name][1]], READING_BUNDLES[name][0], READING_BUNDLES[name][2], reading,
                          toggle(edits) if reading in TOGGLES else pairs(edits))
                  for name, table in READINGS_BY_BUNDLE.items() for reading, edits in sorted(table.items())],
    )


# ---- schedule_checking

def _schedule_checking() -> Family:
    NOT_NEIGHBOURS = ("elif -shared < a['gap'] and not any(c['resource'] == a['resource'] and min(a['end'], b['end']) "
                      "<= c['start'] and c['end'] <= max(a['start'], b['start']) for c in slots):")
    # Rules shared by levels 2 to 5: boundaries, pair naming, midnight, the daily total.
    TIME_READINGS = {
        "touching slots overlap": ("        elif shared > 0:\n", "        elif shared >= 0:\n"),
        "a gap exactly at the minimum is too short": ("elif -shared < a['gap']:", "elif -shared <= a['gap']:"),
        "short gaps only between neighbouring slots": ("elif -shared < a['gap']:", NOT_NEIGHBOURS),
        "a pair named larger id first": ("first, second = a['id'], b['id']", "first, second = b['id'], a['id']"),
        "a pair named in start order": ("first, second = a['id'], b['id']",
                                        "first, second = (a['id'], b['id']) if a['start'] <= b['start'] else (b['id'], a['id'])"),
        "duplicates reported as overlaps": ("report('duplicate', first, second, shared)",
                                            "report('overlap', first, second, shared)"),
        "opening hours exclude their ends": (
            "    if outside > 0:\n",
            "    if outside > 0 or s['start'] % 1440 == s['open'] or s['end'] % 1440 == s['close']:\n"),
        "an end before the start is on the same day": ("end += 1440  # crosses midnight: ends on the next day", "pass"),
        "outside minutes of the start day only": (
            "outside = s['end'] - s['start'] - inside",
            "outside = min(s['end'], s['start'] // 1440 * 1440 + 1440) - s['start'] - inside"),
        "a total at the maximum is a violation": ("if total > DAILY_MAX:", "if total >= DAILY_MAX:"),
        "daily totals by the end date": ("key = (s['entity'], s['start'] // 1440)", "key = (s['entity'], s['end'] // 1440)"),
    }
    # The dirty-data rules of levels 4 and 5.
    DIRTY_READINGS = {
        "cancelled rows counted": ("if row.get('status', 'booked').strip() != 'booked':", "if False:"),
        "a file without status holds no booked slot": ("row.get('status', 'booked')", "row.get('status', 'cancelled')"),
        "stale files read too": (
            "for path in sorted(files):",
            "for path in sorted(set(files) | set(__import__('glob').glob(__import__('os').path.dirname(next(iter(files)))"
            " + '/*.csv'))):",
            "entity = files[path]", "entity = files.get(path, path)"),
        "a repeated row is another slot": ("if row['slot_id'] in seen:", "if False:"),
        "hundredths read as whole units": ("Decimal(text) / SCALE if text", "Decimal(text) if text"),
        "an empty value drops the slot": ("value = Decimal(0)  # an empty value adds nothing to the daily total", "continue"),
        "resource names compared as written": ("resource = norm(row[GF])", "resource = row[GF]"),
    }
    # The capacity rules of level 5.
    CAPACITY_READINGS = {
        "ties at one start go to the larger id first": (
            "key=lambda s: (s['start'], s['id'])", "key=lambda s: (s['start'], [-ord(c) for c in s['id']])"),
        "a slot ending at the start still runs": ("if t['end'] > s['start']", "if t['end'] >= s['start']"),
        "capacity one everywhere": ("if running >= s['capacity']:", "if running >= 1:"),
        "a duplicate does not count toward capacity": (
            "        lines.setdefault(s['resource'], []).append(s)\n",
            "        if not any((t['entity'], t['start'], t['end']) == (s['entity'], s['start'], s['end'])\n"
            "                   for t in lines.get(s['resource'], [])):\n"
            "            lines.setdefault(s['resource'], []).append(s)\n"),
        "overlapping pairs reported too": ("if not CAPACITY:", "if True:"),
    }
    # (level, domain index, seed): a different format and domain for each level.
    READING_BUNDLES = {2: (12, 2), 4: (31, 1), 5: (44, 3)}
    # Level 5 repeats the time rules whose reading meets the capacity rules (to keep
    # this file quick; the generator plants every case at every level from 2 on).
    LEVEL5_TIME = ("touching slots overlap", "a gap exactly at the minimum is too short",
                   "short gaps only between neighbouring slots", "a pair named in start order",
                   "duplicates reported as overlaps", "an end before the start is on the same day")
    READING_CASES = (
        [(2, reading, edits) for reading, edits in sorted(TIME_READINGS.items())]
        + [(4, reading, edits) for reading, edits in sorted(DIRTY_READINGS.items())]
        + [(5, reading, TIME_READINGS[reading]) for reading in LEVEL5_TIME]
        + [(5, reading, edits) for reading, edits in sorted(CAPACITY_READINGS.items())]
    )
    return Family(
        # Levels 0 and 1 on three domains, levels 2-5 on four, where seeds 0-3 rotate
        # through the four deliverable formats (JSON, CSV, one CSV per violation,
        # report + sidecar).
        cases=[(DOMAINS[(level * 7 + seed * 11) % len(DOMAINS)], level, seed)
               for level in range(6) for seed in range(3 if level < 2 else 4)],
        level0_step=file_names("csv", "txt"),
        same_seed=((DOMAINS[5], 5),),
        # hundreds of slots, the bundle well under a megabyte
        large=Large(lambda root, domain: {"slots": sum(len(p.read_text().splitlines()) - 1
                                                       for p in (root / "environment").rglob("*.csv"))},
                    {"slots": 200}, max_bytes=1 << 20),
        readings=[Reading(DOMAINS[READING_BUNDLES[level][0]], level, READING_BUNDLES[level][1], reading, pairs(edits))
                  for level, reading, edits in READING_CASES],
    )


# ---- sqlite_change_set

# Seed 0: CSV, absent-key updates skipped; 1: JSON, skipped; 2: CSV, inserted; 3: JSON, inserted.
SQLITE_BUNDLES = {
    "L2-csv-skip": ("apiary_hive_inventory", 2, 0),
    "L2-json-insert": ("library_book_loans", 2, 3),
    "L3-json-skip": ("trail_maintenance_logs", 3, 1),
    "L4-csv-skip": ("amateur_radio_contacts", 4, 0),
    "L5-skip": ("greenhouse_plant_trials", 5, 1),
    "L5-insert": ("apiary_hive_inventory", 5, 2),
}
# Each reading is the oracle with one decision changed (exact replacements,
# each occurring once in solve.sh). The generator plants, for every seed, a
# case where the two readings end in different tables: two updates of one key
# with the later seq first in the file, a delete with the re-insert first in
# the file, an update of a key the table never had, updates that leave a field
# empty, an insert over an existing row, a value on an exact half after an even
# hundredth, dirty keys on existing rows, one key changed in two batches with
# the later batch's seq lower, a group whose rows are all deleted, a rejected
# batch and an unlisted file that delete untouched rows, an insert with an
# empty key, an insert without a value, a batch in hundredths, retired rows
# that are updated, deleted and re-inserted, and a delete of a key never seen.
STORE_ROW = "        rows[key] = {GROUP: fields.get(GROUP)"
SQLITE_READINGS = {
    "keys matched as written": ("    return key.strip().upper()", "    return key"),
    "changes applied in file order": ("changes.sort(key=lambda x: (x[0], x[1]))\n", ""),
    "seq alone orders the changes": ("changes.sort(key=lambda x: (x[0], x[1]))", "changes.sort(key=lambda x: x[1])"),
    "an update of an absent key inserts it": ("MISSING_UPDATE = 'skip'", "MISSING_UPDATE = 'insert'"),
    "an update of an absent key is ignored": ("MISSING_UPDATE = 'insert'", "MISSING_UPDATE = 'skip'"),
    "an empty value clears the stored one": (
        "    if given(c['value']):\n        fields[VALUE] = stored(c['value'], c['scale'])\n",
        "    fields[VALUE] = stored(c['value'], c['scale']) if given(c['value']) else None\n"),
    "an empty group clears the stored one": (
        "    if given(c['group']):\n        fields[GROUP] =",
        "    if True:\n        fields[GROUP] = None if not given(c['group']) else"),
    "an insert over an existing row is ignored": (
        STORE_ROW, STORE_ROW.replace("= {", "= rows[key] if key in rows else {")),
    "halves rounded to even": ("Decimal('0.01'), ROUND_HALF_UP)", "Decimal('0.01'))"),
    "values stored unrounded": (".quantize(Decimal('0.01'), ROUND_HALF_UP)", ""),
    "a deleted key stays deleted": (
        "changes.sort(key=lambda x: (x[0], x[1]))\n",
        "changes.sort(key=lambda x: (x[0], x[1]))\ngone = set()\n",
        "    elif c['op'] == 'delete':\n",
        "    elif c['op'] == 'delete':\n        gone.add(key)\n",
        "    elif c['op'] == 'insert' or",
        "    elif key in gone:\n        pass\n    elif c['op'] == 'insert' or"),
    "codes stored as they are": ("fields[GROUP] = codes[c['group'].strip()]", "fields[GROUP] = c['group'].strip()"),
    "an emptied group keeps its summary row": (
        "summary = {}\n",
        "summary = {g: [0, Decimal(0)] for (g,) in con.execute('SELECT %s FROM %s' % (GROUP, SUMMARY))}\n"),
    "rejected batches applied": (
        "            if DIRTY and row['status'].strip() != 'accepted':\n                continue\n", ""),
    "unlisted files applied": (
        "    batches = []\n", "    batches, listed = [], set()\n",
        "        for row in csv.DictReader(f):\n",
        "        for row in csv.DictReader(f):\n            listed.add(row['file'].strip())\n",
        "for batch, path in batches:",
        "for batch, path in batches + [(0, os.path.join('changes', n)) for n in sorted(os.listdir('changes'))"
        " if n not in listed | {'index.csv'}]:"),
    "an empty key is a key": ("key = norm(c['key']) if given(c['key']) else None", "key = norm(c['key'] or '')"),
    "an empty key is a key in the log": ("key = norm(c['key']) if given(c['key']) else None",
                                         "key = norm(c['key'] or '')"),
    "hundredths taken as the unit": ("scale = HUNDREDTHS if", "scale = 1 if"),
    "rows without a value not counted": ("    s[0] += 1\n", "    s[0] += r[VALUE] is not None\n"),
    "deletes remove the row": ("            rows[key]['status'] = 'retired'", "            del rows[key]"),
    "retired rows count as present": ("    present = key in rows and rows[key]['status'] == 'active'",
                                      "    present = key in rows"),
    "retired rows counted in the summary": ("    if r['status'] != 'active':\n        continue\n", ""),
    "skipped changes not logged": (
        "    log.append((batch, seq, key, c['op'], outcome))",
        "    if outcome == 'applied':\n        log.append((batch, seq, key, c['op'], outcome))"),
}
L2_RULES = ["keys matched as written", "changes applied in file order", "an empty value clears the stored one",
            "an empty group clears the stored one", "an insert over an existing row is ignored",
            "halves rounded to even", "values stored unrounded", "a deleted key stays deleted"]
SQLITE_READING_CASES = (
    [("L2-csv-skip", r) for r in L2_RULES + ["an update of an absent key inserts it"]]
    + [("L2-json-insert", r) for r in ["an update of an absent key is ignored", "halves rounded to even",
                                       "changes applied in file order"]]
    + [("L3-json-skip", r) for r in ["seq alone orders the changes", "codes stored as they are",
                                     "an emptied group keeps its summary row", "keys matched as written"]]
    + [("L4-csv-skip", r) for r in ["rejected batches applied", "unlisted files applied", "an empty key is a key",
                                    "hundredths taken as the unit", "rows without a value not counted",
                                    "seq alone orders the changes", "a deleted key stays deleted"]]
    + [("L5-skip", r) for r in ["deletes remove the row", "retired rows count as present",
                                "retired rows counted in the summary", "skipped changes not logged",
                                "an empty key is a key in the log", "an update of an absent key inserts it",
                                "seq alone orders the changes", "an insert over an existing row is ignored",
                                "values stored unrounded", "an emptied group keeps its summary row",
                                "rejected batches applied", "unlisted files applied", "hundredths taken as the unit"]]
    + [("L5-insert", r) for r in ["an update of an absent key is ignored", "retired rows count as present",
                                  "deletes remove the row", "halves rounded to even"]]
)


def _sqlite_change_set() -> Family:
    return Family(
        # Levels 0-1 in three domains, levels 2-5 in four so that seeds 0-3 (change
        # file CSV or JSON, absent-key updates skipped or inserted) all occur.
        cases=[(DOMAINS[(level * 11 + k * 17) % len(DOMAINS)], level, (level + k) % 4)
               for level in range(6) for k in range(3 if level < 2 else 4)],
        format="sqlite",
        check_types=frozenset({"sqlite_records"}),
        level0_step=file_names("csv", "txt"),
        level0_domains=lambda domains: domains,
        same_seed=((DOMAINS[5], 1), (DOMAINS[5], 5)),
        same_seed_database=True,
        # hundreds of rows and of change-log entries, the data and the answer under 600 kB
        large=Large(sqlite_rows,
                    {"records": 200, "change_log": 100}, max_bytes=600_000, size_of=("environment", "answer"),
                    runs=((DOMAINS[3], 0),)),
        readings=[Reading(BY_ID[SQLITE_BUNDLES[name][0]], SQLITE_BUNDLES[name][1], SQLITE_BUNDLES[name][2], reading,
                          pairs(SQLITE_READINGS[reading]))
                  for name, reading in SQLITE_READING_CASES],
    )


FAMILIES = {name: make() for name, make in sorted({
    "config_edits": _config_edits,
    "cross_source_audit": _cross_source_audit,
    "entity_resolution": _entity_resolution,
    "file_reorganization": _file_reorganization,
    "grouped_statistics": _grouped_statistics,
    "ledger_reconciliation": _ledger_reconciliation,
    "log_analysis": _log_analysis,
    "multi_document_merge": _multi_document_merge,
    "multi_module_refactor": _multi_module_refactor,
    "rate_table_calculation": _rate_table_calculation,
    "schedule_checking": _schedule_checking,
    "sqlite_change_set": _sqlite_change_set,
}.items())}
