"""The synthesis plan: which capabilities, at which difficulty, how many
candidates. Round 1 starts every capability at the lowest level. From round 2 on a
closed-loop controller plans from the evidence of every round so far.

Why closed-loop: the paper grew difficulty open-loop and overshot; its
admission rate went 65.6% -> 45.8% -> 55.4%, so a third to a half of a round's
budget taught nothing. The controller here:
- tracks, per (capability, level), the pass rate of the policy's rollouts and
  the admission rate of its candidates over all rounds, older rounds weighing
  less (each round trains a new policy);
- moves a capability's level by one only when the evidence is statistically
  clear (the pass rate's 95% Wilson interval wholly outside the inner half of
  the band, after shifting it by the drift the policy showed between the last
  two rounds, or a neighbouring level whose admission rate is clearly
  better), and hedges a move up to an untried level: half the capability's
  candidates stay where they were, so a level that turns out too hard cannot
  sink the round;
- splits the candidates to reach a target admission rate with the most even
  pool that reaches it, and never gives a capability less than `min_share` of
  them, so it cannot buy its admission rate by collapsing the pool;
- within the warm-up tier (levels -2 and -1: one shell command, shown or in
  words), treats each (level, operation) as its own difficulty, pooled over
  capabilities: a warm-up task's difficulty is its operation and form far
  more than its capability's files (measured on one policy: in words,
  deleting a file admitted 11 of 15 tasks, counting characters 4 of 20), and
  the policy learns the operations unevenly, so one level's operations
  outgrow it at different rounds. Each variant's admission next round is
  predicted task by task (each past task's pass rate shifted by the drift
  since, give or take how far one variant's drift strays from the pooled
  one, through the binomial admission band), and the candidates go to the
  most even mix of variants that reaches the target, every variant keeping
  `min_variant_share` so that it stays measured and none taking more than
  `max_variant_share`, because the variant in the band is the one the policy
  is learning and may outgrow within the round;
- tilts weight toward capabilities the diagnosis found weak, and turns the
  knobs of their generators that target the root causes it found.

The drift is measured, where it can be, on the round's held-out split: the
same tasks and seeds before and after the round's training, so exactly the
change from the policy the evidence came from to the one that runs next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from clawloop_assets.generators.generator_common import WARMUP_LEVELS, WARMUP_OPERATIONS

# Every generator family implements levels MIN_LEVEL to MAX_LEVEL (the scale
# in generators/generator_common.py): its own levels 0 to 5, below them the
# two warm-up levels every family shares (one basic shell command on the
# family's own files), so that a weak policy has tasks it sometimes solves.
MIN_LEVEL = -2
MAX_LEVEL = 5
LEVELS = tuple(range(MIN_LEVEL, MAX_LEVEL + 1))


@dataclass(frozen=True)
class PlanEntry:
    capability_id: str
    difficulty: int
    weight: float
    candidates: int
    reason: str
    knobs: tuple[str, ...] = ()
    # At a warm-up level: the operation of each candidate, in order (empty: drawn by the generator).
    operations: tuple[str, ...] = ()


# Generator knobs (applied by generators/generator_common.py: knob_text) that
# target a diagnosed root cause, each a change to what the generator writes:
KNOB_FOR_ROOT_CAUSE = {
    # referred to files that do not exist -> the instruction names the files
    "misread_task": "list_workspace_files",
    # ended without the deliverable -> the task asks for a final check of it
    "premature_termination": "final_check",
    # no complete command, or a wrong deliverable -> the contract's deliverable
    # and rules in the instruction itself, not only in CONTRACT.md
    "format_violation": "inline_contract",
    "computation_error": "inline_contract",
    # a missing tool or a failing command -> the instruction names the tools
    # the workspace has
    "wrong_tool": "list_tools",
    "edit_error": "list_tools",
}
KNOBS = tuple(sorted(set(KNOB_FOR_ROOT_CAUSE.values())))
# Knobs are turned from this level up; the warm-up levels below take none.
FIRST_KNOB_LEVEL = 0


def generator_knobs(failure_causes: Mapping[str, Mapping[str, int]], min_share: float = 0.25,
                    min_count: int = 2) -> dict[str, tuple[tuple[str, ...], str]]:
    """Per capability, (knobs, why): the knob of every root cause behind at
    least `min_share` (and `min_count`) of its diagnosed failures."""
    out = {}
    for capability, causes in failure_causes.items():
        total = sum(causes.values())
        chosen = {}
        for cause, count in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])):
            knob = KNOB_FOR_ROOT_CAUSE.get(cause)
            if knob and count >= min_count and count >= min_share * total:
                chosen.setdefault(knob, f"{cause} {count / total:.0%}")
        if chosen:
            out[capability] = (tuple(sorted(chosen)), "knobs " + ", ".join(f"{k} ({why})" for k, why in chosen.items()))
    return out


@dataclass
class CellEvidence:
    """What the rounds so far say about one (capability, level), each round's
    counts multiplied by its recency weight."""

    passes: float = 0.0  # passing rollouts
    rollouts: float = 0.0  # scored rollouts
    admitted: float = 0.0  # candidates admitted
    candidates: float = 0.0  # candidates that reached validation

    def add(self, weight: float, passes: int = 0, rollouts: int = 0, admitted: int = 0, candidates: int = 0) -> None:
        self.passes += weight * passes
        self.rollouts += weight * rollouts
        self.admitted += weight * admitted
        self.candidates += weight * candidates

    @property
    def pass_rate(self) -> float | None:
        return self.passes / self.rollouts if self.rollouts else None

    @property
    def smoothed_pass_rate(self) -> float:
        """(passes + 1/2) / (rollouts + 1): finite in logits at 0 and 1."""
        return (self.passes + 0.5) / (self.rollouts + 1)

    @property
    def admission_rate(self) -> float:
        """Posterior mean under a uniform prior: 0.5 with no evidence."""
        return (self.admitted + 1) / (self.candidates + 2)


def wilson_interval(successes: float, trials: float, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (works with weighted counts)."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Controller:
    """The controller's settings. `band` is the admission band as pass-rate
    fractions (N_l/N, N_h/N): a task whose rollouts pass more often than N_h/N
    is mostly too easy, less often than N_l/N mostly unsolved."""

    band: tuple[float, float] = (1 / 8, 5 / 8)
    # N: rollouts per task, with the band the binomial admission probability.
    rollouts_per_task: int = 8
    target_admission: float = 0.7
    min_share: float = 0.05
    # Rollouts (recency-weighted) needed before a level may move at all.
    min_rollouts: float = 16.0
    z: float = 1.96
    # Evidence of a round k rounds old counts recency**k: the policy changes every round.
    recency: float = 0.5
    # Weight given to diagnosed weakness: w *= 1 + weakness_tilt * failure_share.
    weakness_tilt: float = 1.0
    # Each warm-up variant (level, operation) keeps this share of the warm-up
    # candidates: 2 of 64, enough to stay measured, the rest where it admits.
    min_variant_share: float = 0.03
    # And no variant more than this share: a variant is in the band exactly
    # while the policy is learning it, so it can be the one that moves most
    # (31 of 64 candidates on one variant predicted 87% admitted; it moved
    # +2.21 logits in the round, not the +0.94 pooled, and 4 were admitted).
    # Half: with each round's own admission rates known, a mix capped at 25%
    # would have held 70% in rounds 2 and 3 of none of three runs, at 50% of
    # two (benchmarks/warmup_variants.py).
    max_variant_share: float = 0.5
    # How far a variant's next-round pass rate strays from the prediction
    # (logits, a normal spread): 0.75, from the 0.60 logits the prediction
    # (assets/synthesis.py: warmup_evidence) missed by on average over 36
    # variant-rounds of three runs.
    drift_uncertainty: float = 0.75
    evenness_steps: int = field(default=20)

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0 < low <= high < 1:
            raise ValueError(f"band must satisfy 0 < low <= high < 1, got {self.band}")
        if not 0 <= self.min_share <= 1:
            raise ValueError(f"min_share must be in [0, 1], got {self.min_share}")
        if not 0 <= self.min_variant_share <= self.max_variant_share <= 1:
            raise ValueError("need 0 <= min_variant_share <= max_variant_share <= 1, got "
                             f"{self.min_variant_share} and {self.max_variant_share}")


def first_plan(capabilities: Sequence[str], candidates_per_round: int, warmup: WarmupMix | None = None) -> list[PlanEntry]:
    """Round 1: every capability at the bottom. With a `warmup` mix (the
    loop's: even_warmup_mix), its candidates spread
    over the warm-up tier's variants, so that round 2 plans from a
    measurement of each; without, all at MIN_LEVEL, the operation drawn by
    the generator."""
    weight = 1.0 / len(capabilities)
    counts = _apportion(candidates_per_round, {c: weight for c in capabilities}, 0.0)
    if warmup is None:
        return [PlanEntry(c, MIN_LEVEL, weight, counts[c], f"round 1: every capability starts at level {MIN_LEVEL}")
                for c in capabilities]
    dealt = deal_warmup_slots(counts, warmup.shares)
    plan = []
    for c in capabilities:
        for level in sorted({level for level, _ in dealt[c]}):
            operations = tuple(op for lv, op in dealt[c] if lv == level)
            plan.append(PlanEntry(c, level, weight * len(operations) / counts[c], len(operations),
                                  f"round 1: every capability starts in the warm-up tier, {warmup.reason}",
                                  (), operations))
    return plan


@dataclass(frozen=True)
class LevelDecision:
    levels: dict[int, float]  # level -> share of the capability's candidates
    expected_admission: float
    reason: str


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def estimate_drift(rounds: Sequence[Mapping[tuple[str, int], CellEvidence]], min_rollouts: float = 16.0) -> float:
    """How much the policy's pass rate moves in a round, in logits: the mean
    change, from the second-last to the last round, over the (capability,
    level) cells both measured, weighted by the smaller count. Each round
    trains the policy, so the next round's policy is this much better than
    the one the evidence came from. Rates are smoothed by half a pass and half
    a failure, so a cell at 0 or 1 does not weigh in as infinitely far.
    Clamped to [-1, 1]; 0 with fewer than two."""
    if len(rounds) < 2:
        return 0.0
    before, after = rounds[-2], rounds[-1]
    changes, weights = [], []
    for key, cell in after.items():
        old = before.get(key)
        if old is None or min(old.rollouts, cell.rollouts) < min_rollouts:
            continue
        changes.append(_logit(cell.smoothed_pass_rate) - _logit(old.smoothed_pass_rate))
        weights.append(min(old.rollouts, cell.rollouts))
    if not changes:
        return 0.0
    mean = sum(c * w for c, w in zip(changes, weights)) / sum(weights)
    return max(-1.0, min(1.0, mean))


def heldout_drift(before: CellEvidence, after: CellEvidence, min_rollouts: float = 16.0) -> float | None:
    """The drift one round's training caused, in logits: the pass rate of its
    held-out split after training against before, the same tasks and seeds
    (smoothed like estimate_drift's; clamped to [-2, 2]). None with fewer
    than `min_rollouts` scored on either side."""
    if min(before.rollouts, after.rollouts) < min_rollouts:
        return None
    change = _logit(after.smoothed_pass_rate) - _logit(before.smoothed_pass_rate)
    return max(-2.0, min(2.0, change))


def decide_level(current: int, evidence: Mapping[int, CellEvidence], controller: Controller,
                 drift: float = 0.0) -> LevelDecision:
    """Where one capability goes next, from its current (primary) level.
    `drift` (logits) shifts the measured pass rate to the policy that will run."""
    low, high = controller.band
    here = evidence.get(current, CellEvidence())
    rate = here.pass_rate
    if here.rollouts < controller.min_rollouts or rate is None:
        return LevelDecision({current: 1.0}, here.admission_rate,
                             f"level {current} kept: {here.rollouts:.0f} rollouts so far, too few to move")
    lo, hi = (_sigmoid(_logit(x) + drift) for x in wilson_interval(here.passes, here.rollouts, controller.z))
    rate = _sigmoid(_logit(rate) + drift)
    described = f"pass rate {rate:.0%} (95% CI {lo:.0%}-{hi:.0%}{f', {drift:+.2f} logits of drift' if drift else ''})"
    for neighbour in (current + 1, current - 1):
        other = evidence.get(neighbour)
        if other is None or other.candidates < 2 or not MIN_LEVEL <= neighbour <= MAX_LEVEL:
            continue
        mine = wilson_interval(here.admitted, here.candidates, controller.z)
        theirs = wilson_interval(other.admitted, other.candidates, controller.z)
        if theirs[0] > mine[1]:
            return LevelDecision({neighbour: 1.0}, other.admission_rate,
                                 f"level {current} -> {neighbour}: admission {other.admission_rate:.0%} there is clearly "
                                 f"above {here.admission_rate:.0%} here")
    # The admission rate peaks when the pass rate sits in the middle of the
    # band and falls off toward its edges (tasks differ, so a mean pass rate
    # near an edge puts many of them outside): keep the pass rate in the inner
    # half of the band, [inner_low, inner_high].
    centre = (low + high) / 2
    inner_low, inner_high = (low + centre) / 2, (centre + high) / 2
    if current < MAX_LEVEL and lo > inner_high:
        return _move(current, current + 1, evidence, here,
                     f"{described} is clearly above {'the band' if lo > high else f'{inner_high:.0%}, the inner band'}")
    if current > MIN_LEVEL and hi < inner_low:
        return _move(current, current - 1, evidence, here,
                     f"{described} is clearly below {'the band' if hi < low else f'{inner_low:.0%}, the inner band'}")
    return LevelDecision({current: 1.0}, here.admission_rate, f"level {current} kept: {described}")


def _move(current: int, target: int, evidence: Mapping[int, CellEvidence], here: CellEvidence, why: str) -> LevelDecision:
    if target < current or (target in evidence and evidence[target].candidates >= 2):
        return LevelDecision({target: 1.0}, evidence.get(target, CellEvidence()).admission_rate,
                             f"level {current} -> {target}: {why}")
    # Up to an untried level, the overshoot the paper suffered: half the
    # candidates stay where the policy is known. (Down from a level that is
    # clearly too hard risks nothing.)
    return LevelDecision({current: 0.5, target: 0.5}, here.admission_rate / 2 + 0.25,
                         f"level {current} -> {target} for half: {why}; the other half stays at {current} "
                         f"until {target} is measured")


# ---- the warm-up tier's variants (level, operation)

WARMUP_VARIANTS = tuple((level, op) for level in WARMUP_LEVELS for op in WARMUP_OPERATIONS[level])


@dataclass(frozen=True)
class TaskEvidence:
    """One past warm-up task: its pass count, the recency weight of its
    round, and the drift (logits) from the policy that ran it to the one that
    runs next."""

    passes: int
    rollouts: int
    weight: float = 1.0
    shift: float = 0.0


def admission_probability(pass_rate: float, controller: Controller) -> float:
    """P(N_l <= passes <= N_h) for N rollouts of a task passing at `pass_rate`."""
    n = controller.rollouts_per_task
    low, high = (round(fraction * n) for fraction in controller.band)
    return sum(math.comb(n, k) * pass_rate**k * (1 - pass_rate) ** (n - k) for k in range(low, high + 1))


# The grid predicted_admission integrates a task's pass rate over (midpoints).
_GRID = tuple((i + 0.5) / 200 for i in range(200))
_LOG_GRID = tuple((math.log(p), math.log(1 - p)) for p in _GRID)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def task_prior(tasks: Sequence[TaskEvidence]) -> tuple[float, float]:
    """Beta(a, b): how the pass rates of one variant's tasks spread, fitted
    to their pass counts (the beta-binomial's maximum likelihood on a grid of
    means and concentrations, recency-weighted). A variant whose tasks split
    into never- and always-solved gets a U-shaped prior (a, b < 1), so a task
    that failed 8 times is taken for one the policy cannot do, not for one
    unlucky 8 times. Jeffreys' Beta(1/2, 1/2) with fewer than 3 tasks."""
    measured = [t for t in tasks if t.rollouts]
    if len(measured) < 3:
        return 0.5, 0.5
    best, best_ll = (0.5, 0.5), -math.inf
    for mean in (i / 50 for i in range(1, 50)):
        for concentration in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64):
            a, b = mean * concentration, (1 - mean) * concentration
            prior = _log_beta(a, b)
            ll = sum(t.weight * (_log_beta(a + t.passes, b + t.rollouts - t.passes) - prior) for t in measured)
            if ll > best_ll:
                best, best_ll = (a, b), ll
    return best


# Probabilists' Gauss-Hermite nodes and weights (5 points, weights summing
# to 1): the expectation over a standard normal drift error.
_NORMAL_NODES = ((0.0, 8 / 15), (1.3556261799742659, 0.2222549197766013), (-1.3556261799742659, 0.2222549197766013),
                 (2.8569700138728056, 0.011257411327720691), (-2.8569700138728056, 0.011257411327720691))


def _admission_curve(shift: float, controller: Controller) -> list[float]:
    """On _GRID: the admission probability of a task of that pass rate after
    `shift` logits of drift, give or take the controller's drift_uncertainty."""
    sigma = controller.drift_uncertainty
    nodes = _NORMAL_NODES if sigma else ((0.0, 1.0),)
    return [sum(w * admission_probability(_sigmoid(_logit(p) + shift + sigma * x), controller) for x, w in nodes)
            for p in _GRID]


def predicted_admission(tasks: Sequence[TaskEvidence], controller: Controller) -> float | None:
    """The admission rate next round of tasks like these, task by task,
    because tasks of one variant differ (a mean pass rate hides the
    never-solved and the always-solved): each task's pass rate, uncertain
    given its k passes in n (the posterior Beta(a + k, b + n - k) under the
    variant's task_prior), shifted by its drift in logits (give or take
    drift_uncertainty: a variant the policy is learning can move much more
    than the pooled drift), through the admission band; averaged with the
    recency weights. None without evidence."""
    measured = [t for t in tasks if t.rollouts]
    total = sum(t.weight for t in measured)
    if not total:
        return None
    a, b = task_prior(measured)
    curves: dict[float, list[float]] = {}
    out = 0.0
    for t in measured:
        log_density = [(a + t.passes - 1) * lp + (b + t.rollouts - t.passes - 1) * lq for lp, lq in _LOG_GRID]
        top = max(log_density)
        density = [math.exp(x - top) for x in log_density]
        if t.shift not in curves:
            curves[t.shift] = _admission_curve(t.shift, controller)
        out += t.weight * sum(d * x for d, x in zip(density, curves[t.shift])) / sum(density)
    return out / total


@dataclass(frozen=True)
class WarmupMix:
    shares: dict[tuple[int, str], float]  # (level, operation) -> share of the warm-up candidates
    predicted: dict[tuple[int, str], float | None]  # None: not measured yet
    expected_admission: float
    reason: str


def even_warmup_mix() -> WarmupMix:
    """With nothing measured yet (round 1): every variant alike, to measure each."""
    return WarmupMix(dict.fromkeys(WARMUP_VARIANTS, 1 / len(WARMUP_VARIANTS)), dict.fromkeys(WARMUP_VARIANTS),
                     0.5, "warm-up variants: none measured yet, an even mix to measure each")


def warmup_mix(evidence: Mapping[tuple[int, str], Sequence[TaskEvidence]], controller: Controller,
               max_sharpness: float = 16.0) -> WarmupMix:
    """The share of each warm-up variant next round: every variant keeps
    `min_variant_share`, so that it stays measured (all a variant not yet
    measured gets: a move to an unmeasured difficulty is hedged), and none
    gets more than `max_variant_share`; the rest goes to the measured
    variants in proportion to predicted**s, s rising from 0 (even) until the
    expected admission reaches the target (or s reaches `max_sharpness`):
    the most even mix that reaches it. With nothing measured, an even mix
    (round 1's)."""
    predicted = {v: predicted_admission(evidence.get(v, ()), controller) for v in WARMUP_VARIANTS}
    measured = [v for v in WARMUP_VARIANTS if predicted[v] is not None]
    if not measured:
        return even_warmup_mix()
    floor = min(controller.min_variant_share, 1 / len(WARMUP_VARIANTS))
    free = 1 - floor * len(WARMUP_VARIANTS)
    # An unmeasured variant's expected admission: the uniform prior's mean.
    score = {v: 0.5 if predicted[v] is None else predicted[v] for v in WARMUP_VARIANTS}
    # What a capped variant's excess goes to once the preferred are full: the
    # measured by prediction; the unmeasured last (a hedged move).
    preference = {v: score[v] if v in measured else -1.0 for v in WARMUP_VARIANTS}
    for step in range(int(max_sharpness * 4) + 1):
        sharpness = step / 4
        powered = {v: score[v] ** sharpness for v in measured}
        total = sum(powered.values()) or 1.0
        shares = _capped({v: floor + free * powered.get(v, 0.0) / total for v in WARMUP_VARIANTS},
                         max(controller.max_variant_share, 1 / len(WARMUP_VARIANTS)), floor, preference)
        expected = sum(shares[v] * score[v] for v in WARMUP_VARIANTS)
        if expected >= controller.target_admission:
            break
    described = ", ".join(f"{op}@{level} {shares[(level, op)]:.0%} "
                          f"({'unmeasured' if predicted[(level, op)] is None else f'{predicted[(level, op)]:.0%}'})"
                          for level, op in WARMUP_VARIANTS)
    return WarmupMix(shares, predicted, expected,
                     f"warm-up variants (share, predicted admission): {described}; sharpness {sharpness:g}")


def _capped(shares: Mapping, cap: float, floor: float = 0.0, preference: Mapping | None = None) -> dict:
    """`shares` with none above `cap` (cap * len(shares) >= 1): each excess
    goes to the shares below the cap in proportion to what they hold above
    `floor` (so in order of preference, not to those kept at the floor only
    to stay measured); where none holds more than the floor, to the most
    preferred below the cap (by `preference`, else by share), filled one
    after another."""
    shares = dict(shares)
    rank = preference or shares
    while True:
        over = {v for v, x in shares.items() if x > cap + 1e-12}
        if not over:
            return shares
        excess = sum(shares[v] - cap for v in over)
        for v in over:
            shares[v] = cap
        under = [v for v, x in shares.items() if x < cap - 1e-12]
        above_floor = {v: max(shares[v] - floor, 0.0) for v in under}
        total = sum(above_floor.values())
        if total > 1e-9:
            for v in under:
                shares[v] += excess * above_floor[v] / total
            continue
        for v in sorted(under, key=lambda v: rank[v], reverse=True):
            take = min(cap - shares[v], excess)
            shares[v], excess = shares[v] + take, excess - take


def deal_warmup_slots(slots: Mapping[str, int], shares: Mapping[tuple[int, str], float]) -> dict[str, list[tuple[int, str]]]:
    """Each capability's warm-up candidates as variants: the total apportioned
    to the mix (exact counts, so a 5% variant is not rounded away in every
    capability), laid out evenly spread, and dealt to the capabilities in
    turn in contiguous runs."""
    total = sum(slots.values())
    counts = _apportion(total, shares, 0.0, at_least_one=False)
    order, used = [], dict.fromkeys(counts, 0)
    for i in range(total):
        # The variant furthest behind its due count so far (ties: the larger share, then by name).
        variant = max(counts, key=lambda v: (counts[v] * (i + 1) / total - used[v], counts[v], v))
        used[variant] += 1
        order.append(variant)
    dealt, start = {}, 0
    for capability in sorted(slots):
        dealt[capability] = order[start:start + slots[capability]]
        start += slots[capability]
    return dealt


def next_plan(
    capabilities: Sequence[str],
    current_levels: Mapping[str, int],
    evidence: Mapping[tuple[str, int], CellEvidence],
    failure_share: Mapping[str, float],
    candidates_per_round: int,
    controller: Controller = Controller(),
    drift: float = 0.0,
    failure_causes: Mapping[str, Mapping[str, int]] | None = None,
    warmup: WarmupMix | None = None,
) -> list[PlanEntry]:
    """Round k+1's plan from the evidence of rounds 1..k (`drift`: see
    estimate_drift and heldout_drift) and round k's diagnosis
    (`failure_share` per capability, `failure_causes`: root-cause counts per
    capability). With a `warmup` mix, a capability's warm-up candidates go to
    the mix's variants (dealt by deal_warmup_slots) instead of its own
    warm-up level; without, the generator draws the operation."""
    knobs = generator_knobs(failure_causes or {})
    decisions = {}
    for capability in capabilities:
        by_level = {level: cell for (c, level), cell in evidence.items() if c == capability}
        decisions[capability] = decide_level(current_levels.get(capability, MIN_LEVEL), by_level, controller, drift)
    expected = {c: d.expected_admission for c, d in decisions.items()}
    if warmup is not None:
        expected.update({c: warmup.expected_admission for c, d in decisions.items() if max(d.levels) < 0})
    tilt = {c: 1.0 + controller.weakness_tilt * failure_share.get(c, 0.0) for c in capabilities}
    weights, evenness = _weights_for_target(expected, tilt, controller)
    counts = _apportion(candidates_per_round, weights, controller.min_share)
    splits = {c: _apportion(counts[c], decisions[c].levels, 0.0, at_least_one=False) for c in capabilities}
    dealt = {}
    if warmup is not None:
        dealt = deal_warmup_slots({c: sum(n for level, n in split.items() if level < 0) for c, split in splits.items()},
                                  warmup.shares)
    plan = []
    for capability in capabilities:
        decision = decisions[capability]
        split = dict(splits[capability])
        operations: dict[int, tuple[str, ...]] = {}
        if capability in dealt:
            split = {level: n for level, n in split.items() if level >= 0}
            for level, op in dealt[capability]:
                operations[level] = operations.get(level, ()) + (op,)
                split[level] = split.get(level, 0) + 1
        chosen, why = knobs.get(capability, ((), ""))
        for level in sorted(split):
            # A warm-up task's one sentence already states its whole contract;
            # the knobs' paragraphs would only repeat it, and measured, they cut
            # the embedded model's pass rate on warm-up tasks from 35% to 6%.
            knobbed = chosen if level >= FIRST_KNOB_LEVEL else ()
            note = why if knobbed else (f"no knobs below level {FIRST_KNOB_LEVEL} ({why})" if why else "")
            if level in operations:
                note = ((note + "; ") if note else "") + (
                    f"warm-up variants from the tier's mix (expected admission {warmup.expected_admission:.0%}): "
                    + ", ".join(f"{op} x{operations[level].count(op)}" for op in sorted(set(operations[level]))))
            share = split[level] / counts[capability] if capability in dealt else decision.levels[level]
            plan.append(PlanEntry(
                capability, level, weights[capability] * share, split[level],
                f"{decision.reason}; expected admission {expected[capability]:.0%}; "
                f"{failure_share.get(capability, 0.0):.0%} of diagnosed failures; pool evenness {evenness:.2f}"
                + (f"; {note}" if note else ""),
                knobbed,
                operations.get(level, ()),
            ))
    return plan


def _weights_for_target(expected: Mapping[str, float], tilt: Mapping[str, float], controller: Controller):
    """Capability weights: the most even mix of uniform and admission-
    proportional weights whose expected admission rate reaches the target (the
    admission-proportional end if none does). Returns (weights, evenness),
    evenness 1 for uniform, 0 for fully admission-proportional."""
    names = sorted(expected)
    uniform = {c: tilt[c] / sum(tilt.values()) for c in names}
    scored = {c: tilt[c] * expected[c] for c in names}
    total = sum(scored.values()) or 1.0
    proportional = {c: scored[c] / total for c in names}
    best = proportional
    for step in range(controller.evenness_steps + 1):
        mix = step / controller.evenness_steps
        weights = {c: (1 - mix) * uniform[c] + mix * proportional[c] for c in names}
        if sum(weights[c] * expected[c] for c in names) >= controller.target_admission:
            return weights, 1 - mix
        best = weights
    return best, 0.0


def _apportion(total: int, weights: Mapping, min_share: float, at_least_one: bool = True) -> dict:
    """Integer counts proportional to `weights` (largest remainder), each at
    least ceil(min_share * total) and, with `at_least_one`, at least one, so no
    capability drops out of sight."""
    names = sorted(weights)
    if not names:
        return {}
    budget = max(total, len(names)) if at_least_one else total
    floor = max(math.ceil(min_share * budget), 1 if at_least_one else 0)
    floor = min(floor, budget // len(names))
    weight_sum = sum(weights.values()) or 1.0
    free = budget - floor * len(names)
    exact = {n: weights[n] / weight_sum * free for n in names}
    counts = {n: floor + int(exact[n]) for n in names}
    leftover = budget - sum(counts.values())
    for n in sorted(names, key=lambda n: exact[n] - int(exact[n]), reverse=True)[: max(leftover, 0)]:
        counts[n] += 1
    return counts
