"""The local policy model: a transformers causal LM on CPU with its own sampling
loop, so every sampled token comes with the exact log-probability GRPO needs,
and each prompt is prefilled once however many samples it gets. A session also
keeps the prefills of earlier prompts, so a later prompt runs only the tokens
past the longest run it shares with one: a multi-turn rollout's next turn its
new turn, another task's first turn its own instruction (the system prompt and
worked examples every task starts with are already there)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from pydantic import Field
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from resources import paths
from resources.checkpoints import verify_checkpoint
from resources.embedded_model import ensure_base_model
from resources.policy import ChatTemplate, Completion, PolicyModel, PolicySession, SamplingParams, end_of_turn_ids


class EmbeddedPolicyModel(PolicyModel):
    """SmolLM2-135M-Instruct (or a checkpoint trained from it), run in-process with transformers."""

    model_cache_dir: str = Field(default="", description="Where the base model is cached; empty means $CLAWLOOP_HOME/models.")
    torch_threads: int = Field(default=2, description="torch.set_num_threads for sampling in this process.")
    max_batch_sequences: int = Field(default=64, description="Most sequences decoded together in one forward pass.")
    prefix_cache_tokens: int = Field(
        default=16384,
        description=(
            "Most prompt tokens whose keys/values a session keeps from earlier prompts, so a prompt that "
            "shares a leading run with one prefills only the rest; 0 turns the cache off. SmolLM2-135M holds "
            "about 46 KB per token (30 layers x keys and values x 3 heads x 64 dims x 4 bytes), so the "
            "default is about 750 MB."
        ),
    )

    def base_checkpoint(self) -> Path:
        return ensure_base_model(Path(self.model_cache_dir) if self.model_cache_dir else paths.model_cache_dir())

    def load(self, checkpoint_dir: Path) -> TransformersPolicySession:
        checkpoint_dir = Path(checkpoint_dir)
        verify_checkpoint(checkpoint_dir)  # raises CheckpointError: nothing unverified is ever loaded
        torch.set_num_threads(self.torch_threads)
        # use_safetensors=True: a pickled .bin is never read (verify_checkpoint also rejects them).
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint_dir, dtype=torch.float32, use_safetensors=True, local_files_only=True
        )
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir, local_files_only=True)
        return TransformersPolicySession(
            model,
            tokenizer,
            max_batch_sequences=self.max_batch_sequences,
            prefix_cache_tokens=self.prefix_cache_tokens,
        )


@dataclass
class _Prefill:
    """A prompt run through the model once: its per-layer keys/values and next-token logits."""

    length: int
    keys: list[torch.Tensor]  # per layer, [1, kv_heads, length, head_dim]
    values: list[torch.Tensor]
    last_logits: torch.Tensor | None  # [vocab]; None for a head cut from a longer prefill

    def head(self, length: int) -> _Prefill:
        """The prefill of this prompt's first `length` tokens: views of its keys/values
        (causal attention: no position ever saw a later one), with no logits."""
        if length == self.length:
            return self
        return _Prefill(length, [k[:, :, :length] for k in self.keys], [v[:, :, :length] for v in self.values], None)


class _PrefixCache:
    """Prefills of earlier prompts, keyed by their token ids and bounded by the
    tokens they hold. A new prompt reuses the cached prefill that shares the
    most leading tokens with it: a whole cached prompt it extends (a rollout's
    next turn), or the head of one it only starts like (another task's first
    turn, which shares the system prompt and worked examples).

    Eviction is least recently used, except that prompts which were themselves
    prefilled on top of a whole cached prompt ("derived": a rollout's second or
    later turn, one per rollout) go before the others (a task's first turn,
    shared by all its rollouts): a turn's hundreds of derived prompts would
    otherwise push out the few first turns that the rest of that same turn
    still needs."""

    # A head shorter than this is not worth a separate batch of extensions.
    MIN_SHARED_TOKENS = 32

    def __init__(self, max_tokens: int):
        if max_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[tuple[int, ...], tuple[_Prefill, bool, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def longest_shared(self, prompt: tuple[int, ...]) -> tuple[_Prefill, int] | None:
        """The cached prefill sharing the most leading tokens with `prompt`, and how
        many of them to reuse: all of a cached prompt that `prompt` extends or is;
        else the shared run, at least MIN_SHARED_TOKENS and short of the whole
        prompt (its last token must run to give the next token's logits). Marked
        as just used; None when no entry shares enough."""
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_length = None, 0
        for key, (_, _, key_ids) in self._entries.items():
            n = min(len(key_ids), len(ids))
            differ = np.flatnonzero(key_ids[:n] != ids[:n])
            shared = int(differ[0]) if differ.size else n
            if shared == len(key):
                usable = shared  # a whole cached prompt: its logits are the next token's
            else:
                usable = min(shared, len(prompt) - 1)
                if usable < self.MIN_SHARED_TOKENS:
                    continue
            if usable > best_length:
                best, best_length = key, usable
        if best is None:
            return None
        self._entries.move_to_end(best)
        return self._entries[best][0], best_length

    def put(self, key: tuple[int, ...], prefill: _Prefill, *, derived: bool) -> None:
        if key in self._entries or prefill.length > self.max_tokens:
            return
        self._entries[key] = (prefill, derived, np.asarray(key, dtype=np.int64))
        self.tokens += prefill.length
        while self.tokens > self.max_tokens:
            victim = next((k for k, (_, d, _) in self._entries.items() if d and k != key), None)
            if victim is None:
                victim = next(iter(self._entries))
            self.tokens -= self._entries.pop(victim)[0].length

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0


@dataclass
class _Sequence:
    """One sample in flight."""

    prefill: _Prefill
    generator: torch.Generator
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    checked_chars: int = 0  # decoded text before this offset holds no stop string
    finish_reason: str | None = None


class TransformersPolicySession(ChatTemplate, PolicySession):
    def __init__(self, model, tokenizer, *, max_batch_sequences: int = 64, prefix_cache_tokens: int = 16384):
        if max_batch_sequences < 1:
            raise ValueError(f"max_batch_sequences must be >= 1, got {max_batch_sequences}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_sequences = max_batch_sequences
        self.prefix_cache = _PrefixCache(prefix_cache_tokens)
        self.eos_token_ids = end_of_turn_ids(tokenizer, getattr(model.generation_config, "eos_token_id", None))

    def close(self) -> None:
        self.prefix_cache.clear()
        self.model = None
        self.tokenizer = None

    def sample(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        return self.sample_streaming(prompts, n, params, on_complete=lambda position, index, completion: None)

    @torch.inference_mode()
    def sample_streaming(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
        on_complete: Callable[[int, int, Completion], None],
    ) -> list[list[Completion]]:
        """`n` samples per prompt, each reported to `on_complete` the moment it
        finishes decoding. A sample's randomness depends only on the seed, its
        prompt, its stream (`params.stream_ids`, else which repeat of that prompt
        it is) and its index (from `params.first_index`), never on what else shares
        the batch: batching changes nothing but float rounding."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if params.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {params.temperature}")
        if params.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {params.max_new_tokens}")
        prompts = [list(p) for p in prompts]
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")

        prefills = self._prefill_all(prompts)

        if params.stream_ids and len(params.stream_ids) != len(prompts):
            raise ValueError(f"stream_ids has {len(params.stream_ids)} ids for {len(prompts)} prompts")
        repeats: dict[tuple[int, ...], int] = defaultdict(int)
        groups: list[list[_Sequence]] = []
        for position, prompt in enumerate(prompts):
            key = tuple(prompt)
            stream = params.stream_ids[position] if params.stream_ids else repeats[key]
            repeats[key] += 1
            groups.append(
                [
                    _Sequence(prefills[key], _sample_generator(params.seed, prompt, stream, params.first_index + index))
                    for index in range(n)
                ]
            )

        completions: dict[int, Completion] = {}
        where = {id(seq): (position, index) for position, group in enumerate(groups) for index, seq in enumerate(group)}

        def finished(seq: _Sequence) -> None:
            completions[id(seq)] = Completion(
                token_ids=seq.token_ids,
                logprobs=seq.logprobs,
                text=self._completion_text(seq.token_ids),
                finish_reason=seq.finish_reason,
            )
            on_complete(*where[id(seq)], completions[id(seq)])

        # Samples of one prompt stay adjacent so chunks mostly share prompt lengths.
        flat = [seq for group in groups for seq in group]
        for start in range(0, len(flat), self.max_batch_sequences):
            self._decode(flat[start : start + self.max_batch_sequences], params, finished)

        return [[completions[id(seq)] for seq in group] for group in groups]

    def _prefill_all(self, prompts: list[list[int]]) -> dict[tuple[int, ...], _Prefill]:
        """A prefill for every distinct prompt: taken from the prefix cache when the
        prompt is cached whole, its new tokens run on top of the cached prefill that
        shares the most leading tokens with it (`_PrefixCache.longest_shared`), and
        run from scratch otherwise."""
        cache = self.prefix_cache
        prefills: dict[tuple[int, ...], _Prefill] = {}
        # (id(base), tokens reused) -> (base, prompts)
        extending: dict[tuple[int, int], tuple[_Prefill, list[tuple[int, ...]]]] = {}
        seen: set[tuple[int, ...]] = set()
        for prompt in prompts:
            key = tuple(prompt)
            if key in seen:
                continue
            seen.add(key)
            found = cache.longest_shared(key) if cache.max_tokens else None
            if found is None:
                prefills[key] = self._prefill(prompt)
                if cache.max_tokens:
                    cache.put(key, prefills[key], derived=False)
            elif found[1] == len(key):
                prefills[key] = found[0]
            else:
                base, length = found
                extending.setdefault((id(base), length), (base, []))[1].append(key)
        # `extending` holds its bases, so evictions while these run cannot lose one.
        for (_, length), (base, keys) in extending.items():
            head = base.head(length)
            for batch in _suffix_batches(keys, length, self.max_batch_sequences):
                for key, prefill in zip(batch, self._extend(head, [list(k[length:]) for k in batch])):
                    prefills[key] = prefill
                    cache.put(key, prefill, derived=head is base)
        return prefills

    def _extend(self, base: _Prefill, suffixes: list[list[int]]) -> list[_Prefill]:
        """Prefill each base prompt + suffix by running only the suffixes, batched and
        right-padded, on copies of the base's keys/values. Causal attention means no
        real token ever sees a padding token (they all come after it), so no mask is
        needed and each row is exactly its own prompt's prefill, up to float rounding."""
        rows, start = len(suffixes), base.length
        width = max(len(suffix) for suffix in suffixes)
        layers = [
            _PreallocatedLayer(
                keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), start + width
            )  # copies: the cached tensors are never written
            for keys, values in zip(base.keys, base.values)
        ]
        pad = suffixes[0][-1]  # any real id: padding only ever follows the real tokens
        input_ids = torch.tensor([suffix + [pad] * (width - len(suffix)) for suffix in suffixes])
        last = torch.tensor([[len(suffix) - 1] for suffix in suffixes])
        out = self.model(
            input_ids=input_ids,
            position_ids=torch.arange(start, start + width)[None].expand(rows, -1),
            cache=Cache(layers=layers),
            use_cache=True,
            logits_to_keep=last,
        )
        return [
            _Prefill(
                length=start + len(suffix),
                keys=[layer.keys[row : row + 1, :, : start + len(suffix)].clone() for layer in layers],
                values=[layer.values[row : row + 1, :, : start + len(suffix)].clone() for layer in layers],
                last_logits=out.logits[row, 0].float().clone(),
            )
            for row, suffix in enumerate(suffixes)
        ]

    def _prefill(self, prompt: list[int]) -> _Prefill:
        cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True, logits_to_keep=1)
        return _Prefill(
            length=len(prompt),
            keys=[layer.keys for layer in cache.layers],
            values=[layer.values for layer in cache.layers],
            last_logits=out.logits[0, -1].float(),
        )

    def _decode(self, batch: list[_Sequence], params: SamplingParams, finished: Callable[[_Sequence], None]) -> None:
        """Decode one batch of sequences to completion, left-padding their prompts'
        caches to a common length and dropping rows as they finish (each
        passed to `finished` then)."""
        width = max(seq.prefill.length for seq in batch)
        capacity = width + params.max_new_tokens
        layers = []
        for layer in range(len(batch[0].prefill.keys)):
            keys = torch.cat([_left_pad(seq.prefill.keys[layer], width) for seq in batch])
            values = torch.cat([_left_pad(seq.prefill.values[layer], width) for seq in batch])
            layers.append(_PreallocatedLayer(keys, values, capacity))
        cache = Cache(layers=layers)
        attention_mask = torch.zeros(len(batch), width, dtype=torch.long)
        for row, seq in enumerate(batch):
            attention_mask[row, width - seq.prefill.length :] = 1
        next_position = torch.tensor([seq.prefill.length for seq in batch])

        active = list(batch)
        logits = torch.stack([seq.prefill.last_logits for seq in batch])
        stop_strings = params.stop
        longest_stop = max((len(s) for s in stop_strings), default=0)
        for _ in range(params.max_new_tokens):
            logprobs_all = torch.log_softmax(logits.float() / params.temperature, dim=-1)
            tokens = _sample_rows(logprobs_all, [seq.generator for seq in active])
            chosen = logprobs_all.gather(1, tokens[:, None])[:, 0]
            keep = []
            for row, seq in enumerate(active):
                token = int(tokens[row])
                seq.token_ids.append(token)
                seq.logprobs.append(float(chosen[row]))
                if token in self.eos_token_ids or self._hit_stop(seq, stop_strings, longest_stop):
                    seq.finish_reason = "stop"
                elif len(seq.token_ids) >= params.max_new_tokens:
                    seq.finish_reason = "length"
                else:
                    keep.append(row)
                    continue
                finished(seq)
            if not keep:
                break
            if len(keep) < len(active):
                # Finished rows leave the batch so they cost no more compute.
                index = torch.tensor(keep)
                cache.batch_select_indices(index)
                attention_mask = attention_mask[index]
                next_position = next_position[index]
                tokens = tokens[index]
                active = [active[row] for row in keep]
            attention_mask = torch.cat([attention_mask, torch.ones(len(active), 1, dtype=torch.long)], dim=1)
            out = self.model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=next_position[:, None],
                cache=cache,
                use_cache=True,
            )
            next_position = next_position + 1
            logits = out.logits[:, -1]

    def _hit_stop(self, seq: _Sequence, stop_strings: tuple[str, ...], longest_stop: int) -> bool:
        if not stop_strings:
            return False
        text = self.tokenizer.decode(seq.token_ids, skip_special_tokens=False)
        # Only text that is new since the last check (plus a stop's length of overlap, and a
        # little slack because the tail of a multi-byte character can change) needs a look.
        start = max(0, seq.checked_chars - longest_stop - 4)
        seq.checked_chars = len(text)
        return any(stop in text[start:] for stop in stop_strings)

    def _completion_text(self, token_ids: list[int]) -> str:
        # A closing EOS token is kept in token_ids (it was sampled and is trained on) but is not text.
        if token_ids and token_ids[-1] in self.eos_token_ids:
            token_ids = token_ids[:-1]
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)


class _PreallocatedLayer(DynamicLayer):
    """A DynamicLayer that writes new keys/values into room reserved up front.
    DynamicLayer concatenates the whole cache on every token: that copy was about
    40% of CPU decode time at 8 x 300 tokens."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        batch, heads, length, dim = keys.shape
        self._key_room = keys.new_empty(batch, heads, capacity, dim)
        self._value_room = values.new_empty(batch, heads, capacity, values.shape[3])
        self._key_room[:, :, :length] = keys
        self._value_room[:, :, :length] = values
        self._length = length
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def _expose(self) -> None:
        self.keys = self._key_room[:, :, : self._length]
        self.values = self._value_room[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self._length + key_states.shape[2]
        if end > self._key_room.shape[2]:
            raise RuntimeError(f"KV cache room of {self._key_room.shape[2]} tokens exceeded")
        self._key_room[:, :, self._length : end] = key_states
        self._value_room[:, :, self._length : end] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._key_room = self._key_room[indices]
        self._value_room = self._value_room[indices]
        self._expose()


def _suffix_batches(keys: list[tuple[int, ...]], start: int, max_rows: int) -> list[list[tuple[int, ...]]]:
    """Prompts extending one prefix, in batches of similar suffix lengths, so that
    right padding costs at most about a quarter more tokens than the suffixes hold."""
    batches: list[list[tuple[int, ...]]] = []
    batch: list[tuple[int, ...]] = []
    real = 0
    for key in sorted(keys, key=len):
        length = len(key) - start
        # Sorted ascending, so this suffix is the longest in the batch if it joins.
        if batch and (len(batch) >= max_rows or (len(batch) + 1) * length > 1.25 * (real + length)):
            batches.append(batch)
            batch, real = [], 0
        batch.append(key)
        real += length
    if batch:
        batches.append(batch)
    return batches


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - states.shape[2]
    if missing == 0:
        return states
    pad = states.new_zeros(states.shape[0], states.shape[1], missing, states.shape[3])
    return torch.cat([pad, states], dim=2)


def _sample_generator(seed: int, prompt: list[int], occurrence: int, index: int) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}|{occurrence}|{index}|{','.join(map(str, prompt))}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def _sample_rows(logprobs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """Inverse-CDF sampling from each row's distribution with that row's own generator,
    so a row's draw does not depend on the other rows in the batch."""
    uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    cdf = torch.cumsum(logprobs.double().exp(), dim=-1)
    # Scale by the total so rounding in the sum can never push the draw past the last token.
    targets = (uniforms * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, targets, right=True)[:, 0].clamp_(max=logprobs.shape[-1] - 1)
