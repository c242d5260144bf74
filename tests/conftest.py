import os
from pathlib import Path

import pytest

from clawloop_assets import paths

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
    """The Docker backend, or a skip naming why it cannot run here. In CI
    (`make test` installs and starts the engine) a missing engine fails."""
    from resources.sandbox import DockerSandbox, SandboxUnavailable

    sandbox = DockerSandbox(**overrides)
    try:
        sandbox.check_available()
    except SandboxUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
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
