"""A training forward and backward pass with the rows' shared prefix run once
(`token_logprobs`) against the same pass with every row run whole, in one
process, on the embedded model.

The batch is shaped like a round's GRPO batch: eight rollouts of different
tasks, each the agent's real opening (system prompt and worked examples,
through the model's chat template) with its own task instruction, then a
short reply of sampled tokens. Both sides must give the same log-probs (up to
float rounding), or the benchmark fails.

    python -m benchmarks.shared_prefix
"""

from __future__ import annotations

import random
import time

import torch

import training_jobs.policy_gradient as policy_gradient
from training_jobs.trajectories import Trajectory, pad_batch

ROWS = 8
ACTION_TOKENS = 15  # a one-command reply, about the mean of a round's GRPO examples
REPEATS = 3
WORDS = ("count", "the", "rows", "of", "ledger.csv", "where", "status", "is", "open", "and", "write", "total",
         "into", "report.txt", "sorted", "by", "date", "each", "line", "sum", "amount", "per", "account")


def realistic_batch(tokenizer, vocab_size: int, seed: int = 0) -> list[Trajectory]:
    from clawloop_assets.harness.agent_loop import initial_messages

    rng = random.Random(seed)
    rows = []
    for i in range(ROWS):
        instruction = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) + "."
        # As a policy session renders a task's opening: the chat template's text, then its tokens.
        text = tokenizer.apply_chat_template(initial_messages(instruction),
                                             add_generation_prompt=True, tokenize=False)
        prompt = tokenizer.encode(text, add_special_tokens=False)
        actions = [rng.randrange(vocab_size) for _ in range(ACTION_TOKENS)]
        rows.append(Trajectory(f"r{i}", f"g{i}", 1.0, prompt + actions, [0] * len(prompt) + [1] * len(actions),
                               [0.0] * len(prompt) + [-1.0] * len(actions), 0.7))
    return rows


def measure(checkpoint=None) -> dict[str, float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if checkpoint is None:
        from resources.embedded_model import ensure_base_model
        from resources.paths import model_cache_dir

        checkpoint = ensure_base_model(model_cache_dir())
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, use_safetensors=True).eval()
    padded = pad_batch(realistic_batch(AutoTokenizer.from_pretrained(checkpoint), model.config.vocab_size))
    shared = policy_gradient.shared_prefix_length(padded.input_ids, padded.attention_mask, padded.target_action_mask)
    rows, width = padded.input_ids.shape

    def step(share: bool) -> tuple[float, torch.Tensor]:
        saved = policy_gradient.MIN_SHARED_PREFIX_TOKENS
        policy_gradient.MIN_SHARED_PREFIX_TOKENS = saved if share else width + 1  # the plain pass
        try:
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            logprobs = policy_gradient.token_logprobs(model, padded.input_ids, padded.attention_mask,
                                                      padded.temperature, padded.target_action_mask)
            (logprobs * padded.target_action_mask).sum().backward()
            return time.perf_counter() - started, logprobs.detach()
        finally:
            policy_gradient.MIN_SHARED_PREFIX_TOKENS = saved

    step(True)  # warm-up
    times = {True: [], False: []}
    for _ in range(REPEATS):
        for share in (False, True):
            seconds, logprobs = step(share)
            times[share].append(seconds)
            if share:
                shared_logprobs = logprobs
            else:
                plain_logprobs = logprobs
    difference = float((shared_logprobs - plain_logprobs).abs().max())
    if difference > 1e-3:
        raise AssertionError(f"the shared-prefix pass changed a log-prob by {difference}")
    return {
        "training.shared_prefix.tokens_shared": float(shared),
        "training.shared_prefix.token_fraction": (shared + rows * (width - shared)) / (rows * width),
        "training.shared_prefix.step_seconds_plain": min(times[False]),
        "training.shared_prefix.step_ratio": min(times[True]) / min(times[False]),
        "training.shared_prefix.max_logprob_difference": difference,
    }


if __name__ == "__main__":
    for key, value in measure().items():
        print(f"{key}  {value:.4g}")
