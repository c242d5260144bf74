"""multi_module_refactor beyond the family contract (test_family_contract.py):
levels 0 and 5 build and pass the domain-dependent checks of agent-free
validation in every domain (slow; family_tasks.domain_dependent_checks)."""

from __future__ import annotations

import pytest
from family_tasks import CAPABILITIES, build_bundle, domain_dependent_checks

from clawloop_assets.synthesis.catalogs import load_domain_catalog
from resources.sandbox import BubblewrapSandbox

DOMAINS = load_domain_catalog()


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


@pytest.mark.slow
@pytest.mark.parametrize("domain", DOMAINS, ids=[d.id for d in DOMAINS])
def test_every_domain_at_levels_0_and_5(sandbox, tmp_path, domain):
    for level in (0, 5):
        bundle = build_bundle(sandbox, CAPABILITIES["multi_module_refactor"], tmp_path / str(level), domain, level, 1)
        scratch = tmp_path / f"scratch-{level}"
        scratch.mkdir()
        failure = domain_dependent_checks(sandbox, bundle, scratch)
        assert failure is None, (level, failure)
