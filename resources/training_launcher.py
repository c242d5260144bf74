"""The training launcher: runs an SFT or GRPO job (`training_jobs/`) as a
Dagster Pipes process and returns the metadata it reported. A local subprocess
here; Docker / K8s launchers on GPU nodes implement the same `launch`."""

from __future__ import annotations

import sys
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.errors import (
    DagsterPipesExecutionError,  # not re-exported at the top level
)
from pydantic import Field

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_JOBS = ("sft", "grpo")
STDERR_TAIL_CHARS = 4000


class TrainingJobError(RuntimeError):
    """A training job exited non-zero or reported no materialization."""


class TrainingLauncher(dg.ConfigurableResource, ABC):
    """Where SFT and GRPO jobs run."""

    @abstractmethod
    def launch(self, context: dg.AssetExecutionContext, job: str, config: dict[str, Any]) -> dict[str, Any]:
        """Run `training_jobs.<job>` with `config` (the job's JSON config) and
        return the metadata of the materialization the job reported."""


def check_job_name(job: str) -> str:
    if job not in TRAINING_JOBS:
        raise ValueError(f"unknown training job {job!r}; expected one of {TRAINING_JOBS}")
    return job


def reported_metadata(invocation: dg.PipesClientCompletedInvocation) -> dict[str, Any]:
    """The job's `report_asset_materialization` metadata as plain values."""
    result = invocation.get_materialize_result(implicit_materialization=False)
    return {key: value.value for key, value in (result.metadata or {}).items()}


class SubprocessTrainingLauncher(TrainingLauncher):
    """Runs the job as `python -m training_jobs.<job>` on this machine, in the
    repository root, through `PipesSubprocessClient`."""

    torch_threads: int = Field(default=2, description="Threads for the job process (OMP_NUM_THREADS, torch_threads) unless its config sets torch_threads.")

    def launch(self, context: dg.AssetExecutionContext, job: str, config: dict[str, Any]) -> dict[str, Any]:
        module = f"training_jobs.{check_job_name(job)}"
        threads = int(config.get("torch_threads", self.torch_threads))
        env = {
            # OpenMP spin-waiting collapses throughput on shared cores (a step
            # went from 5 s to 61 s); it must be set before the process starts.
            "OMP_WAIT_POLICY": "PASSIVE",
            "OMP_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
        }
        with tempfile.TemporaryDirectory(prefix=f"clawloop-{job}-") as tmp:
            stderr_log = Path(tmp) / "stderr.log"
            # stderr goes to a file so a failure can quote it (PipesSubprocessClient
            # only forwards stdio, and its unforwarded mode never drains the pipes).
            # `exec` keeps the job as the direct child, so termination reaches it.
            command = ["/bin/sh", "-c", 'exec "$@" 2>"$0"', str(stderr_log), sys.executable, "-m", module]
            client = dg.PipesSubprocessClient(cwd=str(REPO_ROOT), env=env)
            try:
                invocation = client.run(context=context, command=command, extras={**config, "torch_threads": threads})
            except DagsterPipesExecutionError as exc:
                raise TrainingJobError(f"{module} failed ({exc}); end of its stderr:\n{_tail(stderr_log)}") from exc
            finally:
                if stderr_log.exists() and stderr_log.stat().st_size:
                    context.log.debug(f"{module} stderr:\n{_tail(stderr_log)}")
            try:
                return reported_metadata(invocation)
            except Exception as exc:
                raise TrainingJobError(f"{module} exited 0 but reported no materialization; end of its stderr:\n{_tail(stderr_log)}") from exc


def _tail(path: Path) -> str:
    if not path.exists():
        return "(no stderr captured)"
    text = path.read_text(errors="replace")
    return text[-STDERR_TAIL_CHARS:] if text.strip() else "(stderr was empty)"
