"""Executable domains: the starting point of the domain-grounded synthesis route.

An executable domain is a directory a user can add without touching code:

    <domains root>/<domain_id>/
        domain.json   {"id", "title", "description",
                       "business_keys": {table: key column, ...}}
        schema.sql    the SQLite schema (CREATE TABLE statements)
        seed.py       stdlib only: populate(db, rng, size) fills the background
                      data deterministically from a random.Random
        tools.py      stdlib only: the tools the agent may call. Every public
                      top-level function is a tool:
                          def reserve_stock(db, order_id: str, sku: str, quantity: int) -> dict:
                              '''One-line description.'''
                              row = db.execute("SELECT ... FROM stock WHERE sku = ?", (sku,)).fetchone()
                              if ...: raise ToolError("not enough stock for ...")
                              db.execute("UPDATE stock SET ... WHERE sku = ?", ...)
                              return {"reservation_id": ..., "remaining": ...}
                      `db` is a sqlite3 connection; SQL is written as string
                      literals (the graph extraction reads table names from
                      them); results are dict literals (their keys are the
                      fields the tool produces); a business rule that refuses
                      raises ToolError (what error recovery recovers from).
                      It ends with:
                          if __name__ == "__main__":
                              from tool_cli import main
                              main(globals())

`tool_cli.py` (next to this module's `domains/` directory) is the runtime
copied into every workspace with the tools: `python3 tools.py <tool>
--param value ...` opens the workspace's database, runs the tool in a
transaction, prints its result as JSON (exit 0) or the refusal (exit 1), and
`python3 tools.py --schema` prints every tool's parameters and description.

The built-in domains live in `clawloop_assets/synthesis/domains/`; more are read from
`$CLAWLOOP_HOME/domains/`. A malformed user domain is rejected alone, with its
file and the reason (`scan_domains`), and the others are used.
"""

from __future__ import annotations

import ast
import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawloop_assets.synthesis import domain_graph
from resources.environment import read_environment

BUILTIN_DOMAINS_DIR = Path(__file__).parent / "domains"
TOOL_CLI = BUILTIN_DOMAINS_DIR / "tool_cli.py"
DOMAIN_FILES = ("domain.json", "schema.sql", "seed.py", "tools.py")
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")


class DomainError(ValueError):
    """A domain directory is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class ExecutableDomain:
    id: str
    title: str
    description: str
    business_keys: dict[str, str]  # table -> key column
    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def tools_source(self) -> str:
        return (self.root / "tools.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class RejectedDomain:
    """A user domain left out: its directory and why (naming the file)."""

    root: Path
    reason: str


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DomainError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None


def load_domain(root: Path) -> ExecutableDomain:
    """The domain in `root`, checked whole before anything runs it: its files
    and domain.json, seed.py and tools.py parse (seed.py defines populate),
    schema.sql builds in an empty database, and tools.py's tool graph and
    skills_override.json hold. Raises DomainError naming the file."""
    root = Path(root)
    for name in DOMAIN_FILES:
        if not (root / name).is_file():
            raise DomainError(f"{root}: missing {name}")
    meta_path = root / "domain.json"
    try:
        meta: Any = json.loads(_read(meta_path))
    except json.JSONDecodeError as exc:
        raise DomainError(f"{meta_path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(meta, dict):
        raise DomainError(f"{meta_path}: must be a JSON object")
    for name in ("id", "title", "description"):
        if not isinstance(meta.get(name), str) or not meta[name].strip():
            raise DomainError(f"{meta_path}: field '{name}' must be a non-empty string")
    if not _IDENTIFIER.match(meta["id"]) or meta["id"] != root.name:
        raise DomainError(f"{meta_path}: field 'id' must be a lowercase identifier equal to the directory name {root.name!r}")
    keys = meta.get("business_keys")
    if not isinstance(keys, dict) or not keys or not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        raise DomainError(f"{meta_path}: field 'business_keys' must map table names to key columns")
    domain = ExecutableDomain(meta["id"], meta["title"], meta["description"], dict(keys), root)
    _check_sources(domain)
    return domain


def _check_sources(domain: ExecutableDomain) -> None:
    """What load_domain checks beyond domain.json; nothing is executed but the schema, in memory."""
    seed_path = domain.path("seed.py")
    try:
        seed = ast.parse(_read(seed_path), str(seed_path))
    except (SyntaxError, ValueError) as exc:
        raise DomainError(f"{seed_path}: not valid Python ({exc})") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "populate" for node in seed.body):
        raise DomainError(f"{seed_path}: defines no populate(db, rng, size)")
    schema_path = domain.path("schema.sql")
    schema = _read(schema_path)
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(schema)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise DomainError(f"{schema_path}: does not build in SQLite ({exc})") from None
    finally:
        db.close()
    missing = sorted(set(domain.business_keys) - tables)
    if missing:
        raise DomainError(f"{domain.path('domain.json')}: field 'business_keys' names tables schema.sql does not "
                          f"create: {', '.join(missing)}")
    tools_path = domain.path("tools.py")
    try:
        graph = domain_graph.extract_graph(domain.id, _read(tools_path), str(tools_path))
        if not graph.tools:
            raise DomainError(f"{tools_path}: defines no tool (a public top-level function)")
        domain_graph.apply_overrides(domain_graph.cluster_skills(graph), domain_graph.load_overrides(domain.root), graph)
    except domain_graph.DomainGraphError as exc:
        reason = str(exc)
        raise DomainError(reason if str(domain.root) in reason else f"{domain.root}: {reason}") from None


def domain_roots() -> list[Path]:
    """Where domains are read from: the built-in ones, then the user's."""
    roots = [BUILTIN_DOMAINS_DIR]
    user = read_environment().home / "domains"
    if user.is_dir():
        roots.append(user)
    return roots


def scan_domains() -> tuple[list[ExecutableDomain], list[RejectedDomain]]:
    """Every domain, sorted by id, and the user domains rejected, each with
    its reason. Every directory under the user's root is meant as a domain
    (hidden ones and __pycache__ aside); a malformed one, or one reusing an id
    already loaded, is rejected alone. A malformed built-in domain is a bug
    and raises."""
    found: dict[str, ExecutableDomain] = {}
    rejected: list[RejectedDomain] = []
    for base in domain_roots():
        builtin = base == BUILTIN_DOMAINS_DIR
        try:
            children = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))
        except OSError as exc:
            rejected.append(RejectedDomain(base, f"{base}: cannot be listed ({exc.strerror or exc})"))
            continue
        for child in children:
            if builtin and not (child / "domain.json").is_file():
                continue
            try:
                domain = load_domain(child)
                if domain.id in found:
                    raise DomainError(f"{child}: domain id {domain.id!r} is already defined in {found[domain.id].root}")
            except DomainError as exc:
                if builtin:
                    raise
                rejected.append(RejectedDomain(child, str(exc)))
                continue
            found[domain.id] = domain
    return [found[k] for k in sorted(found)], rejected


def load_domains() -> list[ExecutableDomain]:
    """Every domain that loads (see scan_domains for the ones rejected)."""
    return scan_domains()[0]
