"""The paper's GPU recipe on a GPU node: seconds per step and peak GPU memory
of the real SFT and GRPO jobs (bf16 autocast, gradient checkpointing, batch
128), on the embedded model's architecture and on a SmolLM2-1.7B-shaped model
with trajectories of the paper's maximum length (65,536 tokens). Weights are
random (no model hub on a GPU node here): step time and memory do not depend
on them.

    python -m benchmarks.gpu_training [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from resources.checkpoints import write_checkpoint
from training_jobs.configs import GRPOJobConfig, SFTJobConfig, recipe_config
from training_jobs.grpo import train_grpo
from training_jobs.sft import train_sft

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, tie_word_embeddings=True)
SMOLLM2_1_7B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                    num_key_value_heads=32, head_dim=64, tie_word_embeddings=True)
VOCAB = 49152


def make_base(shape: dict, directory: Path) -> Path:
    config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=65536 + 1, **shape)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    return write_checkpoint(lambda tmp: model.save_pretrained(tmp), directory, {"kind": "random", **shape})


def write_trajectories(path: Path, count: int, length: int, turns: int, groups: int) -> Path:
    """Multi-turn shape: a prompt, then `turns` x (48 action tokens, an observation)."""
    g = torch.Generator().manual_seed(1)
    action = 48
    observation = (length - 300 - turns * action) // turns
    mask = [0] * 300
    for _ in range(turns):
        mask += [1] * action + [0] * observation
    mask += [0] * (length - len(mask))
    uniform = -math.log(VOCAB)  # a random model's log-prob: ratios near 1
    with path.open("w") as f:
        for i in range(count):
            f.write(json.dumps({
                "rollout_id": f"r{i}", "group_id": f"g{i % groups}", "reward": float(i % 3 == 0),
                "token_ids": torch.randint(3, VOCAB, (length,), generator=g).tolist(), "action_mask": mask,
                "sampling_logprobs": [uniform if m else 0.0 for m in mask], "temperature": 1.0,
            }) + "\n")
    return path


def run(job: str, base: Path, examples: Path, work: Path, **overrides) -> dict:
    fields = recipe_config("paper", job) | {"base_checkpoint": str(base), "examples": str(examples),
                                             "output_checkpoint": str(work / f"{job}-out"), "torch_threads": 8,
                                             "device": "cuda", "epochs": 1} | overrides
    if job == "grpo":
        fields["reference_checkpoint"] = str(base)
    torch.cuda.reset_peak_memory_stats()
    started = time.monotonic()
    train = train_sft if job == "sft" else train_grpo
    result = train((SFTJobConfig if job == "sft" else GRPOJobConfig).from_dict(fields), log=lambda m: print(m, flush=True))
    return {"steps": result["steps"], "seconds_per_step": round(result["seconds_per_step"], 3),
            "peak_gpu_memory_mb": round(result.get("peak_gpu_memory_mb", 0.0)), "seconds": round(time.monotonic() - started, 1),
            "action_tokens_trained": result["action_tokens_trained"], "final_loss": result["final_loss"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU: this benchmark is for GPU nodes")
    results = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        small = make_base(SMOLLM2_135M, work / "smollm2-135m")
        # Batch 128 of 4,096-token, 4-turn trajectories: 2 optimizer steps per job.
        data = write_trajectories(work / "small.jsonl", 256, 4096, 4, 32)
        results["smollm2_135m_sft_batch128_len4096"] = run("sft", small, data, work)
        results["smollm2_135m_grpo_batch128_len4096"] = run("grpo", small, data, work)
        large = make_base(SMOLLM2_1_7B, work / "smollm2-1.7b")
        # The paper's maximum length: trajectories are padded to it, never cut.
        long = write_trajectories(work / "long.jsonl", 4, 65536, 16, 2)
        results["smollm2_1.7b_sft_len65536"] = run("sft", large, long, work, batch_size=2)
        results["smollm2_1.7b_grpo_len65536"] = run("grpo", large, long, work, batch_size=2)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
