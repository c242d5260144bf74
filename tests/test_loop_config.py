"""LoopConfig's rollout temperature by round."""

import pytest

from clawloop_assets.loop_config import LoopConfig


def test_each_round_of_the_schedule_samples_at_its_entry_then_the_controller_chooses():
    loop = LoopConfig(round_temperatures=[0.7, 0.85, 0.9])
    assert [loop.scheduled_temperature(f"round-{n:04d}") for n in (1, 2, 3, 4, 12)] == [0.7, 0.85, 0.9, None, None]
    # Without the controller, the last entry repeats.
    fixed = LoopConfig(round_temperatures=[0.7, 0.85, 0.9], controlled_temperature=False)
    assert [fixed.scheduled_temperature(f"round-{n:04d}") for n in (1, 3, 4, 12)] == [0.7, 0.9, 0.9, 0.9]
    # A round's temperature serves the warm-up level; level -1 and up sample at the fixed one.
    settings = loop.agent_settings(0.85)
    assert [settings.temperature_for(level) for level in (-2, -1, 0, 3)] == [0.85, 0.7, 0.7, 0.7]
    assert [loop.at_round_temperature(level) for level in (-2, -1, 0)] == [True, False, False]
    # The ablation: every level at the round's temperature.
    every = LoopConfig(round_temperature_levels="all")
    assert [every.agent_settings(0.85).temperature_for(level) for level in (-2, -1, 0)] == [0.85] * 3
    assert every.at_round_temperature(0)
    # Without a round's temperature: the fixed one of the evaluation set and transfer runs, at every level.
    fixed = LoopConfig(temperature=0.6).agent_settings()
    assert [fixed.temperature_for(level) for level in (-2, -1, 0)] == [0.6] * 3


@pytest.mark.parametrize("temperatures", [[], [0.7, 0.0], [0.7, -0.1], [2.5]])
def test_a_bad_temperature_list_is_refused_by_name(temperatures):
    with pytest.raises(ValueError, match="round_temperatures must be a non-empty list"):
        LoopConfig(round_temperatures=temperatures)


def test_a_round_key_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="'nightly' is not a round key"):
        LoopConfig().scheduled_temperature("nightly")


def test_a_round_after_the_schedule_has_no_temperature_until_its_plan_chooses_one(clawloop_home):
    from clawloop_assets.round_state import MissingUpstreamError, rollout_temperature
    from resources.warehouse import DuckDBWarehouse, table_frame

    warehouse, loop = DuckDBWarehouse(), LoopConfig()
    # A round planned before the rollout_temperatures table existed samples at its scheduled one.
    assert rollout_temperature(warehouse, "round-0002", loop.scheduled_temperature("round-0002")) == 0.95
    with pytest.raises(MissingUpstreamError, match="materialize synthesis_plan for round-0003 first"):
        rollout_temperature(warehouse, "round-0003", loop.scheduled_temperature("round-0003"))
    row = {"round": "round-0003", "temperature": 0.88, "source": "controller", "predicted_pass_rate": 0.28,
           "pass_rate_shift": 0.4, "reason": "r"}
    warehouse.replace("rollout_temperatures", table_frame("rollout_temperatures", [row]), {"round": "round-0003"})
    assert rollout_temperature(warehouse, "round-0003", None) == 0.88


# --- every field checked when the resource is built ---------------------------------------------------------

# For every field, values it must refuse (a wrong type, or out of range); the
# test below fails for a field added without any.
BAD_VALUES = {
    "candidates_per_round": [0, -1, "64", 64.0],
    "rollouts_per_task": [1, 0, "8"],
    "sequential_rollouts": [1, "yes"],
    "admission_low": [-1, 6],  # 6 > admission_high (5)
    "admission_high": [9, -1, 0],  # 9 > rollouts_per_task (8); 0 < admission_low (1)
    "heldout_fraction": [0, 1, 1.5, -0.1],
    "heldout_samples": [0],
    "train_eval_samples": [-1],
    "max_turns": [0, "3"],
    "max_new_tokens": [0, -5],
    "harness_workers": [0, 257],
    "temperature": [-1, 0, 2.5, "0.7"],
    "round_temperatures": [[], [0.7, 0], [3], 0.7],
    "controlled_temperature": [0],
    "round_temperature_levels": ["rung"],
    "training_mode": ["sft"],
    "sft_in_words": ["yes", 1],
    "generator_source": ["gpt"],
    "generator_max_tokens": [0],
    "synthesis_routes": [[], ["vibes"], "capability"],
    "target_admission_rate": [0, 1.5],
    "min_capability_share": [-0.1, 1.1],
    "controller_recency": [-0.5, 2],
    "weakness_tilt": [-1],
    "rung_probe_share": [-0.1, 1],
    "first_level": [-3, 6, "-1", -1.0],
    "model_failure_summaries": ["no"],
    "diagnose_unsolved_candidates": [0],
    "summary_probe": [-1],
    "summary_attempts": [0],
    "evaluation_samples": [0, -1],
    "evaluation_capabilities": [["juggling"], "grouped_statistics"],
    "evaluation_levels": [[7], [], [0.5]],
    "evaluation_seeds_per_cell": [0],
    "training_recipe": ["gpu"],
    "sft_learning_rate": [0, -1e-5, 1.0],
    "sft_epochs": [0],
    "grpo_learning_rate": [0, 2.0],
    "grpo_epochs": [0],
    "kl_beta": [-0.1],
    "train_max_steps": [0, -1],
    "train_batch_size": [0],
    "lora_rank": [0],
    "torch_threads": [0, -1],
    "seed": [-1, "0"],
    "max_error_rate": [-0.01, 1.01],
}


def test_every_field_has_values_it_refuses():
    assert set(BAD_VALUES) == set(LoopConfig.model_fields)


@pytest.mark.parametrize("field,value", [(f, v) for f, values in BAD_VALUES.items() for v in values])
def test_a_bad_value_is_refused_naming_its_field(field, value):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as refused:
        LoopConfig(**{field: value})
    # Named where the error is reported (its location or its message), not only in the input echoed back.
    [error] = refused.value.errors()
    named = error["loc"][:1] == (field,) or field in error["msg"] or field.replace("_", " ") in error["msg"]
    assert named, error


def test_values_at_the_bounds_are_accepted():
    """The bounds refuse nonsense, not the edges of the sensible."""
    loop = LoopConfig(temperature=2.0, round_temperatures=[0.01, 2], train_eval_samples=0, summary_probe=0,
                      controller_recency=0, min_capability_share=0, kl_beta=0, admission_low=0, admission_high=8,
                      max_error_rate=0, rollouts_per_task=8, torch_threads=1, seed=0, max_new_tokens=1)
    assert loop.temperature == 2.0 and loop.admission_band().low == 0
    assert LoopConfig(max_error_rate=1, temperature=1).temperature == 1  # an int where a float is asked: fine


def test_every_field_is_described_in_the_launchpad_schema():
    schema = LoopConfig.to_config_schema().as_field().config_type.fields
    for name, field in LoopConfig.model_fields.items():
        assert field.description and len(field.description) > 10, name
        assert schema[name].description == field.description, name


def _materialize_catalog(run_config):
    import dagster as dg

    from clawloop_assets.assets.synthesis import capability_catalog
    from resources.warehouse import DuckDBWarehouse

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", ["round-0001"])
    return dg.materialize([capability_catalog], partition_key="round-0001", instance=instance, raise_on_error=False,
                          resources={"warehouse": DuckDBWarehouse(), "loop": LoopConfig()}, run_config=run_config)


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"temperature": 0}, {"max_new_tokens": 0}, {"torch_threads": 0}])
def test_a_bad_value_from_the_launchpad_stops_the_run_before_any_step(clawloop_home, bad):
    """The launchpad's run config builds the resource: a bad value fails the
    run when resources start, naming the field, and no step runs or writes."""
    from resources.warehouse import DuckDBWarehouse

    result = _materialize_catalog({"resources": {"loop": {"config": bad}}})
    assert not result.success
    failures = [e for e in result.all_events if e.is_resource_init_failure]
    assert failures, "the resource started"
    error = failures[0].event_specific_data.error
    while error.cause is not None:
        error = error.cause
    assert next(iter(bad)) in error.message
    assert not any(e.is_step_start for e in result.all_events)
    assert DuckDBWarehouse().read("capabilities", {"round": "round-0001"}).height == 0


def test_a_good_value_from_the_launchpad_reaches_the_asset(clawloop_home):
    result = _materialize_catalog({"resources": {"loop": {"config": {"synthesis_routes": ["domain"]}}}})
    assert result.success
    assert result.asset_materializations_for_node("capability_catalog")[0].metadata["routes"].value == "domain"
