import pytest

from clawloop_assets.validation.admission import AdmissionBand, decide_admission, split_tasks


@pytest.mark.parametrize(
    "rewards, decision, passes",
    [
        ([0.0] * 8, "all_failed", 0),
        ([1.0] + [0.0] * 7, "admitted", 1),
        ([1.0] * 5 + [0.0] * 3, "admitted", 5),
        ([1.0] * 6 + [0.0] * 2, "too_easy", 6),
        ([1.0] * 8, "too_easy", 8),
    ],
)
def test_band_decisions(rewards, decision, passes):
    result = decide_admission(rewards, AdmissionBand())
    assert (result.decision, result.pass_count) == (decision, passes)
    assert result.admitted == (decision == "admitted")


def test_infrastructure_failures_are_excluded_not_failures():
    # Two rollouts lost to the sandbox: 6 scored, 1 pass -> still judged and admitted.
    result = decide_admission([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, None, None], AdmissionBand())
    assert (result.scored_rollouts, result.excluded_rollouts, result.decision) == (6, 2, "admitted")
    lost = decide_admission([1.0, None, None, None, None, None, None, None], AdmissionBand())
    assert lost.decision == "too_few_scored"


def test_band_validation_names_the_problem():
    with pytest.raises(ValueError, match="low <= high"):
        AdmissionBand(low=6, high=5)


def test_split_is_seeded_disjoint_and_stratified():
    tasks = {f"t{i}": ("a" if i < 6 else "b") for i in range(10)}
    first = split_tasks(tasks, 0.4, seed=3)
    assert first == split_tasks(tasks, 0.4, seed=3)
    assert set(first) == set(tasks)
    heldout = [t for t, s in first.items() if s == "heldout"]
    assert {tasks[t] for t in heldout} == {"a", "b"}
    assert len(heldout) == 4


def test_split_of_two_tasks_keeps_both_sides():
    split = split_tasks({"x": "a", "y": "b"}, 0.2, seed=0)
    assert sorted(split.values()) == ["heldout", "train"]


def test_only_a_task_already_too_easy_is_final():
    from clawloop_assets.validation.admission import admission_is_final, sequential_waves

    band = AdmissionBand()  # N = 8, [1, 5], at least 6 scored
    assert sequential_waves(band) == [6, 2]
    assert admission_is_final([1.0] * 6, band)
    assert not admission_is_final([1.0] * 5 + [0.0], band)  # 5 or 7 of 8: still open
    assert not admission_is_final([0.0] * 6, band)  # all failed so far: a pass may come
    assert not admission_is_final([1.0] * 6 + [None, None], AdmissionBand(min_scored=8))
    # Whatever the last rollouts, a final decision stands.
    for tail in ([0.0, 0.0], [1.0, None], [None, None]):
        assert decide_admission([1.0] * 6 + tail, band).decision == "too_easy"
    assert sequential_waves(AdmissionBand(high=7)) == [8]
