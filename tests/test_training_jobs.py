"""The SFT and GRPO jobs on a tiny random Llama: standalone, and through the
subprocess launcher inside a real Dagster materialization."""

import json
import os
from pathlib import Path

import dagster as dg
import pytest
import torch
from tiny_llama import (
    assert_trained_checkpoint,
    job_config,
    make_tiny_checkpoint,
    write_tiny_examples,
)
from transformers import LlamaForCausalLM

from resources.checkpoints import (
    CheckpointError,
    verify_checkpoint,
)
from resources.training_launcher import (
    SubprocessTrainingLauncher,
    TrainingJobError,
    TrainingLauncher,
)
from training_jobs.configs import GRPOJobConfig, SFTJobConfig
from training_jobs.grpo import train_grpo
from training_jobs.job_io import run_job, standalone_result_path
from training_jobs.policy_gradient import MIN_SHARED_PREFIX_TOKENS, shared_prefix_length, token_logprobs
from training_jobs.sft import train_sft
from training_jobs.trajectories import load_trajectories, pad_batch, parse_trajectory

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch.set_num_threads(1)  # two shared cores; the model is tiny

@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("models") / "base")


@pytest.fixture(scope="module")
def examples(base_checkpoint, tmp_path_factory) -> Path:
    return write_tiny_examples(base_checkpoint, tmp_path_factory.mktemp("data") / "trajectories.jsonl")


def test_token_logprobs_match_full_log_softmax_at_temperature(base_checkpoint, examples):
    model = LlamaForCausalLM.from_pretrained(base_checkpoint)
    padded = pad_batch(load_trajectories(examples)[:4])  # different lengths: padding included
    with torch.no_grad():
        got = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)
        logits = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits[:, :-1]
        full = torch.log_softmax(logits / padded.temperature[:, None, None], dim=-1)
    expected = full.gather(-1, padded.target_ids[..., None]).squeeze(-1)
    actions = padded.target_action_mask > 0
    assert torch.allclose(got[actions], expected[actions], atol=1e-5)
    assert torch.all(got[~actions] == 0)



def test_token_logprobs_share_a_common_prefix_exactly(base_checkpoint):
    """Rows that open with the same tokens (every rollout's system prompt) run
    them once; the log-probs and the gradient are those of each row alone."""
    model = LlamaForCausalLM.from_pretrained(base_checkpoint)
    g = torch.Generator().manual_seed(7)
    prefix = torch.randint(1, 128, (MIN_SHARED_PREFIX_TOKENS + 4,), generator=g).tolist()
    rows = []
    for i, (prompt, actions) in enumerate([(6, 5), (2, 9), (12, 3)]):  # different lengths: padding included
        ids = prefix + torch.randint(1, 128, (prompt + actions,), generator=g).tolist()
        mask = [0] * (len(prefix) + prompt) + [1] * actions
        rows.append(parse_trajectory({"rollout_id": f"r{i}", "group_id": "g", "reward": 1.0, "token_ids": ids,
                                      "action_mask": mask, "sampling_logprobs": [0.0] * len(ids),
                                      "temperature": 0.7}, f"r{i}"))

    def loss_and_grads(trajectories):
        model.zero_grad()
        padded = pad_batch(trajectories)
        logprobs = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature,
                                  padded.target_action_mask)
        (logprobs * padded.target_action_mask).sum().backward()
        return logprobs.detach(), [p.grad.clone() for p in model.parameters()]

    padded = pad_batch(rows)
    assert shared_prefix_length(padded.input_ids, padded.attention_mask, padded.target_action_mask) == len(prefix)
    batched, batched_grads = loss_and_grads(rows)
    alone_grads = None
    for row, trajectory in enumerate(rows):  # one row: no second row to share with, the plain forward
        logprobs, grads = loss_and_grads([trajectory])
        width = logprobs.shape[1]
        assert torch.allclose(batched[row, :width], logprobs[0], atol=1e-5)
        assert torch.all(batched[row, width:] == 0)
        alone_grads = grads if alone_grads is None else [a + b for a, b in zip(alone_grads, grads)]
    for batched_grad, alone_grad in zip(batched_grads, alone_grads):
        assert torch.allclose(batched_grad, alone_grad, atol=1e-5, rtol=1e-4)

def test_sft_job_standalone(base_checkpoint, examples, tmp_path):
    output = tmp_path / "sft"
    config_file = tmp_path / "sft.json"
    config_file.write_text(json.dumps(job_config(base_checkpoint, examples, output)))

    run_job(train_sft, SFTJobConfig, ["--config", str(config_file)])

    result = json.loads(standalone_result_path(output).read_text())
    assert_trained_checkpoint(base_checkpoint, output, "sft")
    # 7 successes (g1: 2, g2: 4, g3: 1); the 40-token success is dropped.
    assert result["examples_successful"] == 7
    assert result["examples_dropped_too_long"] == 1
    assert result["examples_used"] == 6
    assert result["steps"] == 1 and len(result["losses"]) == 1
    assert result["peak_rss_mb"] > 0


def test_grpo_job_standalone(base_checkpoint, examples, tmp_path):
    output = tmp_path / "grpo"
    config = GRPOJobConfig.from_dict(
        job_config(base_checkpoint, examples, output, reference_checkpoint=str(base_checkpoint), batch_size=4, epochs=2)
    )

    result = train_grpo(config, log=lambda message: None)

    assert_trained_checkpoint(base_checkpoint, output, "grpo")
    assert result["groups_total"] == 3
    assert result["groups_skipped_zero_variance"] == 1
    assert result["groups_used"] == 2
    # 8 rollouts in g1 and g3, the 40-token one dropped.
    assert result["examples_dropped_too_long"] == 1
    assert result["examples_used"] == 7
    assert result["steps"] == 4  # 2 epochs x ceil(7 / 4)
    # The first step runs the sampling policy itself and the reference: ratio 1, KL 0.
    assert result["mean_kl"][0] == pytest.approx(0.0, abs=1e-6)
    assert result["clip_fraction"][0] == 0.0
    assert result["mean_kl"][-1] > 0


def test_a_reference_that_sampled_the_groups_is_read_from_them_not_run(base_checkpoint, examples, tmp_path):
    """The examples were sampled by the base checkpoint: its recorded log-probs
    stand in for a forward pass of it, and every step comes out the same up to
    float rounding (a misaligned or wrong-temperature read would not)."""
    runs = {}
    for sampled in (False, True):
        config = GRPOJobConfig.from_dict(job_config(
            base_checkpoint, examples, tmp_path / f"grpo-{sampled}", reference_checkpoint=str(base_checkpoint),
            batch_size=4, epochs=2, reference_sampled=sampled))
        runs[sampled] = train_grpo(config, log=lambda message: None)

    assert runs[False]["reference_logprobs"] == "reference forward pass"
    assert runs[True]["reference_logprobs"] == "recorded at sampling"
    assert runs[True]["mean_kl"][-1] > 1e-4  # the policy moved: the KL term is not trivially 0
    assert runs[True]["mean_kl"] == pytest.approx(runs[False]["mean_kl"], rel=1e-3, abs=1e-6)
    assert runs[True]["losses"] == pytest.approx(runs[False]["losses"], rel=1e-3, abs=1e-6)



def test_grpo_with_max_steps_anchors_each_scheduled_rollout_to_its_own_reference(base_checkpoint, examples, tmp_path):
    # With max_steps only the scheduled rollouts get reference log-probs; each
    # must still get its own: at the first step the policy is the reference
    # (KL 0), and the step is the uncapped job's first step.
    fields = dict(reference_checkpoint=str(base_checkpoint), batch_size=2, epochs=2)
    whole = train_grpo(GRPOJobConfig.from_dict(job_config(base_checkpoint, examples, tmp_path / "whole", **fields)),
                       log=lambda message: None)
    capped = train_grpo(GRPOJobConfig.from_dict(job_config(base_checkpoint, examples, tmp_path / "capped", **fields,
                                                           max_steps=2)), log=lambda message: None)
    assert capped["steps"] == 2 and whole["steps"] == 8
    assert capped["mean_kl"][0] == pytest.approx(0.0, abs=1e-6)
    assert capped["losses"] == pytest.approx(whole["losses"][:2], rel=1e-5, abs=1e-7)
    assert capped["mean_kl"] == pytest.approx(whole["mean_kl"][:2], rel=1e-4, abs=1e-7)


def test_missing_base_checkpoint_fails_clearly_and_writes_nothing(examples, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    config_file = tmp_path / "sft.json"
    config_file.write_text(json.dumps(job_config(tmp_path / "no-such-model", examples, out_dir / "sft")))

    with pytest.raises(CheckpointError, match="no-such-model does not exist"):
        run_job(train_sft, SFTJobConfig, ["--config", str(config_file)])
    assert list(out_dir.iterdir()) == []


def test_config_errors_say_what_to_do(base_checkpoint, examples, tmp_path):
    with pytest.raises(ValueError, match="needs reference_checkpoint"):
        GRPOJobConfig.from_dict(job_config(base_checkpoint, examples, tmp_path / "o"))
    with pytest.raises(ValueError, match=r"unknown config keys \['lr'\]"):
        SFTJobConfig.from_dict({**job_config(base_checkpoint, examples, tmp_path / "o"), "lr": 1e-5})


def test_grpo_job_through_dagster_pipes(base_checkpoint, examples, tmp_path):
    config = job_config(base_checkpoint, examples, tmp_path / "grpo", reference_checkpoint=str(base_checkpoint))

    @dg.asset
    def grpo_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=training_launcher.launch(context, "grpo", config))

    result = dg.materialize([grpo_checkpoint], resources={"training_launcher": SubprocessTrainingLauncher(torch_threads=1)})

    assert result.success
    metadata = result.asset_materializations_for_node("grpo_checkpoint")[0].metadata
    assert metadata["job"].value == "grpo"
    assert metadata["groups_skipped_zero_variance"].value == 1
    assert metadata["examples_dropped_too_long"].value == 1
    assert metadata["steps"].value == 1
    assert len(metadata["losses"].value) == 1
    assert isinstance(metadata["peak_rss_mb"].value, float)
    verify_checkpoint(tmp_path / "grpo")


def test_failed_job_raises_with_its_stderr(examples, tmp_path):
    config = job_config(tmp_path / "no-such-model", examples, tmp_path / "sft")

    @dg.asset
    def sft_checkpoint(context: dg.AssetExecutionContext, training_launcher: TrainingLauncher) -> None:
        training_launcher.launch(context, "sft", config)

    with pytest.raises(TrainingJobError) as failure:
        dg.materialize([sft_checkpoint], resources={"training_launcher": SubprocessTrainingLauncher(torch_threads=1)})
    message = str(failure.value)
    assert "training_jobs.sft failed" in message
    assert "CheckpointError: checkpoint" in message and "no-such-model does not exist" in message
    assert not (tmp_path / "sft").exists()
