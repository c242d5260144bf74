"""A tiny random Llama checkpoint and recorded trajectories for the training
job tests (a few thousand parameters: each job runs in about a second)."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from resources.checkpoints import verify_checkpoint, write_checkpoint
from training_jobs.policy_gradient import token_logprobs
from training_jobs.trajectories import pad_batch, parse_trajectory

VOCAB = 128
MAX_LENGTH = 32  # the over-length example below has 40 tokens
TOKENIZER_CONFIG = '{"model_max_length": 64}'  # stands in for the base's tokenizer files, copied unchanged


def make_tiny_checkpoint(directory: Path) -> Path:
    torch.manual_seed(0)
    # Shrunk to a few thousand parameters: 2 layers, hidden 32, vocab 128.
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config)

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        (tmp / "tokenizer_config.json").write_text(TOKENIZER_CONFIG)

    return write_checkpoint(save, directory, {"kind": "test"})


def make_trajectory(model, rollout_id: str, group_id: str, reward: float, length: int, seed: int) -> dict:
    """Prompt, action, observation, action; sampling log-probs computed by the
    base model itself at the recorded temperature, as the sampler would have."""
    g = torch.Generator().manual_seed(seed)
    token_ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
    quarter = length // 4
    mask = [0] * quarter + [1] * quarter + [0] * quarter + [1] * (length - 3 * quarter)
    record = {
        "rollout_id": rollout_id,
        "group_id": group_id,
        "reward": reward,
        "token_ids": token_ids,
        "action_mask": mask,
        "sampling_logprobs": [0.0] * length,
        "temperature": 0.7,
    }
    padded = pad_batch([parse_trajectory(record, rollout_id)])
    with torch.no_grad():
        logprobs = token_logprobs(model, padded.input_ids, padded.attention_mask, padded.temperature, padded.target_action_mask)[0]
    record["sampling_logprobs"] = [0.0] + [lp if m else 0.0 for lp, m in zip(logprobs.tolist(), mask[1:])]
    return record


def write_tiny_examples(base_checkpoint: Path, path: Path) -> Path:
    model = LlamaForCausalLM.from_pretrained(base_checkpoint)
    rows = [
        # (group, reward, length): g1 and g3 are informative, g2 all-pass (zero variance).
        ("g1", 1.0, 24), ("g1", 0.0, 20), ("g1", 1.0, 40), ("g1", 0.0, 16),
        ("g2", 1.0, 12), ("g2", 1.0, 28), ("g2", 1.0, 16), ("g2", 1.0, 20),
        ("g3", 0.0, 24), ("g3", 1.0, 32), ("g3", 0.0, 12), ("g3", 0.0, 8),
    ]  # fmt: skip
    with path.open("w") as f:
        for i, (group, reward, length) in enumerate(rows):
            f.write(json.dumps(make_trajectory(model, f"r{i}", group, reward, length, seed=i)) + "\n")
    return path


def job_config(base_checkpoint, examples, output, **overrides) -> dict:
    return {
        "base_checkpoint": str(base_checkpoint),
        "examples": str(examples),
        "output_checkpoint": str(output),
        "learning_rate": 1e-3,  # tiny random model: a visible step
        "batch_size": 8,
        "max_length": MAX_LENGTH,
        "max_tokens_per_forward": 64,  # forces several forward passes per step
        "torch_threads": 1,
        **overrides,
    }


def assert_every_parameter_changed(base_checkpoint: Path, output: Path) -> None:
    before = load_file(base_checkpoint / "model.safetensors")
    after = load_file(output / "model.safetensors")
    assert before.keys() == after.keys()
    unchanged = [name for name in before if torch.equal(before[name], after[name])]
    assert not unchanged, f"parameters that did not change: {unchanged}"


def assert_trained_checkpoint(base_checkpoint: Path, output: Path, job: str) -> dict:
    manifest = verify_checkpoint(output)
    assert manifest["metadata"]["job"] == job
    assert (output / "tokenizer_config.json").read_text() == TOKENIZER_CONFIG
    assert manifest["metadata"]["tokenizer_files_copied"] == ["tokenizer_config.json"]
    assert_every_parameter_changed(base_checkpoint, output)
    LlamaForCausalLM.from_pretrained(output)  # loads back
    return manifest
