"""The OpenAI-compatible policy backend: against a real vLLM server running
here (slow suite), and its failure modes against a port nobody listens on."""

import json

import pytest
import torch
from conftest import closed_port
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from resources.checkpoints import write_checkpoint
from resources.openai_policy import OpenAICompatiblePolicyModel
from resources.policy import PolicyServerError, SamplingParams
from resources.vllm_server import serving_copy

TEMPERATURE = 0.7


def test_an_unreachable_server_is_a_clear_error(base_checkpoint_dir, clawloop_home):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    policy = OpenAICompatiblePolicyModel(base_url=url, max_attempts=2, request_timeout_s=2)
    with pytest.raises(PolicyServerError, match=r"127\.0\.0\.1:\d+/collective_rpc failed 2 times"):
        policy.load(base_checkpoint_dir)


def test_no_configured_server_names_the_variable(base_checkpoint_dir, monkeypatch):
    monkeypatch.delenv("CLAWLOOP_POLICY_URL", raising=False)
    with pytest.raises(PolicyServerError, match="CLAWLOOP_POLICY_URL"):
        OpenAICompatiblePolicyModel().load(base_checkpoint_dir)


def test_the_serving_copy_unties_embeddings_and_keeps_the_function(base_checkpoint_dir, clawloop_home):
    copy = serving_copy(base_checkpoint_dir)
    assert json.loads((copy / "config.json").read_text())["tie_word_embeddings"] is False
    weights = load_file(copy / "model.safetensors")
    assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert serving_copy(base_checkpoint_dir) == copy  # made once per checkpoint


def trainer_logprobs(model, prompt, completion) -> torch.Tensor:
    """log softmax(logits / T) of the sampled tokens, as the trainer computes them (float32)."""
    ids = torch.tensor([list(prompt) + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]


@pytest.mark.slow
def test_samples_carry_token_ids_and_the_sampling_logprobs(vllm_url, base_checkpoint_dir, clawloop_home):
    session = OpenAICompatiblePolicyModel(base_url=vllm_url).load(base_checkpoint_dir)
    prompt = session.chat_tokens([{"role": "user", "content": "Count the lines of data.csv"}],
                                 add_generation_prompt=True) + session.encode("```bash\n")
    (group,) = session.sample([prompt], 8, SamplingParams(max_new_tokens=32, temperature=TEMPERATURE, seed=5))
    assert len(group) == 8 and len({tuple(c.token_ids) for c in group}) > 1
    model = AutoModelForCausalLM.from_pretrained(base_checkpoint_dir, dtype=torch.float32)
    gaps = []
    for completion in group:
        assert len(completion.token_ids) == len(completion.logprobs) <= 32
        assert completion.text == session.decode([t for t in completion.token_ids if t not in session.eos_token_ids])
        if completion.finish_reason == "stop":
            assert "```" in completion.text or completion.token_ids[-1] in session.eos_token_ids
        gaps += (trainer_logprobs(model, prompt, completion) - torch.tensor(completion.logprobs)).abs().tolist()
    # Served in float32, like the trainer: measured about 1e-5 per token here (bfloat16 would be about 0.035).
    mean_gap = sum(gaps) / len(gaps)
    print(f"log-prob gap vLLM float32 vs trainer: mean {mean_gap:.2e}, max {max(gaps):.2e} over {len(gaps)} tokens")
    assert mean_gap < 1e-3


@pytest.mark.slow
def test_new_weights_reach_the_server_in_place(vllm_url, base_checkpoint_dir, clawloop_home):
    # A checkpoint whose output layer (tied to the embeddings) is scaled: the
    # server must sample from it after a reload, and from the base after another.
    weights = load_file(base_checkpoint_dir / "model.safetensors")
    weights["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"] * 1.5

    def save(directory):
        save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
        for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                     "chat_template.jinja"):
            if (base_checkpoint_dir / name).exists():
                (directory / name).write_bytes((base_checkpoint_dir / name).read_bytes())

    changed = write_checkpoint(save, clawloop_home / "checkpoints" / "scaled", {"kind": "test"})
    models = {path: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
              for path in (base_checkpoint_dir, changed)}
    policy = OpenAICompatiblePolicyModel(base_url=vllm_url)
    params = SamplingParams(max_new_tokens=8, temperature=TEMPERATURE, seed=1)
    for checkpoint, other in ((base_checkpoint_dir, changed), (changed, base_checkpoint_dir),
                              (base_checkpoint_dir, changed)):
        session = policy.load(checkpoint)
        probe = session.encode("The capital of France is")
        (group,) = session.sample([probe], 1, params)
        served = torch.tensor(group[0].logprobs)
        # The samples' log-probs are those of the checkpoint just loaded, not of the other one.
        assert torch.allclose(served, trainer_logprobs(models[checkpoint], probe, group[0]), atol=1e-3), checkpoint
        assert (served - trainer_logprobs(models[other], probe, group[0])).abs().max() > 1e-2, checkpoint
