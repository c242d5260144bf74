"""The knobs of one round, as a resource so they can be set per run from the
Dagster launchpad as well as in code."""

from __future__ import annotations

from typing import Literal

import dagster as dg
from pydantic import model_validator

from clawloop_assets.admission import AdmissionBand
from clawloop_assets.agent_loop import AgentSettings
from clawloop_assets.catalogs import round_capabilities
from clawloop_assets.curriculum import Controller
from clawloop_assets.evaluation import EvaluationSetSpec
from clawloop_assets.partitions import round_number
from training_jobs.configs import recipe_config


class LoopConfig(dg.ConfigurableResource):
    candidates_per_round: int = 64
    rollouts_per_task: int = 8
    # Validation rollouts in two waves: a task already too easy after the first
    # gets no more (the same admissions as all N, fewer rollouts).
    sequential_rollouts: bool = True
    admission_low: int = 1
    admission_high: int = 5
    heldout_fraction: float = 0.4
    heldout_samples: int = 16
    # Samples per training task for the before/after pass rate on T_k (0: skip).
    train_eval_samples: int = 8
    # One turn for the embedded 135M model: measured on 24 level-0 tasks x 8, a
    # second turn took 2.5x the time and lowered the pass rate (5.2% -> 3.1%):
    # it never submits, and its second command undoes the first. The loop and
    # the bundles' own limits support many turns for a capable model.
    max_turns: int = 1
    max_new_tokens: int = 48
    # The sampling temperature of the fixed evaluation set (one temperature for
    # every round, so that its figure compares across rounds), of transfer
    # runs, and of the model's writing (generator programs, domain graphs).
    temperature: float = 0.7
    # A round's rollouts (validation, held-out, the T_k reruns: the samples
    # training learns from) sample at entry k of this list in round k. Training
    # sharpens the policy, and a policy that passes a task almost always or
    # almost never gives its group of 8 no signal; a higher temperature
    # spreads it again. On the same round-2 candidates and policy, 0.85
    # admitted 17 and 19 points more than 0.7 (two runs), and on two other
    # runs' round 2, 0.95 admitted 14 and 11 points more than 0.85 (README,
    # "Sampling temperature"); 0.9 from round 1 on taught some operations and
    # starved others. After the list, with `controlled_temperature`, the
    # controller chooses each round's (curriculum.choose_temperature): no
    # fixed temperature suited round 3 of three runs. Without it, the last
    # entry repeats.
    round_temperatures: list[float] = [0.7, 0.95]
    controlled_temperature: bool = True
    training_mode: Literal["sft_then_grpo", "grpo_only", "sft_only"] = "sft_then_grpo"
    # "model": the round's input policy writes each generator program (for a
    # capable model behind the OpenAI-compatible backend); the embedded 135M
    # model cannot, so the built-in families are the default.
    generator_source: Literal["builtin", "model"] = "builtin"
    generator_max_tokens: int = 4096
    # The synthesis routes a round draws from (the ablation switch): the
    # capability route, the domain-grounded route, or both.
    synthesis_routes: list[str] = ["capability", "domain"]
    # The closed-loop difficulty controller (clawloop_assets/curriculum.py).
    target_admission_rate: float = 0.7
    min_capability_share: float = 0.05
    controller_recency: float = 0.5
    # Diagnosis: the loop model is asked for each failure summary (JSON,
    # validated, retried); a model that writes no valid one for the first
    # `summary_probe` failures is not asked about the rest.
    model_failure_summaries: bool = True
    # Diagnose also the validation rollouts of candidates the input policy
    # never solved: with a weak policy E_k holds a task or two (or none), and
    # the plan of the next round needs the weaknesses those candidates show.
    diagnose_unsolved_candidates: bool = True
    summary_probe: int = 4
    summary_attempts: int = 2
    # The fixed evaluation set (clawloop_assets/evaluation.py): k samples per
    # task (5: the paper's Avg@5) of the round's trained policy on every
    # capability (empty list: all of both routes) x level x seed, plus any
    # imported tasks. Default: 13 own tasks (the 12 families and domain_workflow,
    # level 0) x 5 = 65 rollouts, measured 90 s with the embedded model on 2 cores.
    evaluation_samples: int = 5
    evaluation_capabilities: list[str] = []
    evaluation_levels: list[int] = [0]
    evaluation_seeds_per_cell: int = 1

    # The training recipe (training_jobs.configs.RECIPES): "cpu", measured on
    # the embedded model, or "paper" for GPU nodes. A field below that is set
    # overrides the recipe's value.
    training_recipe: Literal["cpu", "paper"] = "cpu"
    sft_learning_rate: float | None = None
    sft_epochs: int | None = None
    grpo_learning_rate: float | None = None
    grpo_epochs: int | None = None
    kl_beta: float | None = None
    train_batch_size: int | None = None
    lora_rank: int | None = None
    torch_threads: int = 2
    seed: int = 0
    # The largest share of a round's rollouts that may end in a harness error
    # (verifier, sandbox or policy error) before the round's blocking check fails.
    max_error_rate: float = 0.01

    @model_validator(mode="after")
    def _check(self) -> "LoopConfig":
        self.admission_band()  # raises with the band's own message
        round_capabilities(self.synthesis_routes)  # raises naming the routes it knows
        if not 0 < self.heldout_fraction < 1:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.max_turns < 1 or self.heldout_samples < 1 or self.candidates_per_round < 1:
            raise ValueError("max_turns, heldout_samples and candidates_per_round must be at least 1")
        if not self.round_temperatures or not all(0 < t <= 2 for t in self.round_temperatures):
            raise ValueError(f"round_temperatures must be a non-empty list of temperatures in (0, 2], "
                             f"got {self.round_temperatures}")
        if not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be in [0, 1], got {self.max_error_rate}")
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

    def agent_settings(self, temperature: float | None = None) -> AgentSettings:
        """How the agent samples: at `temperature` (a round's, see
        round_state.rollout_temperature), or without one at the fixed `temperature`."""
        return AgentSettings(max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
                             temperature=self.temperature if temperature is None else temperature)

    def scheduled_temperature(self, round_key: str) -> float | None:
        """`round_key`'s rollout temperature from the schedule; None when the
        controller chooses it (a round after the schedule's end, with
        `controlled_temperature`)."""
        number = round_number(round_key)
        if number > len(self.round_temperatures) and self.controlled_temperature:
            return None
        return self.round_temperatures[min(number, len(self.round_temperatures)) - 1]

    def controller(self) -> Controller:
        return Controller(
            band=(self.admission_low / self.rollouts_per_task, self.admission_high / self.rollouts_per_task),
            target_admission=self.target_admission_rate,
            min_share=self.min_capability_share,
            recency=self.controller_recency,
        )

    def training_job_config(self, job: str) -> dict:
        """The recipe's fields for `job` ("sft" or "grpo") with this round's overrides."""
        overrides = {
            "learning_rate": self.sft_learning_rate if job == "sft" else self.grpo_learning_rate,
            "epochs": self.sft_epochs if job == "sft" else self.grpo_epochs,
            "batch_size": self.train_batch_size,
            "lora_rank": self.lora_rank,
            "beta": self.kl_beta if job == "grpo" else None,
        }
        config = recipe_config(self.training_recipe, job)
        config |= {key: value for key, value in overrides.items() if value is not None}
        return config | {"seed": self.seed, "torch_threads": self.torch_threads}
