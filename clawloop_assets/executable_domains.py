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

The built-in domains live in `clawloop_assets/domains/`; more are read from
`$CLAWLOOP_HOME/domains/`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def load_domain(root: Path) -> ExecutableDomain:
    root = Path(root)
    for name in DOMAIN_FILES:
        if not (root / name).is_file():
            raise DomainError(f"{root}: missing {name}")
    meta_path = root / "domain.json"
    try:
        meta: Any = json.loads(meta_path.read_text(encoding="utf-8"))
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
    return ExecutableDomain(meta["id"], meta["title"], meta["description"], dict(keys), root)


def domain_roots() -> list[Path]:
    """Where domains are read from: the built-in ones, then the user's."""
    roots = [BUILTIN_DOMAINS_DIR]
    home = os.environ.get("CLAWLOOP_HOME")
    user = Path(home) / "domains" if home else Path.home() / ".clawloop" / "domains"
    if user.is_dir():
        roots.append(user)
    return roots


def load_domains() -> list[ExecutableDomain]:
    """Every domain directory (one holding domain.json), sorted by id; a user
    domain may not reuse a built-in id."""
    found: dict[str, ExecutableDomain] = {}
    for base in domain_roots():
        for child in sorted(p for p in base.iterdir() if (p / "domain.json").is_file()):
            domain = load_domain(child)
            if domain.id in found:
                raise DomainError(f"{child}: domain id {domain.id!r} is already defined in {found[domain.id].root}")
            found[domain.id] = domain
    return [found[k] for k in sorted(found)]
