import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from benchmarks import sandbox_overhead


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_sandbox_overhead_is_reported_as_a_ratio_to_bare_bash(backend):
    results = sandbox_overhead.measure({backend: make_sandbox(backend)}, repeats=3)
    assert results[f"sandbox.{backend}.overhead_ratio"] == (
        results[f"sandbox.{backend}.command_seconds"] / results["sandbox.bare_bash_seconds"]
    )
    # A sandbox does strictly more work than the bare command it wraps.
    assert results[f"sandbox.{backend}.overhead_ratio"] > 1
