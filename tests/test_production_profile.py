"""The production profile (CLAWLOOP_PROFILE=production): its Dagster instance
on a real PostgreSQL server started here, runs and events read back from
Postgres, the concurrency pools (one warehouse writer across step processes),
run retries and monitoring, the profile's definitions; and the laptop profile
unchanged.

There is no Kubernetes cluster here: the K8s run launcher is built from the
production config through Dagster's own rehydration and dagster-k8s's schema,
and the run worker's Job manifest is constructed, but nothing is submitted.

The Postgres tests fail, naming the install command, when the server
binaries (initdb, pg_ctl) are missing: `make test` installs them."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import yaml
from conftest import closed_port

from clawloop_assets.assets.common import ROLLOUTS_POOL, WAREHOUSE_WRITER_POOL
from clawloop_assets.assets.synthesis import capability_catalog, domain_catalog, synthesis_plan
from clawloop_assets.cli import REPO_ROOT, prepare_dagster_home
from clawloop_assets.definitions import (
    INSTANCE_YAML_BY_PROFILE,
    definitions_for,
    executor_for,
    resources_for,
    round_assets,
    round_job_def,
)
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.schedules import NIGHTLY_STATUS_BY_PROFILE, nightly_default_status
from resources.environment import DEFAULT_BACKENDS
from resources.openai_policy import OpenAICompatiblePolicyModel
from resources.sandbox import BubblewrapSandbox, DockerSandbox
from resources.training_launcher import K8sTrainingLauncher
from resources.warehouse import DuckDBWarehouse

PRODUCTION_YAML = REPO_ROOT / "dagster.production.yaml"
LAPTOP_YAML = REPO_ROOT / "dagster.yaml"
PG_USER, PG_PASSWORD = "clawloop", "clawloop-test-password"
# The run launcher's deployment settings, as a cluster's env ConfigMap would give them.
K8S_ENV = {
    "CLAWLOOP_K8S_NAMESPACE": "clawloop",
    "CLAWLOOP_K8S_IMAGE": "registry.example.com/clawloop:2026-11-30",
    "CLAWLOOP_K8S_SERVICE_ACCOUNT": "clawloop-runner",
    "CLAWLOOP_K8S_INSTANCE_CONFIG_MAP": "clawloop-instance",
    "CLAWLOOP_K8S_POSTGRES_SECRET": "clawloop-postgres",
    "CLAWLOOP_K8S_ENV_CONFIG_MAP": "clawloop-env",
    "CLAWLOOP_K8S_ENV_SECRET": "clawloop-secrets",
}
CHEAP_ASSETS = [capability_catalog, domain_catalog, synthesis_plan]  # model-free, sandbox-free


def _postgres_bin_dir() -> Path | None:
    override = os.environ.get("CLAWLOOP_PG_BIN")
    if override:
        return Path(override)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _missing_postgres(reason: str):
    """`make test` installs PostgreSQL (`make postgres-backend`): a missing one fails, never skips."""
    pytest.fail(f"{reason}; `make postgres-backend` installs it")


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server on a loopback port, password auth, for
    this session; its connection settings."""
    bin_dir = _postgres_bin_dir()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        _missing_postgres("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql "
                          "or set CLAWLOOP_PG_BIN to their directory")
    # The server refuses to run as root: as root, run it as the `postgres` user.
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="clawloop-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
            _missing_postgres("running as root, and there is no `postgres` user (or no runuser) to run the server as")
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    password_file = root / "password"
    password_file.write_text(PG_PASSWORD)
    if as_user:
        shutil.chown(password_file, "postgres")
    port = closed_port()
    data = root / "data"
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={password_file}",
                    "--auth=scram-sha-256", "-E", "UTF8"], check=True, capture_output=True)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
    started = subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w",
                              "-o", options, "start"], capture_output=True, text=True)
    if started.returncode:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        pytest.fail(f"PostgreSQL did not start: {started.stdout}{started.stderr}{log}")
    try:
        yield {"host": "127.0.0.1", "port": port, "user": PG_USER, "password": PG_PASSWORD}
    finally:
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _admin(server: dict, statement: str) -> None:
    connection = psycopg2.connect(dbname="postgres", **server)
    try:
        connection.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


@pytest.fixture
def dagster_database(postgres_server, monkeypatch):
    """A fresh database for one test's Dagster instance, named to the
    instance through the DAGSTER_PG_* variables."""
    name = f"dagster_{uuid.uuid4().hex[:12]}"
    _admin(postgres_server, f"CREATE DATABASE {name}")
    env = {"DAGSTER_PG_HOST": postgres_server["host"], "DAGSTER_PG_PORT": str(postgres_server["port"]),
           "DAGSTER_PG_USERNAME": postgres_server["user"], "DAGSTER_PG_PASSWORD": postgres_server["password"],
           "DAGSTER_PG_DB": name}
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    yield {**postgres_server, "dbname": name}
    _admin(postgres_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def production_env(clawloop_home, monkeypatch):
    """CLAWLOOP_PROFILE=production with its backend settings; $DAGSTER_HOME
    under the throwaway home (set through monkeypatch, so that what
    prepare_dagster_home writes there is undone after the test)."""
    monkeypatch.setenv("CLAWLOOP_PROFILE", "production")
    monkeypatch.setenv("DAGSTER_HOME", str(clawloop_home / "dagster"))
    monkeypatch.setenv("CLAWLOOP_POLICY_URL", f"http://127.0.0.1:{closed_port()}/v1")  # never called here
    for variable in ("CLAWLOOP_POLICY", "CLAWLOOP_SANDBOX", "CLAWLOOP_TRAINING_LAUNCHER", "CLAWLOOP_ROLLOUT_POOL_LIMIT"):
        monkeypatch.delenv(variable, raising=False)
    return clawloop_home


def _add_round(instance: dg.DagsterInstance, key: str) -> None:
    if not instance.has_dynamic_partition("rounds", key):
        instance.add_dynamic_partitions("rounds", [key])


# --- The instance, on Postgres ---


def test_runs_and_events_of_a_round_are_stored_in_postgres(production_env, dagster_database):
    home = prepare_dagster_home()
    assert (home / "dagster.yaml").read_bytes() == PRODUCTION_YAML.read_bytes()
    key = "round-0001"
    with dg.DagsterInstance.get() as instance:
        assert [type(s).__name__ for s in (instance.run_storage, instance.event_log_storage, instance.schedule_storage)] \
            == ["PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage"]
        _add_round(instance, key)
        result = dg.materialize(CHEAP_ASSETS, partition_key=key, instance=instance,
                                resources={"warehouse": DuckDBWarehouse(), "loop": LoopConfig()})
        assert result.success
    assert DuckDBWarehouse().read("capabilities", {"round": key}).height > 0

    # A second instance from the same file (another process would see the same) reads the run back.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(result.run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags["dagster/partition"] == key
        for asset in CHEAP_ASSETS:
            event = instance.get_latest_materialization_event(asset.key)
            assert event.run_id == result.run_id and event.dagster_event.partition == key
    # And Postgres itself holds them: no SQLite file stands in.
    connection = psycopg2.connect(**dagster_database)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM runs WHERE run_id = %s", (result.run_id,))
            assert cursor.fetchall() == [("SUCCESS",)]
            cursor.execute("SELECT asset_key FROM event_logs WHERE run_id = %s AND dagster_event_type = "
                           "'ASSET_MATERIALIZATION' ORDER BY asset_key", (result.run_id,))
            assert [row[0] for row in cursor.fetchall()] == sorted(a.key.to_string() for a in CHEAP_ASSETS)
    finally:
        connection.close()
    assert not list(home.rglob("*.db"))


def test_pools_retries_and_monitoring_are_on(production_env, dagster_database, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_ROLLOUT_POOL_LIMIT", "3")
    prepare_dagster_home()
    with dg.DagsterInstance.get() as instance:
        limits = {p.name: (p.limit, p.from_default) for p in instance.event_log_storage.get_pool_limits()}
        assert limits == {WAREHOUSE_WRITER_POOL: (1, False), ROLLOUTS_POOL: (3, False)}
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 1  # any other pool: one step at a time
        assert concurrency.pool_config.pool_granularity.value == "op"
        assert concurrency.run_queue_config.max_concurrent_runs == 1
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
        assert not instance.run_retries_retry_on_asset_or_op_failure  # a failed gate is not retried
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 600
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 300
    # The limit follows the variable on the next setup.
    monkeypatch.setenv("CLAWLOOP_ROLLOUT_POOL_LIMIT", "5")
    prepare_dagster_home()
    with dg.DagsterInstance.get() as instance:
        assert instance.event_log_storage.get_concurrency_info(ROLLOUTS_POOL).slot_count == 5
    for bad in ("0", "many"):
        monkeypatch.setenv("CLAWLOOP_ROLLOUT_POOL_LIMIT", bad)
        with pytest.raises(ValueError, match=f"CLAWLOOP_ROLLOUT_POOL_LIMIT='{bad}' must be a whole number"):
            prepare_dagster_home()


@pytest.mark.slow
def test_step_processes_take_turns_at_the_warehouse(production_env, dagster_database):
    """The production executor runs each step in its own process. Without the
    pool, capability_catalog and domain_catalog (no dependency between them)
    would start together; the `warehouse_writer` pool makes one wait. (Only
    those two run: each step process imports the definitions anew.)"""
    independent_writers = [capability_catalog, domain_catalog]
    home = prepare_dagster_home()
    key = "round-0001"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        _add_round(instance, key)
        # Each step process rebuilds round_job from the production definitions.
        result = dg.execute_job(dg.reconstructable(round_job_def), instance, tags={"dagster/partition": key},
                                asset_selection=[a.key for a in independent_writers])
        assert result.success
        records = instance.get_records_for_run(result.run_id).records
    events = [r.event_log_entry for r in records if r.event_log_entry.dagster_event]
    assert any(e.dagster_event.event_type_value == "ENGINE_EVENT" and "multiprocess executor" in e.message
               for e in events)
    blocked = [e.step_key for e in events
               if f"blocked by limit for pool {WAREHOUSE_WRITER_POOL}" in (e.message or "")]
    assert blocked, "no step waited for the warehouse_writer pool"
    spans = {}
    for e in events:
        kind = e.dagster_event.event_type_value
        if kind in ("STEP_START", "STEP_SUCCESS"):
            spans.setdefault(e.step_key, {})[kind] = e.timestamp
    assert set(spans) == {a.key.to_user_string() for a in independent_writers}
    ordered = sorted(spans.values(), key=lambda s: s["STEP_START"])
    for earlier, later in zip(ordered, ordered[1:]):
        assert earlier["STEP_SUCCESS"] <= later["STEP_START"], f"two warehouse writers at once: {spans}"


def test_switching_profiles_replaces_the_shipped_instance_file(production_env, dagster_database, monkeypatch):
    monkeypatch.delenv("CLAWLOOP_PROFILE")
    home = prepare_dagster_home()
    assert (home / "dagster.yaml").read_bytes() == LAPTOP_YAML.read_bytes()
    monkeypatch.setenv("CLAWLOOP_PROFILE", "production")
    prepare_dagster_home()
    assert (home / "dagster.yaml").read_bytes() == PRODUCTION_YAML.read_bytes()


def test_an_edited_laptop_instance_is_kept_and_production_refuses_it(production_env, monkeypatch):
    """No server needed: the edited file never names Postgres."""
    for variable in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        monkeypatch.setenv(variable, "unused")
    home = production_env / "dagster"
    home.mkdir(parents=True)
    edited = LAPTOP_YAML.read_text() + "\n# edited by hand\n"
    (home / "dagster.yaml").write_text(edited)
    with pytest.raises(SystemExit, match="stores runs in SqliteRunStorage, not Postgres: it was edited by hand"):
        prepare_dagster_home()
    assert (home / "dagster.yaml").read_text() == edited


def test_production_names_the_missing_postgres_settings(production_env, monkeypatch):
    for variable in ("DAGSTER_PG_HOST", "DAGSTER_PG_PASSWORD"):
        monkeypatch.delenv(variable, raising=False)
    for variable in ("DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_DB"):
        monkeypatch.setenv(variable, "x")
    with pytest.raises(SystemExit, match="set DAGSTER_PG_HOST, DAGSTER_PG_PASSWORD$"):
        prepare_dagster_home()


# --- The K8s run launcher (no cluster: config and manifest only) ---


def _run_launcher_data(**changes):
    from dagster._serdes.config_class import ConfigurableClassData

    launcher = yaml.safe_load(PRODUCTION_YAML.read_text())["run_launcher"]
    return ConfigurableClassData(launcher["module"], launcher["class"], yaml.safe_dump({**launcher["config"], **changes}))


def _kubeconfig(path: Path) -> Path:
    """A kubeconfig for a cluster that is not there (nothing is ever sent)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": f"https://127.0.0.1:{closed_port()}"}}],
        "users": [{"name": "none", "user": {"token": "unused"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    }))
    return path


def test_the_k8s_run_launcher_config_builds_the_run_worker_job(tmp_path, monkeypatch):
    from dagster._core.launcher import RunLauncher
    from dagster_k8s import K8sRunLauncher
    from dagster_k8s.job import construct_dagster_k8s_job

    for variable, value in K8S_ENV.items():
        monkeypatch.setenv(variable, value)
    # In a cluster the launcher loads the in-cluster config; here a kubeconfig stands in.
    data = _run_launcher_data(load_incluster_config=False, kubeconfig_file=str(_kubeconfig(tmp_path / "kubeconfig")))
    launcher = data.rehydrate(as_type=RunLauncher)  # validates against dagster-k8s's schema, then builds it
    assert isinstance(launcher, K8sRunLauncher)
    assert launcher.supports_check_run_worker_health  # what run monitoring relies on

    run = dg.DagsterRun(job_name="round_job", run_id=str(uuid.uuid4()))
    context = launcher.get_container_context_for_run(run)
    assert context.namespace == "clawloop"
    job = construct_dagster_k8s_job(job_config=context.get_k8s_job_config(job_image=None, run_launcher=launcher),
                                    args=["dagster", "api", "execute_run"], job_name="dagster-run-test",
                                    component="run_worker", user_defined_k8s_config=context.run_k8s_config)
    pod = job.spec.template.spec
    [container] = pod.containers
    assert container.image == K8S_ENV["CLAWLOOP_K8S_IMAGE"]
    assert pod.service_account_name == K8S_ENV["CLAWLOOP_K8S_SERVICE_ACCOUNT"]
    assert [(e.config_map_ref and e.config_map_ref.name, e.secret_ref and e.secret_ref.name) for e in container.env_from] \
        == [(K8S_ENV["CLAWLOOP_K8S_ENV_CONFIG_MAP"], None), (None, K8S_ENV["CLAWLOOP_K8S_ENV_SECRET"])]
    env = {e.name: e for e in container.env}
    assert env["DAGSTER_PG_PASSWORD"].value_from.secret_key_ref.name == K8S_ENV["CLAWLOOP_K8S_POSTGRES_SECRET"]
    assert env["CLAWLOOP_PROFILE"].value == "production"
    # The run pod mounts the training pods' volume where CLAWLOOP_HOME points.
    [mount] = container.volume_mounts
    [volume] = pod.volumes
    assert (mount.name, mount.mount_path) == (volume.name, env["CLAWLOOP_HOME"].value)
    assert volume.persistent_volume_claim.claim_name == K8sTrainingLauncher().volume_claim


def test_the_k8s_run_launcher_config_names_a_missing_setting(tmp_path, monkeypatch):
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.launcher import RunLauncher

    for variable, value in K8S_ENV.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("CLAWLOOP_K8S_IMAGE")
    data = _run_launcher_data(load_incluster_config=False, kubeconfig_file=str(_kubeconfig(tmp_path / "kubeconfig")))
    with pytest.raises(DagsterInvalidConfigError, match="CLAWLOOP_K8S_IMAGE"):
        data.rehydrate(as_type=RunLauncher)


# --- The definitions each profile selects ---


def test_the_production_definitions_resolve(production_env, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_K8S_NAMESPACE", "clawloop")
    monkeypatch.setenv("CLAWLOOP_K8S_SERVICE_ACCOUNT", "clawloop-trainer")
    monkeypatch.setenv("CLAWLOOP_TRAINER_IMAGE", "registry.example.com/clawloop-trainer:1")
    defs = definitions_for("production")
    job = defs.resolve_job_def("round_job")
    assert job.executor_def.name == "multiprocess"
    assert {"round_summary", "validation_rollouts", "policy_checkpoint"} <= {n.name for n in job.graph.node_defs}
    assert defs.resolve_schedule_def("nightly_round").default_status == dg.DefaultScheduleStatus.RUNNING
    resources = resources_for("production")
    assert isinstance(resources["policy"], OpenAICompatiblePolicyModel)
    assert isinstance(resources["sandbox"], DockerSandbox)
    launcher = resources["training_launcher"]
    assert isinstance(launcher, K8sTrainingLauncher)
    assert (launcher.namespace, launcher.service_account, launcher.image) \
        == ("clawloop", "clawloop-trainer", "registry.example.com/clawloop-trainer:1")
    # A backend variable still overrides the profile's choice.
    monkeypatch.setenv("CLAWLOOP_SANDBOX", "bubblewrap")
    assert isinstance(resources_for("production")["sandbox"], BubblewrapSandbox)
    # The policy server must be named before the code location loads.
    monkeypatch.delenv("CLAWLOOP_POLICY_URL")
    with pytest.raises(ValueError, match="set CLAWLOOP_POLICY_URL"):
        definitions_for("production")


def test_every_asset_carries_its_pool():
    """Rollout steps (the policy acting in the sandbox) share the `rollouts`
    pool; every other step writes the warehouse and takes the one
    `warehouse_writer` slot. No asset escapes both."""
    pools = {a.key.to_user_string(): a.op.pool for a in round_assets}
    for asset in round_assets:
        keys = asset.required_resource_keys
        assert "warehouse" in keys
        expected = ROLLOUTS_POOL if {"policy", "sandbox"} <= keys else WAREHOUSE_WRITER_POOL
        assert pools[asset.key.to_user_string()] == expected, asset.key
    assert {"validation_rollouts", "heldout_baseline_rollouts", "diagnosis_rollouts", "training_gain"} \
        <= {k for k, p in pools.items() if p == ROLLOUTS_POOL}


def test_the_laptop_profile_is_unchanged(clawloop_home, monkeypatch):
    monkeypatch.delenv("CLAWLOOP_PROFILE", raising=False)
    for variable in ("CLAWLOOP_POLICY", "CLAWLOOP_SANDBOX", "CLAWLOOP_TRAINING_LAUNCHER"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(clawloop_home / "dagster"))
    home = prepare_dagster_home()
    assert (home / "dagster.yaml").read_bytes() == LAPTOP_YAML.read_bytes()
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 1
        assert not instance.run_retries_enabled and not instance.run_monitoring_enabled
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
    defs = definitions_for("laptop")
    assert defs.resolve_job_def("round_job").executor_def.name == "in_process"
    assert defs.resolve_schedule_def("nightly_round").default_status == dg.DefaultScheduleStatus.STOPPED
    assert [type(r).__name__ for r in (resources_for("laptop")[k] for k in ("policy", "sandbox", "training_launcher"))] \
        == ["EmbeddedPolicyModel", "BubblewrapSandbox", "SubprocessTrainingLauncher"]


def test_the_profiles_agree_everywhere():
    assert set(INSTANCE_YAML_BY_PROFILE) == set(NIGHTLY_STATUS_BY_PROFILE) == set(DEFAULT_BACKENDS)
    for name in INSTANCE_YAML_BY_PROFILE.values():
        assert (REPO_ROOT / name).is_file()


def test_an_unknown_profile_errors_clearly(monkeypatch, clawloop_home):
    message = "CLAWLOOP_PROFILE='cloud' is unknown; choose one of ['laptop', 'production']"
    for call in (lambda: resources_for("cloud"), lambda: executor_for("cloud"), lambda: definitions_for("cloud"),
                 lambda: nightly_default_status("cloud")):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            call()
    monkeypatch.setenv("CLAWLOOP_PROFILE", "cloud")
    with pytest.raises(ValueError, match=r"CLAWLOOP_PROFILE='cloud' is unknown"):
        prepare_dagster_home()
    # What `dagster dev` or the code server would show: the code location fails to load, saying why.
    loaded = subprocess.run([sys.executable, "-c", "import clawloop_assets.definitions"], cwd=REPO_ROOT,
                            capture_output=True, text=True, env={**os.environ, "CLAWLOOP_PROFILE": "cloud"})
    assert loaded.returncode != 0
    assert message in loaded.stderr
