"""The synthesis plan: which capabilities, at which difficulty, how many
candidates. Round 1 starts every capability at one level (`loop.first_level`). From round 2 on a
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
  two rounds, or once the temperature is the controller's, by the held-out
  gain less the next temperature's cost; or a neighbouring level whose
  admission rate is clearly better), and hedges a move up to an untried
  level, or to one measured below the inner band: half the capability's
  candidates stay where they were, so a level that turns out too hard
  cannot sink the round
  (docs/experiments/2026-12-04-four-rules-replayed.md); and never climbs to a
  level whose own evidence is clearly below the band (until it fades);
- splits the candidates to reach a target admission rate with the most even
  pool that reaches it, and never gives a capability less than `min_share` of
  them, so it cannot buy its admission rate by collapsing the pool;
- at a warm-up level, holds back an operation (copy a file, count
  characters, ...) whose pass rate, pooled over capabilities, is clearly
  below the inner band by the same test: it keeps `min_operation_share` of the
  level's candidates, so it stays measured and trained on, and the others
  share the rest evenly. It never favours an operation: one admitted most
  this round is the one that grows too easy by the next. There is no level
  below the lowest for such an operation to move to, and training may not
  lift it for rounds (docs/experiments/2026-11-30-warmup-variant-mix.md,
  docs/experiments/2026-12-01-operation-holdback-and-0.95.md);
- at a level that shows the command (the warm-up level, the rung) in the
  band's upper half, probes the level above with a share of the
  capability's candidates and climbs once that level's evidence is in the
  band (_climb_or_probe): how well the policy copies a shown command does
  not say how hard the same task is without it (and the temperature holds
  the warm-up pass rate near the band's centre). The level's evidence is
  the capability's own once it has enough, else the level's pooled over
  the capabilities still below it (_rung_evidence);
- tilts weight toward capabilities the diagnosis found weak, and from
  FIRST_KNOB_LEVEL up turns the knobs of their generators that target the
  root causes it found;
- after the schedule's rounds, chooses the rollout temperature
  (choose_temperature): the pass rate a round admits most at depends on the
  policy, and no fixed temperature suits every run
  (docs/experiments/2026-11-30-sampling-temperature.md); the levels then see
  the pass rate the next round will sample at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from clawloop_assets.synthesis.generators.generator_common import SHOWN_COMMAND_LEVEL, WARMUP_OPERATIONS
from resources.schemas import MAX_LEVEL, MIN_LEVEL

# Every generator family implements levels MIN_LEVEL to MAX_LEVEL (the scale
# in generators/generator_common.py): its own levels 0 to 5, below them its
# level-0 task with the command shown (-1) and the warm-up level every family
# shares (-2: one basic shell command on the family's own files, shown), so
# that a weak policy has tasks it sometimes solves.
LEVELS = tuple(range(MIN_LEVEL, MAX_LEVEL + 1))


@dataclass(frozen=True)
class PlanEntry:
    capability_id: str
    difficulty: int
    weight: float
    candidates: int
    reason: str
    knobs: tuple[str, ...] = ()
    # At a warm-up level: the share of each of its operations (warmup_operation_mix); None draws them evenly.
    operation_weights: Mapping[str, float] | None = None


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
# Knobs are turned from this level up; the levels below take none. A
# paragraph added to help with a diagnosed weakness made the warm-up tasks
# and the families' level 0 harder for the embedded policy, not easier
# (docs/experiments/2026-11-30-warmup-levels.md,
# docs/experiments/2026-12-04-four-rules-replayed.md).
FIRST_KNOB_LEVEL = 1


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
    def smoothed_logit(self) -> float:
        """smoothed_pass_rate in logits: what drift is measured in."""
        return _logit(self.smoothed_pass_rate)

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
    """The controller's settings.

    The first six are the method's knobs and come from LoopConfig, the one
    place their defaults live (LoopConfig.controller(); docs/round.md, "The
    knobs of a round"), so that a run can switch a feature off from the
    launchpad (its ablation): build a Controller with `loop.controller()`,
    or give all six. `band` is the admission band as pass-rate fractions (N_l/N,
    N_h/N): a task whose rollouts pass more often than N_h/N is mostly too
    easy, less often than N_l/N mostly unsolved.

    The rest are the controller's own constants, not round knobs: what each
    does is beside it, and docs/round.md ("Synthesis") and the experiments
    it links say why."""

    # From LoopConfig: admission_low/admission_high over rollouts_per_task,
    # target_admission_rate, min_capability_share, controller_recency,
    # weakness_tilt, rung_probe_share.
    band: tuple[float, float]
    target_admission: float
    min_share: float
    # Evidence of a round k rounds old counts recency**k: the policy changes every round.
    recency: float
    # Weight given to diagnosed weakness: w *= 1 + weakness_tilt * failure_share
    # (docs/round.md, "The plan follows the report"). 0 turns the tilt off.
    weakness_tilt: float
    # At a level that shows the command (-2, -1), in the band, the share of a
    # capability's candidates that probe the level above (_climb_or_probe):
    # one of the five or so a capability gets; the probes of all
    # capabilities together measure that level (_rung_evidence). 0 turns
    # the probe off.
    rung_probe_share: float
    # Rollouts (recency-weighted) needed before a level may move at all, and
    # the Wilson interval's z (95%): a level moves only on clear evidence
    # (docs/round.md, "Synthesis").
    min_rollouts: float = 16.0
    z: float = 1.96
    # A warm-up operation held back (clearly below the inner band) keeps this share of its level's candidates
    # (docs/experiments/2026-12-01-operation-holdback-and-0.95.md).
    min_operation_share: float = 0.1
    # The rollout temperature (choose_temperature): logits of pass rate lost
    # per +1.0 of temperature (docs/experiments/2026-12-01-temperature-controller.md);
    # the most it moves in a round; the range it stays in. A ceiling the
    # warm-up level reaches before the capabilities have left it turns its
    # easy operations too easy: most of their tasks pass 6 of 8 or more
    # (docs/experiments/2026-12-03-the-warm-up-level-spent.md).
    temperature_sensitivity: float = 7.5
    max_temperature_step: float = 0.15
    temperature_range: tuple[float, float] = (0.5, 1.5)
    # How finely _weights_for_target searches the mix between the even pool
    # and the one that reaches the target admission (docs/round.md, "Synthesis":
    # the most even pool that reaches it).
    evenness_steps: int = field(default=20)

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0 < low <= high < 1:
            raise ValueError(f"band must satisfy 0 < low <= high < 1, got {self.band}")
        if not 0 <= self.min_share <= 1:
            raise ValueError(f"min_share must be in [0, 1], got {self.min_share}")
        if self.weakness_tilt < 0:
            raise ValueError(f"weakness_tilt must be >= 0, got {self.weakness_tilt}")
        if not 0 <= self.rung_probe_share < 1:
            raise ValueError(f"rung_probe_share must be in [0, 1), got {self.rung_probe_share}")
        if not 0 < self.min_operation_share <= 1:
            raise ValueError(f"min_operation_share must be in (0, 1], got {self.min_operation_share}")
        if self.temperature_sensitivity <= 0 or self.max_temperature_step <= 0:
            raise ValueError(f"temperature_sensitivity and max_temperature_step must be positive, got "
                             f"{self.temperature_sensitivity} and {self.max_temperature_step}")
        if not 0 < self.temperature_range[0] <= self.temperature_range[1]:
            raise ValueError(f"temperature_range must be (low, high) with 0 < low <= high, got {self.temperature_range}")


def first_plan(capabilities: Sequence[str], candidates_per_round: int, level: int) -> list[PlanEntry]:
    """Round 1 has no evidence: every capability gets an even share at `level`."""
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        raise ValueError(f"the first plan's level must be in [{MIN_LEVEL}, {MAX_LEVEL}], got {level}")
    weight = 1.0 / len(capabilities)
    counts = _apportion(candidates_per_round, {c: weight for c in capabilities}, 0.0)
    return [PlanEntry(c, level, weight, counts[c], f"round 1: every capability starts at level {level}")
            for c in capabilities]


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
        changes.append(cell.smoothed_logit - old.smoothed_logit)
        weights.append(min(old.rollouts, cell.rollouts))
    if not changes:
        return 0.0
    mean = sum(c * w for c, w in zip(changes, weights)) / sum(weights)
    return max(-1.0, min(1.0, mean))


def decide_level(current: int, evidence: Mapping[int, CellEvidence], controller: Controller,
                 drift: float = 0.0, pooled: Mapping[int, CellEvidence] | None = None) -> LevelDecision:
    """Where one capability goes next, from its current (primary) level.
    `drift` (logits) shifts the measured pass rate to the policy that will
    run; `pooled` is each level's evidence summed over the capabilities
    still below it (_rung_evidence)."""
    pooled = pooled or {}
    low, high = controller.band
    here = evidence.get(current, CellEvidence())
    rate = here.pass_rate
    if here.rollouts < controller.min_rollouts or rate is None:
        return LevelDecision({current: 1.0}, here.admission_rate,
                             f"level {current} kept: {here.rollouts:.0f} rollouts so far, too few to move")
    lo, hi = _shifted_interval(here, controller, drift)
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
    inner_low, inner_high = _inner_band(controller)
    if current < MAX_LEVEL and lo > inner_high:
        return _move(current, current + 1, evidence, here,
                     f"{described} is clearly above {'the band' if lo > high else f'{inner_high:.0%}, the inner band'}",
                     controller, pooled)
    if current > MIN_LEVEL and hi < inner_low:
        return _move(current, current - 1, evidence, here,
                     f"{described} is clearly below {'the band' if hi < low else f'{inner_low:.0%}, the inner band'}",
                     controller, pooled)
    in_upper_half = _logit(here.pass_rate) + drift >= _logit((low + high) / 2)
    if current <= SHOWN_COMMAND_LEVEL and in_upper_half and controller.rung_probe_share > 0:
        return _climb_or_probe(current, evidence, here, described, controller, pooled)
    return LevelDecision({current: 1.0}, here.admission_rate, f"level {current} kept: {described}")


def _climb_or_probe(current: int, evidence: Mapping[int, CellEvidence], here: CellEvidence, described: str,
                    controller: Controller, pooled: Mapping[int, CellEvidence]) -> LevelDecision:
    """At a level that shows the command (the warm-up level or the rung), in
    the band's upper half: up to the level above once its evidence
    (_rung_evidence) puts it in the band, else a probe of it (unless it is
    a measured cliff, _cliff_upper_bound). A shown level's pass rate says
    how well the policy copies a command, not how hard the level above is:
    the warm-up level's does not say how hard a family's rung is (and the
    temperature holds it at the band's centre, so it seldom reads clearly
    above the band; docs/experiments/2026-12-03-temperature-per-level.md),
    and the rung's does not say whether the policy finds the same command
    from the task's words alone (level 0), which passes far less often
    (docs/experiments/2026-12-04-the-shown-tasks-in-words.md)."""
    above = current + 1
    there, whose = _rung_evidence(evidence.get(above), pooled.get(above), controller)
    low, _ = controller.band
    if there.rollouts >= controller.min_rollouts:
        lo, hi = wilson_interval(there.passes, there.rollouts, controller.z)
        measured = f"level {above}'s {whose} pass rate {there.pass_rate:.0%} (95% CI {lo:.0%}-{hi:.0%})"
        if lo > low:
            return _move(current, above, evidence, here, f"{measured} is in the band; level {current}'s {described}",
                         controller, pooled)
        if _cliff_upper_bound(there, controller) is not None:
            return LevelDecision({current: 1.0}, here.admission_rate,
                                 f"level {current} kept: {described}; {measured} is clearly below the band")
    else:
        measured = f"level {above} {there.rollouts:.0f} rollouts so far"
    share = controller.rung_probe_share
    return LevelDecision({current: 1 - share, above: share},
                         here.admission_rate * (1 - share) + there.admission_rate * share,
                         f"level {current} kept: {described}; {share:.0%} probe level {above} ({measured})")


def _rung_evidence(own: CellEvidence | None, pooled: CellEvidence | None,
                   controller: Controller) -> tuple[CellEvidence, str]:
    """(evidence, whose) a move onto a level above reads: the capability's
    own once it has `min_rollouts`, else the level's pooled over the
    capabilities still below it (next_plan). A probe of one candidate per
    capability gives each only 8 rollouts a round, too few to move on and,
    with the evidence fading by recency, never enough; together they
    measure the level in one round (every family's rung is its own level-0
    command shown, its level 0 the same task in words). Families' levels
    do differ (one policy's rungs ranged from 1 to 10 of 16), so a
    capability's own evidence, once it has enough, decides for it either
    way."""
    own = own or CellEvidence()
    if own.rollouts >= controller.min_rollouts or pooled is None or pooled.rollouts <= own.rollouts:
        return own, "own"
    return pooled, "pooled"


def _cliff_upper_bound(cell: CellEvidence | None, controller: Controller) -> float | None:
    """The upper end of a level's own 95% interval when that level is
    measured clearly below the band (a cliff: neither climbed nor probed
    until its evidence fades), else None. The band's edge, not the inner
    band's: a task that passes 1 of 8 is admitted, and a level read
    against the inner band stopped the probes of one whose last probes
    were admitted 3 of 4; a move onto a level below the inner band but
    short of a cliff is hedged instead (_move)
    (docs/experiments/2026-12-05-the-cliff-at-the-bands-edge.md)."""
    upper = _measured_upper_bound(cell, controller)
    return upper if upper is not None and upper < controller.band[0] else None


def _measured_upper_bound(cell: CellEvidence | None, controller: Controller) -> float | None:
    """The upper end of a level's 95% interval, None below `min_rollouts`."""
    if cell is None or cell.rollouts < controller.min_rollouts:
        return None
    return wilson_interval(cell.passes, cell.rollouts, controller.z)[1]


def _inner_band(controller: Controller) -> tuple[float, float]:
    """The admission rate peaks when the pass rate sits in the middle of the
    band and falls off toward its edges (tasks differ, so a mean pass rate
    near an edge puts many of them outside): the controller keeps the pass
    rate in the inner half of the band."""
    low, high = controller.band
    centre = (low + high) / 2
    return (low + centre) / 2, (centre + high) / 2


def _shifted_interval(cell: CellEvidence, controller: Controller, drift: float) -> tuple[float, float]:
    """The 95% Wilson interval of a cell's pass rate, shifted by `drift` logits."""
    return tuple(_sigmoid(_logit(x) + drift) for x in wilson_interval(cell.passes, cell.rollouts, controller.z))


def warmup_operation_mix(level: int, evidence: Mapping[str, CellEvidence], controller: Controller,
                         drift: float = 0.0) -> tuple[dict[str, float] | None, str]:
    """(share per operation, why) at warm-up `level` next round, from each
    operation's evidence there (pooled over capabilities): an operation whose
    drift-shifted pass rate is clearly below the inner band keeps
    `min_operation_share`, the others share the rest evenly. (None, "") when
    none is held back, or when all are (then nothing says which to prefer)."""
    operations = WARMUP_OPERATIONS[level]
    inner_low, _ = _inner_band(controller)
    held = {}
    for operation in operations:
        cell = evidence.get(operation)
        if cell is None or cell.rollouts < controller.min_rollouts:
            continue
        _, hi = _shifted_interval(cell, controller, drift)
        if hi < inner_low:
            held[operation] = f"{operation} held back at {controller.min_operation_share:.0%} (pass rate " \
                              f"{cell.pass_rate:.0%}, 95% CI up to {hi:.0%}{' with drift' if drift else ''}, " \
                              f"clearly below {inner_low:.0%})"
    if not held or len(held) == len(operations):
        return None, ""
    floor = min(controller.min_operation_share, 1 / len(operations))
    rest = (1 - floor * len(held)) / (len(operations) - len(held))
    mix = {operation: floor if operation in held else rest for operation in operations}
    return mix, f"level {level} operations: " + "; ".join(held.values())


@dataclass(frozen=True)
class TemperatureDecision:
    temperature: float
    # The pass rate predicted for the next round's policy at the last round's temperature (None: not enough evidence).
    predicted_pass_rate: float | None
    reason: str
    # How far (logits) the next round's pass rate should sit from the last
    # round's on the same tasks: the training's gain on the held-out split,
    # less what the temperature's move costs. The levels and the operation
    # mix shift their evidence by it (in place of estimate_drift), so that
    # a temperature raised and a level moved up do not both answer one
    # pass rate that is too high.
    pass_rate_shift: float = 0.0


def choose_temperature(previous: float, validation: CellEvidence, heldout_before: CellEvidence,
                       heldout_after: CellEvidence, controller: Controller) -> TemperatureDecision:
    """The next round's rollout temperature, from the last round's, which its
    rollouts sampled at (`previous`). The next policy's pass rate there is
    predicted as the last round's validation pass rate plus the drift its
    held-out split showed (the same tasks, seeds and temperature before and
    after the round's training: the training's gain alone). The temperature
    then moves to bring that prediction to the band's centre, where the
    admission rate peaks (docs/experiments/2026-12-01-temperature-controller.md).

    Why not the level drift (estimate_drift): across a temperature change it
    is the training's gain minus the temperature's cost. Why the temperature
    as well as the level: a warm-up level has no level below it, and training
    sharpens a policy until most tasks pass always or never at a fixed
    temperature; a higher one spreads them again. The step is bounded, and
    each round measures again: a policy less sensitive than assumed is
    approached more slowly, one up to twice as sensitive with a damped
    swing (tests/test_plan.py simulates both)."""
    low, high = controller.band
    target = (low + high) / 2
    drift, drift_text = 0.0, "no held-out drift (too few held-out rollouts)"
    if min(heldout_before.rollouts, heldout_after.rollouts) >= controller.min_rollouts:
        drift = heldout_after.smoothed_logit - heldout_before.smoothed_logit
        drift_text = (f"held-out {heldout_before.pass_rate:.0%} -> {heldout_after.pass_rate:.0%} "
                      f"through training ({drift:+.2f} logits)")
    if validation.rollouts < controller.min_rollouts:
        return TemperatureDecision(previous, None, f"{previous:.2f} kept: {validation.rollouts:.0f} validation "
                                                   f"rollouts last round, too few to aim with", drift)
    predicted = validation.smoothed_logit + drift
    step = (predicted - _logit(target)) / controller.temperature_sensitivity
    bounded = max(-controller.max_temperature_step, min(controller.max_temperature_step, step))
    lowest, highest = controller.temperature_range
    temperature = round(max(lowest, min(highest, previous + bounded)), 2)
    shift = drift - controller.temperature_sensitivity * (temperature - previous)
    return TemperatureDecision(
        temperature, _sigmoid(predicted),
        f"{previous:.2f} -> {temperature:.2f}: last round's validation pass rate {validation.pass_rate:.0%} at "
        f"{previous:.2f}, {drift_text}, predicts {_sigmoid(predicted):.0%} for the next policy at {previous:.2f}; "
        f"aimed at the band's centre {target:.1%} ({controller.temperature_sensitivity:g} logits per 1.0 of "
        f"temperature{', step bounded' if bounded != step else ''}"
        f"{', range bounded' if temperature != round(previous + bounded, 2) else ''}); "
        f"levels see the pass rate {shift:+.2f} logits from last round's", shift)


def _move(current: int, target: int, evidence: Mapping[int, CellEvidence], here: CellEvidence, why: str,
          controller: Controller, pooled: Mapping[int, CellEvidence]) -> LevelDecision:
    there = evidence.get(target)
    # A level above that its own evidence puts clearly below the band is
    # a cliff, not the next step: moving there would sink the
    # capability's whole share. Its evidence is not shifted by the drift:
    # what the policy gained where it is need not carry to the level
    # above (a family's level -1 stayed at 0 of 48 while its level -2
    # rose). The evidence fades with recency, and the climb is tried
    # again, hedged, once it has.
    measured, whose = _rung_evidence(there, pooled.get(target), controller)
    cliff = _cliff_upper_bound(measured, controller) if target > current else None
    if cliff is not None:
        return LevelDecision({current: 1.0}, here.admission_rate,
                             f"level {current} kept: {why}, but level {target} measured clearly below the band "
                             f"({whose} pass rate {measured.pass_rate:.0%}, 95% CI up to {cliff:.0%})")
    upper = _measured_upper_bound(measured, controller)
    below_inner_band = upper is not None and upper < _inner_band(controller)[0]
    if target < current or (there is not None and there.candidates >= 2 and not below_inner_band):
        return LevelDecision({target: 1.0}, (there or CellEvidence()).admission_rate,
                             f"level {current} -> {target}: {why}")
    # Up to an untried level, the overshoot the paper suffered, or to one
    # measured below the inner band (short of a cliff): half the candidates
    # stay where the policy is known. (Down from a level that is clearly
    # too hard risks nothing.)
    return LevelDecision({current: 0.5, target: 0.5}, here.admission_rate / 2 + 0.25,
                         f"level {current} -> {target} for half: {why}; the other half stays at {current} "
                         f"until {target} is measured in the band")


def next_plan(
    capabilities: Sequence[str],
    current_levels: Mapping[str, int],
    evidence: Mapping[tuple[str, int], CellEvidence],
    failure_share: Mapping[str, float],
    candidates_per_round: int,
    controller: Controller,
    drift: float | Mapping[int, float] = 0.0,
    failure_causes: Mapping[str, Mapping[str, int]] | None = None,
    operation_evidence: Mapping[tuple[int, str], CellEvidence] | None = None,
) -> list[PlanEntry]:
    """Round k+1's plan from the evidence of rounds 1..k (`drift`: see
    estimate_drift, one for every level or per level; `operation_evidence`:
    per (warm-up level, operation), pooled over capabilities) and round k's
    diagnosis (`failure_share` per capability, `failure_causes`: root-cause
    counts per capability)."""
    def drift_at(level: int) -> float:
        return drift.get(level, 0.0) if isinstance(drift, Mapping) else drift

    knobs = generator_knobs(failure_causes or {})
    mixes = {level: warmup_operation_mix(
        level, {op: cell for (lv, op), cell in (operation_evidence or {}).items() if lv == level}, controller,
        drift_at(level))
        for level in WARMUP_OPERATIONS}
    # Each level's evidence from the capabilities still below it (_rung_evidence):
    # those that have climbed onto it are the ones that found it easier.
    pooled: dict[int, CellEvidence] = {}
    for (capability, level), cell in evidence.items():
        if capability in capabilities and current_levels.get(capability, MIN_LEVEL) < level:
            pooled.setdefault(level, CellEvidence()).add(1.0, cell.passes, cell.rollouts, cell.admitted,
                                                         cell.candidates)
    decisions = {}
    for capability in capabilities:
        by_level = {level: cell for (c, level), cell in evidence.items() if c == capability}
        current = current_levels.get(capability, MIN_LEVEL)
        decisions[capability] = decide_level(current, by_level, controller, drift_at(current), pooled)
    expected = {c: d.expected_admission for c, d in decisions.items()}
    tilt = {c: 1.0 + controller.weakness_tilt * failure_share.get(c, 0.0) for c in capabilities}
    weights, evenness = _weights_for_target(expected, tilt, controller)
    counts = _apportion(candidates_per_round, weights, controller.min_share)
    plan = []
    for capability in capabilities:
        decision = decisions[capability]
        split = _apportion(counts[capability], decision.levels, 0.0, at_least_one=False)
        chosen, why = knobs.get(capability, ((), ""))
        for level in sorted(split):
            # A warm-up task's one sentence already states its whole contract;
            # the knobs' paragraphs would only repeat it and cut the pass rate
            # (docs/experiments/2026-11-30-warmup-levels.md).
            knobbed = chosen if level >= FIRST_KNOB_LEVEL else ()
            note = why if knobbed else (f"no knobs below level {FIRST_KNOB_LEVEL} ({why})" if why else "")
            mix, mix_why = mixes.get(level, (None, ""))
            plan.append(PlanEntry(
                capability, level, weights[capability] * decision.levels[level], split[level],
                f"{decision.reason}; expected admission {decision.expected_admission:.0%}; "
                f"{failure_share.get(capability, 0.0):.0%} of diagnosed failures; pool evenness {evenness:.2f}"
                + (f"; {note}" if note else "") + (f"; {mix_why}" if mix_why else ""),
                knobbed,
                mix,
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
