"""One pandera schema per warehouse table. Every row carries `round` and the
ids of what it came from, so lineage is a join, not a search."""

from __future__ import annotations

from typing import Annotated, Optional

import pandera.polars as pa
import polars as pl

# The difficulty levels a task may have: two rungs below the families'
# level 0 (generator_common's scale), up to their hardest (the planner's ladder, plan.LEVELS).
MIN_LEVEL = -2
MAX_LEVEL = 5


ROUND_KEY = r"^round-\d{4}$"
# train_before/train_after: fresh rollouts on T_k with one seed, before and after
# training (the validation rollouts chose T_k, so they are a biased "before").
# evaluation: the round's trained policy on the fixed evaluation set (clawloop_assets/evaluation/fixed_set.py).
ROLLOUT_PHASES = ["validation", "train_before", "train_after", "heldout_before", "heldout_after", "evaluation"]
# Only "scored" rollouts count; the others failed for infrastructure reasons and are excluded.
ROLLOUT_STATUSES = ["scored", "verifier_error", "sandbox_error", "policy_error"]
ROOT_CAUSES = [
    "misread_task",
    "wrong_tool",
    "edit_error",
    "premature_termination",
    "format_violation",
    "computation_error",
    "environment_error",
]


class _RoundTable(pa.DataFrameModel):
    round: str = pa.Field(str_matches=ROUND_KEY)

    class Config:
        strict = True
        coerce = True


class Capabilities(_RoundTable):
    capability_id: str
    track: str = pa.Field(isin=["analysis", "terminal"])
    description: str
    skills: Annotated[pl.List, pl.Utf8()]
    route: str = pa.Field(isin=["capability", "domain"])  # the synthesis route its tasks come from


class Domains(_RoundTable):
    domain_id: str
    entity: str
    vocabulary: str  # the domain's catalog entry as JSON


class DomainTools(_RoundTable):
    """The tool nodes of each executable domain's tripartite graph (AST of tools.py)."""

    domain_id: str
    tool: str
    description: str
    parameters: str  # JSON: [{"name", "type", "required"}]
    refuses: bool


class DomainGraphEdges(_RoundTable):
    """Edges of the tripartite graph: a tool consumes or produces a field, reads or writes a table."""

    domain_id: str
    kind: str = pa.Field(isin=["consumes", "produces", "reads", "writes"])
    tool: str
    node: str


class DomainSkills(_RoundTable):
    """Skills: tools clustered by affinity (the prior), or as a stated override
    moved them, each materialized as a CLI script, a document and a capability
    spec extracted from the script's code."""

    domain_id: str
    skill_id: str
    tools: Annotated[pl.List, pl.Utf8()]
    decision: str = pa.Field(isin=["accepted_prior", "overridden"])
    reason: str
    capability_spec: str  # JSON, from the generated script's AST
    script_path: str
    doc_path: str


class SynthesisPlans(_RoundTable):
    """The plan a round's synthesis follows: how many candidates per capability
    at which difficulty, and why (which diagnosis moved it)."""

    capability_id: str
    difficulty: int = pa.Field(ge=MIN_LEVEL, le=MAX_LEVEL)
    weight: float = pa.Field(ge=0)
    candidates: int = pa.Field(ge=0)
    source_round: Optional[str] = pa.Field(nullable=True)
    reason: str
    knobs: Annotated[pl.List, pl.Utf8()]  # generator knobs (plan.KNOB_FOR_ROOT_CAUSE)
    # At a warm-up level, the share of each operation as JSON (plan.warmup_operation_mix); null for an even draw.
    operation_weights: Optional[str] = pa.Field(nullable=True)


class RolloutTemperatures(_RoundTable):
    """The temperature a round's rollouts sample at (validation, the T_k reruns,
    the held-out split), decided with its synthesis plan: from the schedule
    (LoopConfig.round_temperatures) or by the controller (plan.choose_temperature)."""

    temperature: float = pa.Field(gt=0)
    source: str = pa.Field(isin=["schedule", "controller"])
    # The controller's prediction of the policy's pass rate at the last round's temperature.
    predicted_pass_rate: Optional[float] = pa.Field(nullable=True, ge=0, le=1)
    # What the levels shift last round's pass rates by (logits; TemperatureDecision.pass_rate_shift); null: estimate_drift.
    pass_rate_shift: Optional[float] = pa.Field(nullable=True)
    reason: str


class Generators(_RoundTable):
    generator_id: str
    capability_id: str
    domain_id: str
    difficulty: int = pa.Field(ge=MIN_LEVEL, le=MAX_LEVEL)
    track: str
    source: str = pa.Field(isin=["builtin", "model"])
    status: str = pa.Field(isin=["written", "rejected"])
    reason: Optional[str] = pa.Field(nullable=True)  # why a model's reply was rejected
    path: Optional[str] = pa.Field(nullable=True)


class Tasks(_RoundTable):
    task_id: str = pa.Field(unique=True)
    generator_id: str
    capability_id: str
    domain_id: str
    difficulty: int
    track: str
    seed: int
    bundle_path: Optional[str] = pa.Field(nullable=True)
    build_status: str = pa.Field(isin=["built", "failed"])
    build_error: Optional[str] = pa.Field(nullable=True)
    seconds: float


class AgentFreeValidations(_RoundTable):
    task_id: str = pa.Field(unique=True)
    passed: bool
    oracle_passed: bool
    untouched_failed: bool
    leak_free: bool
    wrong_deliverables_failed: bool
    verifier_deterministic: bool
    reason: Optional[str] = pa.Field(nullable=True)


class Rollouts(_RoundTable):
    rollout_id: str = pa.Field(unique=True)
    task_id: str
    phase: str = pa.Field(isin=ROLLOUT_PHASES)
    checkpoint_id: str
    sample_index: int = pa.Field(ge=0)
    status: str = pa.Field(isin=ROLLOUT_STATUSES)
    # None unless scored: an infrastructure failure is never a reward of 0.
    reward: Optional[float] = pa.Field(nullable=True, isin=[0.0, 1.0])
    error: Optional[str] = pa.Field(nullable=True)
    turns: int = pa.Field(ge=0)
    submitted: bool
    canary_seen: bool  # flagged: excluded from admission counts and training
    commands: Annotated[pl.List, pl.Utf8()]
    exit_codes: Annotated[pl.List, pl.Int64()]
    last_output: str
    verifier_checks: str  # JSON list of {name, passed, detail}
    token_ids: Annotated[pl.List, pl.Int64()]
    action_mask: Annotated[pl.List, pl.Int64()]
    sampling_logprobs: Annotated[pl.List, pl.Float64()]
    temperature: float
    prompt_tokens: int
    generated_tokens: int
    model_seconds: float
    sandbox_seconds: float


class Admissions(_RoundTable):
    task_id: str = pa.Field(unique=True)
    pass_count: int = pa.Field(ge=0)
    scored_rollouts: int = pa.Field(ge=0)
    excluded_rollouts: int = pa.Field(ge=0)
    admitted: bool
    decision: str = pa.Field(isin=["admitted", "all_failed", "too_hard", "too_easy", "too_few_scored"])


class TaskSplits(_RoundTable):
    task_id: str = pa.Field(unique=True)
    split: str = pa.Field(isin=["train", "heldout"])


class TrainingRuns(_RoundTable):
    run_id: str = pa.Field(unique=True)
    job: str = pa.Field(isin=["sft", "grpo"])
    base_checkpoint_id: str
    output_checkpoint_id: Optional[str] = pa.Field(nullable=True)
    examples: int = pa.Field(ge=0)
    status: str = pa.Field(isin=["trained", "skipped"])
    reason: Optional[str] = pa.Field(nullable=True)
    metrics: str  # JSON reported by the job through Pipes
    seconds: float


class Checkpoints(_RoundTable):
    checkpoint_id: str
    kind: str = pa.Field(isin=["base", "sft", "policy"])
    path: str
    parent_checkpoint_id: Optional[str] = pa.Field(nullable=True)


class FailureSummaries(_RoundTable):
    summary_id: str = pa.Field(unique=True)
    rollout_id: str
    task_id: str
    capability_id: str
    failure_turn: int = pa.Field(ge=0)
    failure_action: str
    root_cause: str = pa.Field(isin=ROOT_CAUSES)
    missing_capability: str
    evidence: str  # JSON: the deterministic facts the classification rests on
    produced_by: str
    phase: str = pa.Field(isin=["heldout_after", "validation"])  # which rollouts it summarizes
    # What the task asked for: the operation at a warm-up level, else the capability (diagnosis/failures.task_skill).
    skill: Optional[str] = pa.Field(nullable=True)  # null in rows written before skills were recorded


class DiagnosisPatterns(_RoundTable):
    pattern_id: str = pa.Field(unique=True)
    # The capability of its tasks; null for a warm-up skill whose failures span families.
    capability_id: Optional[str] = pa.Field(nullable=True)
    root_cause: str = pa.Field(isin=ROOT_CAUSES)
    count: int = pa.Field(ge=1)
    share: float = pa.Field(ge=0, le=1)
    description: str
    evidence: str  # the most central member's command, error and failed check (abstracted)
    produced_by: str  # how many of its summaries each producer wrote
    summary_ids: Annotated[pl.List, pl.Utf8()]
    example_rollout_ids: Annotated[pl.List, pl.Utf8()]
    task_ids: Annotated[pl.List, pl.Utf8()]
    # The skill its failures were grouped by (see FailureSummaries.skill); null in rows written before.
    skill: Optional[str] = pa.Field(nullable=True)


class RoundSummaries(_RoundTable):
    summary: str  # the summary.json document


class CostLedger(_RoundTable):
    phase: str
    wall_seconds: float = pa.Field(ge=0)
    cpu_seconds: float = pa.Field(ge=0)
    rollouts: int = pa.Field(ge=0)
    tokens: int = pa.Field(ge=0)


TABLES: dict[str, type[_RoundTable]] = {
    "capabilities": Capabilities,
    "domains": Domains,
    "synthesis_plans": SynthesisPlans,
    "rollout_temperatures": RolloutTemperatures,
    "domain_tools": DomainTools,
    "domain_graph_edges": DomainGraphEdges,
    "domain_skills": DomainSkills,
    "generators": Generators,
    "tasks": Tasks,
    "agent_free_validations": AgentFreeValidations,
    "rollouts": Rollouts,
    "admissions": Admissions,
    "task_splits": TaskSplits,
    "training_runs": TrainingRuns,
    "checkpoints": Checkpoints,
    "failure_summaries": FailureSummaries,
    "diagnosis_patterns": DiagnosisPatterns,
    "round_summaries": RoundSummaries,
    "cost_ledger": CostLedger,
}
