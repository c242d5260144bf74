from benchmarks import sandbox_overhead


def test_sandbox_overhead_is_reported_as_a_ratio_to_bare_bash():
    results = sandbox_overhead.measure(repeats=3)
    assert results["sandbox.bubblewrap.overhead_ratio"] == (
        results["sandbox.bubblewrap.command_seconds"] / results["sandbox.bare_bash_seconds"]
    )
    # A sandbox does strictly more work than the bare command it wraps.
    assert results["sandbox.bubblewrap.overhead_ratio"] > 1
