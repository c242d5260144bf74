import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from benchmarks import sandbox_overhead
from clawloop_assets.catalogs import load_capability_catalog
from clawloop_assets.curriculum import LEVELS


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_sandbox_overhead_is_reported_as_a_ratio_to_bare_bash(backend):
    results = sandbox_overhead.measure({backend: make_sandbox(backend)}, repeats=3)
    assert results[f"sandbox.{backend}.overhead_ratio"] == (
        results[f"sandbox.{backend}.command_seconds"] / results["sandbox.bare_bash_seconds"]
    )
    # A sandbox does strictly more work than the bare command it wraps.
    assert results[f"sandbox.{backend}.overhead_ratio"] > 1


def test_synthesis_throughput_reports_rates_per_rejection_kind():
    from benchmarks import synthesis_throughput

    capabilities = len(load_capability_catalog())
    plan = synthesis_throughput.candidate_plan(capabilities * len(LEVELS))
    # Any prefix of the plan spreads over every capability, then every level.
    assert len({c[0].id for c in plan[:capabilities]}) == capabilities and len({c[2] for c in plan}) == len(LEVELS)
    results = synthesis_throughput.measure(count=6, workers=2)
    assert results["synthesis.candidates"] == 6 and results["synthesis.candidates_per_second"] > 0
    kinds = sum(v for k, v in results.items() if k.startswith("synthesis.rejections."))
    assert kinds == pytest.approx(results["synthesis.rejection_rate"])
