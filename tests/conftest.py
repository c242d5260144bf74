import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def base_checkpoint_dir(tmp_path_factory) -> Path:
    """The converted base model, prepared once per session. Set CLAWLOOP_MODEL_CACHE
    to a lasting directory to convert (and download) it only once across sessions."""
    from resources.embedded_model import ensure_base_model

    cache = os.environ.get("CLAWLOOP_MODEL_CACHE")
    return ensure_base_model(Path(cache) if cache else tmp_path_factory.mktemp("model_cache"))


@pytest.fixture
def clawloop_home(tmp_path, monkeypatch):
    """A throwaway $CLAWLOOP_HOME; the converted model stays in the real cache."""
    from clawloop_assets import paths

    monkeypatch.setenv("CLAWLOOP_MODEL_CACHE", str(paths.model_cache_dir()))
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
