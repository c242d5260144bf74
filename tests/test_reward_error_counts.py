"""Rollouts lost to the harness (verifier, sandbox or policy errors) are
counted per round and shown, and more of them than loop.max_error_rate of an
asset's rollouts fails a blocking check: the round stops there instead of
being judged on the rollouts its harness happened not to lose."""

from __future__ import annotations

import dagster as dg
import pytest

from clawloop_assets.assets import checks
from clawloop_assets.assets.checks import error_rate_result
from clawloop_assets.definitions import gate_checks
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_partitions
from resources.warehouse import DuckDBWarehouse, table_frame

KEY = "round-0001"


def rollouts(phase: str, statuses: list[str]):
    return table_frame("rollouts", [
        {"round": KEY, "rollout_id": f"t{i}.{phase}.0", "task_id": f"t{i}", "phase": phase, "checkpoint_id": "c",
         "sample_index": 0, "status": status, "reward": 0.0 if status == "scored" else None,
         "error": None if status == "scored" else "lost", "turns": 1, "submitted": True, "canary_seen": False,
         "commands": [], "exit_codes": [], "last_output": "", "verifier_checks": "[]", "token_ids": [],
         "action_mask": [], "sampling_logprobs": [], "temperature": 0.7, "prompt_tokens": 0, "generated_tokens": 0,
         "model_seconds": 0.0, "sandbox_seconds": 0.0}
        for i, status in enumerate(statuses)])


def test_the_error_rate_is_counted_by_status_against_the_limit():
    at_limit = error_rate_result(rollouts("validation", ["scored"] * 99 + ["verifier_error"]), 0.01)
    assert at_limit.passed
    over = error_rate_result(rollouts("validation", ["scored"] * 98 + ["verifier_error", "sandbox_error"]), 0.01)
    assert not over.passed
    metadata = {k: v.value for k, v in over.metadata.items()}
    assert (metadata["rollouts"], metadata["error_rollouts"], metadata["error_rate"]) == (100, 2, 0.02)
    assert (metadata["verifier_errors"], metadata["sandbox_errors"], metadata["policy_errors"]) == (1, 1, 0)
    assert error_rate_result(rollouts("validation", []), 0.0).passed  # nothing ran, nothing lost
    assert error_rate_result(rollouts("validation", ["policy_error"] * 2 + ["scored"] * 2), 0.5).passed


def test_every_asset_that_records_rollouts_has_a_blocking_error_check():
    recorded = {"validation_rollouts", "training_gain", "heldout_baseline_rollouts", "diagnosis_rollouts", "evaluation"}
    guarded = {}
    for check in gate_checks:
        for spec in check.check_specs:
            if spec.name == "rollout_errors_within_limit":
                guarded[spec.asset_key.to_user_string()] = spec.blocking
    assert guarded == {asset: True for asset in recorded}


@pytest.mark.parametrize("errors, passed", [(1, True), (2, False)])
def test_too_many_errors_stop_the_round(clawloop_home, errors, passed):
    # The real check on a stand-in for validation_rollouts that records 100
    # rollouts: past the limit the check fails and, blocking, stops what follows.
    ran = []

    @dg.asset(name="validation_rollouts", partitions_def=round_partitions)
    def stand_in(warehouse: DuckDBWarehouse) -> None:
        statuses = ["scored"] * (100 - errors) + ["verifier_error"] * errors
        warehouse.replace("rollouts", rollouts("validation", statuses), {"round": KEY, "phase": "validation"})

    @dg.asset(partitions_def=round_partitions, deps=[stand_in])
    def downstream() -> None:
        ran.append(True)

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [KEY])
    result = dg.materialize([stand_in, downstream, checks.validation_rollout_errors], partition_key=KEY,
                            instance=instance, raise_on_error=False,
                            resources={"warehouse": DuckDBWarehouse(), "loop": LoopConfig()})
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed is passed
    assert {k: v.value for k, v in evaluation.metadata.items()}["error_rollouts"] == errors
    assert ran == ([True] if passed else [])
