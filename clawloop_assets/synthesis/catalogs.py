"""The capability and domain catalogs: data files under `catalog/`, loaded and
validated here. Every capability is a generator family
(`generators/<capability_id>.py`) and instantiates in every domain."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CATALOG_DIR = Path(__file__).parent / "catalog"
GENERATORS_DIR = Path(__file__).parent / "generators"
CAPABILITY_CATALOG_PATH = CATALOG_DIR / "capabilities.json"
DOMAIN_CATALOG_PATH = CATALOG_DIR / "domains.json"

TRACKS = ("analysis", "terminal")
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_WORD = re.compile(r"^[a-z]+$")
_PREFIX = re.compile(r"^[A-Z]{2,4}$")
# Words the generators themselves put into record files (status column of the
# grouped-statistics family); a group value must not hide inside them, or a
# "lines containing the word X" task would count the wrong lines.
_GENERATOR_WORDS = ("status", "valid", "void")


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Capability:
    id: str
    track: str  # "analysis": a structured deliverable; "terminal": the workspace end state
    description: str
    skills: tuple[str, ...]

    @property
    def generator_script(self) -> Path:
        return GENERATORS_DIR / f"{self.id}.py"


@dataclass(frozen=True)
class Domain:
    id: str
    entity: str  # singular noun: "hive"
    entity_plural: str
    id_prefix: str  # record ids look like "HV-0042"
    id_field: str  # business-key column: "hive_id"
    record_file: str  # stem of the main record file: "hives" -> hives.csv
    group_field: str
    group_values: tuple[str, ...]
    numeric_field: str
    numeric_label: str
    unit: str
    numeric_range: tuple[float, float]
    ledger_sources: tuple[str, str]  # stems of the two sources a reconciliation compares
    file_stems: tuple[str, ...]  # document kinds for the terminal track
    file_extensions: tuple[str, ...]

    def as_params(self) -> dict[str, Any]:
        """The vocabulary handed to a generator script in params.json."""
        return json.loads(json.dumps(asdict(self)))


def _require(entry: dict, field: str, kind: type | tuple[type, ...], where: str) -> Any:
    if field not in entry:
        raise CatalogError(f"{where}: missing field '{field}'")
    value = entry[field]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CatalogError(f"{where}: field '{field}' must be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _string_list(entry: dict, field: str, where: str, *, min_len: int, pattern: re.Pattern) -> tuple[str, ...]:
    values = _require(entry, field, list, where)
    if len(values) < min_len:
        raise CatalogError(f"{where}: field '{field}' needs at least {min_len} values, has {len(values)}")
    for value in values:
        if not isinstance(value, str) or not pattern.match(value):
            raise CatalogError(f"{where}: field '{field}' has an invalid value {value!r} (must match {pattern.pattern})")
    if len(set(values)) != len(values):
        raise CatalogError(f"{where}: field '{field}' has duplicate values")
    return tuple(values)


def _identifier(entry: dict, field: str, where: str) -> str:
    value = _require(entry, field, str, where)
    if not _IDENTIFIER.match(value):
        raise CatalogError(f"{where}: field '{field}' must be a lowercase identifier, got {value!r}")
    return value


def _load_entries(path: Path, top_key: str) -> list[dict]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get(top_key), list) or not data[top_key]:
        raise CatalogError(f"{path}: field '{top_key}' must be a non-empty list")
    seen: set[str] = set()
    for index, entry in enumerate(data[top_key]):
        where = f"{path}: {top_key}[{index}]"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: must be an object")
        entry_id = _identifier(entry, "id", where)
        if entry_id in seen:
            raise CatalogError(f"{where}: field 'id' repeats {entry_id!r}")
        seen.add(entry_id)
    return data[top_key]


def load_capability_catalog(path: Path = CAPABILITY_CATALOG_PATH) -> list[Capability]:
    capabilities = []
    for index, entry in enumerate(_load_entries(path, "capabilities")):
        where = f"{path}: capabilities[{index}] ({entry['id']})"
        track = _require(entry, "track", str, where)
        if track not in TRACKS:
            raise CatalogError(f"{where}: field 'track' must be one of {TRACKS}, got {track!r}")
        skills = _require(entry, "skills", list, where)
        if not skills or not all(isinstance(s, str) and s for s in skills):
            raise CatalogError(f"{where}: field 'skills' must be a non-empty list of strings")
        capability = Capability(
            id=entry["id"],
            track=track,
            description=_require(entry, "description", str, where),
            skills=tuple(skills),
        )
        if not capability.generator_script.is_file():
            raise CatalogError(f"{where}: field 'id' has no generator family at {capability.generator_script}")
        capabilities.append(capability)
    return capabilities


# The two synthesis routes. The capability route instantiates every catalog
# capability in the surface domains above; the domain-grounded route starts
# from an executable domain (executable_domains.py) and is planned as one
# capability of its own, so the controller tracks its levels like any other.
ROUTES = ("capability", "domain")
DOMAIN_WORKFLOW = Capability(
    id="domain_workflow",
    track="terminal",
    description="Bring an executable domain's database to a stated end state through its command-line tools: "
                "find the calls, feed one call's output into the next, recover from refusals, follow house rules.",
    skills=("read tool schemas", "chain outputs into inputs", "recover from a refusal", "apply house rules"),
)


def route_of(capability_id: str) -> str:
    return "domain" if capability_id == DOMAIN_WORKFLOW.id else "capability"


def round_capabilities(routes) -> list[Capability]:
    """The capabilities a round plans for, given the routes switched on."""
    unknown = sorted(set(routes) - set(ROUTES))
    if unknown or not routes:
        raise ValueError(f"synthesis routes must be a non-empty subset of {list(ROUTES)}, got {list(routes)}")
    out = load_capability_catalog() if "capability" in routes else []
    return out + ([DOMAIN_WORKFLOW] if "domain" in routes else [])


def load_domain_catalog(path: Path = DOMAIN_CATALOG_PATH) -> list[Domain]:
    domains = []
    for index, entry in enumerate(_load_entries(path, "domains")):
        where = f"{path}: domains[{index}] ({entry['id']})"
        prefix = _require(entry, "id_prefix", str, where)
        if not _PREFIX.match(prefix):
            raise CatalogError(f"{where}: field 'id_prefix' must be 2-4 capital letters, got {prefix!r}")
        numeric_range = _require(entry, "numeric_range", list, where)
        if (
            len(numeric_range) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numeric_range)
            or not (0 < numeric_range[0] and numeric_range[1] - numeric_range[0] >= 2)
        ):
            raise CatalogError(f"{where}: field 'numeric_range' must be [min, max] with 0 < min and max - min >= 2")
        sources = _string_list(entry, "ledger_sources", where, min_len=2, pattern=_IDENTIFIER)
        if len(sources) != 2:
            raise CatalogError(f"{where}: field 'ledger_sources' must hold exactly two source names")
        extensions = _string_list(entry, "file_extensions", where, min_len=3, pattern=_WORD)
        if {"md", "tmp"} & set(extensions):
            # CONTRACT.md lives in every workspace and .tmp marks junk files.
            raise CatalogError(f"{where}: field 'file_extensions' must not contain 'md' or 'tmp'")
        domain = Domain(
            id=entry["id"],
            entity=_require(entry, "entity", str, where),
            entity_plural=_require(entry, "entity_plural", str, where),
            id_prefix=prefix,
            id_field=_identifier(entry, "id_field", where),
            record_file=_identifier(entry, "record_file", where),
            group_field=_identifier(entry, "group_field", where),
            group_values=_string_list(entry, "group_values", where, min_len=5, pattern=_WORD),
            numeric_field=_identifier(entry, "numeric_field", where),
            numeric_label=_require(entry, "numeric_label", str, where),
            unit=_require(entry, "unit", str, where),
            numeric_range=(float(numeric_range[0]), float(numeric_range[1])),
            ledger_sources=(sources[0], sources[1]),
            file_stems=_string_list(entry, "file_stems", where, min_len=4, pattern=_IDENTIFIER),
            file_extensions=extensions,
        )
        if any(ch.isdigit() for ch in domain.numeric_label + domain.unit + domain.entity):
            raise CatalogError(f"{where}: fields 'entity', 'numeric_label' and 'unit' must hold no digits (instructions state no numbers)")
        surface = [domain.id_field, domain.group_field, domain.numeric_field, domain.id_prefix.lower(), *_GENERATOR_WORDS]
        for value in domain.group_values:
            clashes = [w for w in surface + list(domain.group_values) if w != value and value in w]
            if clashes:
                raise CatalogError(f"{where}: field 'group_values' value {value!r} occurs inside {clashes[0]!r}")
        domains.append(domain)
    return domains
