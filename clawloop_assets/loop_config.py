"""The knobs of one round, as a resource so they can be set per run from the
Dagster launchpad, from `clawloop run --config FILE`, or in code. Every field is
checked (type and range) when the resource is built, so a bad value is refused
before a round starts, with the field named."""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Literal

import dagster as dg
from pydantic import ConfigDict, Field, model_validator

from clawloop_assets.evaluation.fixed_set import EvaluationSetSpec
from clawloop_assets.harness.agent_loop import AgentSettings
from clawloop_assets.partitions import round_number
from clawloop_assets.synthesis.catalogs import round_capabilities
from clawloop_assets.synthesis.generators.generator_common import SHOWN_COMMAND_LEVEL, WARMUP_LEVELS
from clawloop_assets.synthesis.plan import Controller
from clawloop_assets.validation.admission import AdmissionBand
from resources.schemas import MAX_LEVEL, MIN_LEVEL
from training_jobs.configs import recipe_config

# The sampling temperatures a policy may be asked for: 0 is greedy, which
# gives a group of rollouts no spread (and no GRPO signal); above 2 the
# embedded model's samples are noise.
MAX_TEMPERATURE = 2.0


class LoopConfig(dg.ConfigurableResource):
    """The knobs of one round. Each field's description says what it sets and
    its range; docs/round.md ("The knobs of a round") and docs/experiments/
    give the measurements behind the defaults.

    Values are taken as they are typed (strict): "8" is not an int and 1 is
    not a bool. Cross-field rules (the admission band within
    `rollouts_per_task`, the evaluation set's capabilities and levels) are
    checked after the fields, naming the fields involved.
    """

    # Strict: a value of the wrong type is refused, not coerced.
    model_config = ConfigDict(strict=True)

    # --- synthesis and validation ------------------------------------------------------------------------
    candidates_per_round: int = Field(
        default=64, ge=1, description="Candidate tasks synthesized per round (>= 1).")
    rollouts_per_task: int = Field(
        default=8, ge=2,
        description="Validation rollouts per candidate, the GRPO group size N (>= 2: a group of one has no spread).")
    sequential_rollouts: bool = Field(
        default=True,
        description="Validate in two waves: a task already too easy after the first gets no more rollouts "
                    "(the same admissions as all N, fewer rollouts).")
    admission_low: int = Field(
        default=1, ge=0,
        description="Admit a task passed at least this many times out of rollouts_per_task "
                    "(0 <= admission_low <= admission_high).")
    admission_high: int = Field(
        default=5, ge=0,
        description="Admit a task passed at most this many times out of rollouts_per_task "
                    "(admission_high <= rollouts_per_task).")
    heldout_fraction: float = Field(
        default=0.4, gt=0, lt=1, description="Share of admitted tasks held out of training, in (0, 1).")
    heldout_samples: int = Field(
        default=16, ge=1, description="Rollouts per held-out task for its before/after pass rate (>= 1).")
    train_eval_samples: int = Field(
        default=8, ge=0, description="Rollouts per training task for the before/after pass rate on T_k (0: skip).")

    # --- the agent -----------------------------------------------------------------------------------------
    max_turns: int = Field(
        default=1, ge=1,
        description="Agent turns per rollout (>= 1). One for the embedded 135M model: a second turn costs time "
                    "and does not raise its pass rate (docs/round.md). A capable model may take many.")
    max_new_tokens: int = Field(
        default=48, ge=1, description="Tokens the policy may write per turn (>= 1).")
    harness_workers: int = Field(
        default=4, ge=1, le=256,
        description="Threads that run the rollouts' sandboxed commands and verifiers while the policy samples "
                    "(1-256). They mostly wait on sandbox processes, so a few more than the cores pay off.")
    temperature: float = Field(
        default=0.7, gt=0, le=MAX_TEMPERATURE,
        description="Sampling temperature of the fixed evaluation set (one for every round, so its figure "
                    "compares across rounds), of transfer runs and of the model's writing (generator programs, "
                    "domain graphs), in (0, 2].")
    round_temperatures: list[float] = Field(
        default=[0.7, 0.95],
        description="Round k's rollouts (validation, held-out, the T_k reruns) sample at entry k, each in (0, 2]; "
                    "non-empty. After the list the controller chooses (with controlled_temperature), otherwise the "
                    "last entry repeats. A trained policy passes most tasks almost always or almost never; a higher "
                    "temperature spreads its groups again (docs/experiments/2026-11-30-sampling-temperature.md).")
    controlled_temperature: bool = Field(
        default=True,
        description="After round_temperatures, the controller chooses each round's temperature "
                    "(plan.choose_temperature).")
    round_temperature_levels: Literal["warmup", "all"] = Field(
        default="warmup",
        description="Which levels a round's temperature serves: 'warmup' (the warm-up level; level -1 and up "
                    "sample at `temperature`, where the evaluation measures them) or 'all' (every level). A "
                    "temperature raised to spread the warm-up level's groups cost the levels above it most of "
                    "their pass rate (docs/experiments/2026-12-03-temperature-per-level.md).")

    # --- training --------------------------------------------------------------------------------------------
    training_mode: Literal["sft_then_grpo", "grpo_only", "sft_only"] = Field(
        default="sft_then_grpo", description="Which training stages a round runs.")
    sft_in_words: bool = Field(
        default=True,
        description="SFT also trains each success on a task that shows its command (levels -2 and -1) as the same "
                    "task in words, its own replies after the prompt the words give: at level -1 that is the "
                    "family's level-0 task (docs/experiments/2026-12-04-the-shown-tasks-in-words.md).")

    # --- generators and routes -------------------------------------------------------------------------------
    generator_source: Literal["builtin", "model"] = Field(
        default="builtin",
        description="builtin: the built-in families; model: the round's input policy writes each generator "
                    "program (for a capable model behind the OpenAI-compatible backend).")
    generator_max_tokens: int = Field(
        default=4096, ge=1, description="Tokens the model may write per generator program (>= 1).")
    synthesis_routes: list[str] = Field(
        default=["capability", "domain"],
        description="The synthesis routes a round draws from (the ablation switch): a non-empty subset of "
                    "capability, domain.")

    # --- the difficulty controller (clawloop_assets/synthesis/plan.py) -----------------------------------------
    first_level: int = Field(
        default=SHOWN_COMMAND_LEVEL, ge=MIN_LEVEL, le=MAX_LEVEL,
        description="The level every capability starts at in round 1, when the plan has no evidence yet "
                    f"([{MIN_LEVEL}, {MAX_LEVEL}]). The rung -1 (the family's level-0 task with its command "
                    "shown) trains the families' own commands from round 1, and with them their words; a start "
                    f"at the warm-up level {MIN_LEVEL} admits more in rounds 1-2 but, trained there, the policy "
                    "loses the rung and never climbs (docs/experiments/2026-12-04-the-copies-from-every-success.md).")
    target_admission_rate: float = Field(
        default=0.7, gt=0, le=1, description="The admission rate the controller aims each capability at, in (0, 1].")
    min_capability_share: float = Field(
        default=0.05, ge=0, le=1, description="The least share of a round's candidates any capability gets, in [0, 1].")
    controller_recency: float = Field(
        default=0.5, ge=0, le=1,
        description="Evidence of a round k rounds old counts recency**k, in [0, 1] (0: the last round only).")
    weakness_tilt: float = Field(
        default=1.0, ge=0,
        description="A capability's weight grows by 1 + tilt x its share of the diagnosed failures, >= 0 (0: off).")
    rung_probe_share: float = Field(
        default=0.2, ge=0, lt=1,
        description="At a level that shows the command (-2, -1), in the band's upper half, the share of a "
                    "capability's candidates that probe the level above, in [0, 1) (0: off); the probes of all "
                    "capabilities together measure it.")

    # --- diagnosis --------------------------------------------------------------------------------------------
    model_failure_summaries: bool = Field(
        default=True, description="Ask the loop model for each failure summary (JSON, validated, retried).")
    diagnose_unsolved_candidates: bool = Field(
        default=True,
        description="Diagnose also the validation rollouts of candidates the input policy never solved "
                    "(with a weak policy E_k holds few tasks, and the next plan needs their weaknesses).")
    summary_probe: int = Field(
        default=4, ge=0,
        description="A model that writes no valid summary for the first summary_probe failures is not asked "
                    "about the rest (>= 0; 0: no probe).")
    summary_attempts: int = Field(default=2, ge=1, description="Tries per failure summary (>= 1).")

    # --- the fixed evaluation set (clawloop_assets/evaluation/fixed_set.py) -------------------------------------------
    # The default set is graded: 2 seeds x 13 capabilities at each of levels -2, -1, 0 and 1 (104 tasks), one
    # sample each, so every level's pass@1 has its own Wilson interval over 26 tasks. The interval is over
    # tasks, so more tasks narrow it and more samples of the same task barely do: 26 tasks at one sample bound
    # a level at 0 passes by 13%, where 13 tasks at two samples (the same rollouts) give 23%. Its cost and the
    # measurements behind it: docs/experiments/2026-12-02-graded-evaluation-set.md.
    evaluation_samples: int = Field(
        default=1, description="Samples per evaluation task, k of Avg@k (>= 1; 1 by default: the interval is over "
                               "tasks, so the rollouts buy more tasks instead; 5 is the paper's Avg@5).")
    evaluation_capabilities: list[str] = Field(
        default=[], description="Capabilities of the evaluation set's own tasks (empty: all of both routes).")
    evaluation_levels: list[int] = Field(
        default=[-2, -1, 0, 1], description="Difficulty levels of the evaluation set's own tasks (non-empty, "
                                            "within the plan's levels), each reported apart: levels -2 and -1 below "
                                            "the families' own to level 1 show where the policy stands on the ladder.")
    evaluation_seeds_per_cell: int = Field(
        default=2, description="Seeds per capability x level of the evaluation set (within the seeds per level): "
                               "2 gives each level 26 tasks: a 95% interval of [0.16, 0.49] at pass@1 0.3, [0, 0.13] at 0.")

    # --- the training recipe (training_jobs.configs.RECIPES); a field set below overrides the recipe's ------
    training_recipe: Literal["cpu", "paper"] = Field(
        default="cpu", description="cpu: measured on the embedded model; paper: for GPU nodes.")
    sft_learning_rate: float | None = Field(
        default=None, gt=0, lt=1, description="SFT learning rate, in (0, 1); unset: the recipe's.")
    sft_epochs: int | None = Field(default=None, ge=1, description="SFT epochs (>= 1); unset: the recipe's.")
    grpo_learning_rate: float | None = Field(
        default=None, gt=0, lt=1, description="GRPO learning rate, in (0, 1); unset: the recipe's.")
    grpo_epochs: int | None = Field(default=None, ge=1, description="GRPO epochs (>= 1); unset: the recipe's.")
    kl_beta: float | None = Field(
        default=None, ge=0, description="GRPO's KL penalty coefficient (>= 0); unset: the recipe's.")
    train_max_steps: int | None = Field(
        default=None, ge=1, description="Optimizer steps per training job at most (>= 1); unset: every step of "
                                        "the epochs.")
    train_batch_size: int | None = Field(
        default=None, ge=1, description="Training batch size (>= 1); unset: the recipe's.")
    lora_rank: int | None = Field(default=None, ge=1, description="LoRA rank (>= 1); unset: the recipe's.")
    torch_threads: int = Field(default=2, ge=1, description="CPU threads torch may use in training (>= 1).")
    seed: int = Field(default=0, ge=0, description="The seed of sampling and training (>= 0).")

    # --- round checks ---------------------------------------------------------------------------------------
    max_error_rate: float = Field(
        default=0.01, ge=0, le=1,
        description="The largest share of a round's rollouts that may end in a harness error (verifier, sandbox "
                    "or policy error) before the round's blocking check fails, in [0, 1].")

    @model_validator(mode="after")
    def _check(self) -> "LoopConfig":
        if not self.admission_low <= self.admission_high <= self.rollouts_per_task:
            raise ValueError(f"admission_low ({self.admission_low}) <= admission_high ({self.admission_high}) "
                             f"<= rollouts_per_task ({self.rollouts_per_task}) does not hold")
        self.admission_band()  # raises with the band's own message
        try:
            round_capabilities(self.synthesis_routes)
        except ValueError as exc:
            raise ValueError(f"synthesis_routes: {exc}") from None
        if not self.round_temperatures or not all(0 < t <= MAX_TEMPERATURE for t in self.round_temperatures):
            raise ValueError(f"round_temperatures must be a non-empty list of temperatures in (0, {MAX_TEMPERATURE:g}], "
                             f"got {self.round_temperatures}")
        if self.evaluation_samples < 1:
            raise ValueError(f"evaluation_samples must be at least 1, got {self.evaluation_samples}")
        self.evaluation_set()  # raises naming the bad capability, level or seed count
        return self

    def evaluation_set(self) -> EvaluationSetSpec:
        return EvaluationSetSpec(tuple(self.evaluation_capabilities), tuple(self.evaluation_levels),
                                 self.evaluation_seeds_per_cell)

    def admission_band(self) -> AdmissionBand:
        return AdmissionBand(
            rollouts_per_task=self.rollouts_per_task,
            low=self.admission_low,
            high=self.admission_high,
            min_scored=max(1, (3 * self.rollouts_per_task + 3) // 4),
        )

    def agent_settings(self, round_temperature: float | None = None) -> AgentSettings:
        """How the agent samples: the levels a round's temperature serves at
        `round_temperature` (see round_state.rollout_temperature and
        `round_temperature_levels`), the rest, and everything without one, at
        the fixed `temperature`."""
        settings = AgentSettings(max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
                                 harness_workers=self.harness_workers, temperature=self.temperature)
        if round_temperature is None:
            return settings
        if self.round_temperature_levels == "all":
            return replace(settings, temperature=round_temperature)
        return replace(settings, level_temperatures={level: round_temperature for level in WARMUP_LEVELS})

    def at_round_temperature(self, level: int) -> bool:
        """Whether `level` samples at its round's temperature (`round_temperature_levels`)."""
        return self.round_temperature_levels == "all" or level in WARMUP_LEVELS

    def scheduled_temperature(self, round_key: str) -> float | None:
        """`round_key`'s rollout temperature from the schedule; None when the
        controller chooses it (a round after the schedule's end, with
        `controlled_temperature`)."""
        number = round_number(round_key)
        if number > len(self.round_temperatures) and self.controlled_temperature:
            return None
        return self.round_temperatures[min(number, len(self.round_temperatures)) - 1]

    def round_seed(self, round_key: str, purpose: str) -> int:
        """Stable seeds per round and purpose (the held-out before/after pair shares one)."""
        return (zlib.crc32(f"{round_key}/{purpose}".encode()) + self.seed) % (2**31)

    def controller(self) -> Controller:
        return Controller(
            band=(self.admission_low / self.rollouts_per_task, self.admission_high / self.rollouts_per_task),
            target_admission=self.target_admission_rate,
            min_share=self.min_capability_share,
            recency=self.controller_recency,
            weakness_tilt=self.weakness_tilt,
            rung_probe_share=self.rung_probe_share,
        )

    def training_job_config(self, job: str) -> dict:
        """The recipe's fields for `job` ("sft" or "grpo") with this round's overrides."""
        overrides = {
            "learning_rate": self.sft_learning_rate if job == "sft" else self.grpo_learning_rate,
            "epochs": self.sft_epochs if job == "sft" else self.grpo_epochs,
            "batch_size": self.train_batch_size,
            "max_steps": self.train_max_steps,
            "lora_rank": self.lora_rank,
            "beta": self.kl_beta if job == "grpo" else None,
        }
        config = recipe_config(self.training_recipe, job)
        config |= {key: value for key, value in overrides.items() if value is not None}
        return config | {"seed": self.seed, "torch_threads": self.torch_threads}
