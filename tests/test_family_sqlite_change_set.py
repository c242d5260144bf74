"""sqlite_change_set beyond the family contract (test_family_contract.py):
every reading of its table is exercised on some bundle, and the family script
imports only the standard library and the shared module."""

from __future__ import annotations

import re
import sys

from family_readings import SQLITE_READING_CASES, SQLITE_READINGS

from clawloop_assets.synthesis.catalogs import GENERATORS_DIR


def test_every_reading_is_exercised():
    assert {r for _, r in SQLITE_READING_CASES} == set(SQLITE_READINGS)


def test_family_script_imports_only_the_stdlib_and_the_shared_module():
    source = (GENERATORS_DIR / "sqlite_change_set.py").read_text()
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M))
    assert imported - {"generator_common"} <= set(sys.stdlib_module_names), imported
