"""LoopConfig's rollout temperature by round."""

import pytest

from clawloop_assets.loop_config import LoopConfig


def test_each_round_samples_at_its_entry_and_the_last_one_repeats():
    loop = LoopConfig(round_temperatures=[0.7, 0.85, 0.9])
    assert [loop.round_temperature(f"round-{n:04d}") for n in (1, 2, 3, 4, 12)] == [0.7, 0.85, 0.9, 0.9, 0.9]
    assert loop.agent_settings("round-0002").temperature == 0.85
    # Without a round: the fixed temperature of the evaluation set and transfer runs.
    assert LoopConfig(temperature=0.6).agent_settings().temperature == 0.6
    assert LoopConfig(round_temperatures=[1.0]).round_temperature("round-0009") == 1.0


@pytest.mark.parametrize("temperatures", [[], [0.7, 0.0], [0.7, -0.1], [2.5]])
def test_a_bad_temperature_list_is_refused_by_name(temperatures):
    with pytest.raises(ValueError, match="round_temperatures must be a non-empty list"):
        LoopConfig(round_temperatures=temperatures)


def test_a_round_key_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="'nightly' is not a round key"):
        LoopConfig().round_temperature("nightly")
