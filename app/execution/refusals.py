"""Refusals a provider explains: a prompt longer than the model's context window,
content its policy rejects, or a region it does not serve.

All are the request's doing, not the provider's failing: ``client_error``,
neutral for the provider's health, never retried on the same deployment. The
outcome's error names them first (``context_length_exceeded: HTTP 400 (...)``,
``content_policy_violation: finish_reason content_filter``; the words are
:data:`app.contract.REFUSAL_CODES`), so the router can act on them without a field of
their own: another model may have a larger window, and the requester learns the code.

The provider's message is read to recognise a context-window refusal (servers word
it differently and few send a code), never quoted.
"""

from __future__ import annotations

from typing import Any, Final

from app.contract import CONTENT_POLICY_VIOLATION, CONTEXT_LENGTH_EXCEEDED, REGION_NOT_SERVED

#: Error codes (or types) of a prompt beyond the context window: OpenAI's, llama.cpp's.
CONTEXT_CODES: Final = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
)
#: What their messages say, lower-cased: OpenAI and vLLM ("This model's maximum context
#: length is ..."), Anthropic ("prompt is too long: ..."), llama.cpp ("... exceeds the
#: available context size ..."), and others.
CONTEXT_PHRASES: Final = (
    "maximum context length",
    "context length",
    "context size",
    "context window",
    "too many tokens",
    "prompt is too long",
    "input is too long",
)
#: Error codes (or types) of content a policy rejected: OpenAI's, Azure OpenAI's.
POLICY_CODES: Final = frozenset({"content_policy_violation", "content_filter"})
#: Error codes of a request refused for the region it came from: OpenAI's and others'.
REGION_CODES: Final = frozenset(
    {"unsupported_country_region_territory", "unsupported_country", "unsupported_region"}
)
#: What their messages say, lower-cased.
REGION_PHRASES: Final = (
    "country, region, or territory not supported",
    "not available in your country",
    "not available in your region",
    "not supported in your region",
    "unsupported region",
)
#: A 2xx (or a stream) whose answer ends so was cut or withheld by a content filter.
POLICY_FINISH_REASONS: Final = frozenset({"content_filter"})
#: How much of a provider's message is searched.
_MESSAGE_CHARS: Final = 2_000


def refusal_of(body: dict[str, Any] | None) -> str | None:
    """The refusal a 4xx error body explains (``CONTEXT_LENGTH_EXCEEDED``,
    ``CONTENT_POLICY_VIOLATION`` or ``REGION_NOT_SERVED``), else None."""
    if body is None:
        return None
    codes = set(_codes(body))
    if codes & POLICY_CODES:
        return CONTENT_POLICY_VIOLATION
    if codes & CONTEXT_CODES:
        return CONTEXT_LENGTH_EXCEEDED
    if codes & REGION_CODES:
        return REGION_NOT_SERVED
    message = " ".join(_messages(body)).lower()
    if any(phrase in message for phrase in CONTEXT_PHRASES):
        return CONTEXT_LENGTH_EXCEEDED
    if any(phrase in message for phrase in REGION_PHRASES):
        return REGION_NOT_SERVED
    return None


def policy_code_of(error: object) -> str | None:
    """``CONTENT_POLICY_VIOLATION`` for a stream's error event a content policy caused."""
    body = {"error": error}
    return CONTENT_POLICY_VIOLATION if set(_codes(body)) & POLICY_CODES else None


def _codes(body: dict[str, Any]) -> list[str]:
    """The ``code`` and ``type`` strings of the body's ``error`` object, and of the body
    itself (vLLM's older shape puts them at the top)."""
    error = body.get("error")
    places = [error, body] if isinstance(error, dict) else [body]
    return [
        value
        for place in places
        for field in ("code", "type")
        if isinstance(value := place.get(field), str)
    ]


def _messages(body: dict[str, Any]) -> list[str]:
    """The provider's messages, cut to a bounded length: ``error`` as a string or its
    ``message``, a top-level ``message`` or ``detail``."""
    error = body.get("error")
    found = [error, body.get("message"), body.get("detail")]
    if isinstance(error, dict):
        found.append(error.get("message"))
    return [text[:_MESSAGE_CHARS] for text in found if isinstance(text, str)]
