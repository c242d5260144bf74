"""Checkpoints safe to trust under kill -9, resumable training state, LoRA and
the named recipes. Jobs run on the tiny random Llama of test_training_jobs;
a job is killed for real (SIGKILL from inside itself, at a chosen point, so
the test is not a race)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_llama import job_config, make_tiny_checkpoint, write_tiny_examples

from resources.checkpoints import verify_checkpoint
from training_jobs import optimization
from training_jobs.configs import RECIPES, GRPOJobConfig, SFTJobConfig, recipe_config
from training_jobs.grpo import train_grpo
from training_jobs.optimization import state_root
from training_jobs.sft import train_sft

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("models") / "base")


@pytest.fixture(scope="module")
def examples(base_checkpoint, tmp_path_factory) -> Path:
    return write_tiny_examples(base_checkpoint, tmp_path_factory.mktemp("data") / "trajectories.jsonl")

# Runs a job from a JSON config and SIGKILLs itself at the point named by argv:
#   after-state N   right after the resumable state of step N is complete
#   in-state N      halfway through writing the state of step N
#   in-final        halfway through writing the final checkpoint's weights
KILLER = r"""
import json, os, signal, sys
import safetensors.torch
import training_jobs.optimization as optimization
import transformers
from training_jobs.configs import GRPOJobConfig, SFTJobConfig
from training_jobs import optimization
from training_jobs.grpo import train_grpo
from training_jobs.sft import train_sft

job, config_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
at = int(sys.argv[4]) if len(sys.argv) > 4 else None
die = lambda: os.kill(os.getpid(), signal.SIGKILL)

def half_write(path):
    with open(path, "wb") as f:
        f.write(b"\x00" * 1000)
    die()

original_save_state = optimization.save_state
def save_state(root, steps_done, *args):
    if mode == "in-state" and steps_done == at:
        optimization.save_file = lambda tensors, path: half_write(path)
    written = original_save_state(root, steps_done, *args)
    if mode == "after-state" and steps_done == at:
        die()
    return written
optimization.save_state = save_state

if mode == "in-final":
    transformers.PreTrainedModel.save_pretrained = lambda self, directory, **kw: half_write(f"{directory}/model.safetensors")

config_cls, train = (SFTJobConfig, train_sft) if job == "sft" else (GRPOJobConfig, train_grpo)
train(config_cls.from_dict(json.loads(open(config_path).read())), log=print)
"""


def run_and_kill(tmp_path: Path, job: str, config: dict, mode: str, at: int | None = None) -> str:
    config_file = tmp_path / f"{job}-{mode}.json"
    config_file.write_text(json.dumps(config))
    args = [sys.executable, "-c", KILLER, job, str(config_file), mode] + ([str(at)] if at else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, f"the job was not killed (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


def grpo_config(base, data, output, **overrides) -> dict:
    # 7 informative rollouts, batch 2, 2 epochs: 8 optimizer steps.
    return job_config(base, data, output, reference_checkpoint=str(base), batch_size=2, epochs=2, **overrides)


def test_resume_after_kill_gives_the_weights_of_an_uninterrupted_run(base_checkpoint, examples, tmp_path):
    uninterrupted = train_grpo(GRPOJobConfig.from_dict(grpo_config(base_checkpoint, examples, tmp_path / "whole")), log=lambda m: None)
    assert uninterrupted["steps"] == 8

    output = tmp_path / "killed"
    config = grpo_config(base_checkpoint, examples, output, save_every_steps=3)
    run_and_kill(tmp_path, "grpo", config, "after-state", at=3)
    assert not output.exists()
    assert [p.name for p in state_root(output).iterdir()] == ["step-000003"]

    messages: list[str] = []
    resumed = train_grpo(GRPOJobConfig.from_dict(config), log=messages.append)

    assert any("continuing after step 3" in m for m in messages), messages
    assert sum(m.startswith("grpo step ") for m in messages) == 5  # steps 4-8 only
    assert resumed["steps"] == 8
    assert resumed["losses"] == pytest.approx(uninterrupted["losses"], abs=1e-6)
    expected, got = weights(tmp_path / "whole"), weights(output)
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-6), name
    verify_checkpoint(output)
    assert not state_root(output).exists(), "resumable state outlives the finished job"


def test_kill_while_saving_state_resumes_from_the_previous_complete_state(base_checkpoint, examples, tmp_path):
    output = tmp_path / "grpo"
    config = grpo_config(base_checkpoint, examples, output, save_every_steps=2)
    run_and_kill(tmp_path, "grpo", config, "in-state", at=4)
    root = state_root(output)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["step-000002"]
    assert any(p.name.startswith(".step-000004.tmp-") for p in root.iterdir()), "the half-written state should be left behind"

    messages: list[str] = []
    train_grpo(GRPOJobConfig.from_dict(config), log=messages.append)

    assert any("continuing after step 2" in m for m in messages), messages
    verify_checkpoint(output)


def test_state_of_another_configuration_is_not_resumed(base_checkpoint, examples, tmp_path):
    output = tmp_path / "grpo"
    run_and_kill(tmp_path, "grpo", grpo_config(base_checkpoint, examples, output, save_every_steps=3), "after-state", at=3)

    messages: list[str] = []
    changed = grpo_config(base_checkpoint, examples, output, save_every_steps=3, learning_rate=2e-3)
    result = train_grpo(GRPOJobConfig.from_dict(changed), log=messages.append)

    assert any("belongs to another job configuration" in m for m in messages), messages
    assert sum(m.startswith("grpo step ") for m in messages) == 8
    assert result["steps"] == 8


def test_kill_while_saving_the_final_checkpoint_keeps_the_previous_one(base_checkpoint, examples, tmp_path):
    output = tmp_path / "sft"
    train_sft(SFTJobConfig.from_dict(job_config(base_checkpoint, examples, output)), log=lambda m: None)
    before = verify_checkpoint(output)

    run_and_kill(tmp_path, "sft", job_config(base_checkpoint, examples, output, learning_rate=5e-3), "in-final")

    assert verify_checkpoint(output) == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".sft.tmp-")]
    assert leftovers, "the killed save should have left its temporary directory, never the final one"


def test_lora_trains_every_adapter_parameter_and_saves_a_merged_full_model(base_checkpoint, examples, tmp_path, monkeypatch):
    output = tmp_path / "lora"
    # Two steps: LoRA's B starts at zero, so A gets no gradient on the first step.
    config = SFTJobConfig.from_dict(job_config(base_checkpoint, examples, output, lora_rank=4, batch_size=3))
    import training_jobs.sft as sft_module

    seen = {}

    def prepare_model(*args):
        model = optimization.prepare_model(*args)
        seen["initial"] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        return model

    def finish(model, *args):
        seen["final"] = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        return original_finish(model, *args)

    original_finish = sft_module.finish
    monkeypatch.setattr(sft_module, "prepare_model", prepare_model)
    monkeypatch.setattr(sft_module, "finish", finish)
    result = train_sft(config, log=lambda m: None)

    assert result["steps"] == 2 and result["lora_rank"] == 4
    initial, final = seen["initial"], seen["final"]
    assert initial and all("lora_" in name for name in initial), sorted(initial)[:4]
    unchanged = [n for n in initial if torch.equal(initial[n], final[n])]
    assert not unchanged, f"trainable parameters that did not change: {unchanged}"
    before, after = weights(base_checkpoint), weights(output)
    assert before.keys() == after.keys(), "the checkpoint must be a plain model, adapters merged"
    for name in before:
        targeted = any(f"{module}.weight" in name for module in config.lora_target_modules)
        assert torch.equal(before[name], after[name]) != targeted, name


def test_recipes_hold_the_papers_numbers_and_build_valid_configs(base_checkpoint, examples, tmp_path):
    paper_sft, paper_grpo = recipe_config("paper", "sft"), recipe_config("paper", "grpo")
    assert (paper_sft["learning_rate"], paper_sft["batch_size"], paper_sft["epochs"], paper_sft["max_length"]) == (2e-5, 128, 3, 65536)
    assert (paper_grpo["learning_rate"], paper_grpo["beta"]) == (5e-7, 0.04)
    paths = {"base_checkpoint": str(base_checkpoint), "examples": str(examples), "output_checkpoint": str(tmp_path / "o")}
    for recipe in RECIPES:
        SFTJobConfig.from_dict({**recipe_config(recipe, "sft"), **paths})
        GRPOJobConfig.from_dict({**recipe_config(recipe, "grpo"), **paths, "reference_checkpoint": str(base_checkpoint)})
    with pytest.raises(ValueError, match="unknown training recipe 'big'"):
        recipe_config("big", "sft")


def test_loop_config_takes_the_recipe_and_its_overrides():
    from clawloop_assets.loop_config import LoopConfig

    paper = LoopConfig(training_recipe="paper", grpo_learning_rate=1e-6)
    assert paper.training_job_config("grpo")["learning_rate"] == 1e-6
    assert paper.training_job_config("grpo")["beta"] == 0.04
    assert paper.training_job_config("sft")["learning_rate"] == 2e-5
    cpu = LoopConfig(train_batch_size=4, seed=7).training_job_config("sft")
    assert (cpu["batch_size"], cpu["learning_rate"], cpu["seed"]) == (4, 1e-5, 7)
    assert "max_steps" not in cpu  # unset: the job's default, every step
    assert LoopConfig(train_max_steps=3).training_job_config("grpo")["max_steps"] == 3


def test_max_steps_keeps_the_first_steps_of_the_epochs_schedule(tmp_path):
    from training_jobs.optimization import step_schedule

    paths = {"base_checkpoint": str(tmp_path / "base"), "examples": str(tmp_path / "e.jsonl"),
             "output_checkpoint": str(tmp_path / "out")}
    every = SFTJobConfig.from_dict({**paths, "batch_size": 3, "epochs": 2})
    capped = SFTJobConfig.from_dict({**paths, "batch_size": 3, "epochs": 2, "max_steps": 5})
    schedule = step_schedule(list(range(10)), every)
    assert len(schedule) == 8  # 2 epochs x ceil(10 / 3)
    assert step_schedule(list(range(10)), capped) == schedule[:5]
    with pytest.raises(ValueError, match="max_steps must be >= 0"):
        SFTJobConfig.from_dict({**paths, "max_steps": -1})


def test_activation_checkpointing_trains_the_same_weights(base_checkpoint, examples, tmp_path):
    plain = grpo_config(base_checkpoint, examples, tmp_path / "plain")
    checkpointed = grpo_config(base_checkpoint, examples, tmp_path / "checkpointed", gradient_checkpointing=True)
    first = train_grpo(GRPOJobConfig.from_dict(plain), log=lambda m: None)
    second = train_grpo(GRPOJobConfig.from_dict(checkpointed), log=lambda m: None)
    assert second["losses"] == pytest.approx(first["losses"], abs=1e-5)
    expected, got = weights(tmp_path / "plain"), weights(tmp_path / "checkpointed")
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-5), name
