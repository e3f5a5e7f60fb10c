"""A request as platforms publish it to ``llm.requests``: a chat completion (OpenAI chat
format), or the embeddings of a list of texts (``operation: "embeddings"``, OpenAI's
``/v1/embeddings``), routed, recorded and replayed alike."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.contract.trace import TraceParent, TraceState, trace_field
from app.contract.turn import Turn

#: A stop sequence: where the provider stops writing.
StopText = Annotated[str, Field(min_length=1)]
#: One text to embed (OpenAI refuses an empty one).
EmbeddingText = Annotated[str, Field(min_length=1)]
#: What a request asks for: a chat completion, or the embeddings of its ``input``.
Operation = Literal["chat", "embeddings"]
#: OpenAI's limit on the texts of one embeddings request.
MAX_EMBEDDING_INPUTS = 2048
EmbeddingInput = Annotated[
    list[EmbeddingText], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)
]
#: The fields only a chat completion takes: an embeddings request names none of them.
CHAT_ONLY_FIELDS = (
    "messages",
    "max_tokens",
    "temperature",
    "tools",
    "tool_choice",
    "response_format",
    "stop",
    "stream",
    "turn",
)
#: The fields only an embeddings request takes.
EMBEDDINGS_ONLY_FIELDS = ("input", "dimensions", "encoding_format")


def _is_chat(value: object) -> bool:
    return value == "chat"


def _unset(value: object) -> bool:
    return value is None or value == []


class ChatMessage(BaseModel):
    """One OpenAI chat message. Extra keys (name, tool_calls ...) pass through."""

    model_config = ConfigDict(frozen=True, extra="allow", hide_input_in_errors=True)

    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: str | list[dict[str, Any]] | None = None


class RoutingOptions(BaseModel):
    """Routing controls of one request: an unknown one is refused, never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    mode: Literal["balanced", "price", "latency", "quality", "throughput"] | None = None
    #: ``false`` opts this request out of cache/session affinity.
    affinity: bool | None = None
    #: ``false`` keeps context (prompt prefix) affinity but ignores ``session_id``.
    session_affinity: bool | None = None
    #: ``true`` opts this request in to the route's ``status: preview`` deployments.
    preview: bool | None = None
    #: The routes the request may be served on (a gateway key's allowlist), whatever a
    #: dynamic route or a fallback model names: another is refused (``route_not_allowed``).
    allowed_routes: list[str] | None = None
    #: The route's response cache: ``true`` lets it answer this request (and store its
    #: answer) whatever the temperature; ``false`` keeps it out; absent: only a request
    #: with ``temperature: 0`` is cached (docs/routing.md, "Response cache").
    cache: bool | None = None


class MaxPrice(BaseModel):
    """The most a request will pay, USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    prompt: Annotated[float, Field(ge=0.0)] | None = None
    completion: Annotated[float, Field(ge=0.0)] | None = None


class ProviderPreferences(BaseModel):
    """The per-request provider controls. Each narrows what the route, the tenant
    and the key allow, never widens it; an unknown one is refused, never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    only: list[str] | None = None
    ignore: list[str] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list)
    #: Try deployments cheapest, fastest or highest-throughput first, in that order.
    sort: Literal["price", "latency", "throughput"] | None = None
    #: ``false``: the first deployment only (no retry elsewhere, no fallback model).
    allow_fallbacks: bool = True
    max_price: MaxPrice | None = None
    #: Data rules (app/routing/data_policy.py), added to the route's and the tenant's.
    regions: list[str] | None = None
    zdr: bool = False
    data_collection: Literal["allow", "deny"] = "allow"


class ReplyTo(BaseModel):
    """Where a gateway waits for the answer: a copy of the request's response
    goes to this partition of the replies topic, besides ``llm.responses``."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    topic: Annotated[str, Field(min_length=1, max_length=249)]
    partition: Annotated[int, Field(ge=0)]


class ChatRequest(BaseModel):
    """What a platform publishes on ``llm.requests``. Unknown fields are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    request_id: Annotated[str, Field(min_length=1, max_length=200)]
    #: ``embeddings``: the embeddings of ``input`` (OpenAI's ``/v1/embeddings``), answered
    #: with OpenAI's list of embeddings; ``chat`` (absent: every record written before
    #: embeddings existed reads as chat) a chat completion of ``messages``. Left out of a
    #: chat request's record, so chat records are byte for byte what they were.
    operation: Operation = Field(default="chat", exclude_if=_is_chat)
    #: A chat request's messages (required, at least one); none on an embeddings request.
    messages: Annotated[list[ChatMessage], Field(min_length=1)] = Field(
        default_factory=list, exclude_if=_unset
    )
    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    session_id: str | None = None
    tenant: str | None = None
    #: The API key's name (the gateway sets it from its key's ``name``; never the key):
    #: its budget applies.
    key_name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    routing: RoutingOptions | None = None
    provider: ProviderPreferences | None = None
    #: A named preset of the policy (``presets:``): its lists, models, mode and defaults.
    preset: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    #: OpenAI's ``tools``, ``tool_choice`` and ``response_format``, passed to the provider as is.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    #: OpenAI's ``stop`` (the Anthropic Messages API's ``stop_sequences``): where the
    #: provider stops writing, passed to it as is.
    stop: StopText | list[StopText] | None = None
    #: Set by the gateway: where it waits for the response (a copy is sent there).
    reply_to: ReplyTo | None = None
    #: ``stream: true``: the executor streams from the provider and publishes the answer's
    #: pieces as ``response.delta`` events, besides the whole answer.
    stream: bool | None = None
    #: Set by the gateway on a Responses API request (``POST /v1/responses``): its
    #: conversation's previous turn and where its answer will be (positions, no text).
    turn: Turn | None = None
    #: W3C trace context of the span that sent it (the gateway's, or a platform's): the
    #: worker's spans join that trace. Identifiers only; no decision reads them.
    traceparent: TraceParent | None = trace_field()
    tracestate: TraceState | None = trace_field()
    #: An embeddings request's texts (required, 1 to 2,048): each is embedded alone.
    input: EmbeddingInput | None = Field(default=None, exclude_if=_unset)
    #: OpenAI's ``dimensions``: the length of each vector asked of the model.
    dimensions: Annotated[int, Field(ge=1)] | None = Field(default=None, exclude_if=_unset)
    #: OpenAI's ``encoding_format``: the vectors as lists of numbers (``float``, the default)
    #: or as base64 of little-endian float32s (``base64``), asked of the provider so, and
    #: recorded so in the answer.
    encoding_format: Literal["float", "base64"] | None = Field(default=None, exclude_if=_unset)

    @field_validator("request_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("request_id must be printable")
        return value

    @model_validator(mode="after")
    def _one_operation(self) -> ChatRequest:
        """A chat request has messages and none of the embeddings' fields; an embeddings
        request has ``input`` and none of the chat completion's fields."""
        if self.operation == "chat":
            if not self.messages:
                raise ValueError("a chat request needs messages (at least one)")
            named = [f for f in EMBEDDINGS_ONLY_FIELDS if getattr(self, f) is not None]
            if named:
                raise ValueError(f"a chat request takes no {', '.join(named)}")
            return self
        if not self.input:
            raise ValueError("an embeddings request needs input (at least one text)")
        named = [f for f in CHAT_ONLY_FIELDS if getattr(self, f) not in (None, [])]
        if named:
            raise ValueError(f"an embeddings request takes no {', '.join(named)}")
        return self

    @property
    def is_embeddings(self) -> bool:
        return self.operation == "embeddings"
