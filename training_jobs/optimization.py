"""The optimizer loop both jobs share: the model on its device (LoRA and
gradient checkpointing when the config asks), AdamW with gradient clipping,
and training state that survives a killed job.

Resumable state lives beside the output checkpoint, in
`<output_checkpoint>.state/step-NNNNNN/`, each one a verified checkpoint (see
`resources.checkpoints`): the trainable weights and the AdamW moments as
safetensors, the step count and the per-step history as JSON. Nothing is
pickled. A rerun of the same job (same fingerprint: config, examples, base and
reference weights) continues after the last complete state; the batches are a
pure function of the seed, so the resumed run takes the same steps the
uninterrupted one would have.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from resources.checkpoints import (
    CheckpointError,
    checkpoint_id,
    verify_checkpoint,
    write_checkpoint,
)
from training_jobs.configs import TrainingJobConfig
from training_jobs.trajectories import shuffled_batches

Log = Callable[[str], None]

STATE_WEIGHTS = "trainable.safetensors"
STATE_OPTIMIZER = "optimizer.safetensors"
STATE_PROGRESS = "progress.json"
# Fields that change how a job runs but not the weights it ends with.
_NOT_FINGERPRINTED = {"output_checkpoint", "torch_threads", "save_every_steps", "device", "max_tokens_per_forward"}


def load_verified_model(directory: str | Path):
    """A full-precision model from a checkpoint that passed verify_checkpoint (safetensors only)."""
    verify_checkpoint(Path(directory))
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, use_safetensors=True)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={name!r} but torch sees no CUDA GPU here; use device='auto' or 'cpu'")
    return device


def prepare_model(config: TrainingJobConfig, device: torch.device):
    """The base checkpoint, ready to train: on `device`, LoRA-wrapped when
    `lora_rank` > 0, and with no dropout (the loss compares the same function
    that sampled the recorded tokens)."""
    model = load_verified_model(config.base_checkpoint)
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=0.0,
            target_modules=list(config.lora_target_modules),
            bias="none",
        )
        model = get_peft_model(model, lora)
    if config.gradient_checkpointing:
        # transformers only checkpoints in train mode; train mode with every
        # dropout at 0 is the same function as eval mode.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    else:
        model.eval()
    return model.to(device)


def trained_model(model):
    """The full model to save: LoRA adapters merged into the base weights."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def autocast(config: TrainingJobConfig, device: torch.device):
    if config.mixed_precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step_schedule(items: Sequence, config: TrainingJobConfig) -> list[tuple[int, list]]:
    """(epoch, batch) for every optimizer step of the job, fixed by the seed;
    the first `max_steps` of them when that is set."""
    order = torch.Generator().manual_seed(config.seed)
    steps = [(epoch, batch) for epoch in range(config.epochs) for batch in shuffled_batches(items, config.batch_size, order)]
    return steps[:config.max_steps] if config.max_steps else steps


def _file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def job_fingerprint(job: str, config: TrainingJobConfig) -> str:
    """What a job's result depends on: its math config, its examples, and the
    weights it starts from and anchors to. State with another fingerprint is
    never resumed from."""
    fields = {k: v for k, v in config.to_dict().items() if k not in _NOT_FINGERPRINTED}
    fields["job"] = job
    fields["examples"] = _file_sha256(config.examples)
    fields["base_checkpoint"] = checkpoint_id(Path(config.base_checkpoint))
    reference = getattr(config, "reference_checkpoint", None)
    if reference:
        fields["reference_checkpoint"] = checkpoint_id(Path(reference))
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def state_root(output_checkpoint: str | Path) -> Path:
    output = Path(output_checkpoint)
    return output.with_name(f"{output.name}.state")


def _trainable(model) -> list[tuple[str, torch.nn.Parameter]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def save_state(root: Path, steps_done: int, fingerprint: str, model, optimizer, history: list[dict]) -> Path:
    """Write the state after `steps_done` steps, then drop older states."""

    def save(tmp: Path) -> None:
        trainable = _trainable(model)
        save_file({name: p.detach().cpu().contiguous() for name, p in trainable}, str(tmp / STATE_WEIGHTS))
        moments = {}
        for name, p in trainable:
            for key, value in optimizer.state.get(p, {}).items():
                moments[f"{key}/{name}"] = value.detach().cpu().contiguous()
        save_file(moments, str(tmp / STATE_OPTIMIZER))
        progress = {"steps_done": steps_done, "fingerprint": fingerprint, "history": history}
        (tmp / STATE_PROGRESS).write_text(json.dumps(progress))

    final = write_checkpoint(save, root / f"step-{steps_done:06d}", {"kind": "training_state", "steps_done": steps_done})
    for older in root.glob("step-*"):
        if older != final:
            shutil.rmtree(older, ignore_errors=True)
    return final


def restore_state(root: Path, fingerprint: str, model, optimizer, log: Log) -> tuple[int, list[dict]]:
    """Load the newest complete state of this job into `model` and `optimizer`;
    (0, []) when there is none. Leftovers of a save that was killed are removed."""
    if not root.is_dir():
        return 0, []
    for leftover in root.glob(".step-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for directory in sorted(root.glob("step-*"), reverse=True):
        try:
            verify_checkpoint(directory)
            progress = json.loads((directory / STATE_PROGRESS).read_text())
        except (CheckpointError, OSError, json.JSONDecodeError) as exc:
            log(f"resume: skipping {directory}: {exc}")
            continue
        if progress["fingerprint"] != fingerprint:
            log(f"resume: {directory} belongs to another job configuration or data; starting over")
            shutil.rmtree(root, ignore_errors=True)
            return 0, []
        weights = load_file(str(directory / STATE_WEIGHTS))
        moments = load_file(str(directory / STATE_OPTIMIZER))
        with torch.no_grad():
            for name, p in _trainable(model):
                p.copy_(weights[name])
                state = {key.split("/", 1)[0]: value for key, value in moments.items() if key.split("/", 1)[1] == name}
                if state:
                    # AdamW keeps `step` on the CPU unless it is fused or capturable.
                    on_device = optimizer.defaults.get("fused") or optimizer.defaults.get("capturable")
                    optimizer.state[p] = {k: v if k == "step" and not on_device else v.to(p.device)
                                          for k, v in state.items()}
        log(f"resume: continuing after step {progress['steps_done']} from {directory}")
        return int(progress["steps_done"]), list(progress["history"])
    return 0, []


def adamw(parameters: list[torch.nn.Parameter], learning_rate: float) -> torch.optim.AdamW:
    """AdamW without weight decay, fused where torch has the kernel (CPU and
    CUDA): the same update in one pass over the parameters, not a loop of small
    operations per tensor."""
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in parameters)
    return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0, fused=fused)


def run_steps(
    job: str,
    model,
    config: TrainingJobConfig,
    schedule: list[tuple[int, list]],
    step: Callable[[list], dict[str, Any]],
    log: Log,
) -> list[dict[str, Any]]:
    """Run the optimizer over `schedule`. `step(batch)` runs the forward and
    backward passes of one optimizer step and returns its stats (at least
    "loss"); this loop zeroes the gradients, clips, steps, times, logs, and
    saves resumable state. Returns the stats of every step, resumed ones included."""
    optimizer = adamw([p for _, p in _trainable(model)], config.learning_rate)
    root = state_root(config.output_checkpoint)
    fingerprint = job_fingerprint(job, config)
    start, history = restore_state(root, fingerprint, model, optimizer, log)
    for index in range(start, len(schedule)):
        epoch, batch = schedule[index]
        started = time.monotonic()
        optimizer.zero_grad(set_to_none=True)
        stats = step(batch)
        grad_norm = 0.0
        if config.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_([p for _, p in _trainable(model)], config.max_grad_norm).item()
        optimizer.step()
        stats = {**stats, "grad_norm": grad_norm, "seconds": time.monotonic() - started, "epoch": epoch + 1}
        history.append(stats)
        shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items() if k != "epoch")
        log(f"{job} step {index + 1}/{len(schedule)} (epoch {epoch + 1}): {shown}")
        if config.save_every_steps and (index + 1) % config.save_every_steps == 0 and index + 1 < len(schedule):
            save_state(root, index + 1, fingerprint, model, optimizer, history)
    return history


def discard_state(output_checkpoint: str | Path) -> None:
    """After the final checkpoint is written its resumable state is obsolete."""
    shutil.rmtree(state_root(output_checkpoint), ignore_errors=True)
