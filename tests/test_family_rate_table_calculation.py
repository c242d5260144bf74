"""rate_table_calculation beyond the family contract (test_family_contract.py):
its reading bundles draw both values of every toggled rule, so the contract
test reads each rule the other way from both sides."""

from __future__ import annotations

import pytest
from family_readings import FAMILIES, RATE_TOGGLES
from family_tasks import FamilyBundles

from resources.sandbox import BubblewrapSandbox


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    return FamilyBundles(BubblewrapSandbox(), tmp_path_factory.mktemp("families"))


def test_reading_bundles_draw_both_values_of_every_toggle(bundles):
    readings = FAMILIES["rate_table_calculation"].readings
    built = {(r.domain.id, r.level, r.seed): r for r in readings}.values()
    solves = [bundles.get("rate_table_calculation", r.domain, r.level, r.seed).solution_path.read_text() for r in built]
    for reading, values in RATE_TOGGLES.items():
        for value in values:
            assert any(value in solve for solve in solves), (reading, value)
