"""The Docker and K8s training launchers. The K8s pod spec is checked as
dagster_k8s builds it, without a cluster; the Docker launcher runs the real
GRPO job in the trainer image (built offline here) inside a Dagster
materialization."""

import json
import os
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest
from kubernetes.client import ApiClient
from tiny_llama import make_tiny_checkpoint, make_trajectory
from transformers import LlamaForCausalLM

from resources.checkpoints import verify_checkpoint
from resources.training_launcher import (
    DockerTrainingLauncher,
    K8sTrainingLauncher,
    SubprocessTrainingLauncher,
    TrainingJobError,
    TrainingLauncher,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAINER_IMAGE = "clawloop/trainer:latest"


def docker_engine_running() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def docker_engine() -> None:
    """A running Docker engine; a missing one fails the test with the fix (never a skip)."""
    if not docker_engine_running():
        pytest.fail("no Docker engine running here: `make docker-backend` (as root) installs and starts one")


def job_config(base, examples, output, **overrides) -> dict:
    return {
        "base_checkpoint": str(base),
        "examples": str(examples),
        "output_checkpoint": str(output),
        "learning_rate": 1e-3,  # tiny random model: a visible step
        "batch_size": 8,
        "max_length": 64,
        "torch_threads": 1,
        **overrides,
    }


def paths_under(root: Path) -> tuple[Path, Path, Path]:
    """A base checkpoint directory, an examples file and an output checkpoint,
    in three different directories under root (none needs to exist)."""
    return root / "models" / "base", root / "data" / "examples.jsonl", root / "rounds" / "r1" / "sft"


# --- K8s: the pod spec, as dagster_k8s turns it into the pod it creates ---


def k8s_launcher(mount: Path, **overrides) -> K8sTrainingLauncher:
    return K8sTrainingLauncher(
        **{
            "image": "registry.example/clawloop/trainer:v1",
            "namespace": "training",
            "gpus": 2,
            "cpu_request": "8",
            "memory_request": "64Gi",
            "memory_limit": "96Gi",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}
            ],
            "service_account": "clawloop-trainer",
            "volume_claim": "clawloop-data",
            "volume_mount_path": str(mount),
            "env": {"NCCL_DEBUG": "WARN"},
            **overrides,
        }
    )


def test_k8s_pod_spec_for_a_gpu_job(tmp_path):
    base, examples, output = paths_under(tmp_path)
    pod = k8s_launcher(tmp_path).pod_spec_for("grpo", job_config(base, examples, output, torch_threads=6))

    spec = pod["base_pod_spec"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/clawloop/trainer:v1"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == ["python", "-m", "training_jobs.grpo"]
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi"},
        "limits": {"memory": "96Gi", "nvidia.com/gpu": "2"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "6", "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "WARN"}
    assert {"name": "clawloop-data", "mountPath": str(tmp_path)} in container["volumeMounts"]
    assert {"name": "clawloop-data", "persistentVolumeClaim": {"claimName": "clawloop-data"}} in spec["volumes"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert spec["serviceAccountName"] == "clawloop-trainer"
    assert pod["base_pod_meta"]["labels"]["clawloop/training-job"] == "grpo"


def test_k8s_pod_body_built_by_dagster_k8s_keeps_every_field(tmp_path):
    from dagster_k8s.pipes import build_pod_body

    base, examples, output = paths_under(tmp_path)
    pod = k8s_launcher(tmp_path).pod_spec_for("sft", job_config(base, examples, output))
    pipes_env = {"DAGSTER_PIPES_CONTEXT": "context-param", "DAGSTER_PIPES_MESSAGES": "messages-param"}

    # What PipesK8sClient.run sends to create_namespaced_pod, in the API's own field names.
    body = build_pod_body(pod_name="dagster-abc", image=None, command=None, env_vars=pipes_env, **pod)
    sent = ApiClient().sanitize_for_serialization(body)

    spec = sent["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/clawloop/trainer:v1"
    assert container["command"] == ["python", "-m", "training_jobs.sft"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"] == {"cpu": "8", "memory": "64Gi"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["OMP_NUM_THREADS"] == "1"
    assert env["DAGSTER_PIPES_CONTEXT"] == "context-param"  # the session's bootstrap, added to our container
    assert container["volumeMounts"][0] == {"name": "clawloop-data", "mountPath": str(tmp_path)}
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}
    ]
    assert spec["serviceAccountName"] == "clawloop-trainer"
    assert {"name": "clawloop-data", "persistentVolumeClaim": {"claimName": "clawloop-data"}} in spec["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in spec["volumes"]
    labels = sent["metadata"]["labels"]
    assert labels["clawloop/training-job"] == "sft" and labels["app.kubernetes.io/part-of"] == "dagster"
    assert sent["metadata"]["name"] == "dagster-abc"


def test_k8s_cpu_pod_has_no_gpu_limit_and_no_empty_fields(tmp_path):
    base, examples, output = paths_under(tmp_path)
    launcher = K8sTrainingLauncher(gpus=0, volume_mount_path=str(tmp_path))
    spec = launcher.pod_spec_for("sft", job_config(base, examples, output))["base_pod_spec"]
    assert spec["containers"][0]["resources"] == {"requests": {}, "limits": {}}
    assert "nodeSelector" not in spec and "tolerations" not in spec and "serviceAccountName" not in spec


def test_k8s_mount_path_defaults_to_clawloop_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "home"))
    base, examples, output = paths_under(tmp_path / "home")
    spec = K8sTrainingLauncher().pod_spec_for("sft", job_config(base, examples, output))["base_pod_spec"]
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == str((tmp_path / "home").resolve())


def test_k8s_path_outside_the_volume_is_refused_by_name(tmp_path):
    base, examples, output = paths_under(tmp_path / "volume")
    launcher = k8s_launcher(tmp_path / "volume")
    elsewhere = tmp_path / "laptop" / "examples.jsonl"
    with pytest.raises(ValueError, match=rf"examples={elsewhere} is not under {tmp_path / 'volume'}.*'clawloop-data'"):
        launcher.pod_spec_for("sft", job_config(base, elsewhere, output))
    with pytest.raises(ValueError, match="output_checkpoint='out/sft' is a relative path"):
        launcher.pod_spec_for("sft", job_config(base, examples, "out/sft"))
    with pytest.raises(ValueError, match="unknown training job 'dpo'"):
        launcher.pod_spec_for("dpo", job_config(base, examples, output))


def test_k8s_launch_without_a_cluster_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    base, examples, output = paths_under(tmp_path)

    @dg.asset
    def sft_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher) -> None:
        training_launcher.launch(context, "sft", job_config(base, examples, output))

    with pytest.raises(TrainingJobError, match="no Kubernetes cluster to run training_jobs.sft on"):
        dg.materialize([sft_checkpoint], resources={"training_launcher": k8s_launcher(tmp_path)})


# --- Docker: the container it asks for ---


def mounts_by_target(mounts) -> dict[str, tuple[str, bool]]:
    return {m["Target"]: (m["Source"], m["ReadOnly"]) for m in mounts}


def test_docker_mounts_inputs_read_only_and_the_output_directory_writable(tmp_path):
    base, examples, output = paths_under(tmp_path)
    base.mkdir(parents=True)
    examples.parent.mkdir()
    examples.write_text("")
    pipes_dir = tmp_path / "pipes"
    config = job_config(base, examples, output, reference_checkpoint=str(base))

    mounts = mounts_by_target(DockerTrainingLauncher().mounts_for(config, pipes_dir))

    assert mounts == {
        str(base): (str(base), True),  # once, though it is also the reference
        str(examples): (str(examples), True),
        str(output.parent): (str(output.parent), False),  # the atomic rename and the resumable state live there
        str(pipes_dir): (str(pipes_dir), False),
    }


def test_docker_mounts_nest_an_input_inside_the_output_directory_read_only(tmp_path):
    # The round's layout: GRPO starts from the SFT checkpoint beside its own output.
    sft = tmp_path / "checkpoints" / "sft"
    sft.mkdir(parents=True)
    examples = tmp_path / "checkpoints" / "grpo_examples.jsonl"
    examples.write_text("")
    config = job_config(sft, examples, tmp_path / "checkpoints" / "policy")
    mounts = mounts_by_target(DockerTrainingLauncher().mounts_for(config, tmp_path / "pipes"))
    assert mounts[str(tmp_path / "checkpoints")][1] is False
    assert mounts[str(sft)][1] is True and mounts[str(examples)][1] is True


def test_docker_mount_errors_name_the_field(tmp_path):
    base, examples, output = paths_under(tmp_path)
    launcher = DockerTrainingLauncher()
    with pytest.raises(ValueError, match="examples='data/x.jsonl' is a relative path"):
        launcher.mounts_for(job_config(base, "data/x.jsonl", output), tmp_path)
    with pytest.raises(ValueError, match=rf"reference_checkpoint={output} is \(inside\) output_checkpoint"):
        launcher.mounts_for(job_config(base, examples, output, reference_checkpoint=str(output)), tmp_path)
    # A missing input is not mounted: the job reports it with its own error.
    assert str(base) not in mounts_by_target(launcher.mounts_for(job_config(base, examples, output), tmp_path))


def test_docker_container_runs_as_the_caller_without_network_or_privileges(tmp_path):
    base, examples, output = paths_under(tmp_path)
    config = job_config(base, examples, output)

    kwargs = DockerTrainingLauncher().container_kwargs("sft", config, tmp_path / "pipes", "clawloop-sft-x")

    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["network_mode"] == "none"
    assert kwargs["read_only"] is True and kwargs["cap_drop"] == ["ALL"]
    assert "device_requests" not in kwargs
    gpu = DockerTrainingLauncher(gpus=2).container_kwargs("sft", config, tmp_path / "pipes", "n")["device_requests"]
    assert [(r["Driver"], r["Count"], r["Capabilities"]) for r in gpu] == [("nvidia", 2, [["gpu"]])]


def test_launcher_is_chosen_by_environment_variable(monkeypatch):
    from clawloop_assets.definitions import resources_for

    monkeypatch.delenv("CLAWLOOP_TRAINING_LAUNCHER", raising=False)
    assert type(resources_for("laptop")["training_launcher"]).__name__ == "SubprocessTrainingLauncher"
    for name, cls in (("docker", DockerTrainingLauncher), ("k8s", K8sTrainingLauncher)):
        monkeypatch.setenv("CLAWLOOP_TRAINING_LAUNCHER", name)
        assert isinstance(resources_for("laptop")["training_launcher"], cls)
    monkeypatch.setenv("CLAWLOOP_TRAINING_LAUNCHER", "slurm")
    with pytest.raises(ValueError, match="CLAWLOOP_TRAINING_LAUNCHER='slurm' is unknown"):
        resources_for("laptop")


# --- Docker, for real: the trainer image and the GRPO job in it ---


@pytest.fixture(scope="module")
def trainer_image(docker_engine) -> str:
    started = time.monotonic()
    # Cached by Docker after the first build (a few seconds); the wheelhouse under $CLAWLOOP_HOME.
    subprocess.run([str(REPO_ROOT / "sandbox_images/trainer/build.sh"), TRAINER_IMAGE], check=True, timeout=1800)
    print(f"trainer image ready in {time.monotonic() - started:.1f}s")
    return TRAINER_IMAGE


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("models") / "base")


@pytest.fixture(scope="module")
def grpo_examples(tiny_checkpoint, tmp_path_factory) -> Path:
    """Two groups of four with mixed rewards, sampling log-probs from the base itself."""
    model = LlamaForCausalLM.from_pretrained(tiny_checkpoint)
    path = tmp_path_factory.mktemp("data") / "trajectories.jsonl"
    with path.open("w") as f:
        for i, (group, reward) in enumerate([("g1", 1.0), ("g1", 0.0), ("g1", 0.0), ("g1", 1.0),
                                             ("g2", 0.0), ("g2", 1.0), ("g2", 0.0), ("g2", 0.0)]):  # fmt: skip
            f.write(json.dumps(make_trajectory(model, f"r{i}", group, reward, 12 + 2 * i, seed=i)) + "\n")
    return path


def trainer_containers() -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=clawloop.training-job"], capture_output=True, text=True, check=True
    )
    return listed.stdout.split()


def materialize_grpo(launcher: TrainingLauncher, config: dict) -> dict:
    @dg.asset
    def policy_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher):
        return dg.MaterializeResult(metadata=training_launcher.launch(context, "grpo", config))

    result = dg.materialize([policy_checkpoint], resources={"training_launcher": launcher})
    assert result.success
    metadata = result.asset_materializations_for_node("policy_checkpoint")[0].metadata
    return {key: value.value for key, value in metadata.items()}


@pytest.mark.slow
def test_grpo_job_in_docker_through_dagster_pipes(trainer_image, tiny_checkpoint, grpo_examples, tmp_path):
    before = trainer_containers()
    # Beside its examples, as in a round: a read-only file mount inside the writable directory.
    output = grpo_examples.parent / "policy"
    config = job_config(tiny_checkpoint, grpo_examples, output, reference_checkpoint=str(tiny_checkpoint))

    started = time.monotonic()
    metadata = materialize_grpo(DockerTrainingLauncher(image=trainer_image), config)
    print(f"GRPO in Docker: {time.monotonic() - started:.1f}s")

    assert metadata["job"] == "grpo"
    assert metadata["groups_used"] == 2
    assert metadata["examples_used"] == 8
    assert metadata["steps"] == 1
    assert len(metadata["losses"]) == 1  # a per-step list comes back as JSON
    assert isinstance(metadata["peak_rss_mb"], float)
    manifest = verify_checkpoint(output)
    assert manifest["metadata"]["job"] == "grpo"
    assert (output / "tokenizer_config.json").exists()
    for path in (output, *output.iterdir()):
        assert path.stat().st_uid == os.getuid(), f"{path} is not the caller's"
    assert trainer_containers() == before  # the container is removed

    # The same job through the subprocess launcher reports the same metadata:
    # the same keys and types, and the same numbers but for time, memory and its own output path.
    local = SubprocessTrainingLauncher(torch_threads=1)
    here = materialize_grpo(local, {**config, "output_checkpoint": str(tmp_path / "local")})
    assert here.keys() == metadata.keys()
    for key, value in here.items():
        assert type(value) is type(metadata[key]), key
        if key != "output_checkpoint" and not key.startswith(("seconds", "peak_")):
            assert same_values(value, metadata[key]), f"{key}: {value} here, {metadata[key]} in Docker"


def same_values(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-4, abs=1e-6)
    return a == b


@pytest.mark.slow
def test_failed_job_in_docker_raises_with_its_output(trainer_image, grpo_examples, tmp_path):
    before = trainer_containers()
    config = job_config(tmp_path / "no-such-model", grpo_examples, tmp_path / "out" / "sft")

    @dg.asset
    def sft_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher) -> None:
        training_launcher.launch(context, "sft", config)

    with pytest.raises(TrainingJobError) as failure:
        dg.materialize([sft_checkpoint], resources={"training_launcher": DockerTrainingLauncher(image=trainer_image)})
    message = str(failure.value)
    assert f"training_jobs.sft failed in {trainer_image}" in message
    assert "CheckpointError" in message and "no-such-model does not exist" in message
    assert not (tmp_path / "out" / "sft").exists()
    assert trainer_containers() == before


def test_missing_image_says_how_to_build_it(docker_engine, tmp_path):
    base, examples, output = paths_under(tmp_path)

    @dg.asset
    def sft_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher) -> None:
        training_launcher.launch(context, "sft", job_config(base, examples, output))

    launcher = DockerTrainingLauncher(image="clawloop/no-such-trainer:never-built")
    with pytest.raises(TrainingJobError, match=r"clawloop/no-such-trainer:never-built.*make trainer-image"):
        dg.materialize([sft_checkpoint], resources={"training_launcher": launcher})
