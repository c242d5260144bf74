"""The one Definitions of the ClawLoop code location."""

from __future__ import annotations

import os

import dagster as dg

from clawloop_assets import checks
from clawloop_assets.assets import diagnosis, domains, synthesis, training, validation
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.schedules import nightly_round_schedule
from resources.embedded_policy import EmbeddedPolicyModel
from resources.openai_policy import OpenAICompatiblePolicyModel
from resources.sandbox import BubblewrapSandbox, DockerSandbox
from resources.training_launcher import (
    DockerTrainingLauncher,
    K8sTrainingLauncher,
    SubprocessTrainingLauncher,
)
from resources.warehouse import DuckDBWarehouse

round_assets = dg.load_assets_from_modules([synthesis, domains, validation, training, diagnosis])
gate_checks = dg.load_asset_checks_from_modules([checks])

round_job = dg.define_asset_job(
    "round_job",
    selection=dg.AssetSelection.all(),
    description="One whole round of the loop: synthesize, validate, admit, train, diagnose.",
)

# The backends, each chosen by one environment variable: the round's assets
# see only the Sandbox and PolicyModel interfaces.
SANDBOX_BACKENDS = {"bubblewrap": BubblewrapSandbox, "docker": DockerSandbox}
# "openai": any OpenAI-compatible server at $CLAWLOOP_POLICY_URL (a vLLM
# server; `clawloop run --policy vllm` starts one here and sets the URL).
POLICY_BACKENDS = {"embedded": EmbeddedPolicyModel, "openai": OpenAICompatiblePolicyModel}
# Where training jobs run: here, in the trainer image on this Docker engine
# (`make trainer-image`), or as pods on GPU nodes.
TRAINING_LAUNCHERS = {"subprocess": SubprocessTrainingLauncher, "docker": DockerTrainingLauncher, "k8s": K8sTrainingLauncher}


def _backend(variable: str, choices: dict, default: str):
    name = os.environ.get(variable, default)
    if name not in choices:
        raise ValueError(f"{variable}={name!r} is unknown; choose one of {sorted(choices)}")
    return choices[name]()


def resources_for(profile: str) -> dict:
    """The resources of a profile; only "laptop" for now."""
    if profile != "laptop":
        raise ValueError(f"CLAWLOOP_PROFILE={profile!r} is unknown; choose one of ['laptop']")
    return {
        "policy": _backend("CLAWLOOP_POLICY", POLICY_BACKENDS, "embedded"),
        "sandbox": _backend("CLAWLOOP_SANDBOX", SANDBOX_BACKENDS, "bubblewrap"),
        "warehouse": DuckDBWarehouse(),
        "training_launcher": _backend("CLAWLOOP_TRAINING_LAUNCHER", TRAINING_LAUNCHERS, "subprocess"),
        "loop": LoopConfig(),
    }


defs = dg.Definitions(
    assets=round_assets,
    asset_checks=gate_checks,
    jobs=[round_job],
    schedules=[nightly_round_schedule(os.environ.get("CLAWLOOP_PROFILE", "laptop"))],
    resources=resources_for(os.environ.get("CLAWLOOP_PROFILE", "laptop")),
    # DuckDB takes one writer process: run a round's steps in one process.
    executor=dg.in_process_executor,
)
