"""One provider call: POST an OpenAI chat completion (or, for an embeddings request, the
texts to ``/embeddings``: :mod:`app.execution.embeddings`), classify what came back.

``call_provider`` never raises for anything the provider or the network does;
every result is a ``CallResult`` with a ``StatusClass``. Error strings are built
here from fixed words, HTTP statuses, short provider error codes and exception
class names, never from exception text or headers, and are scrubbed of the API
key besides, so they are safe to publish on ``llm.outcomes``.

A prompt beyond the model's context window and content a policy rejected are
recognised (:mod:`app.execution.refusals`) and named first in the error
(``context_length_exceeded: HTTP 400 (...)``). The provider's ``ttft_timeout_ms``
bounds the wait for the response headers (:mod:`app.execution.limits`).

:mod:`app.execution.outcome` turns a result into the attempt's outcome and feedback.
"""

from __future__ import annotations

import json
import math
import re
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final

import httpx

from app.config.providers import ProviderConfig
from app.contract import CONTENT_POLICY_VIOLATION, ChatRequest, StatusClass
from app.execution.cache_marks import without_cache_marks
from app.execution.embeddings import embeddings_body, embeddings_url, read_embeddings
from app.execution.limits import CallLimits
from app.execution.outcome import CallResult as CallResult  # what call_provider returns
from app.execution.refusals import POLICY_FINISH_REASONS, refusal_of
from app.execution.retry_after import parse_retry_after
from app.routing.reliability import classify_http_status

#: A 2xx whose first choice ends with one of these is not a usable completion.
ERROR_FINISH_REASONS: Final = frozenset({"error"})

#: Provider error codes short and plain enough to quote in an error string.
_ERROR_CODE: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_REDACTED: Final = "[redacted]"
_MAX_PROVIDER_TEXT: Final = 64


@dataclass(frozen=True, slots=True)
class _Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0


# --------------------------------------------------------------------------- the call


async def call_provider(
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    model: str,
    request: ChatRequest,
    timeout_s: float,
    *,
    logprobs: bool = False,
) -> CallResult:
    """POST ``{base_url}/chat/completions`` (an embeddings request: ``{base_url}/embeddings``)
    and classify the answer.

    ``timeout_s`` bounds the whole call (connect, send, wait, read the body),
    not just each network operation; the provider's ``ttft_timeout_ms``, when set,
    the wait for the response headers.
    """
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    key = provider.api_key.get_secret_value()
    if key and not is_header_safe(key):
        return CallResult(
            StatusClass.AUTH_ERROR, None, 0.0, error="API key is not a valid header value"
        )
    if request.is_embeddings:
        url, body = embeddings_url(provider.base_url), embeddings_body(model, request)
    else:
        url = chat_completions_url(provider.base_url)
        body = request_body(model, request, logprobs, cache_control=provider.cache_control)
    started = time.perf_counter()
    limits = CallLimits(timeout_s, ttft_s=provider.ttft_timeout_s)
    try:
        async with (
            limits.timer(),
            post_json(client, url, body, key, timeout_s) as response,
        ):
            limits.headers()
            await response.aread()
    except httpx.TimeoutException:
        return _failure(StatusClass.TIMEOUT, f"timeout after {timeout_s:g}s", started, key)
    except TimeoutError:
        return _failure(StatusClass.TIMEOUT, limits.error(), started, key)
    except httpx.DecodingError as exc:  # a body that does not decode as its Content-Encoding
        return _failure(StatusClass.BAD_RESPONSE, type(exc).__name__, started, key)
    except httpx.TransportError as exc:
        return _failure(StatusClass.CONNECTION_ERROR, type(exc).__name__, started, key)
    if request.is_embeddings:
        return classify_embeddings(response, _elapsed_ms(started), request, model, key)
    return classify_response(response, _elapsed_ms(started), key)


def chat_completions_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/chat/completions"


def post_chat_completion(
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    body: dict[str, Any],
    key: str,
    timeout_s: float,
) -> AbstractAsyncContextManager[httpx.Response]:
    """The POST of ``body`` to the provider's chat completions, as a stream (the caller
    reads the answer: whole, or event by event)."""
    return post_json(client, chat_completions_url(provider.base_url), body, key, timeout_s)


def post_json(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], key: str, timeout_s: float
) -> AbstractAsyncContextManager[httpx.Response]:
    """The POST of ``body`` to ``url`` with the key, as a stream (the caller reads it)."""
    return client.stream("POST", url, json=body, headers=auth_headers(key), timeout=timeout_s)


def request_body(
    model: str, request: ChatRequest, logprobs: bool = False, *, cache_control: bool = False
) -> dict[str, Any]:
    """The OpenAI request body: the deployment's model, the request's messages and knobs;
    prompt-cache marks only for a provider that takes them (``cache_control``)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in request.messages],
    }
    if logprobs:
        # One alternative per token, not the server's default: llama.cpp sends about
        # ten (~2 KB a token), and the completion travels in the attempt's record.
        body["logprobs"] = True
        body["top_logprobs"] = 1
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    for name in ("tools", "tool_choice", "response_format", "stop"):  # passed through as is
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    return body if cache_control else without_cache_marks(body)


def auth_headers(key: str) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def is_header_safe(value: str) -> bool:
    return value.isascii() and value.isprintable()


def _elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _failure(status_class: StatusClass, error: str, started: float, key: str) -> CallResult:
    return CallResult(status_class, None, _elapsed_ms(started), error=scrub(error, key))


def scrub(text: str, key: str) -> str:
    return text.replace(key, _REDACTED) if key else text


def _short(text: str, key: str) -> str:
    """Provider-chosen text, cut to a bounded length and scrubbed of the key."""
    return scrub(text, key)[:_MAX_PROVIDER_TEXT]


# --------------------------------------------------------------------------- classification


def _answer_body(
    response: httpx.Response, latency_ms: float, key: str
) -> dict[str, Any] | CallResult:
    """A 2xx answer's JSON object, or the call's failure (its HTTP status, or a body that
    is not a JSON object)."""
    status = response.status_code
    if not 200 <= status < 300:
        return _http_failure(response, latency_ms, key)
    body = _json_object(response.content)
    if body is None:
        return CallResult(StatusClass.BAD_RESPONSE, status, latency_ms, error="malformed JSON body")
    return body


def classify_response(response: httpx.Response, latency_ms: float, key: str = "") -> CallResult:
    """The result of a call that got an HTTP response (its body already read)."""
    body = _answer_body(response, latency_ms, key)
    if isinstance(body, CallResult):
        return body
    status = response.status_code
    usage = usage_of(body.get("usage"))
    problem, finish_reason = _check_completion(body)
    if finish_reason is not None:
        finish_reason = _short(finish_reason, key)
    status_class = StatusClass.SUCCESS
    if problem:
        refused = problem.startswith(CONTENT_POLICY_VIOLATION)  # the request's doing
        status_class = StatusClass.CLIENT_ERROR if refused else StatusClass.BAD_RESPONSE
    return CallResult(
        status_class,
        status,
        latency_ms,
        tokens_in=usage.tokens_in,
        tokens_out=usage.tokens_out,
        tokens_cached=usage.tokens_cached,
        finish_reason=finish_reason,
        completion=None if problem else body,
        error=_short(problem, key) if problem else None,
        confidence=None if problem else confidence_of(body),
    )


def classify_embeddings(
    response: httpx.Response, latency_ms: float, request: ChatRequest, model: str, key: str = ""
) -> CallResult:
    """The result of an embeddings call that got an HTTP response (its body already read):
    a failure as a chat call's, a 2xx a success only with one vector per text."""
    body = _answer_body(response, latency_ms, key)
    if isinstance(body, CallResult):
        return body
    status = response.status_code
    tokens_in = usage_of(body.get("usage")).tokens_in
    answer, problem = read_embeddings(body, request, model, tokens_in)
    if answer is None:
        error = _short(problem or "no embeddings", key)
        return CallResult(
            StatusClass.BAD_RESPONSE, status, latency_ms, tokens_in=tokens_in, error=error
        )
    return CallResult(
        StatusClass.SUCCESS, status, latency_ms, tokens_in=tokens_in, completion=answer
    )


def _http_failure(response: httpx.Response, latency_ms: float, key: str) -> CallResult:
    """A non-2xx answer: its class, the provider's short code, a refusal named first."""
    status = response.status_code
    status_class = classify_http_status(status)
    body = _json_object(response.content)
    error = _http_error(status, body)
    refusal = refusal_of(body) if status_class is StatusClass.CLIENT_ERROR else None
    return CallResult(
        status_class,
        status,
        latency_ms,
        error=scrub(f"{refusal}: {error}" if refusal else error, key),
        retry_after_s=parse_retry_after(response.headers),
    )


def confidence_of(body: dict[str, Any]) -> float | None:
    """exp(mean log-probability) of the first choice's tokens, when the server sent them.

    The geometric mean of the token probabilities: 1.0 when the model was sure of
    every token, lower as it hesitated. None without ``logprobs.content``.
    """
    try:
        tokens = body["choices"][0]["logprobs"]["content"]
        values = [float(token["logprob"]) for token in tokens]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if not values or not all(math.isfinite(v) for v in values):
        return None
    return math.exp(sum(values) / len(values))


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):  # ValueError covers bad UTF-8 too
        return None
    return value if isinstance(value, dict) else None


def _check_completion(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """(what is wrong with the completion or None, its finish reason)."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "missing choices", None
    first = choices[0]
    finish_reason = first.get("finish_reason")
    if finish_reason is not None and not isinstance(finish_reason, str):
        return "invalid finish_reason", None
    if finish_reason in POLICY_FINISH_REASONS:  # cut or withheld, whatever was sent
        return f"{CONTENT_POLICY_VIOLATION}: finish_reason {finish_reason}", finish_reason
    message = first.get("message")
    if not isinstance(message, dict):
        return "missing choices[0].message", finish_reason
    if finish_reason in ERROR_FINISH_REASONS:
        return f"finish_reason {finish_reason}", finish_reason
    if not has_answer(message):
        return "no content in choices[0].message", finish_reason
    return None, finish_reason


def has_answer(message: dict[str, Any]) -> bool:
    """Whether a completion's message says anything: text (an empty string counts: the
    model's own answer), content parts, tool or function calls, or a refusal. Not
    ``{}``, nor ``content: null`` alone."""
    content, calls, refusal = (message.get(k) for k in ("content", "tool_calls", "refusal"))
    return (
        isinstance(content, str)
        or (isinstance(content, list) and bool(content))
        or (isinstance(calls, list) and bool(calls))
        or isinstance(message.get("function_call"), dict)
        or (isinstance(refusal, str) and bool(refusal))
    )


def _http_error(status: int, body: dict[str, Any] | None) -> str:
    """``HTTP 429``, plus the provider's error code when it is a plain identifier."""
    code = _provider_error_code(body)
    return f"HTTP {status} ({code})" if code else f"HTTP {status}"


def _provider_error_code(body: dict[str, Any] | None) -> str | None:
    error = body.get("error") if body else None
    if not isinstance(error, dict):
        return None
    for field in ("code", "type"):
        value = error.get(field)
        if isinstance(value, str) and _ERROR_CODE.match(value):
            return value
    return None


# --------------------------------------------------------------------------- usage


def usage_of(usage: object) -> _Usage:
    """Token counts from a ``usage`` object, whatever its shape (0 for anything unusable)."""
    if not isinstance(usage, dict):
        return _Usage()
    return _Usage(
        tokens_in=_count(usage.get("prompt_tokens")),
        tokens_out=_count(usage.get("completion_tokens")),
        tokens_cached=_cached_tokens(usage),
    )


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Cached prompt tokens, wherever the provider reports them (docs/design.md, "Cost").

    OpenAI: ``prompt_tokens_details.cached_tokens``; some compatible servers:
    ``cached_tokens``; Anthropic-style: ``cache_read_input_tokens``.
    """
    details = usage.get("prompt_tokens_details")
    candidates = (
        details.get("cached_tokens") if isinstance(details, dict) else None,
        usage.get("cached_tokens"),
        usage.get("cache_read_input_tokens"),
    )
    return next((_count(c) for c in candidates if c is not None), 0)


def _count(value: object) -> int:
    """A token count: a non-negative finite number, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or value < 0:
        return 0
    return int(value)
