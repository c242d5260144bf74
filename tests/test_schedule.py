"""The nightly_round schedule: what it decides, against a real Dagster
instance; it launches nothing here (the RunRequest is the assertion)."""

import uuid
from datetime import datetime, timezone

import dagster as dg
import pytest

from clawloop_assets.partitions import round_after
from clawloop_assets.schedules import (
    Decision,
    LatestRun,
    decide_next_round,
    nightly_default_status,
    nightly_round_schedule,
)
from resources.environment import DEFAULT_NIGHTLY_CRON

TICK = datetime(2025, 1, 2, 2, 0, tzinfo=timezone.utc)
S = dg.DagsterRunStatus


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def add_round_run(instance, key: str, status: dg.DagsterRunStatus, job_name: str = "round_job") -> str:
    run_id = str(uuid.uuid4())
    instance.add_run(dg.DagsterRun(job_name=job_name, run_id=run_id, status=status, tags={"dagster/partition": key}))
    return run_id


def tick(instance, profile: str = "laptop"):
    schedule = nightly_round_schedule(profile)
    return schedule(dg.build_schedule_context(instance=instance, scheduled_execution_time=TICK))


# The schedule on an instance.


def test_no_rounds_yet_adds_and_requests_round_one(instance):
    result = tick(instance)
    assert isinstance(result, dg.RunRequest)
    assert (result.run_key, result.partition_key) == ("round-0001", "round-0001")
    assert result.tags["clawloop/trigger"] == "nightly_round"
    assert "no round has run yet" in result.tags["clawloop/decision"]
    assert instance.get_dynamic_partitions("rounds") == ["round-0001"]


def test_after_a_successful_round_the_next_is_requested(instance):
    instance.add_dynamic_partitions("rounds", ["round-0001", "round-0002"])
    add_round_run(instance, "round-0001", S.SUCCESS)
    add_round_run(instance, "round-0002", S.FAILURE)
    run_id = add_round_run(instance, "round-0002", S.SUCCESS)  # rerun: the newest run counts
    result = tick(instance)
    assert isinstance(result, dg.RunRequest)
    assert (result.run_key, result.partition_key) == ("round-0003", "round-0003")
    assert f"round-0002 succeeded (run {run_id})" in result.tags["clawloop/decision"]
    assert instance.has_dynamic_partition("rounds", "round-0003")


def test_a_partition_added_by_hand_that_never_ran_is_launched(instance):
    instance.add_dynamic_partitions("rounds", ["round-0001", "round-0002"])
    add_round_run(instance, "round-0001", S.SUCCESS)
    result = tick(instance)
    assert isinstance(result, dg.RunRequest)
    assert result.partition_key == "round-0002"
    assert instance.get_dynamic_partitions("rounds") == ["round-0001", "round-0002"]


def test_a_round_still_running_skips_the_tick(instance):
    instance.add_dynamic_partitions("rounds", ["round-0001", "round-0002"])
    add_round_run(instance, "round-0001", S.SUCCESS)
    run_id = add_round_run(instance, "round-0002", S.STARTED)
    result = tick(instance)
    assert isinstance(result, dg.SkipReason)
    assert result.skip_message == f"round-0002 is still running (run {run_id}); not starting round-0003"
    assert not instance.has_dynamic_partition("rounds", "round-0003")


def test_a_failed_round_skips_the_tick_until_it_is_fixed(instance):
    instance.add_dynamic_partitions("rounds", ["round-0001"])
    run_id = add_round_run(instance, "round-0001", S.FAILURE)
    result = tick(instance)
    assert isinstance(result, dg.SkipReason)
    assert f"round-0001 failed (run {run_id}); rematerialize or fix it first" in result.skip_message
    assert not instance.has_dynamic_partition("rounds", "round-0002")
    # Rematerialized from the UI (Dagster's implicit asset job): the next tick goes on.
    add_round_run(instance, "round-0001", S.SUCCESS, job_name="__ASSET_JOB")
    assert tick(instance).partition_key == "round-0002"


def test_the_tick_resolves_to_a_run_of_round_job_on_the_new_partition(instance):
    """The daemon's path: evaluate_tick with the code location, which checks
    the partition exists (the schedule adds it first) and tags the run."""
    from clawloop_assets.definitions import defs

    schedule = defs.resolve_schedule_def("nightly_round")
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=TICK,
                                        repository_def=defs.get_repository_def())
    data = schedule.evaluate_tick(context)
    assert data.skip_message is None
    [request] = data.run_requests
    assert request.tags["dagster/partition"] == "round-0001"
    assert request.tags["dagster/schedule_name"] == "nightly_round"


# The decision alone.


def run(status, run_id="r"):
    return LatestRun(run_id, status)


@pytest.mark.parametrize(
    ("existing", "runs", "expected"),
    [
        ([], {}, "round-0001"),
        (["round-0001"], {}, "round-0001"),  # added by hand, never ran
        (["round-0001"], {"round-0001": run(S.SUCCESS)}, "round-0002"),
        (["round-0001", "round-0002"], {"round-0001": run(S.SUCCESS)}, "round-0002"),
        (["round-0001", "round-0002"], {"round-0001": run(S.SUCCESS), "round-0002": run(S.SUCCESS)}, "round-0003"),
        # an older round failed again later: only the previous round gates the next
        (["round-0001", "round-0002"], {"round-0001": run(S.FAILURE), "round-0002": run(S.SUCCESS)}, "round-0003"),
        (["not-a-round", "round-0001"], {"round-0001": run(S.SUCCESS)}, "round-0002"),
    ],
)
def test_decision_launches(existing, runs, expected):
    decision = decide_next_round(existing, runs)
    assert decision.round_key == expected, decision.reason


@pytest.mark.parametrize("status", [S.QUEUED, S.NOT_STARTED, S.STARTING, S.STARTED, S.CANCELING])
def test_decision_waits_for_a_running_previous_round(status):
    decision = decide_next_round(["round-0001", "round-0002"], {"round-0001": run(S.SUCCESS), "round-0002": run(status, "abc")})
    assert decision == Decision(None, "round-0002 is still running (run abc); not starting round-0003")


@pytest.mark.parametrize(("status", "verb"), [(S.FAILURE, "failed"), (S.CANCELED, "was canceled")])
def test_decision_stops_on_a_failed_previous_round(status, verb):
    decision = decide_next_round(["round-0001"], {"round-0001": run(status, "abc")})
    assert decision.round_key is None
    assert decision.reason.startswith(f"round-0001 {verb} (run abc); rematerialize or fix it first")


def test_decision_waits_while_an_older_round_is_rematerializing():
    decision = decide_next_round(["round-0001", "round-0002"], {"round-0001": run(S.STARTED, "abc"), "round-0002": run(S.SUCCESS)})
    assert decision.round_key is None
    assert decision.reason.startswith("round-0001 is still running (run abc); not starting round-0003")


def test_round_after_is_the_cli_rule():
    assert round_after([]) == "round-0001"
    assert round_after(["round-0002", "round-0010", "round-0003"]) == "round-0011"


# Configuration.


def test_default_status_follows_the_profile():
    assert nightly_default_status("laptop") == dg.DefaultScheduleStatus.STOPPED
    assert nightly_default_status("production") == dg.DefaultScheduleStatus.RUNNING
    assert nightly_round_schedule("production").default_status == dg.DefaultScheduleStatus.RUNNING
    with pytest.raises(ValueError, match="CLAWLOOP_PROFILE='cloud'"):
        nightly_default_status("cloud")


def test_cron_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("CLAWLOOP_NIGHTLY_CRON", raising=False)
    schedule = nightly_round_schedule("laptop")
    assert (schedule.cron_schedule, schedule.execution_timezone) == (DEFAULT_NIGHTLY_CRON, "UTC")
    monkeypatch.setenv("CLAWLOOP_NIGHTLY_CRON", "30 3 * * 1-5")
    assert nightly_round_schedule("laptop").cron_schedule == "30 3 * * 1-5"


def test_the_laptop_definitions_carry_the_schedule_stopped():
    from clawloop_assets.definitions import defs

    schedule = defs.resolve_schedule_def("nightly_round")
    assert schedule.job_name == "round_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
