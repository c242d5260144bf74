"""The nightly round: a schedule on round_job that adds the next round's
partition and launches it, unless the previous round is still running or
failed. Every tick says what it decided: the skip reason, or the run's
`clawloop/decision` tag and the tick's log line."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import dagster as dg

from clawloop_assets.partitions import round_after, round_number, round_partitions
from resources.environment import check_profile, read_environment

# Whether the schedule runs as soon as the code location loads, per profile:
# a laptop turns it on in the UI (or `dagster schedule start`) when it wants
# it; production runs a round every night.
NIGHTLY_STATUS_BY_PROFILE = {
    "laptop": dg.DefaultScheduleStatus.STOPPED,
    "production": dg.DefaultScheduleStatus.RUNNING,
}

_SUCCEEDED = {dg.DagsterRunStatus.SUCCESS}
_FAILED = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
# Every other status (not started, queued, starting, started, canceling,
# suspended, managed) is a run that is still going.


@dataclass(frozen=True)
class LatestRun:
    """The newest run of one round's partition."""

    run_id: str
    status: dg.DagsterRunStatus


@dataclass(frozen=True)
class Decision:
    round_key: str | None  # the round to launch; None: skip this tick
    reason: str


def _is_round_key(key: str) -> bool:
    try:
        round_number(key)
    except ValueError:
        return False
    return True


def decide_next_round(existing_keys: Iterable[str], latest_runs: Mapping[str, LatestRun]) -> Decision:
    """The round to launch now, or why none.

    The previous round is the highest round that has a run; the next is the
    one after it (`round_after`, as `clawloop run` picks it), or round-0001
    when no round has run yet; a partition added by hand that never ran is
    that next round. Nothing starts while the previous round's latest run is
    unfinished or failed, nor while any other round has a run in progress
    (the warehouse takes one writer)."""
    existing = {k for k in existing_keys if _is_round_key(k)}
    ran = sorted((k for k in latest_runs if _is_round_key(k)), key=round_number)
    candidate = round_after(ran)
    if ran:
        previous = ran[-1]
        run = latest_runs[previous]
        if run.status in _FAILED:
            verb = "was canceled" if run.status == dg.DagsterRunStatus.CANCELED else "failed"
            return Decision(None, f"{previous} {verb} (run {run.run_id}); rematerialize or fix it first, "
                                  f"then {candidate} starts on the next tick")
        if run.status not in _SUCCEEDED:
            return Decision(None, f"{previous} is still running (run {run.run_id}); not starting {candidate}")
        for key in ran[:-1]:
            other = latest_runs[key]
            if other.status not in _SUCCEEDED | _FAILED:
                return Decision(None, f"{key} is still running (run {other.run_id}); not starting {candidate} "
                                      f"until it finishes (one round at a time)")
        why = f"{previous} succeeded (run {run.run_id})"
    else:
        why = "no round has run yet"
    if candidate in existing:
        return Decision(candidate, f"{why}; starting {candidate} (its partition exists and has never run)")
    return Decision(candidate, f"{why}; adding and starting {candidate}")


def latest_round_runs(instance: dg.DagsterInstance, keys: Iterable[str]) -> dict[str, LatestRun]:
    """The newest run of each of these rounds' partitions, of any job: a
    round_job run, a re-execution, or assets rematerialized from the UI (which
    runs as Dagster's implicit asset job)."""
    keys = sorted(keys)
    if not keys:
        return {}
    latest: dict[str, LatestRun] = {}
    # get_runs returns the newest first.
    for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": keys})):
        key = run.tags.get("dagster/partition")
        if key not in latest:
            latest[key] = LatestRun(run.run_id, run.status)
    return latest


def nightly_default_status(profile: str) -> dg.DefaultScheduleStatus:
    return NIGHTLY_STATUS_BY_PROFILE[check_profile(profile)]


def nightly_cron() -> str:
    return read_environment().nightly_cron


def nightly_round_schedule(profile: str) -> dg.ScheduleDefinition:
    """`nightly_round` on round_job: cron from $CLAWLOOP_NIGHTLY_CRON (UTC),
    on by default in the production profile only."""

    @dg.schedule(
        name="nightly_round",
        job_name="round_job",
        cron_schedule=nightly_cron(),
        execution_timezone="UTC",
        default_status=nightly_default_status(profile),
        description="Adds the next round's partition and launches round_job on it, unless the previous "
                    "round is still running or failed; the tick says which.",
    )
    def nightly_round(context: dg.ScheduleEvaluationContext):
        instance = context.instance
        existing = instance.get_dynamic_partitions(round_partitions.name)
        decision = decide_next_round(existing, latest_round_runs(instance, existing))
        context.log.info(decision.reason)
        if decision.round_key is None:
            return dg.SkipReason(decision.reason)
        key = decision.round_key
        # A schedule cannot return a DynamicPartitionsRequest (only sensors
        # can, through SensorResult), and its partitioned RunRequest must name
        # an existing partition: add it here, before returning.
        if not instance.has_dynamic_partition(round_partitions.name, key):
            instance.add_dynamic_partitions(round_partitions.name, [key])
        return dg.RunRequest(
            run_key=key,
            partition_key=key,
            tags={"clawloop/trigger": "nightly_round", "clawloop/decision": decision.reason},
        )

    return nightly_round
