from pathlib import Path

import pytest

from clawloop_assets import paths

# The model cache `make test`'s setup prepared, resolved before any test
# points $CLAWLOOP_HOME elsewhere: the base model is converted once, not per test.
MODEL_CACHE = paths.model_cache_dir()


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
    import os

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
