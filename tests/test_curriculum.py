"""The synthesis plan and the closed-loop difficulty controller, against a
simulated policy whose pass rate per capability and level is known."""

import dataclasses
import math
import random

import pytest

from clawloop_assets import curriculum
from clawloop_assets.curriculum import (
    MAX_LEVEL,
    MIN_LEVEL,
    WARMUP_VARIANTS,
    CellEvidence,
    Controller,
    TaskEvidence,
    admission_probability,
    deal_warmup_slots,
    decide_level,
    estimate_drift,
    even_warmup_mix,
    first_plan,
    generator_knobs,
    heldout_drift,
    next_plan,
    predicted_admission,
    warmup_mix,
    wilson_interval,
)

CAPS = ["a", "b", "c", "d", "e", "f"]
PAPER = Controller(band=(1 / 8, 5 / 8))  # N = 8, band [1, 5]


def test_first_plan_starts_at_the_lowest_level_with_the_whole_budget():
    plan = first_plan(CAPS, 36)
    assert {e.difficulty for e in plan} == {MIN_LEVEL}
    assert sum(e.candidates for e in plan) == 36


def test_wilson_interval_matches_the_textbook_value():
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)


def cell(passes, rollouts, admitted=0, candidates=0):
    return CellEvidence(passes, rollouts, admitted, candidates)


def test_drift_is_the_mean_logit_change_of_cells_seen_twice():
    before = {("a", 0): cell(16, 64), ("b", 1): cell(32, 64), ("c", 0): cell(1, 8)}
    after = {("a", 0): cell(24, 64), ("b", 1): cell(40, 64), ("c", 0): cell(8, 8)}
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    smooth = lambda passes, n: (passes + 0.5) / (n + 1)  # noqa: E731
    expected = (logit(smooth(24, 64)) - logit(smooth(16, 64)) + logit(smooth(40, 64)) - logit(smooth(32, 64))) / 2
    # (c: too few rollouts to count)
    assert estimate_drift([before, after]) == pytest.approx(expected)
    assert estimate_drift([after]) == 0.0


def test_levels_move_only_on_clear_evidence_and_by_one():
    # 30 of 32 rollouts pass: clearly above the band; level 3 untried, so half moves.
    up = decide_level(2, {2: cell(30, 32, 0, 4)}, PAPER)
    assert up.levels == {2: 0.5, 3: 0.5} and "clearly above" in up.reason
    # 6 of 8 pass is above 5/8 but not clearly; 18 of 32 not clearly above the inner band (50%): kept.
    assert decide_level(2, {2: cell(6, 8, 0, 1)}, PAPER).levels == {2: 1.0}
    assert decide_level(2, {2: cell(18, 32, 1, 4)}, PAPER).levels == {2: 1.0}
    # The same evidence with a round of drift expected: the policy that runs next is better.
    assert decide_level(2, {2: cell(18, 32, 1, 4)}, PAPER, drift=1.0).levels == {2: 0.5, 3: 0.5}
    # 0 of 64 pass: clearly below; one level down.
    assert decide_level(3, {3: cell(0, 64, 0, 8)}, PAPER).levels == {2: 1.0}
    assert decide_level(MIN_LEVEL, {MIN_LEVEL: cell(0, 64, 0, 8)}, PAPER).levels == {MIN_LEVEL: 1.0}  # the bottom
    assert decide_level(0, {0: cell(0, 64, 0, 8)}, PAPER).levels == {-1: 1.0}  # level 0 has warm-ups below it
    # A neighbour whose admission rate is clearly better wins outright.
    better = decide_level(2, {2: cell(1, 64, 0, 8), 1: cell(20, 64, 7, 8)}, PAPER)
    assert better.levels == {1: 1.0}


def test_plan_follows_the_evidence_and_keeps_every_capability_in_the_pool():
    L = MIN_LEVEL  # noqa: N806  (c, hopeless there, has nowhere lower to go)
    evidence = {("a", L): cell(60, 64, 0, 8), ("b", L): cell(20, 64, 7, 8), ("c", L): cell(0, 64, 0, 8)}
    plan = next_plan(["a", "b", "c"], {"a": L, "b": L, "c": L}, evidence, {"c": 1.0}, 40, PAPER)
    by_cap = {}
    for e in plan:
        by_cap.setdefault(e.capability_id, {})[e.difficulty] = e.candidates
    assert sum(sum(v.values()) for v in by_cap.values()) == 40
    assert set(by_cap["a"]) == {L, L + 1}  # hedged move up
    assert by_cap["b"] == {L: max(by_cap["b"].values())}
    assert sum(by_cap["b"].values()) > sum(by_cap["c"].values())  # admission outweighs the failure tilt
    assert all(sum(v.values()) >= math.ceil(0.05 * 40) for v in by_cap.values())


class SimulatedPolicy:
    """Pass probability of a task at level l for a capability of skill s:
    its mean is 1 / (1 + exp(2 (l - s))), and tasks differ (Beta with
    concentration 4). Training raises a capability's skill by 0.15 a round
    when the round admitted tasks of it."""

    def __init__(self, skills: dict[str, float], rng: random.Random):
        self.skills, self.rng = dict(skills), rng

    def run_round(self, plan, n: int = 8, band: tuple[int, int] = (1, 5)):
        evidence, admitted_by_cap, total_admitted, total = {}, {}, 0, 0
        for entry in plan:
            mean = 1 / (1 + math.exp(2 * (entry.difficulty - self.skills[entry.capability_id])))
            for _ in range(entry.candidates):
                p = self.rng.betavariate(4 * mean + 1e-3, 4 * (1 - mean) + 1e-3)
                passes = sum(self.rng.random() < p for _ in range(n))
                admitted = band[0] <= passes <= band[1]
                key = (entry.capability_id, entry.difficulty)
                evidence.setdefault(key, CellEvidence()).add(1.0, passes, n, int(admitted), 1)
                admitted_by_cap[entry.capability_id] = admitted_by_cap.get(entry.capability_id, 0) + admitted
                total_admitted += admitted
                total += 1
        for capability, count in admitted_by_cap.items():
            if count:
                self.skills[capability] += 0.15
        return evidence, total_admitted / total


def merge(history, recency):
    merged = {}
    for age, evidence in enumerate(reversed(history)):
        for key, cell_ in evidence.items():
            merged.setdefault(key, CellEvidence()).add(recency**age, cell_.passes, cell_.rollouts, cell_.admitted,
                                                       cell_.candidates)
    return merged


def primary_levels(plan):
    levels = {}
    for e in sorted(plan, key=lambda e: (e.candidates, e.difficulty), reverse=True):
        levels.setdefault(e.capability_id, e.difficulty)
    return levels


def simulate(planner, rounds=10, candidates=256, seed=0):
    rng = random.Random(seed)
    # Skills relative to the lowest level, where round 1 starts.
    policy = SimulatedPolicy(dict(zip(CAPS, [MIN_LEVEL + s for s in (-1.0, -0.5, 0.0, 0.25, 0.5, 1.0)])), rng)
    plan, history, rates, plans = first_plan(CAPS, candidates), [], [], []
    for _ in range(rounds):
        plans.append(plan)
        evidence, rate = policy.run_round(plan)
        history.append(evidence)
        rates.append(rate)
        plan = planner(plan, history, candidates)
    return rates, plans


def closed_loop(plan, history, candidates):
    return next_plan(CAPS, primary_levels(plan), merge(history, PAPER.recency), {}, candidates, PAPER,
                     estimate_drift(history))


def open_loop(plan, history, candidates):
    """The paper's growth: every capability one level harder each round."""
    return [e.__class__(e.capability_id, min(e.difficulty + 1, MAX_LEVEL), e.weight, e.candidates, "open loop")
            for e in plan]


@pytest.mark.parametrize("seed", range(6))
def test_the_controller_converges_on_the_admission_band_without_overshoot(seed):
    """Six capabilities from hopeless to easy at the lowest level, each getting better
    every round it trains. The best level at any moment admits about 65%
    (a task's 8 passes land in [1, 5] that often at the best pass rate): from
    round 3 on the controller stays near it and never drops 10 points."""
    rates, plans = simulate(closed_loop, seed=seed)
    settled = rates[2:]
    assert min(settled) >= 0.5, rates
    assert all(later >= earlier - 0.10 for earlier, later in zip(settled, settled[1:])), rates
    assert sum(settled[-3:]) / 3 >= rates[0], rates  # it did not get worse than where it started
    for plan in plans:
        share = {}
        for e in plan:
            share[e.capability_id] = share.get(e.capability_id, 0) + e.candidates
        assert min(share.values()) >= math.ceil(0.05 * 64), share  # no capability squeezed out
    for before, after in zip(plans, plans[1:]):
        b, a = primary_levels(before), primary_levels(after)
        assert all(abs(a[c] - b[c]) <= 1 for c in CAPS)


def test_open_loop_growth_overshoots_under_the_same_policy():
    """The same check fails for the paper's open-loop growth: the test can tell."""
    rates, _ = simulate(open_loop, seed=0)
    settled = rates[2:]
    assert min(settled) < 0.5 or any(later < earlier - 0.10 for earlier, later in zip(settled, settled[1:])), rates


def test_round_two_plan_follows_round_one_evidence_and_report(clawloop_home):
    """The asset's inputs, read from a warehouse holding round 1: a capability
    whose tasks all passed moves up (hedged), the diagnosed one keeps its
    share, and every reason says why."""
    from clawloop_assets.assets.synthesis import controller_inputs
    from clawloop_assets.loop_config import LoopConfig
    from resources.warehouse import DuckDBWarehouse, table_frame

    warehouse, key, L = DuckDBWarehouse(), "round-0001", MIN_LEVEL  # round 1 plans the lowest level
    passes = {"easy": 8, "band": 3, "hard": 0}
    plans, tasks, admissions, failures = [], [], [], []
    for capability, count in passes.items():
        plans.append({"round": key, "capability_id": capability, "difficulty": L, "weight": 1 / 3, "candidates": 4,
                      "source_round": None, "reason": "round 1", "knobs": []})
        for i in range(4):
            task_id = f"{key}.{capability}.{i}"
            tasks.append({"round": key, "task_id": task_id, "generator_id": f"{capability}.g", "capability_id": capability,
                          "domain_id": "d", "difficulty": L, "track": "analysis", "seed": i, "bundle_path": None,
                          "build_status": "built", "build_error": None, "seconds": 0.1})
            admissions.append({"round": key, "task_id": task_id, "pass_count": count, "scored_rollouts": 8,
                               "excluded_rollouts": 0, "admitted": 1 <= count <= 5, "decision": "admitted"})
            if capability == "hard":
                failures.append({"round": key, "summary_id": f"s{i}", "rollout_id": f"r{i}", "task_id": task_id,
                                 "capability_id": capability, "failure_turn": 0, "failure_action": "ls",
                                 "root_cause": "premature_termination", "missing_capability": "x", "evidence": "{}",
                                 "produced_by": "evidence", "phase": "heldout_after"})
    for table, rows in (("synthesis_plans", plans), ("tasks", tasks), ("admissions", admissions),
                        ("failure_summaries", failures), ("round_summaries", [{"round": key, "summary": "{}"}])):
        warehouse.replace(table, table_frame(table, rows), {"round": key})

    loop = LoopConfig(candidates_per_round=30)
    levels, evidence, failure_share, drift, causes = controller_inputs(warehouse, "round-0002", loop.controller_recency)
    assert levels == {"easy": L, "band": L, "hard": L} and drift == 0.0
    assert evidence[("easy", L)].pass_rate == 1.0 and evidence[("band", L)].admitted == 4
    assert failure_share == {"easy": 0.0, "band": 0.0, "hard": 1.0}
    assert causes == {"hard": {"premature_termination": 4}}
    plan = next_plan(list(passes), levels, evidence, failure_share, 30, loop.controller(), drift, causes)
    by = {(e.capability_id, e.difficulty): e for e in plan}
    assert ("easy", L + 1) in by and ("easy", L) in by and "clearly above the band" in by[("easy", L + 1)].reason
    assert by[("band", L)].candidates > by[("hard", L)].candidates >= 2
    assert "100% of diagnosed failures" in by[("hard", L)].reason
    # The report's root cause names the knob that targets it, for that capability
    # only; at a warm-up level the plan says so and turns none.
    assert "no knobs below level 0 (knobs final_check (premature_termination 100%))" in by[("hard", L)].reason
    assert by[("hard", L)].knobs == by[("band", L)].knobs == by[("easy", L)].knobs == ()
    # The same evidence at level 1 ("hard" goes down to 0): the knob is turned.
    higher = next_plan(list(passes), {c: 1 for c in passes}, {(c, 1): cell for (c, _), cell in evidence.items()},
                       failure_share, 30, loop.controller(), drift, causes)
    assert {(e.capability_id, e.difficulty, e.knobs) for e in higher if e.capability_id == "hard"} == {
        ("hard", 0, ("final_check",))}
    assert all(e.knobs == () for e in higher if e.capability_id != "hard")
    assert all("knobs final_check (premature_termination 100%)" in e.reason for e in higher if e.capability_id == "hard")


def test_knobs_follow_the_dominant_root_causes():
    knobs = generator_knobs({
        "a": {"misread_task": 6, "computation_error": 3, "wrong_tool": 1},
        "b": {"format_violation": 1},  # one failure is no pattern
        "c": {"environment_error": 9},  # nothing a generator can change
        "d": {"edit_error": 2, "wrong_tool": 2, "computation_error": 4},
    })
    assert knobs["a"][0] == ("inline_contract", "list_workspace_files")  # wrong_tool: 10%, below the share
    assert knobs["d"][0] == ("inline_contract", "list_tools")
    assert "b" not in knobs and "c" not in knobs



# ---- the warm-up tier's variants


def test_admission_probability_is_the_binomial_band():
    # N = 8, band [1, 5]: 1 - P(0) - P(6) - P(7) - P(8).
    p = 0.3
    tail = sum(math.comb(8, k) * p**k * (1 - p) ** (8 - k) for k in (6, 7, 8))
    assert admission_probability(p, PAPER) == pytest.approx(1 - 0.7**8 - tail)
    assert admission_probability(0.0, PAPER) == 0.0 and admission_probability(1.0, PAPER) == 0.0


def test_heldout_drift_is_the_logit_change_on_the_same_tasks():
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    drift = heldout_drift(cell(40, 160), cell(80, 160))
    assert drift == pytest.approx(logit(80.5 / 161) - logit(40.5 / 161))
    assert heldout_drift(cell(0, 8), cell(8, 8)) is None  # too few rollouts to say
    assert heldout_drift(cell(0, 200), cell(200, 200)) == 2.0  # clamped


def tasks(counts, n=8, shift=0.0):
    return [TaskEvidence(k, n, 1.0, shift) for k in counts]


# The prior and the drift alone, without the drift's uncertainty.
CERTAIN = dataclasses.replace(PAPER, drift_uncertainty=0.0)


def test_a_task_that_never_passed_reads_as_one_the_policy_cannot_do_where_its_variant_splits():
    # Half the tasks never pass, half always: the variant's fitted prior is
    # U-shaped, and neither kind is predicted to land in the band next round.
    split = predicted_admission(tasks([0] * 10 + [8] * 10), CERTAIN)
    assert split < 0.15
    # The same single 0 of 8 among tasks that mostly pass now and then is bad luck.
    assert predicted_admission(tasks([0] + [2, 3, 1, 2, 3, 2, 1, 2, 3]), CERTAIN) > 0.8
    # Drift: a policy that got better makes an easy variant too easy and a hard one admissible.
    easy, hard = [5, 6, 6, 7, 5, 6], [0, 1, 0, 1, 1, 0]
    assert predicted_admission(tasks(easy, shift=1.0), CERTAIN) < predicted_admission(tasks(easy), CERTAIN)
    assert predicted_admission(tasks(hard, shift=1.0), CERTAIN) > predicted_admission(tasks(hard), CERTAIN)
    assert predicted_admission([], CERTAIN) is None


def test_the_drifts_uncertainty_tempers_the_prediction_both_ways():
    """A variant may move much more or less than the pooled drift: in the
    middle of the band that can only cost admission, just outside it, it can
    only bring some in."""
    middle, outside = tasks([3, 3, 2, 3, 3, 2, 3, 3]), tasks([7, 7, 8, 7, 7, 8, 7, 7])
    assert predicted_admission(middle, PAPER) < predicted_admission(middle, CERTAIN) - 0.03
    assert predicted_admission(outside, PAPER) > predicted_admission(outside, CERTAIN) + 0.03
    # The 5-point quadrature against a fine one of the same expectation over
    # the drift's normal error, at pass rates across the grid.
    sigma, fine = PAPER.drift_uncertainty, [-6 + 12 * i / 2000 for i in range(2001)]
    density = [math.exp(-x * x / 2) for x in fine]
    curve = curriculum._admission_curve(0.5, PAPER)
    for i in (10, 60, 100, 150, 190):
        p = curriculum._GRID[i]
        logit = math.log(p / (1 - p)) + 0.5
        expected = sum(d * admission_probability(1 / (1 + math.exp(-(logit + sigma * x))), PAPER)
                       for x, d in zip(fine, density)) / sum(density)
        assert curve[i] == pytest.approx(expected, abs=0.01), p


def test_the_warmup_mix_is_the_most_even_that_reaches_the_target_and_keeps_every_variant():
    band, easy, never, unmeasured, second = WARMUP_VARIANTS[:5]
    evidence = {band: tasks([2, 3, 4, 3, 2, 3]), easy: tasks([8, 7, 8, 8, 6, 8]), never: tasks([0] * 6 + [8] * 2),
                second: tasks([1, 2, 1, 3, 1, 2])}
    capped = dataclasses.replace(PAPER, max_variant_share=0.25)
    mix = warmup_mix(evidence, capped)
    assert sum(mix.shares.values()) == pytest.approx(1.0)
    floor = PAPER.min_variant_share
    assert min(mix.shares.values()) == pytest.approx(floor)  # every variant stays measured
    # A variant not yet measured gets the floor and no more: a hedged move.
    assert mix.predicted[unmeasured] is None and mix.shares[unmeasured] == pytest.approx(floor)
    assert "unmeasured" in mix.reason
    # None above the cap: the best variant's excess goes to the next best, not
    # to the variants kept at the floor only to stay measured.
    assert max(mix.shares.values()) == pytest.approx(capped.max_variant_share)
    assert mix.shares[band] == pytest.approx(capped.max_variant_share)
    assert mix.shares[second] == pytest.approx(capped.max_variant_share)
    # The rest follows the predictions (what the floors leave must go to the
    # measured: 9 floors of 3%, 4 measured variants).
    measured = [band, second, never, easy]
    assert [mix.predicted[v] for v in measured] == sorted((mix.predicted[v] for v in measured), reverse=True)
    assert [mix.shares[v] for v in measured] == sorted((mix.shares[v] for v in measured), reverse=True)
    # Without the cap, the best variant takes more than it allowed.
    uncapped = warmup_mix(evidence, dataclasses.replace(capped, max_variant_share=1.0))
    assert uncapped.shares[band] > capped.max_variant_share + 0.1
    # A target the even split of the measured ones already reaches leaves them even.
    lenient = warmup_mix(evidence, Controller(target_admission=0.1))
    assert lenient.shares[band] == pytest.approx(lenient.shares[easy]) and "sharpness 0" in lenient.reason
    # With nothing measured (round 1), every variant alike.
    assert warmup_mix({}, PAPER) == even_warmup_mix()
    assert set(even_warmup_mix().shares.values()) == {1 / len(WARMUP_VARIANTS)}


def test_capping_moves_the_excess_in_order_of_preference():
    shares = {"a": 0.5, "b": 0.2, "c": 0.1, "d": 0.1, "e": 0.05, "f": 0.05}
    # a's excess goes to b, c and d by what each holds above the floor; b's
    # in turn to c and d; e and f, at the floor, keep it.
    assert curriculum._capped(shares, 0.25, floor=0.05) == pytest.approx(
        {"a": 0.25, "b": 0.25, "c": 0.2, "d": 0.2, "e": 0.05, "f": 0.05})
    # Only when every variant above the floor is full does one at the floor
    # take the rest, the most preferred first.
    assert curriculum._capped({"a": 0.6, "b": 0.2, "c": 0.1, "d": 0.05, "e": 0.05}, 0.25, floor=0.05,
                              preference={"a": 5, "b": 4, "c": 3, "d": 1, "e": 2}) == pytest.approx(
        {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.05, "e": 0.2})
    with pytest.raises(ValueError, match="max_variant_share"):
        Controller(min_variant_share=0.3, max_variant_share=0.2)


def test_round_one_spreads_every_capability_over_the_warmup_variants():
    plan = first_plan(CAPS, 64, even_warmup_mix())
    assert sum(e.candidates for e in plan) == 64 and {e.difficulty for e in plan} == {-2, -1}
    assert all(len(e.operations) == e.candidates for e in plan)
    dealt = [(e.difficulty, op) for e in plan for op in e.operations]
    assert {dealt.count(v) for v in WARMUP_VARIANTS} == {7, 8}  # 64 over 9
    per_capability = {c: sum(e.candidates for e in plan if e.capability_id == c) for c in CAPS}
    assert set(per_capability.values()) == {10, 11}


def test_warmup_slots_are_dealt_in_exact_counts_across_capabilities():
    shares = dict.fromkeys(WARMUP_VARIANTS, 0.05)
    shares[WARMUP_VARIANTS[0]] = 0.6  # the other eight 5% each
    slots = {c: 5 for c in CAPS}  # 30 candidates: a 5% variant gets 1 or 2 somewhere, not 0 everywhere
    dealt = deal_warmup_slots(slots, shares)
    assert {c: len(v) for c, v in dealt.items()} == slots
    everything = [v for variants in dealt.values() for v in variants]
    assert set(everything) == set(WARMUP_VARIANTS)
    assert everything.count(WARMUP_VARIANTS[0]) == 18  # 60% of 30; the other 12 spread over eight


def test_the_plan_deals_the_warmup_mix_to_capabilities_in_the_tier():
    """Capabilities in the warm-up tier get the mix's variants (each
    candidate its operation); one leaving the tier keeps its level-0 half;
    every capability keeps its floor."""
    band = WARMUP_VARIANTS[0]
    mix = warmup_mix({band: tasks([2, 3, 4, 3, 2, 3])}, dataclasses.replace(PAPER, max_variant_share=1.0))
    evidence = {(c, -1): cell(20, 64, 5, 8) for c in CAPS}
    evidence[("a", -1)] = cell(62, 64, 0, 8)  # clearly above: half moves to the untried level 0
    plan = next_plan(CAPS, dict.fromkeys(CAPS, -1), evidence, {}, 60, PAPER, 0.0, None, mix)
    assert sum(e.candidates for e in plan) == 60
    assert all(len(e.operations) == e.candidates for e in plan if e.difficulty < 0)
    assert all(e.operations == () for e in plan if e.difficulty >= 0)
    leaving = {e.difficulty: e.candidates for e in plan if e.capability_id == "a"}
    assert leaving[0] >= 1 and sum(n for level, n in leaving.items() if level < 0) >= 1
    dealt = [(e.difficulty, op) for e in plan for op in e.operations]
    assert dealt.count(band) > len(dealt) / 2 and set(dealt) == set(WARMUP_VARIANTS)
    assert "warm-up variants from the tier's mix" in plan[0].reason
    per_capability = {c: sum(e.candidates for e in plan if e.capability_id == c) for c in CAPS}
    assert min(per_capability.values()) >= math.ceil(0.05 * 60)


class SimulatedWarmupPolicy:
    """Warm-up tasks whose pass rate depends on the variant: per variant a
    Beta spread of pass rates (mean, concentration), the whole policy
    drifting up by `drift` logits a round."""

    def __init__(self, means, concentration, drift, rng):
        self.means, self.concentration, self.drift, self.rng, self.rounds = means, concentration, drift, rng, 0

    def run(self, variants):
        evidence, admitted = {}, 0
        for variant in variants:
            mean, kappa = self.means[variant], self.concentration[variant]
            p = min(max(self.rng.betavariate(mean * kappa, (1 - mean) * kappa), 1e-9), 1 - 1e-9)
            p = 1 / (1 + math.exp(-(math.log(p / (1 - p)) + self.drift * self.rounds)))
            passes = sum(self.rng.random() < p for _ in range(8))
            admitted += 1 <= passes <= 5
            evidence.setdefault(variant, []).append(passes)
        self.rounds += 1
        return evidence, admitted / len(variants)


def simulate_warmup(mixed, seed, drift=0.5, candidates=256, rounds=3):
    """Round 1 the even mix; then the controller's mix (mixed) or the even one."""
    # Means and spreads like round 1's measured on the embedded model: the
    # shown commands passing about half the time with tasks spread wide, the
    # spoken ones less, copying rarely.
    # The two-command variants are rarer still.
    means = dict(zip(WARMUP_VARIANTS, (0.5, 0.55, 0.08, 0.04, 0.2, 0.25, 0.35, 0.05, 0.08), strict=True))
    kappa = dict(zip(WARMUP_VARIANTS, (4, 6, 30, 5, 4, 4, 4, 2, 5), strict=True))
    policy = SimulatedWarmupPolicy(means, kappa, drift, random.Random(seed))
    variants = deal_warmup_slots({"all": candidates}, even_warmup_mix().shares)["all"]
    history, rates = [], []
    for _ in range(rounds):
        evidence, rate = policy.run(variants)
        history.append(evidence)
        rates.append(rate)
        if mixed:
            merged = {}
            for age, past in enumerate(reversed(history)):
                for variant, counts in past.items():
                    merged.setdefault(variant, []).extend(
                        TaskEvidence(k, 8, PAPER.recency**age, drift * (age + 1)) for k in counts)
            variants = deal_warmup_slots({"all": candidates}, warmup_mix(merged, PAPER).shares)["all"]
            assert set(variants) == set(WARMUP_VARIANTS)  # none drops out
    return rates


@pytest.mark.parametrize("seed", range(3))
def test_a_simulated_warmup_tier_admits_more_under_the_mix_than_under_an_even_draw(seed):
    """The same simulated policy, 0.5 logits better each round: rounds 2 and
    3 planned by the mix (the drift known, as the held-out split measures it)
    admit more than the even draw (together by more than 10 points), and
    more than round 1."""
    mixed, even = simulate_warmup(True, seed), simulate_warmup(False, seed)
    assert mixed[0] == even[0]  # round 1 is the same even draw
    assert all(m > e for m, e in zip(mixed[1:], even[1:])), (mixed, even)
    assert sum(mixed[1:]) > sum(even[1:]) + 0.1, (mixed, even)
    assert min(mixed[1:]) > mixed[0], mixed


def test_warmup_evidence_takes_each_task_at_validation_and_after_training(tmp_path):
    """A round's warm-up task counts at its validation (shifted by the drift
    since) and, admitted, again as the policy its training produced reran it
    (shifted only by the rounds after): the measurement that sees a variant
    training made worse."""
    from test_warmup_variants import write_run

    from clawloop_assets.assets.synthesis import warmup_evidence

    warehouse = write_run(tmp_path)  # round 1: copy tasks a (4/16, admitted, 12/16 after) and b (0/16)
    drift = heldout_drift(cell(8, 32), cell(16, 32))
    evidence = warmup_evidence(warehouse, "round-0002", recency=0.5)
    assert evidence == {(-2, "copy_file"): [TaskEvidence(2, 8, 1.0, drift), TaskEvidence(0, 8, 1.0, drift),
                                            TaskEvidence(12, 16, 1.0, 0.0)]}
    # A round later round 1 weighs half and carries round 2's drift too; round
    # 2's admitted tasks have no reruns after training in this warehouse.
    later = warmup_evidence(warehouse, "round-0003", recency=0.5)[(-2, "copy_file")]
    assert later[:3] == [TaskEvidence(2, 8, 0.5, 2 * drift), TaskEvidence(0, 8, 0.5, 2 * drift),
                         TaskEvidence(12, 16, 0.5, drift)]
    assert [(t.passes, t.rollouts, t.weight, t.shift) for t in later[3:]] == [(5, 8, 1.0, drift), (6, 8, 1.0, drift)]
