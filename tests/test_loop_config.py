"""LoopConfig's rollout temperature by round."""

import pytest

from clawloop_assets.loop_config import LoopConfig


def test_each_round_of_the_schedule_samples_at_its_entry_then_the_controller_chooses():
    loop = LoopConfig(round_temperatures=[0.7, 0.85, 0.9])
    assert [loop.scheduled_temperature(f"round-{n:04d}") for n in (1, 2, 3, 4, 12)] == [0.7, 0.85, 0.9, None, None]
    # Without the controller, the last entry repeats.
    fixed = LoopConfig(round_temperatures=[0.7, 0.85, 0.9], controlled_temperature=False)
    assert [fixed.scheduled_temperature(f"round-{n:04d}") for n in (1, 3, 4, 12)] == [0.7, 0.9, 0.9, 0.9]
    assert loop.agent_settings(0.85).temperature == 0.85
    # Without a round's temperature: the fixed one of the evaluation set and transfer runs.
    assert LoopConfig(temperature=0.6).agent_settings().temperature == 0.6


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
