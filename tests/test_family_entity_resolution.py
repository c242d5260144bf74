"""entity_resolution beyond the family contract (test_family_contract.py):
the level-5 contract declares no answer and names every rule it plants."""

from __future__ import annotations

import json

import pytest
from family_readings import BY_ID
from family_tasks import FamilyBundles

from resources.sandbox import BubblewrapSandbox


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    return FamilyBundles(BubblewrapSandbox(), tmp_path_factory.mktemp("families"))


def test_contract_declares_no_answer_and_the_rules_it_plants(bundles):
    bundle = bundles.get("entity_resolution", BY_ID["sawmill_log_scaling"], 5, 2)  # the level-5 reading bundle
    contract = bundle.contract
    assert contract["parameters"] == {"tolerance": 0.001} and contract["labels"] == []
    text = " ".join(contract["rules"])
    for phrase in ("halves rounded up", "listed later in index.csv", "follow renumbered.csv", "`void`", "factor",
                   "another prefix", "without an amount", "all void"):
        assert phrase in text, phrase
    checks = json.loads(bundle.answer_path.read_text())["checks"]
    assert "csv_records" in {check["type"] for check in checks}  # the files format: one CSV per group
