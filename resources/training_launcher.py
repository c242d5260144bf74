"""The training launcher: runs an SFT or GRPO job (`training_jobs/`) as a
Dagster Pipes process and returns the metadata it reported. Three places the
same `python -m training_jobs.<job>` runs: a local subprocess (laptop), a
container of the trainer image on this machine's Docker engine, and a pod on a
Kubernetes cluster (GPU nodes)."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.errors import (
    DagsterPipesExecutionError,  # not re-exported at the top level
)
from pydantic import Field

from resources.pipes_messages import WholeLineFileMessageReader

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINING_JOBS = ("sft", "grpo")
STDERR_TAIL_CHARS = 4000
# The job config's paths: read-only inputs and the checkpoint the job writes
# (atomically, through a temporary directory beside it, with its resumable
# state in `<output>.state` beside it too: so its whole parent is written).
INPUT_PATH_FIELDS = ("base_checkpoint", "examples", "reference_checkpoint")
OUTPUT_PATH_FIELD = "output_checkpoint"
TRAINER_IMAGE = "clawloop/trainer:latest"


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


def job_env(threads: int) -> dict[str, str]:
    return {
        # OpenMP spin-waiting collapses throughput on shared cores (a step
        # went from 5 s to 61 s); it must be set before the process starts.
        "OMP_WAIT_POLICY": "PASSIVE",
        "OMP_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
    }


def job_paths(config: dict[str, Any]) -> dict[str, Path]:
    """The config's path fields that are set, each required to be absolute: a
    container or pod sees them at the same place, never under the caller's cwd."""
    paths = {}
    for name in (*INPUT_PATH_FIELDS, OUTPUT_PATH_FIELD):
        value = config.get(name)
        if not value:
            continue
        path = Path(value)
        if not path.is_absolute():
            raise ValueError(f"{name}={value!r} is a relative path; give an absolute one (the job runs in a container)")
        paths[name] = Path(os.path.normpath(path))
    return paths


class SubprocessTrainingLauncher(TrainingLauncher):
    """Runs the job as `python -m training_jobs.<job>` on this machine, in the
    repository root, through `PipesSubprocessClient`."""

    torch_threads: int = Field(default=2, description="Threads for the job process (OMP_NUM_THREADS, torch_threads) unless its config sets torch_threads.")

    def launch(self, context: dg.AssetExecutionContext, job: str, config: dict[str, Any]) -> dict[str, Any]:
        module = f"training_jobs.{check_job_name(job)}"
        threads = int(config.get("torch_threads", self.torch_threads))
        env = job_env(threads)
        with tempfile.TemporaryDirectory(prefix=f"clawloop-{job}-") as tmp:
            stderr_log = Path(tmp) / "stderr.log"
            # stderr goes to a file so a failure can quote it (PipesSubprocessClient
            # only forwards stdio, and its unforwarded mode never drains the pipes).
            # `exec` keeps the job as the direct child, so termination reaches it.
            command = ["/bin/sh", "-c", 'exec "$@" 2>"$0"', str(stderr_log), sys.executable, "-m", module]
            client = dg.PipesSubprocessClient(
                cwd=str(REPO_ROOT), env=env, message_reader=WholeLineFileMessageReader(str(Path(tmp) / "messages.jsonl"))
            )
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


def _tail_text(text: str) -> str:
    return text[-STDERR_TAIL_CHARS:] if text.strip() else "(its output was empty)"


class DockerTrainingLauncher(TrainingLauncher):
    """Runs the job in a container of the trainer image (`make trainer-image`)
    on this machine's Docker engine, through `PipesDockerClient`.

    The config's paths hold inside the container: each input is bind-mounted
    read-only at its own path, the output checkpoint's directory read-write.
    The job runs as the caller's uid:gid (the checkpoint it writes is the
    caller's), on a read-only root with no capabilities and, by default, no
    network. Pipes context and messages go through files in a mounted
    directory, as with the subprocess launcher: Docker's log stream splits
    lines over 16 KiB, and a GRPO run's per-step metadata can be longer."""

    image: str = Field(default=TRAINER_IMAGE, description="The trainer image (sandbox_images/trainer).")
    gpus: int = Field(
        default=0,
        description="GPUs for the container (a device request to the nvidia driver; -1: all of them); 0 on CPU.",
    )
    torch_threads: int = Field(
        default=2,
        description="Threads for the job (OMP_NUM_THREADS, torch_threads) unless its config sets torch_threads.",
    )
    network: str = Field(default="none", description="Docker network mode; the job reads and writes only local files.")
    shm_size: str = Field(
        default="1g", description="Size of /dev/shm (PyTorch shares tensors through it; Docker's default is 64 MB)."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the job (CUDA or NCCL settings, say)."
    )

    def mounts_for(self, config: dict[str, Any], pipes_dir: str | Path) -> list[dict[str, Any]]:
        """Bind mounts (docker.types.Mount) that put every path of the job config,
        and the Pipes directory, at the same place in the container."""
        import docker.types

        writable: dict[Path, bool] = {Path(pipes_dir): True}
        paths = job_paths(config)
        output = paths.pop(OUTPUT_PATH_FIELD, None)
        if output is None:
            raise ValueError(f"{OUTPUT_PATH_FIELD} is required: set it to a path in the job config")
        for name, path in paths.items():
            if path == output or output in path.parents:
                raise ValueError(f"{name}={path} is (inside) output_checkpoint; the job would replace what it reads")
            # A missing input is left unmounted, so the job itself fails on it
            # with its own error (a checkpoint that does not exist) rather than
            # Docker with a bind-source error.
            if path.exists():
                writable.setdefault(path, False)
        writable[output.parent] = True  # also when an input is that very directory
        return [
            docker.types.Mount(target=str(path), source=str(path.resolve()), type="bind", read_only=not rw)
            for path, rw in sorted(writable.items())
        ]

    def container_kwargs(self, job: str, config: dict[str, Any], pipes_dir: str | Path, name: str) -> dict[str, Any]:
        """What `docker create` gets besides the image, command and environment."""
        import docker.types

        if self.gpus < -1:
            raise ValueError(f"gpus must be >= 0, or -1 for all of them; got {self.gpus}")
        kwargs: dict[str, Any] = {
            "name": name,
            "labels": {"clawloop.training-job": check_job_name(job)},
            "user": f"{os.getuid()}:{os.getgid()}",
            "mounts": self.mounts_for(config, pipes_dir),
            "network_mode": self.network,
            "read_only": True,
            "tmpfs": {"/tmp": ""},  # HOME (the image sets HOME=/tmp) and scratch
            "shm_size": self.shm_size,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "init": True,  # signals reach the job, so `docker stop` ends it at once
        }
        if self.gpus:
            gpus = docker.types.DeviceRequest(driver="nvidia", count=self.gpus, capabilities=[["gpu"]])
            kwargs["device_requests"] = [gpus]
        return kwargs

    def launch(self, context: dg.AssetExecutionContext, job: str, config: dict[str, Any]) -> dict[str, Any]:
        # Imported here: only this launcher needs the Docker client.
        import docker
        import docker.errors
        from dagster_docker import PipesDockerClient
        from dagster_pipes import DagsterPipesError

        module = f"training_jobs.{check_job_name(job)}"
        threads = int(config.get("torch_threads", self.torch_threads))
        name = f"clawloop-{job}-{uuid.uuid4().hex[:12]}"
        try:
            engine = docker.from_env()
            engine.ping()
        except docker.errors.DockerException as exc:
            raise TrainingJobError(
                f"the Docker engine is not reachable ({exc}); start it with `make docker-backend`"
            ) from exc
        try:
            engine.images.get(self.image)
            image_is_local = True
        except docker.errors.ImageNotFound:
            image_is_local = False  # PipesDockerClient pulls it: fine where a registry has it
        output = ""
        with tempfile.TemporaryDirectory(prefix=f"clawloop-{job}-pipes-") as pipes_dir:
            kwargs = self.container_kwargs(job, config, pipes_dir, name)
            Path(config[OUTPUT_PATH_FIELD]).parent.mkdir(parents=True, exist_ok=True)  # the mount's source
            client = PipesDockerClient(
                context_injector=dg.PipesFileContextInjector(os.path.join(pipes_dir, "context.json")),
                message_reader=WholeLineFileMessageReader(os.path.join(pipes_dir, "messages.jsonl")),
            )
            try:
                try:
                    invocation = client.run(
                        context=context,
                        image=self.image,
                        command=["python", "-m", module],
                        env={**job_env(threads), **self.env},
                        extras={**config, "torch_threads": threads},
                        container_kwargs=kwargs,
                    )
                finally:
                    # PipesDockerClient stops the container but leaves it; its
                    # output is the failure's evidence, then it goes.
                    output = _remove_container(engine, name)
                    if output.strip():
                        context.log.debug(f"{module} output ({self.image}):\n{_tail_text(output)}")
            except DagsterPipesError as exc:
                raise TrainingJobError(
                    f"{module} failed in {self.image} ({exc}); end of its output:\n{_tail_text(output)}"
                ) from exc
            except docker.errors.DockerException as exc:
                if not image_is_local:
                    raise TrainingJobError(
                        f"{self.image} is not on this Docker engine and pulling it failed ({exc}); build it with "
                        "`make trainer-image`, or push it to a registry this engine can pull from"
                    ) from exc
                raise TrainingJobError(f"Docker could not run {module} in {self.image}: {exc}") from exc
        try:
            return reported_metadata(invocation)
        except Exception as exc:
            raise TrainingJobError(
                f"{module} exited 0 in {self.image} but reported no materialization; "
                f"end of its output:\n{_tail_text(output)}"
            ) from exc


def _remove_container(engine, name: str) -> str:
    """The container's stdout and stderr, after which it is removed ("" if it was never created)."""
    import docker.errors

    try:
        container = engine.containers.get(name)
    except docker.errors.NotFound:
        return ""
    try:
        return container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)


class K8sTrainingLauncher(TrainingLauncher):
    """Runs the job as a pod of the trainer image on a Kubernetes cluster,
    through `PipesK8sClient`: GPU limits, node selector and tolerations from
    this config. The job's paths must lie on a PersistentVolumeClaim the pod
    mounts at the same path (where the orchestrator wrote them: by default
    $CLAWLOOP_HOME, which on a cluster is that shared volume)."""

    image: str = Field(default=TRAINER_IMAGE, description="The trainer image, as the cluster's nodes can pull it.")
    image_pull_policy: str = Field(default="IfNotPresent", description="Always, IfNotPresent or Never.")
    namespace: str | None = Field(
        default=None, description="Namespace of the pod; None: the current one in a cluster, else 'default'."
    )
    gpus: int = Field(default=1, description="GPUs per pod (the container's nvidia.com/gpu limit); 0 for a CPU pod.")
    cpu_request: str | None = Field(default=None, description="Container cpu request, e.g. '8'.")
    cpu_limit: str | None = Field(default=None, description="Container cpu limit.")
    memory_request: str | None = Field(default=None, description="Container memory request, e.g. '64Gi'.")
    memory_limit: str | None = Field(default=None, description="Container memory limit.")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the pod must match, e.g. {'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3'}.",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Pod tolerations as in a pod spec, "
        "e.g. [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}].",
    )
    service_account: str | None = Field(
        default=None, description="serviceAccountName of the pod; None: the namespace's default."
    )
    volume_claim: str = Field(
        default="clawloop-data", description="PersistentVolumeClaim holding checkpoints and examples."
    )
    volume_mount_path: str | None = Field(
        default=None,
        description="Where the pod mounts volume_claim; every path in the job config must be under it. "
        "None: $CLAWLOOP_HOME.",
    )
    shm_size: str = Field(default="8Gi", description="Size of the in-memory /dev/shm (NCCL and PyTorch use it).")
    torch_threads: int = Field(
        default=2,
        description="Threads for the job (OMP_NUM_THREADS, torch_threads) unless its config sets torch_threads.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the job.")
    kubeconfig_file: str | None = Field(
        default=None, description="kubeconfig to use outside a cluster; None: the default."
    )
    kube_context: str | None = Field(default=None, description="kubeconfig context; None: its current one.")

    def mount_path(self) -> Path:
        if self.volume_mount_path:
            return Path(os.path.normpath(self.volume_mount_path))
        from resources.paths import clawloop_home

        return clawloop_home()

    def pod_spec_for(self, job: str, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """`base_pod_meta` and `base_pod_spec` for PipesK8sClient.run (K8s API
        field names): a pure function of this config and the job's."""
        module = f"training_jobs.{check_job_name(job)}"
        mount = self.mount_path()
        for name, path in job_paths(config).items():
            if path != mount and mount not in path.parents:
                raise ValueError(
                    f"{name}={path} is not under {mount}, where the pod mounts PersistentVolumeClaim "
                    f"{self.volume_claim!r}: the pod sees nothing else; write it there or set volume_mount_path"
                )
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus}")
        threads = int(config.get("torch_threads", self.torch_threads))
        requests = {k: v for k, v in (("cpu", self.cpu_request), ("memory", self.memory_request)) if v}
        limits = {k: v for k, v in (("cpu", self.cpu_limit), ("memory", self.memory_limit)) if v}
        if self.gpus:
            limits["nvidia.com/gpu"] = str(self.gpus)  # an extended resource: its request follows the limit
        container = {
            "name": "trainer",
            "image": self.image,
            "imagePullPolicy": self.image_pull_policy,
            "command": ["python", "-m", module],
            "env": [{"name": k, "value": v} for k, v in {**job_env(threads), **self.env}.items()],
            "resources": {"requests": requests, "limits": limits},
            "volumeMounts": [
                {"name": "clawloop-data", "mountPath": str(mount)},
                {"name": "dshm", "mountPath": "/dev/shm"},
            ],
            # A failed job's last log lines become its termination message (kubectl describe).
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        spec: dict[str, Any] = {
            "containers": [container],
            "restartPolicy": "Never",  # a failed job is a failed asset, not a retry loop
            "volumes": [
                {"name": "clawloop-data", "persistentVolumeClaim": {"claimName": self.volume_claim}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": self.shm_size}},
            ],
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        meta = {"labels": {"app.kubernetes.io/component": "clawloop-trainer", "clawloop/training-job": job}}
        return {"base_pod_meta": meta, "base_pod_spec": spec}

    def launch(self, context: dg.AssetExecutionContext, job: str, config: dict[str, Any]) -> dict[str, Any]:
        # Imported here: the Kubernetes client takes a while to import and only this launcher needs it.
        from dagster_k8s import PipesK8sClient
        from dagster_k8s.client import DagsterK8sError
        from kubernetes.config import ConfigException

        module = f"training_jobs.{check_job_name(job)}"
        threads = int(config.get("torch_threads", self.torch_threads))
        pod = self.pod_spec_for(job, config)
        client = PipesK8sClient(kubeconfig_file=self.kubeconfig_file, kube_context=self.kube_context)
        try:
            invocation = client.run(
                context=context, namespace=self.namespace, extras={**config, "torch_threads": threads}, **pod
            )
        except ConfigException as exc:
            raise TrainingJobError(
                f"no Kubernetes cluster to run {module} on ({exc}); run inside one, or set kubeconfig_file/kube_context"
            ) from exc
        except DagsterK8sError as exc:  # its message holds the pod's last log lines
            raise TrainingJobError(f"{module} failed in a pod of {self.image}: {exc}") from exc
        try:
            return reported_metadata(invocation)
        except Exception as exc:
            raise TrainingJobError(
                f"{module} exited 0 in a pod of {self.image} but reported no materialization"
            ) from exc
