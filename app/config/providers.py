"""Providers and their models in ``providers.yaml``: prices, limits, timeouts and what
each model serves. A deployment is one (provider, model) pair, named ``provider:model``
(:func:`deployment_id`) as a request pins it. API keys are held as ``SecretStr`` and
left out of the routing view, the config hash, ``repr`` and every error message.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

#: The cost bonus's table ($ per 1M tokens), resolved by provider-id prefix
#: (docs/design.md#ucb1-and-thompson-sampling).
SEED_COST_PER_1M: dict[str, float] = {
    "cerebras": 0.20,
    "groq": 0.30,
    "deepseek": 0.50,
    "deepinfra": 0.60,
    "together": 0.80,
    "fireworks": 0.90,
    "cohere": 1.00,
    "perplexity": 1.00,
    "gemini": 1.25,
    "ai21": 1.50,
    "mistral": 2.00,
    "openrouter": 3.00,
    "openai": 5.00,
    "anthropic": 8.00,
    "huggingface": 0.00,
}
DEFAULT_COST_PER_1M = 2.0


def _is_chat(kind: object) -> bool:
    return kind == "chat"


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    #: What the model serves: chat completions (``chat``, the default) or embeddings
    #: (``embeddings``: OpenAI's ``/v1/embeddings``, priced by its provider entry's
    #: ``cost_per_mtok_input``). Only an embeddings model is a candidate for an embeddings
    #: request, and never for a chat one (app/routing/capabilities.py). Left out of the
    #: routing view when ``chat``: a config without embeddings keeps its hash.
    kind: Literal["chat", "embeddings"] = Field(default="chat", exclude_if=_is_chat)
    specialized: str | None = None
    #: Expected acceptance of this model's answers (0-1), overriding the provider's.
    quality_prior: float | None = Field(default=None, ge=0.0, le=1.0)
    #: What the model takes and gives besides text (app/routing/capabilities.py): image
    #: and audio input, tool calling, JSON-schema output. None: not declared (anything).
    modalities: list[Literal["text", "image", "audio", "tools", "json_schema"]] | None = None
    #: Tokens of prompt and answer the model holds, and of answer it writes (None: not
    #: declared): a request that needs more is not sent to it.
    context_window: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    #: Deployment status: ``demoted`` is used only when no active candidate can take the
    #: attempt; ``preview`` only for a route (``preview: true``) or a request
    #: (``routing.preview: true``) that opts in (app/routing/status.py).
    status: Literal["active", "demoted", "preview"] = "active"


class ProviderConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    base_url: str = Field(pattern=r"^https?://[^\s/?#]+[^\s]*$")
    api_key: SecretStr = SecretStr("")
    #: Prices, USD per 1M tokens. ``0`` declares the deployment free; absent (None) is
    #: unknown: billed as nothing, but the auto router leaves it out (``price_unknown``).
    cost_per_mtok_input: float | None = Field(default=None, ge=0.0)
    cost_per_mtok_output: float | None = Field(default=None, ge=0.0)
    cost_per_mtok_cached_input: float | None = Field(default=None, ge=0.0)
    #: The single $/1M figure of the cost bonus. Default: the table by id prefix.
    cost_per_mtok: float | None = Field(default=None, ge=0.0)
    max_concurrency: int = Field(default=100, ge=1)
    weight_initial: float = Field(default=0.0, ge=0.0)
    p95_latency_baseline_ms: float = Field(default=1000.0, gt=0.0)
    timeout_ms: int = Field(default=30_000, ge=1)
    #: Longest wait for the first sign of an answer: a stream's first piece (text, tool
    #: call, refusal or reasoning), a plain call's response headers. None: only
    #: ``timeout_ms`` bounds it (a reasoning model or a long prompt can take most of it).
    ttft_timeout_ms: int | None = Field(default=None, ge=1)
    #: Streams: longest gap between two chunks once the answer has begun. None: only
    #: ``timeout_ms`` bounds a stalled stream.
    stream_idle_timeout_ms: int | None = Field(default=10_000, ge=1)
    #: Whether the deployment continues an answer given as a trailing assistant message
    #: (a prefill: Anthropic's API, vLLM, llama.cpp's server do; OpenAI's writes a new
    #: turn instead). A broken stream's answer goes on there from the text the client
    #: has; elsewhere (false) the answer restarts and only what follows that text is
    #: sent. A deployment that answers a prefill with a 400 is then restarted too.
    prefill: bool = False
    #: Whether the provider takes prompt-cache marks (Anthropic's ``cache_control``) on
    #: content parts, messages and tools in the OpenAI format, as OpenRouter and LiteLLM's
    #: proxy do; they are taken out of the body for any other (app/execution/cache_marks.py).
    cache_control: bool = False
    #: Data policy (app/routing/data_policy.py): where the deployment processes requests
    #: (a region name such as ``eu``), how long it keeps them (``none``, or days), whether
    #: it trains on them, and the certifications it holds. Undeclared: unknown, which no
    #: request requiring it accepts.
    region: str | None = None
    data_retention: Literal["none"] | Annotated[int, Field(ge=1)] | None = None
    trains_on_data: bool | None = None
    certifications: list[str] = Field(default_factory=list)
    #: Call with ``stream: true`` to measure time to first token (a cut stream is a failure).
    stream: bool = False
    #: Expected acceptance of an answer (0-1), e.g. from an offline evaluation: the
    #: ``adaptive`` strategy's starting point until outcomes say otherwise.
    quality_prior: float | None = Field(default=None, ge=0.0, le=1.0)
    models: list[ModelSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_time_limits(self) -> ProviderConfig:
        if self.ttft_timeout_ms is not None and self.ttft_timeout_ms > self.timeout_ms:
            raise ValueError("ttft_timeout_ms must not exceed timeout_ms")
        return self

    @model_validator(mode="after")
    def _one_kind(self) -> ProviderConfig:
        """An entry's models are all chat or all embeddings models: its prices, limits and
        concurrency are the entry's, and a route takes one model of each entry."""
        if len({m.kind for m in self.models}) > 1:
            raise ValueError(
                "models: chat and embeddings models in one provider entry; give the "
                "embeddings models an entry of their own (same base_url, their own prices)"
            )
        return self

    @property
    def kind(self) -> Literal["chat", "embeddings"]:
        """What the entry's models serve (they all serve the same)."""
        return self.models[0].kind

    @property
    def ttft_timeout_s(self) -> float | None:
        return None if self.ttft_timeout_ms is None else self.ttft_timeout_ms / 1000.0

    @property
    def stream_idle_timeout_s(self) -> float | None:
        ms = self.stream_idle_timeout_ms
        return None if ms is None else ms / 1000.0

    @property
    def default_model(self) -> str:
        for spec in self.models:
            if spec.specialized is None:
                return spec.name
        return self.models[0].name

    def quality_prior_of(self, model: str) -> float | None:
        """The model's own quality prior, else the provider's (None: not configured)."""
        for spec in self.models:
            if spec.name == model and spec.quality_prior is not None:
                return spec.quality_prior
        return self.quality_prior

    @property
    def bonus_cost_per_mtok(self) -> float:
        if self.cost_per_mtok is not None:
            return self.cost_per_mtok
        return SEED_COST_PER_1M.get(self.id.split("-")[0], DEFAULT_COST_PER_1M)

    @property
    def input_price(self) -> float:
        """The input price to bill and estimate with (0.0 when unknown: nothing to bill)."""
        price = self.cost_per_mtok_input
        return 0.0 if price is None else price

    @property
    def output_price(self) -> float:
        """The output price to bill and estimate with (0.0 when unknown)."""
        price = self.cost_per_mtok_output
        return 0.0 if price is None else price

    @property
    def price_known(self) -> bool:
        """Whether both text prices are declared (a declared 0 is known: free)."""
        return self.cost_per_mtok_input is not None and self.cost_per_mtok_output is not None

    @property
    def free(self) -> bool:
        """Declared free: both prices given as 0 (not merely absent)."""
        return self.cost_per_mtok_input == 0.0 and self.cost_per_mtok_output == 0.0

    @property
    def cached_input_price(self) -> float:
        """Cached input is billed at its own price when configured, else as plain input."""
        if self.cost_per_mtok_cached_input is not None:
            return self.cost_per_mtok_cached_input
        return self.input_price


def deployment_id(provider: str, model: str) -> str:
    return f"{provider}:{model}"
