"""A whole round through Dagster's materialize, on small sizes, with the real
sandbox, the real embedded model, the real warehouse and real training jobs.

Round 1 is materialized once per session (conftest.finished_round) and each
test below reads one part of it; round 2 and the production backends run
their own."""

import json
from collections import Counter

import dagster as dg
import polars as pl
import pytest
from conftest import ROUND_ONE, docker_sandbox, materialize_round, round_resources, small_round

from benchmarks import sampling_temperature
from clawloop_assets.cli import why_stopped
from clawloop_assets.definitions import defs, gate_checks, resources_for, round_assets
from clawloop_assets.evaluation.fixed_set import is_evaluation_seed
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.generators.generator_common import WARMUP_OPERATIONS
from clawloop_assets.training.examples import COPIES_PER_TASK, IN_WORDS
from resources.openai_policy import OpenAICompatiblePolicyModel
from resources.sandbox import DockerSandbox
from resources.schemas import MIN_LEVEL
from resources.warehouse import DuckDBWarehouse, table_frame

# A candidate per capability, 4 rollouts each, a wide admission band; two training steps.
SMALL_ROUND = small_round()


def summary_of(finished_round) -> dict:
    return json.loads((finished_round.home / "rounds" / ROUND_ONE / "summary.json").read_text())


def test_definitions_load_and_resolve_the_round_job():
    job = defs.resolve_job_def("round_job")
    assert "round_summary" in {node.name for node in job.graph.node_defs}


def test_backends_are_chosen_by_configuration_alone(monkeypatch):
    monkeypatch.setenv("CLAWLOOP_SANDBOX", "docker")
    monkeypatch.setenv("CLAWLOOP_POLICY", "openai")
    chosen = resources_for("laptop")
    assert isinstance(chosen["sandbox"], DockerSandbox)
    assert isinstance(chosen["policy"], OpenAICompatiblePolicyModel)
    monkeypatch.setenv("CLAWLOOP_SANDBOX", "chroot")
    with pytest.raises(ValueError, match="CLAWLOOP_SANDBOX='chroot' is unknown"):
        resources_for("laptop")


# The production backends' round, through its rollouts: synthesis,
# agent-free validation and validation rollouts, every command in a container
# and every sample from the vLLM server. What follows (training, the rollouts
# of the trained policy, evaluation, diagnosis) is the same code on the same
# two interfaces: the finished round runs it, and
# test_openai_policy.test_new_weights_reach_the_server_in_place checks that
# trained weights reach the server.
# Two rollouts a candidate, the fewest a group may have.
SMALL_PRODUCTION_ROUND = LoopConfig(candidates_per_round=6, rollouts_per_task=2, admission_low=0, admission_high=2,
                                    max_turns=1)


@pytest.mark.slow
def test_a_round_on_docker_and_a_vllm_server(clawloop_home, vllm_url):
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_round(instance, "round-0001", SMALL_PRODUCTION_ROUND,
                               selection=dg.AssetSelection.assets("admitted_tasks").upstream(),
                               policy=OpenAICompatiblePolicyModel(base_url=vllm_url), sandbox=docker_sandbox())
    assert result.success, why_stopped(result)
    warehouse = DuckDBWarehouse()
    passed = warehouse.read("agent_free_validations", {"round": "round-0001"}).filter(pl.col("passed"))
    admissions = warehouse.read("admissions", {"round": "round-0001"})
    # A band of [0, N] admits every candidate that passed validation.
    assert passed.height >= 1 and set(admissions.filter(pl.col("admitted"))["task_id"]) == set(passed["task_id"])
    rollouts = warehouse.read("rollouts", {"round": "round-0001"})
    per_task = dict(rollouts.group_by("task_id").len().iter_rows())
    assert set(per_task) == set(passed["task_id"]) and all(
        1 <= n <= SMALL_PRODUCTION_ROUND.rollouts_per_task for n in per_task.values()), per_task
    assert set(rollouts["status"]) == {"scored"}, rollouts.filter(rollouts["status"] != "scored")["error"].to_list()
    for row in rollouts.iter_rows(named=True):
        assert len(row["token_ids"]) == len(row["action_mask"]) == len(row["sampling_logprobs"])
        assert sum(row["action_mask"]) == row["generated_tokens"] > 0


@pytest.mark.slow
def test_the_round_summary_holds_every_figure_and_they_add_up(finished_round):
    summary = summary_of(finished_round)
    for field in ["candidates", "candidates_by_capability", "rejections", "agent_free_passed", "rollouts", "admitted",
                  "admission_rate", "train_tasks", "heldout_tasks", "sft_examples", "grpo_groups",
                  "train_pass_rate_before", "train_pass_rate_after", "heldout_pass_rate_before",
                  "heldout_pass_rate_after", "patterns", "seconds", "policy_checkpoint_id", "diagnosis_report_id",
                  "mean_turns", "rollouts_per_admitted_task", "candidates_by_route",
                  "evaluation_pass_at_1", "evaluation_ci_low", "evaluation_ci_high", "evaluation_tasks",
                  "evaluation_by_level"]:
        assert field in summary, field
    candidates = SMALL_ROUND.candidates_per_round
    assert summary["candidates"] == candidates
    assert summary["admitted"] >= 1
    assert summary["rollouts"] == SMALL_ROUND.rollouts_per_task * summary["agent_free_passed"]
    assert summary["admission_rate"] == pytest.approx(summary["admitted"] / candidates, abs=1e-4)
    assert summary["rollouts_per_admitted_task"] == pytest.approx(summary["rollouts"] / summary["admitted"], abs=1e-4)
    assert summary["mean_turns"] is not None and summary["mean_turns"] >= 0
    by_capability = summary["candidates_by_capability"]
    assert sum(c["candidates"] for c in by_capability.values()) == candidates
    assert sum(c["admitted"] for c in by_capability.values()) == summary["admitted"]
    assert sum(summary["rejections"].values()) == candidates - summary["agent_free_passed"]
    # Both synthesis routes drew candidates; the route figures add up to the round's.
    by_route = summary["candidates_by_route"]
    assert set(by_route) == {"capability", "domain"} and by_route["domain"]["candidates"] >= 1
    assert sum(r["candidates"] for r in by_route.values()) == candidates
    assert sum(r["admitted"] for r in by_route.values()) == summary["admitted"]
    assert by_route["domain"]["candidates"] == by_capability["domain_workflow"]["candidates"]
    # Harness errors are counted per phase, never dropped from the round's figures.
    rollouts = DuckDBWarehouse().read("rollouts", {"round": ROUND_ONE})
    errors = rollouts.filter(rollouts["status"] != "scored")
    assert summary["rollout_errors"] == {
        phase: dict(sorted(frame.group_by("status").len().iter_rows()))
        for (phase,), frame in sorted(errors.group_by("phase"), key=lambda item: item[0])}
    assert summary["rollout_error_rate"] == pytest.approx(errors.height / rollouts.height, abs=1e-4)


@pytest.mark.slow
def test_the_evaluation_set_ran_on_the_trained_policy_and_shares_no_task(finished_round):
    summary = summary_of(finished_round)
    assert summary["evaluation_tasks"] == 4
    assert summary["evaluation_ci_low"] <= summary["evaluation_pass_at_1"] <= summary["evaluation_ci_high"]
    # The graded set: each level's figure apart, over its own two tasks.
    by_level = summary["evaluation_by_level"]
    assert list(by_level) == ["-1", "0"] and [part["tasks"] for part in by_level.values()] == [2, 2]
    assert all(part["ci_low"] <= part["pass_at_1"] <= part["ci_high"] for part in by_level.values())
    evaluated = DuckDBWarehouse().read("rollouts", {"round": ROUND_ONE, "phase": "evaluation"})
    assert evaluated.height == 4 * 1 and set(evaluated["checkpoint_id"]) == {summary["policy_checkpoint_id"]}
    candidates = DuckDBWarehouse().read("tasks", {"round": ROUND_ONE})
    assert not set(evaluated["task_id"]) & set(candidates["task_id"])
    assert not any(is_evaluation_seed(seed) for seed in candidates["seed"])


@pytest.mark.slow
def test_the_evaluation_compares_each_level_with_round_one_task_by_task(finished_round):
    """Round 2's evaluation with round 1's own policy: the same tasks with
    the same sample streams, so no task moves. Round 2 borrows round 1's
    checkpoint row for this and gives it back, with its evaluation's rows."""
    warehouse = DuckDBWarehouse()
    second = "round-0002"
    policy_row = warehouse.read("checkpoints", {"round": ROUND_ONE, "kind": "policy"})
    warehouse.replace("checkpoints", policy_row.with_columns(pl.lit(second).alias("round")),
                      {"round": second, "kind": "policy"})
    try:
        result = materialize_round(dg.DagsterInstance.ephemeral(), second, SMALL_ROUND,
                                   selection=dg.AssetSelection.assets("evaluation"))
        assert result.success, why_stopped(result)
        [materialization] = result.asset_materializations_for_node("evaluation")
        table = materialization.metadata["by_level_since_round_1"].value
        assert "| -1 | 2 | 0 | 0 | 1 |" in table and "| 0 | 2 | 0 | 0 | 1 |" in table
    finally:
        warehouse.replace("checkpoints", table_frame("checkpoints", []), {"round": second, "kind": "policy"})
        for table in ("rollouts", "cost_ledger"):
            warehouse.replace(table, table_frame(table, []), {"round": second, "phase": "evaluation"})
    first = finished_round.result.asset_materializations_for_node("evaluation")[0]
    assert first.metadata["by_level_since_round_1"].value == "none (round 1 itself)"


@pytest.mark.slow
def test_grpo_reads_the_input_policys_log_probs_from_the_rollouts_it_sampled(finished_round):
    [run] = DuckDBWarehouse().read("training_runs", {"round": ROUND_ONE, "job": "grpo"}).iter_rows(named=True)
    assert run["status"] == "trained", run["reason"]
    assert json.loads(run["metrics"])["reference_logprobs"] == "recorded at sampling"


@pytest.mark.slow
def test_sft_trains_the_shown_tasks_successes_once_more_in_words(finished_round):
    # Round 1 is the warm-up level, whose tasks show their command: the SFT
    # job trains T_k's successes, and in words the successes of every
    # validated task but the held-out ones, at most COPIES_PER_TASK a task.
    warehouse = DuckDBWarehouse()
    [run] = warehouse.read("training_runs", {"round": ROUND_ONE, "job": "sft"}).iter_rows(named=True)
    assert run["status"] == "trained", run["reason"]
    path = finished_round.home / "rounds" / ROUND_ONE / "training" / "sft_examples.jsonl"
    ids = [json.loads(line)["rollout_id"] for line in path.read_text().splitlines()]
    copies = [i for i in ids if i.endswith(IN_WORDS)]
    validated = warehouse.read("rollouts", {"round": ROUND_ONE, "phase": "validation"})
    task_of = dict(zip(validated["rollout_id"], validated["task_id"]))
    successes = set(validated.filter(pl.col("reward") == 1.0)["rollout_id"])
    splits = warehouse.read("task_splits", {"round": ROUND_ONE})
    heldout, train = (set(splits.filter(pl.col("split") == name)["task_id"]) for name in ("heldout", "train"))
    sources = [i.removesuffix(IN_WORDS) for i in copies]
    assert copies and set(sources) <= successes and not {task_of[i] for i in sources} & heldout
    assert max(Counter(task_of[i] for i in sources).values()) <= COPIES_PER_TASK
    assert sorted(set(ids) - set(copies)) == sorted(i for i in successes if task_of[i] in train)
    assert run["examples"] == len(ids)
    [materialization] = finished_round.result.asset_materializations_for_node("sft_checkpoint")
    assert materialization.metadata["examples_in_words"].value == len(copies)


@pytest.mark.slow
def test_the_history_over_rounds_rides_on_the_round_summary(finished_round):
    [materialization] = finished_round.result.asset_materializations_for_node("round_summary")
    assert "round-0001" in materialization.metadata["rounds_table"].value
    assert materialization.metadata["rounds_plot"].value.startswith("![rounds](data:image/png;base64,")
    assert (finished_round.home / "rounds" / ROUND_ONE / "rounds_plot.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_every_rollout_keeps_aligned_tokens_at_its_phases_temperature(finished_round):
    summary = summary_of(finished_round)
    # T_k before and after training: the same tasks, the same seeds, both policies.
    train_tasks = summary["train_tasks"]
    if train_tasks:
        assert summary["train_pass_rate_before"] is not None and summary["train_pass_rate_after"] is not None
    rollouts = DuckDBWarehouse().read("rollouts", {"round": ROUND_ONE})
    # Every rollout of the round samples at its temperature but the fixed evaluation set's, at the fixed one.
    evaluation = rollouts["phase"] == "evaluation"
    assert set(rollouts.filter(~evaluation)["temperature"]) == {SMALL_ROUND.scheduled_temperature(ROUND_ONE)}
    assert set(rollouts.filter(evaluation)["temperature"]) <= {SMALL_ROUND.temperature}
    assert summary["rollout_temperature"] == SMALL_ROUND.scheduled_temperature(ROUND_ONE)
    for phase in ("train_before", "train_after"):
        assert (rollouts["phase"] == phase).sum() == SMALL_ROUND.train_eval_samples * train_tasks, phase
    # Token-in/token-out: every trajectory keeps aligned ids, mask and log-probs.
    for row in rollouts.iter_rows(named=True):
        assert len(row["token_ids"]) == len(row["action_mask"]) == len(row["sampling_logprobs"])
        assert sum(row["action_mask"]) == row["generated_tokens"]


@pytest.mark.slow
def test_the_diagnosis_covers_held_out_failures_and_unsolved_candidates(finished_round):
    warehouse = DuckDBWarehouse()
    admissions = warehouse.read("admissions", {"round": ROUND_ONE})
    summaries = warehouse.read("failure_summaries", {"round": ROUND_ONE})
    unsolved = set(admissions.filter(admissions["pass_count"] == 0)["task_id"])
    assert set(summaries.filter(summaries["phase"] == "validation")["task_id"]) == unsolved
    assert summaries.height >= len(unsolved)
    checkpoints = warehouse.read("checkpoints", {"round": ROUND_ONE})
    assert set(checkpoints["kind"]) == {"sft", "policy"}
    assert summary_of(finished_round)["policy_checkpoint_id"] in checkpoints["checkpoint_id"].to_list()


@pytest.mark.slow
def test_the_temperature_benchmark_judges_a_finished_round_as_the_round_did(finished_round):
    # At the loop's temperature and the validation seed, the same decision per
    # task. A rollout's sampling does not depend on the other tasks of its
    # call, so three admitted and three other candidates stand for the round.
    from resources.embedded_policy import EmbeddedPolicyModel

    summary = summary_of(finished_round)
    bundles, ref = sampling_temperature.round_inputs(finished_round.home, 1, EmbeddedPolicyModel())
    assert ref.upstream_round is None and len(bundles) == summary["agent_free_passed"]
    decided = {row["task_id"]: row["decision"]
               for row in DuckDBWarehouse().read("admissions", {"round": ROUND_ONE}).iter_rows(named=True)}
    admitted = sorted(task for task, decision in decided.items() if decision == "admitted")[:3]
    others = sorted(task for task, decision in decided.items() if decision != "admitted")[:3]
    assert admitted and others, decided
    [rerun] = sampling_temperature.measure(finished_round.home, 1, [SMALL_ROUND.scheduled_temperature(ROUND_ONE)],
                                           SMALL_ROUND.round_seed(ROUND_ONE, "validation"), SMALL_ROUND,
                                           task_ids={*admitted, *others})
    assert rerun["decisions"] == {task: decided[task] for task in (*admitted, *others)}
    assert (rerun["tasks"], rerun["admitted"]) == (len(admitted) + len(others), len(admitted))
    # Per kind of task (every task at -2 is one of its operations), the same totals.
    assert set(rerun["by_kind"]) <= set(WARMUP_OPERATIONS[-2])
    assert sum(k["tasks"] for k in rerun["by_kind"].values()) == rerun["tasks"]
    assert sum(k["admitted"] for k in rerun["by_kind"].values()) == rerun["admitted"]


@pytest.mark.slow
def test_rematerializing_one_asset_of_the_round_replaces_its_rows(finished_round):
    warehouse = DuckDBWarehouse()
    admissions = warehouse.read("admissions", {"round": ROUND_ONE})
    with dg.DagsterInstance.get() as instance:
        again = dg.materialize([*round_assets, *gate_checks], selection="admitted_tasks", partition_key=ROUND_ONE,
                               instance=instance, resources=round_resources(SMALL_ROUND))
    assert again.success
    assert warehouse.read("admissions", {"round": ROUND_ONE}).sort("task_id").equals(admissions.sort("task_id"))


@pytest.mark.slow
def test_round_two_starts_from_round_ones_checkpoint_and_plan(finished_round):
    """Run up to its validation rollouts, on 8 candidates: what follows is
    round 1's path again, and with a 135M policy whether any candidate lands
    in the band is luck. Here the schedule is round 1's temperature alone, so
    round 2's is the controller's. (A new resource: Dagster rebuilds one from its
    init arguments, so a model_copy's update would be lost.) On an ephemeral
    instance: the shared one keeps round 1 alone for the UI tests."""
    warehouse = DuckDBWarehouse()
    summary = summary_of(finished_round)
    round_one_rollouts = warehouse.read("rollouts", {"round": ROUND_ONE}).height
    controlled = LoopConfig(**{**SMALL_ROUND.model_dump(), "candidates_per_round": 8,
                               "round_temperatures": [SMALL_ROUND.scheduled_temperature(ROUND_ONE)]})
    second = materialize_round(dg.DagsterInstance.ephemeral(), "round-0002", controlled,
                               selection=dg.AssetSelection.assets("validation_rollouts").upstream())
    assert second.success, why_stopped(second)
    validation = warehouse.read("rollouts", {"round": "round-0002", "phase": "validation"})
    assert set(validation["checkpoint_id"]) == {summary["policy_checkpoint_id"]}
    [chosen] = warehouse.read("rollout_temperatures", {"round": "round-0002"}).iter_rows(named=True)
    assert warehouse.read("rollout_temperatures", {"round": ROUND_ONE})["source"].to_list() == ["schedule"]
    assert chosen["source"] == "controller" and chosen["reason"].startswith(f"{summary['rollout_temperature']:.2f} -> ")
    assert abs(chosen["temperature"] - summary["rollout_temperature"]) <= controlled.controller().max_temperature_step + 1e-9
    # The round's temperature serves the warm-up level; the rung above it samples at the fixed one.
    levels = warehouse.read("tasks", {"round": "round-0002"}).select("task_id", "difficulty")
    for (level,), rows in validation.join(levels, on="task_id").group_by("difficulty"):
        assert set(rows["temperature"]) == {chosen["temperature"] if level == MIN_LEVEL else controlled.temperature}
    [plan_materialization] = second.asset_materializations_for_node("synthesis_plan")
    assert plan_materialization.metadata["rollout_temperature"].value == chosen["temperature"]
    # The levels see round 1's pass rates shifted to round 2's policy at round 2's temperature.
    drifts = plan_materialization.metadata["pass_rate_drift_logits"].value
    assert f"| {MIN_LEVEL} | the round's temperature | {chosen['pass_rate_shift']:+.3f} |" in drifts
    plan = warehouse.read("synthesis_plans", {"round": "round-0002"})
    assert set(plan["source_round"]) == {ROUND_ONE}
    first_plan = warehouse.read("synthesis_plans", {"round": ROUND_ONE})
    moved = plan.join(first_plan, on="capability_id", suffix="_before")
    assert (moved["difficulty"] - moved["difficulty_before"]).abs().max() <= 1
    # Nothing of round 1 was lost or duplicated by round 2.
    assert warehouse.read("rollouts", {"round": ROUND_ONE}).height == round_one_rollouts


def test_round_two_without_round_one_fails_loudly(clawloop_home):
    instance = dg.DagsterInstance.ephemeral()
    result = materialize_round(instance, "round-0002")
    assert not result.success
    reason = why_stopped(result)
    assert "synthesis_plan failed" in reason and "round-0001 has not completed" in reason
