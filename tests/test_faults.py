"""Faults: a run worker killed mid-asset, a warehouse write killed inside its
transaction, a partition rematerialized, rounds launched out of order, two
runs at once. Real processes, a real Dagster instance (SQLite, the repo's
dagster.yaml), the real sandbox and DuckDB file; SIGKILL, not exceptions.

The rounds here run the cheap front of a round (catalogs, plan, generators,
candidate bundles, agent-free validation: no model), one candidate per
capability; the three that run it in worker processes are marked slow."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import sqlalchemy.exc
from conftest import MODEL_CACHE

from clawloop_assets.cli import why_stopped
from clawloop_assets.definitions import round_assets
from clawloop_assets.loop_config import LoopConfig
from resources.embedded_policy import EmbeddedPolicyModel
from resources.run_lock import RunLockHeld, acquire_run_lock
from resources.sandbox import BubblewrapSandbox
from resources.training_launcher import SubprocessTrainingLauncher
from resources.warehouse import DuckDBWarehouse, table_frame

REPO = Path(__file__).resolve().parent.parent
ROUND = "round-0001"
FRONT_TABLES = ["capabilities", "domains", "synthesis_plans", "rollout_temperatures", "generators", "tasks", "agent_free_validations",
                "cost_ledger"]
# Wall-clock measurements, the only columns two runs of one round may differ
# in: a bundle's build time and a phase's wall and CPU seconds.
TIME_COLUMNS = {"tasks": {"seconds"}, "cost_ledger": {"wall_seconds", "cpu_seconds"}}

# A run worker: the cheap front of one round through dg.materialize on the
# persistent instance under $DAGSTER_HOME (as `clawloop run` uses it).
FRONT_WORKER = """
import json, os, sys, time
import dagster as dg
from clawloop_assets.cli import prepare_dagster_home, why_stopped
from clawloop_assets.definitions import round_assets
from clawloop_assets.loop_config import LoopConfig
from resources.embedded_policy import EmbeddedPolicyModel
from resources.run_lock import RunLockHeld, acquire_run_lock
from resources.sandbox import BubblewrapSandbox
from resources.training_launcher import SubprocessTrainingLauncher
from resources.warehouse import DuckDBWarehouse

key = sys.argv[1]
gate = sys.argv[2] if len(sys.argv) > 2 else ""


# The real sandbox, whose commands wait until the gate file exists: the run
# stays under way, at its first sandboxed step, for as long as a test needs.
class GatedSandbox(BubblewrapSandbox):
    def run(self, *args, **kwargs):
        deadline = time.monotonic() + 180
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().run(*args, **kwargs)


prepare_dagster_home()
with dg.DagsterInstance.get() as instance:
    if not instance.has_dynamic_partition("rounds", key):
        instance.add_dynamic_partitions("rounds", [key])
    result = dg.materialize(
        round_assets, partition_key=key, instance=instance, raise_on_error=False,
        selection=dg.AssetSelection.assets("agent_free_validation").upstream(),
        resources={"policy": EmbeddedPolicyModel(), "sandbox": GatedSandbox() if gate else BubblewrapSandbox(),
                   "warehouse": DuckDBWarehouse(),
                   "training_launcher": SubprocessTrainingLauncher(), "loop": LoopConfig(candidates_per_round=13)})
    print("RESULT " + json.dumps({"run_id": result.run_id, "success": result.success,
                                  "why": None if result.success else why_stopped(result)}), flush=True)
"""


def worker_env(home: Path) -> dict:
    return {**os.environ, "CLAWLOOP_HOME": str(home), "CLAWLOOP_MODEL_CACHE": str(MODEL_CACHE),
            "DAGSTER_HOME": str(home / "dagster"), "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}


def start_front(home: Path, key: str = ROUND, gate: Path | None = None) -> subprocess.Popen:
    """The front's worker; with `gate`, its sandboxed commands wait until that file exists."""
    return subprocess.Popen([sys.executable, "-c", FRONT_WORKER, key, *([str(gate)] if gate else [])], cwd=REPO,
                            env=worker_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(worker: subprocess.Popen, timeout: float = 240) -> dict:
    out, _ = worker.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the worker (exit {worker.returncode}) printed no result:\n{out[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def run_front(home: Path, key: str = ROUND) -> dict:
    result = finish(start_front(home, key))
    assert result["success"], result["why"]
    return result


def round_fingerprint(home: Path, key: str = ROUND) -> dict[str, tuple[int, str]]:
    """(rows, sha256 over the sorted rows) per table for one round, without the
    time columns and with the home directory written as $CLAWLOOP_HOME (a
    bundle's path is its home's). Fails on a duplicate row."""
    warehouse = DuckDBWarehouse(path=str(home / "warehouse.duckdb"))
    prints = {}
    for table in FRONT_TABLES:
        rows = warehouse.read(table, {"round": key})
        rows = rows.drop([c for c in TIME_COLUMNS.get(table, ()) if c in rows.columns])
        lines = sorted(json.dumps(r, sort_keys=True, default=str).replace(str(home), "$CLAWLOOP_HOME")
                       for r in rows.iter_rows(named=True))
        assert len(set(lines)) == len(lines), f"{table} holds duplicate rows for {key}"
        prints[table] = (len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest())
    return prints


def instance_at(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home / "dagster"))


def wait_for(what: str, predicate, worker: subprocess.Popen | None = None, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker is not None and worker.poll() is not None:
            pytest.fail(f"the worker exited ({worker.returncode}) before {what}:\n{worker.stdout.read()[-3000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def step_started(home: Path, step: str):
    """The run id once `step` has started in the only run of the instance.
    Looks only once the worker has a run's event log (history/runs/<run id>.db):
    before that the worker is still creating the instance's tables, and a
    second process creating them too would collide."""
    storage = home / "dagster" / "history" / "runs"
    if not storage.exists() or not [p for p in storage.glob("*.db") if p.stem != "index"]:
        return None
    try:
        with instance_at(home) as instance:
            for run in instance.get_runs():
                if any(e.step_key == step for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)):
                    return run.run_id
    except sqlalchemy.exc.OperationalError:  # busy with the worker's writes: look again
        return None
    return None


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A clean run of the round's front, and its fingerprint."""
    home = tmp_path_factory.mktemp("reference") / "home"
    run_front(home)
    fingerprint = round_fingerprint(home)
    assert fingerprint["tasks"][0] == 13 and fingerprint["agent_free_validations"][0] >= 1, fingerprint
    return home, fingerprint


@pytest.mark.slow  # a front run is 20-60 s here
def test_rematerializing_a_partition_gives_identical_rows(reference):
    home, first = reference
    again = run_front(home)
    assert round_fingerprint(home) == first
    with instance_at(home) as instance:
        assert {r.run_id for r in instance.get_runs()} >= {again["run_id"]}
        assert len(instance.get_runs()) == 2


@pytest.mark.slow  # a front run is 20-60 s here
def test_a_run_worker_killed_mid_asset_is_rerun_without_duplicates_or_partial_rows(tmp_path, reference):
    home = tmp_path / "home"
    worker = start_front(home)
    # The deterministic point: candidate_tasks has started and written bundles
    # to disk, but not its rows (those go in at the end, in one transaction).
    run_id = wait_for("candidate_tasks to start", lambda: step_started(home, "candidate_tasks"), worker)
    tasks_dir = home / "rounds" / ROUND / "tasks"
    wait_for("three bundles on disk", lambda: tasks_dir.exists() and len(list(tasks_dir.iterdir())) >= 3, worker)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL

    with instance_at(home) as instance:
        materialized = {e.step_key for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)}
        assert "candidate_tasks" not in materialized, "the kill landed after candidate_tasks finished"
        assert {"capability_catalog", "synthesis_plan", "task_generators"} <= materialized
        # Nothing on a laptop marks the dead run (no run monitoring for a run
        # executed in process): it still reads as started.
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
    killed = round_fingerprint(home)
    assert killed["tasks"][0] == 0 and killed["agent_free_validations"][0] == 0  # no half-written rows
    assert killed["generators"] == reference[1]["generators"]  # committed before the kill, kept

    rerun = run_front(home)
    assert round_fingerprint(home) == reference[1]
    with instance_at(home) as instance:
        dead = instance.get_run_by_id(run_id)
        # The rerun took the warehouse's run lock from the dead worker and said so.
        assert dead.status == dg.DagsterRunStatus.FAILURE
        [failure] = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "died holding the warehouse run lock" in failure.message and rerun["run_id"] in failure.message


@pytest.mark.slow  # a front run is 20-60 s here
def test_two_runs_at_once_one_is_refused_and_nothing_corrupts(tmp_path, reference):
    home = tmp_path / "home"
    # The first run holds at its first sandboxed command until the second is
    # done: however fast the front gets, the two overlap.
    gate = tmp_path / "release-the-first-run"
    first = start_front(home, gate=gate)
    # The second starts once the first is under way (writing its generators).
    first_run = wait_for("the first run's task_generators", lambda: step_started(home, "task_generators"), first)
    second = finish(start_front(home))
    assert not second["success"], f"both runs wrote the warehouse at once (the first still running: {first.poll() is None})"
    assert first.poll() is None, "the first run ended before the second was refused: nothing was concurrent"
    assert f"is in use by run {first_run} ({ROUND}, pid {first.pid}" in second["why"], second["why"]
    gate.touch()
    winner = finish(first)
    assert winner["success"], winner["why"]
    assert round_fingerprint(home) == reference[1]
    assert (home / "warehouse.duckdb.run.lock").read_text() == ""  # released: the next run may start
    with instance_at(home) as instance:
        # Its resources start once per run: the lock spanned every step.
        assert len(instance.all_logs(winner["run_id"], of_type=dg.DagsterEventType.RESOURCE_INIT_STARTED)) == 1
        refused = instance.get_run_by_id(second["run_id"])
        assert refused.status == dg.DagsterRunStatus.FAILURE
        assert not instance.all_logs(second["run_id"], of_type=dg.DagsterEventType.STEP_START)  # it wrote nothing


# Writes a committed batch, then replaces round-0002's rows with a large batch
# (past DuckDB's row group size: written to the file before COMMIT) and stops
# after its INSERT, before COMMIT (the real connection, wrapped), for the
# parent to kill -9 inside the transaction.
TRANSACTION_WORKER = """
import sys, time
from contextlib import contextmanager
from resources.warehouse import DuckDBWarehouse, table_frame

def splits(key, n, prefix):
    return table_frame("task_splits", [{"round": key, "task_id": f"{prefix}{i:07d}", "split": "train"} for i in range(n)])

class PausingConnection:
    def __init__(self, con):
        self._con = con
        con.execute("SET python_scan_all_frames=true")  # the replacement scan finds the caller's frame
    def execute(self, sql, *args):
        result = self._con.execute(sql, *args)
        if sql.startswith("INSERT INTO"):  # the batch is in; COMMIT is next
            print("INSIDE", flush=True)
            time.sleep(600)
        return result
    def __getattr__(self, name):
        return getattr(self._con, name)

class PausingWarehouse(DuckDBWarehouse):
    @contextmanager
    def connect(self, read_only=False):
        with super().connect(read_only) as con:
            yield PausingConnection(con)

path = sys.argv[1]
warehouse = DuckDBWarehouse(path=path)
warehouse.replace("task_splits", splits("round-0001", 100, "kept"), {"round": "round-0001"})
warehouse.replace("task_splits", splits("round-0002", 50, "old"), {"round": "round-0002"})
print("COMMITTED", flush=True)
PausingWarehouse(path=path).replace("task_splits", splits("round-0002", 300_000, "new"), {"round": "round-0002"})
"""


def test_a_write_killed_inside_its_transaction_leaves_only_committed_rows(tmp_path):
    path = tmp_path / "warehouse.duckdb"
    worker = subprocess.Popen([sys.executable, "-c", TRANSACTION_WORKER, str(path)], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in worker.stdout:  # blocks until the worker reaches the point
        seen.append(line.strip())
        if line.strip() == "INSIDE":
            break
    assert seen[-2:] == ["COMMITTED", "INSIDE"], "\n".join(seen)[-3000:]
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)

    with duckdb.connect(str(path)) as con:  # the file opens, and replays its log
        counts = dict(con.sql("SELECT round, count(*) FROM task_splits GROUP BY round").fetchall())
        prefixes = {r[0] for r in con.sql("SELECT DISTINCT regexp_extract(task_id, '^[a-z]+') FROM task_splits").fetchall()}
    assert counts == {"round-0001": 100, "round-0002": 50}
    assert prefixes == {"kept", "old"}
    # And takes the next write.
    warehouse = DuckDBWarehouse(path=str(path))
    fresh = table_frame("task_splits", [{"round": "round-0002", "task_id": "fresh", "split": "heldout"}])
    warehouse.replace("task_splits", fresh, {"round": "round-0002"})
    assert warehouse.read("task_splits", {"round": "round-0002"})["task_id"].to_list() == ["fresh"]


def front_resources():
    return {"policy": EmbeddedPolicyModel(), "sandbox": BubblewrapSandbox(), "warehouse": DuckDBWarehouse(),
            "training_launcher": SubprocessTrainingLauncher(), "loop": LoopConfig(candidates_per_round=13)}


def test_a_backfill_out_of_order_refuses_later_rounds_and_round_one_needs_no_upstream(clawloop_home):
    # A backfill over round partitions launches one run per round, in no order
    # Dagster guarantees (dynamic partitions have no self-dependency): here the
    # worst, round 3, then 2, then 1, up to the plan and the generators.
    warehouse = DuckDBWarehouse()
    selection = dg.AssetSelection.assets("task_generators").upstream()
    results = {}
    with dg.DagsterInstance.ephemeral() as instance:
        keys = ["round-0003", "round-0002", "round-0001"]
        instance.add_dynamic_partitions("rounds", keys)
        for key in keys:
            results[key] = dg.materialize(round_assets, partition_key=key, instance=instance, selection=selection,
                                          resources=front_resources(), raise_on_error=False)
    for key, upstream in [("round-0003", "round-0002"), ("round-0002", "round-0001")]:
        assert not results[key].success
        assert f"{upstream} has not completed" in why_stopped(results[key]), why_stopped(results[key])
        for table in ("synthesis_plans", "generators"):  # the refusal wrote nothing past the catalogs
            assert warehouse.read(table, {"round": key}).is_empty(), (key, table)
    first = results["round-0001"]
    assert first.success, why_stopped(first)
    [plan] = first.asset_materializations_for_node("synthesis_plan")
    assert plan.metadata["upstream_round"].value.startswith("none")
    rows = warehouse.read("synthesis_plans", {"round": "round-0001"})
    assert rows.height >= 1 and rows["source_round"].is_null().all()


def test_the_run_lock_refuses_another_run_and_lets_the_same_runs_steps_through(tmp_path):
    database = tmp_path / "warehouse.duckdb"
    held = acquire_run_lock(database, "run-a", "round-0001")
    with pytest.raises(RunLockHeld, match="in use by run run-a \\(round-0001"):
        acquire_run_lock(database, "run-b", "round-0002")
    # A second step process of run-a (multiprocess executor) goes through.
    sibling = acquire_run_lock(database, "run-a", "round-0001")
    assert sibling.handle is None
    sibling.release()  # lets go of nothing: run-a still holds the warehouse
    with pytest.raises(RunLockHeld):
        acquire_run_lock(database, "run-b", "round-0002")
    held.release()
    acquire_run_lock(database, "run-b", "round-0002").release()
