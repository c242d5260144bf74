import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from resources import paths

# The model cache `make test`'s setup prepared, resolved before any test
# points $CLAWLOOP_HOME elsewhere: the base model is converted once, not per test.
MODEL_CACHE = paths.model_cache_dir()
# Likewise the vLLM environment `make vllm-backend` installed.
VLLM_PYTHON = Path(os.environ.get("CLAWLOOP_VLLM_PYTHON") or paths.clawloop_home() / "vllm-venv" / "bin" / "python")


@pytest.fixture(scope="session")
def base_checkpoint_dir() -> Path:
    """The converted base model (prepared on first use)."""
    from resources.embedded_model import ensure_base_model

    return ensure_base_model(MODEL_CACHE)


@pytest.fixture
def clawloop_home(tmp_path, monkeypatch):
    """A throwaway $CLAWLOOP_HOME; the converted model stays in the real cache."""
    monkeypatch.setenv("CLAWLOOP_MODEL_CACHE", str(MODEL_CACHE))
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def docker_sandbox(**overrides):
    """The Docker backend. `make test` installs and starts the engine, so a
    missing one fails the test with the fix (never a skip)."""
    from resources.sandbox import DockerSandbox, SandboxUnavailable

    sandbox = DockerSandbox(**overrides)
    try:
        sandbox.check_available()
    except SandboxUnavailable as exc:
        pytest.fail(str(exc))
    return sandbox


SANDBOX_BACKENDS = ["bubblewrap", pytest.param("docker", marks=pytest.mark.slow)]


def make_sandbox(backend: str, **overrides):
    from resources.sandbox import BubblewrapSandbox

    return BubblewrapSandbox(**overrides) if backend == "bubblewrap" else docker_sandbox(**overrides)


def closed_port() -> int:
    """A loopback port nobody listens on (for now)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory, base_checkpoint_dir):
    """A real vLLM server on loopback serving the base model, shared by the
    tests that need one; its OpenAI-compatible base URL."""
    from resources.vllm_server import VLLMServer

    if not VLLM_PYTHON.exists():
        pytest.fail(f"no vLLM environment at {VLLM_PYTHON}: run `make vllm-backend`")
    server = VLLMServer(python=VLLM_PYTHON, port=closed_port(), log_path=tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        yield server.start(base_checkpoint_dir)
    finally:
        server.stop()


# --- One small round, materialized once per session ---

REPO = Path(__file__).resolve().parent.parent
ROUND_ONE = "round-0001"


def round_resources(loop, policy=None, sandbox=None):
    """The real backends a round runs on here (embedded model, bubblewrap,
    DuckDB, training jobs in subprocesses), or the given policy and sandbox."""
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.sandbox import BubblewrapSandbox
    from resources.training_launcher import SubprocessTrainingLauncher
    from resources.warehouse import DuckDBWarehouse

    return {
        "policy": policy or EmbeddedPolicyModel(),
        "sandbox": sandbox or BubblewrapSandbox(),
        "warehouse": DuckDBWarehouse(),
        "training_launcher": SubprocessTrainingLauncher(),
        "loop": loop,
    }


def small_round():
    """`make bench`'s small round (benchmarks.round_phases.bench_round), made
    smaller: one candidate per capability of both routes (the fewest a plan
    draws), 4 rollouts each (admitted at 1 to 3 passes), two samples a training
    task before and after training, and two optimizer steps per training job. The
    round tests check that each phase runs and records what it did, which these
    sizes show as well as the bench's; what training learns is test_transfer's
    and test_training_jobs' to check."""
    from benchmarks.round_phases import bench_round
    from clawloop_assets.loop_config import LoopConfig
    from clawloop_assets.synthesis.catalogs import round_capabilities
    from resources.schemas import MIN_LEVEL

    bench = bench_round()
    # Round 1 at the warm-up level: its tasks pass often enough that each
    # phase has successes to train on at these sizes.
    return LoopConfig(**{**bench.model_dump(), "candidates_per_round": len(round_capabilities(bench.synthesis_routes)),
                         "rollouts_per_task": 4, "admission_high": 3, "train_eval_samples": 2, "train_max_steps": 2,
                         "first_level": MIN_LEVEL})


def materialize_round(instance, round_key, loop=None, selection=None, **backends):
    import dagster as dg

    from clawloop_assets.definitions import gate_checks, round_assets

    instance.add_dynamic_partitions("rounds", [round_key])
    return dg.materialize([*round_assets, *gate_checks], partition_key=round_key, instance=instance,
                          resources=round_resources(loop or small_round(), **backends), raise_on_error=False,
                          selection=selection)


@dataclass(frozen=True)
class FinishedRound:
    """Round 1 of `small_round` (a candidate per capability), materialized with the real
    backends into a persistent Dagster instance. Tests read it; the few that
    add to it (a rematerialized asset, round 2 on an ephemeral instance)
    leave what the others read unchanged."""

    home: Path
    dagster_home: Path
    result: object  # the dg.materialize result of round 1
    seconds: float = 0.0  # its wall time

    def environment(self) -> dict[str, str]:
        return {"CLAWLOOP_MODEL_CACHE": str(MODEL_CACHE), "CLAWLOOP_HOME": str(self.home),
                "DAGSTER_HOME": str(self.dagster_home)}


# The first test that asks for the finished round pays for it inside its own
# timeout: that test gets the round's time on top of the suite's limit.
FINISHED_ROUND_SECONDS = 1800


# Under `make test` the suite runs in three pytest-xdist workers (on two
# cores: a third fills the waits on Docker, servers and subprocesses), with
# --dist loadgroup: a module's tests stay together (its module fixtures are
# built once), and so do the tests that share a session fixture too dear to
# build twice (the finished round, the vLLM server).
SHARED_GROUPS = {"finished_round_once": "finished_round", "vllm_url": "vllm_server"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "finished_round_once" in fixtures:
            item.add_marker(pytest.mark.timeout(900 + FINISHED_ROUND_SECONDS))
        group = next((name for fixture, name in SHARED_GROUPS.items() if fixture in fixtures), item.module.__name__)
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def finished_round_once(tmp_path_factory) -> FinishedRound:
    import dagster as dg

    from clawloop_assets.cli import why_stopped

    root = tmp_path_factory.mktemp("finished-round")
    finished = FinishedRound(root / "home", root / "dagster", None)
    finished.dagster_home.mkdir()
    shutil.copy(REPO / "dagster.yaml", finished.dagster_home)
    with pytest.MonkeyPatch.context() as env:
        for key, value in finished.environment().items():
            env.setenv(key, value)
        with dg.DagsterInstance.get() as instance:
            started = time.perf_counter()
            result = materialize_round(instance, ROUND_ONE)
            seconds = time.perf_counter() - started
    if not result.success:
        pytest.fail(f"the shared small round failed: {why_stopped(result)}")
    return FinishedRound(finished.home, finished.dagster_home, result, seconds)


@pytest.fixture
def finished_round(finished_round_once, monkeypatch) -> FinishedRound:
    """The session's finished round, with $CLAWLOOP_HOME and $DAGSTER_HOME pointing at it."""
    for key, value in finished_round_once.environment().items():
        monkeypatch.setenv(key, value)
    return finished_round_once
