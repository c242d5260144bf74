"""The one Definitions of the ClawLoop code location."""

from __future__ import annotations

import os

import dagster as dg

from clawloop_assets import checks
from clawloop_assets.assets import diagnosis, synthesis, training, validation
from clawloop_assets.loop_config import LoopConfig
from resources.embedded_policy import EmbeddedPolicyModel
from resources.sandbox import BubblewrapSandbox
from resources.training_launcher import SubprocessTrainingLauncher
from resources.warehouse import DuckDBWarehouse

round_assets = dg.load_assets_from_modules([synthesis, validation, training, diagnosis])
gate_checks = dg.load_asset_checks_from_modules([checks])

round_job = dg.define_asset_job(
    "round_job",
    selection=dg.AssetSelection.all(),
    description="One whole round of the loop: synthesize, validate, admit, train, diagnose.",
)

# One dict per profile, picked by one environment variable; production
# backends (vLLM, Docker, K8s) slot in here without touching an asset.
RESOURCES_LAPTOP = {
    "policy": EmbeddedPolicyModel(),
    "sandbox": BubblewrapSandbox(),
    "warehouse": DuckDBWarehouse(),
    "training_launcher": SubprocessTrainingLauncher(),
    "loop": LoopConfig(),
}
RESOURCES_BY_PROFILE = {"laptop": RESOURCES_LAPTOP}


def resources_for(profile: str) -> dict:
    if profile not in RESOURCES_BY_PROFILE:
        raise ValueError(f"CLAWLOOP_PROFILE={profile!r} is unknown; choose one of {sorted(RESOURCES_BY_PROFILE)}")
    return RESOURCES_BY_PROFILE[profile]


defs = dg.Definitions(
    assets=round_assets,
    asset_checks=gate_checks,
    jobs=[round_job],
    resources=resources_for(os.environ.get("CLAWLOOP_PROFILE", "laptop")),
    # DuckDB takes one writer process: run a round's steps in one process.
    executor=dg.in_process_executor,
)
