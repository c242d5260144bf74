"""Plumbing the training jobs share: writing the trained checkpoint, and the
entrypoint that runs a job under Dagster Pipes or
standalone with `--config`."""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

from resources.checkpoints import (
    COMPLETE_MARKER,
    MANIFEST,
    write_checkpoint,
)
from training_jobs.configs import TrainingJobConfig
from training_jobs.optimization import Log, discard_state, trained_model

# Written by save_pretrained itself; everything else in the base checkpoint
# (tokenizer files, chat template) is copied unchanged.
_WEIGHT_FILE_SUFFIXES = (".safetensors", ".safetensors.index.json")


def save_trained_checkpoint(model, base_checkpoint: str | Path, output_checkpoint: str | Path, metadata: dict) -> list[str]:
    """Write `model` atomically as a verified checkpoint, with the base's
    non-weight files (the tokenizer does not change). Returns the copied names."""
    copied: list[str] = []

    def save(tmp: Path) -> None:
        # transformers 5 always writes safetensors (the safe_serialization flag
        # is gone); write_checkpoint refuses anything else anyway.
        model.save_pretrained(tmp)
        written = {p.name for p in tmp.iterdir()}
        for src in sorted(Path(base_checkpoint).iterdir()):
            if (
                src.is_file()
                and src.name not in written
                and src.name not in (MANIFEST, COMPLETE_MARKER)
                and not src.name.endswith(_WEIGHT_FILE_SUFFIXES)
            ):
                shutil.copy2(src, tmp / src.name)
                copied.append(src.name)

    write_checkpoint(save, Path(output_checkpoint), {**metadata, "tokenizer_files_copied": copied})
    return copied


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def finish(model, config: TrainingJobConfig, result: dict[str, Any], log: Log, started: float) -> None:
    """Save the checkpoint and complete `result` with the totals (in place)."""
    result["peak_rss_mb"] = peak_rss_mb()
    if torch.cuda.is_available():
        result["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    result["tokenizer_files_copied"] = save_trained_checkpoint(
        trained_model(model).cpu(), config.base_checkpoint, config.output_checkpoint, result
    )
    discard_state(config.output_checkpoint)
    result["seconds"] = time.monotonic() - started
    log(f"{result['job']}: wrote {config.output_checkpoint} ({result['steps']} steps, {result['seconds']:.1f}s, peak RSS {result['peak_rss_mb']:.0f} MB)")


def standalone_result_path(output_checkpoint: str | Path) -> Path:
    """Next to the checkpoint, not inside it (a checkpoint holds only its manifest's files)."""
    output = Path(output_checkpoint)
    return output.with_name(f"{output.name}.result.json")


def run_job(train: Callable[..., dict], config_cls: type[TrainingJobConfig], argv: list[str] | None = None) -> None:
    """`--config FILE.json`: standalone, progress on stdout and a result JSON next
    to the checkpoint. No arguments: a Dagster Pipes process, config from extras."""
    parser = argparse.ArgumentParser(description=sys.modules[train.__module__].__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="JSON job config; omit when launched by Dagster Pipes")
    args = parser.parse_args(argv)
    if args.config is not None:
        config = config_cls.from_json_file(args.config)
        result = train(config, log=lambda message: print(message, flush=True))
        path = standalone_result_path(config.output_checkpoint)
        path.write_text(json.dumps(result, indent=2))
        print(f"result: {path}", flush=True)
        return
    if not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        parser.error("pass --config FILE.json, or launch through Dagster Pipes (DAGSTER_PIPES_CONTEXT is not set)")
    with open_dagster_pipes() as pipes:
        config = config_cls.from_dict(dict(pipes.extras))
        result = train(config, log=pipes.log.info)
        pipes.report_asset_materialization(metadata=pipes_metadata(result))


def pipes_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Numbers stay numbers; per-step lists go as JSON."""
    return {key: {"raw_value": value, "type": "json"} if isinstance(value, list) else value for key, value in result.items()}
