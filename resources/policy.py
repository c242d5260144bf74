"""The policy model: the agent being trained. An interface, so the embedded
transformers model and a vLLM / OpenAI-compatible server are interchangeable."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import dagster as dg


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.7
    # Generation of a sample ends once its decoded text contains one of these.
    stop: tuple[str, ...] = ("```",)
    seed: int = 0
    # Where a backend can seed each sample (the embedded one): one stream id per
    # prompt, and the index of the first of its n samples. A sample then depends
    # on (seed, stream id, index, prompt) alone, so samples 6-7 drawn in a later
    # wave are those a single call for 8 would have drawn. Empty: streams by
    # the prompt's position among identical prompts of the call.
    stream_ids: tuple[int, ...] = ()
    first_index: int = 0


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]  # sampled tokens, including the stop sequence when one was hit
    # log p(token) under the sampling distribution, softmax(logits / temperature),
    # one per sampled token: what GRPO's importance ratio is taken against.
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"


class PolicyServerError(RuntimeError):
    """The policy server is unreachable, failed, or answered with something
    unusable: an infrastructure failure, never the agent's."""


def end_of_turn_ids(tokenizer, generation_eos=None) -> frozenset[int]:
    """Token ids that end a sample: the tokenizer's EOS, the chat template's
    end of turn, and the generation config's EOS ids."""
    candidates = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    candidates += generation_eos if isinstance(generation_eos, list) else [generation_eos]
    return frozenset(i for i in candidates if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id)


class PolicySession(ABC):
    """One loaded checkpoint, ready to sample. Token ids in, token ids out, so
    the trainer never re-tokenizes what was sampled."""

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, token_ids: Sequence[int]) -> str: ...

    @abstractmethod
    def chat_text(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        """A chat rendered as text with the model's own template."""

    def chat_tokens(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> list[int]:
        """Token ids of a chat rendered with the model's own template."""
        return self.encode(self.chat_text(messages, add_generation_prompt=add_generation_prompt))

    @abstractmethod
    def sample(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        """`n` samples for each prompt, batched across prompts and samples."""

    def sample_streaming(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
        on_complete: Callable[[int, int, Completion], None],
    ) -> list[list[Completion]]:
        """`sample`, calling `on_complete(prompt position, sample index,
        completion)` for each completion as soon as it is final, so a caller
        can act on early finishers while the rest are sampled. The completions
        are those `sample` gives. By default they are all reported when the
        call ends; a backend that can report them earlier overrides this. The
        callback may run on another thread and must be quick."""
        completions = self.sample(prompts, n, params)
        for position, group in enumerate(completions):
            for index, completion in enumerate(group):
                on_complete(position, index, completion)
        return completions

    def close(self) -> None:
        """Free the weights."""


class ChatTemplate:
    """A checkpoint's tokenizer and chat template without its weights: the
    prompts a session of that checkpoint builds, token for token (both
    backends' sessions build them this way). What the trainer needs to
    write a prompt the sampler would have written."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def of_checkpoint(cls, checkpoint_dir: Path) -> "ChatTemplate":
        from transformers import AutoTokenizer

        from resources.checkpoints import verify_checkpoint

        verify_checkpoint(Path(checkpoint_dir))  # raises CheckpointError naming the directory
        return cls(AutoTokenizer.from_pretrained(checkpoint_dir, local_files_only=True))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def chat_text(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)

    chat_tokens = PolicySession.chat_tokens


class PolicyModel(dg.ConfigurableResource, ABC):
    """Where policy weights come from and how a checkpoint becomes a session."""

    @abstractmethod
    def base_checkpoint(self) -> Path:
        """Directory of the verified base checkpoint that round 1 starts from."""

    @abstractmethod
    def load(self, checkpoint_dir: Path) -> PolicySession:
        """Load a verified checkpoint (see resources.checkpoints)."""
