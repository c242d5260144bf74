"""The one Definitions of the ClawLoop code location."""

from __future__ import annotations

import dagster as dg

from clawloop_assets.assets import checks, diagnosis, domains, evaluation, synthesis, training, validation
from clawloop_assets.assets.common import ROLLOUTS_POOL, WAREHOUSE_WRITER_POOL
from clawloop_assets.console import clawloop_console
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.schedules import nightly_round_schedule
from resources.embedded_policy import EmbeddedPolicyModel
from resources.environment import (
    POLICY,
    POLICY_URL,
    PROFILE,
    SANDBOX,
    TRAINING_LAUNCHER,
    check_profile,
    read_environment,
)
from resources.openai_policy import OpenAICompatiblePolicyModel
from resources.sandbox import BubblewrapSandbox, DockerSandbox
from resources.training_launcher import (
    DockerTrainingLauncher,
    K8sTrainingLauncher,
    SubprocessTrainingLauncher,
)
from resources.warehouse import DuckDBWarehouse

round_assets = dg.load_assets_from_modules([synthesis, domains, validation, training, evaluation, diagnosis])
gate_checks = dg.load_asset_checks_from_modules([checks])

round_job = dg.define_asset_job(
    "round_job",
    selection=dg.AssetSelection.all(),
    description="One whole round of the loop: synthesize, validate, admit, train, diagnose.",
)

# The backends, each chosen by one environment variable (its name, default
# and choices are in resources/environment.py): the round's assets see only
# the Sandbox and PolicyModel interfaces.
SANDBOX_BACKENDS = {"bubblewrap": BubblewrapSandbox, "docker": DockerSandbox}
# "openai": any OpenAI-compatible server at $CLAWLOOP_POLICY_URL (a vLLM
# server; `clawloop run --policy vllm` starts one here and sets the URL).
POLICY_BACKENDS = {"embedded": EmbeddedPolicyModel, "openai": OpenAICompatiblePolicyModel}
# Where training jobs run: here, in the trainer image on this Docker engine
# (`make trainer-image`), or as pods on GPU nodes.
TRAINING_LAUNCHERS = {"subprocess": SubprocessTrainingLauncher, "docker": DockerTrainingLauncher, "k8s": K8sTrainingLauncher}


# CLAWLOOP_PROFILE selects a whole setup. "laptop" (the default): the SQLite
# instance of dagster.yaml, steps in one process, the nightly schedule off.
# "production": the Postgres instance and K8s run launcher of
# dagster.production.yaml, steps in parallel under its concurrency pools, the
# schedule on. Each profile has its backends (environment.DEFAULT_BACKENDS);
# the backend variables override them one by one.
INSTANCE_YAML_BY_PROFILE = {"laptop": "dagster.yaml", "production": "dagster.production.yaml"}


def current_profile() -> str:
    return read_environment().profile


def _training_launcher(profile: str):
    environment = read_environment()
    name = environment.backend(TRAINING_LAUNCHER, profile)
    if name != "k8s":
        return TRAINING_LAUNCHERS[name]()
    # Training pods go where the run pods go unless told otherwise; the
    # trainer image must come from a registry the GPU nodes can pull from.
    return K8sTrainingLauncher(**environment.trainer_pods)


def resources_for(profile: str) -> dict:
    """The resources of a profile: its backends, unless a backend variable
    names another."""
    environment = read_environment()
    policy_name = environment.backend(POLICY, check_profile(profile))
    if profile == "production" and policy_name == "openai" and not environment.policy_url:
        # Fail when the code location loads, not in the middle of a nightly round.
        raise ValueError(f"{PROFILE}=production serves the policy from an OpenAI-compatible server: "
                         f"set {POLICY_URL} to its base URL (e.g. http://vllm.clawloop.svc:8000/v1)")
    return {
        "policy": POLICY_BACKENDS[policy_name](),
        "sandbox": SANDBOX_BACKENDS[environment.backend(SANDBOX, profile)](),
        "warehouse": DuckDBWarehouse(),
        "training_launcher": _training_launcher(profile),
        "loop": LoopConfig(),
    }


def executor_for(profile: str) -> dg.ExecutorDefinition:
    if check_profile(profile) == "laptop":
        # DuckDB takes one writer process, and the embedded model lives in
        # the process: run a round's steps in one process.
        return dg.in_process_executor
    # Each step a process of the run's pod: a rollout step runs beside
    # training, while the pools keep the warehouse to one writer step.
    return dg.multiprocess_executor


def pool_limits() -> dict[str, int]:
    """The production profile's pool limits: one warehouse writer, and
    $CLAWLOOP_ROLLOUT_POOL_LIMIT rollout steps."""
    return {WAREHOUSE_WRITER_POOL: 1, ROLLOUTS_POOL: read_environment().rollout_pool_limit}


def apply_pool_limits(instance: dg.DagsterInstance) -> dict[str, int]:
    """Write the pool limits into the instance (as `dagster instance
    concurrency set` does): a pool's limit lives in its storage, not in
    dagster.yaml, which only holds the default for pools without one."""
    limits = pool_limits()
    for pool, limit in limits.items():
        instance.event_log_storage.set_concurrency_slots(pool, limit)
    return limits


def definitions_for(profile: str) -> dg.Definitions:
    return dg.Definitions(
        assets=round_assets,
        asset_checks=gate_checks,
        jobs=[round_job],
        schedules=[nightly_round_schedule(profile)],
        resources=resources_for(profile),
        executor=executor_for(profile),
        # Dagster's console logger stays the launchpad's default; clawloop run uses its own.
        loggers={"console": dg.colored_console_logger, "clawloop_console": clawloop_console},
    )


defs = definitions_for(current_profile())


def round_job_def() -> dg.JobDefinition:
    """round_job of the profile $CLAWLOOP_PROFILE names now (not when this
    module was imported), for `dg.reconstructable`: each step process of the
    multiprocess executor rebuilds it from here."""
    return definitions_for(current_profile()).resolve_job_def("round_job")
