from clawloop_assets.curriculum import CapabilityOutcome, first_plan, next_plan

CAPS = ["grouped_statistics", "ledger_reconciliation", "file_reorganization"]
BAND = (1 / 8, 5 / 8)


def test_first_plan_starts_at_level_zero_with_the_whole_budget():
    plan = first_plan(CAPS, 36)
    assert {e.difficulty for e in plan} == {0}
    assert sum(e.candidates for e in plan) == 36


def test_levels_move_at_most_one_and_weights_follow_failures():
    outcomes = {
        "grouped_statistics": CapabilityOutcome(0, 0.9, 0.0),  # outgrown
        "ledger_reconciliation": CapabilityOutcome(2, 0.0, 0.8),  # out of reach
        "file_reorganization": CapabilityOutcome(1, 0.3, 0.2),  # in band
    }
    plan = {e.capability_id: e for e in next_plan(CAPS, outcomes, 30, BAND)}
    assert plan["grouped_statistics"].difficulty == 1
    assert plan["ledger_reconciliation"].difficulty == 1
    assert plan["file_reorganization"].difficulty == 1
    assert plan["ledger_reconciliation"].candidates > plan["grouped_statistics"].candidates
    assert sum(e.candidates for e in plan.values()) == 30
    assert "below the band" in plan["ledger_reconciliation"].reason


def test_every_capability_keeps_at_least_one_candidate():
    outcomes = {c: CapabilityOutcome(0, 0.3, 1.0 if c == CAPS[0] else 0.0) for c in CAPS}
    plan = next_plan(CAPS, outcomes, 3, BAND)
    assert all(e.candidates >= 1 for e in plan)
