"""Streaming calls (``stream: true``): time to first token, and no cut stream taken for an answer.

A stream counts as a success only when it carried a finish reason. A stream
that ends without one (``stream ended without a finish reason``), drops the
connection (``stream broken: ReadError``), or carries a chunk that is not JSON
(``malformed stream chunk``) is a ``bad_response``; one whose first piece of answer
or next chunk comes too late (the provider's ``ttft_timeout_ms`` and
``stream_idle_timeout_ms``, :mod:`app.execution.limits`) is a ``timeout``. Both
count against the deployment's availability (the reliability accounting: errors
after the stream began) and are retried elsewhere (a server that ignores ``stream: true`` and
answers JSON is read as an ordinary answer). Once the finish reason and the usage
have come, the answer is complete: it is not held back waiting for ``[DONE]``, and a
stall or a hang-up after the finish reason loses nothing. A finish reason
``content_filter`` is a refusal (:mod:`app.execution.refusals`), not a success.
The chunks are assembled into one ordinary OpenAI completion, so the requester's
response looks the same whether the provider streamed or not (text, tool calls and
refusal; UTF-16 surrogate halves a provider sent in separate chunks are paired again,
a lone one becomes U+FFFD).

With a :class:`DeltaSink` (``stream: true`` requests) every piece of the
answer is also handed to the sink as it comes, without waiting (agents/executor.py
publishes them as ``response.delta`` events).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from app.config.providers import ProviderConfig
from app.contract import CONTENT_POLICY_VIOLATION, ChatRequest, StatusClass
from app.execution.call import (
    ERROR_FINISH_REASONS,
    CallResult,
    classify_response,
    is_header_safe,
    post_chat_completion,
    request_body,
    scrub,
    usage_of,
)
from app.execution.limits import CallLimits
from app.execution.pieces import merge_tool_call, whole_text
from app.execution.refusals import POLICY_FINISH_REASONS, policy_code_of

CLIENT_ERROR = StatusClass.CLIENT_ERROR


class DeltaSink(Protocol):
    """Takes the pieces of a streamed answer as they come (must not block)."""

    def piece(
        self, content: str, tool_calls: list[dict[str, Any]] | None, refusal: str | None
    ) -> None:
        """Text added, tool-call deltas, refusal text: at least one of them non-empty."""


@dataclass
class _Assembly:
    """What the chunks of one streamed completion add up to."""

    content: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    first_token_ms: float | None = None
    #: Whether any delta carried content (an empty string counts) or tool calls.
    answered: bool = False
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    refusal: list[str] = field(default_factory=list)
    sink: DeltaSink | None = None

    def take(self, chunk: dict[str, Any], elapsed_ms: float) -> bool:
        """Fold in one chunk; whether it carried a piece of the answer (reasoning too)."""
        answers = False
        if not self.meta:
            self.meta = {k: chunk.get(k) for k in ("id", "created", "model")}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            calls = _tool_call_deltas(delta.get("tool_calls"))
            refusal = delta.get("refusal") if isinstance(delta.get("refusal"), str) else None
            self.answered = self.answered or isinstance(text, str) or bool(calls) or bool(refusal)
            text = text if isinstance(text, str) else ""
            if text and self.first_token_ms is None:
                self.first_token_ms = elapsed_ms
            answers = answers or bool(text or calls or refusal) or _reasons(delta)
            self._keep(text, calls, refusal)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return answers

    def _keep(self, text: str, calls: list[dict[str, Any]], refusal: str | None) -> None:
        if text:
            self.content.append(text)
        for call in calls:
            merge_tool_call(self.tool_calls, call)
        if refusal:
            self.refusal.append(refusal)
        if self.sink is not None and (text or calls or refusal):
            self.sink.piece(text, calls or None, refusal or None)

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": whole_text("".join(self.content)),
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
            message["content"] = message["content"] or None
        if self.refusal:
            message["refusal"] = whole_text("".join(self.refusal))
        body: dict[str, Any] = {
            **self.meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body


async def stream_provider(
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    model: str,
    request: ChatRequest,
    timeout_s: float,
    sink: DeltaSink | None = None,
) -> CallResult:
    """Stream one completion within ``timeout_s`` and the provider's first-token and idle
    limits (:mod:`app.execution.limits`); never raises for what the provider does."""
    key = provider.api_key.get_secret_value()
    if key and not is_header_safe(key):
        return CallResult(
            StatusClass.AUTH_ERROR, None, 0.0, error="API key is not a valid header value"
        )
    body = {
        **request_body(model, request, cache_control=provider.cache_control),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    assembly = _Assembly(sink=sink)
    limits = CallLimits(
        timeout_s, ttft_s=provider.ttft_timeout_s, idle_s=provider.stream_idle_timeout_s
    )
    status = 200
    problem: _Problem | None = None
    try:
        async with (
            limits.timer(),
            post_chat_completion(client, provider, body, key, timeout_s) as response,
        ):
            status = response.status_code
            if not 200 <= status < 300 or _whole_json(response):
                limits.headers()
                await response.aread()
                return classify_response(response, _ms(started), key)
            problem = await _read_events(response, assembly, started, limits)
    except httpx.TimeoutException:  # httpx's own per-operation timeout (the whole call's)
        if assembly.finish_reason is None:
            error = f"timeout after {timeout_s:g}s"
            return _failed(StatusClass.TIMEOUT, error, started, assembly)
    except TimeoutError:  # one of the call's limits
        if assembly.finish_reason is None:  # a stall after the finish reason loses nothing
            return _failed(StatusClass.TIMEOUT, limits.error(), started, assembly)
    except httpx.TransportError as exc:
        if assembly.finish_reason is None:  # a hang-up after it neither
            started_streaming = assembly.first_token_ms is not None
            kind = StatusClass.BAD_RESPONSE if started_streaming else StatusClass.CONNECTION_ERROR
            return _failed(kind, f"stream broken: {type(exc).__name__}", started, assembly)
    problem = problem or _check_end(assembly)
    if problem is not None and problem.status_class is StatusClass.CLIENT_ERROR:
        # A stream a content policy cut: the request's doing; its tokens were still used.
        return _ended(StatusClass.CLIENT_ERROR, status, started, assembly, error=problem.error)
    if problem is not None:
        return _failed(problem.status_class, scrub(problem.error, key), started, assembly)
    completion = assembly.completion()
    return _ended(StatusClass.SUCCESS, status, started, assembly, completion=completion)


@dataclass(frozen=True, slots=True)
class _Problem:
    """Why a stream is not an answer: its class and its error (fixed words, short codes)."""

    error: str
    status_class: StatusClass = StatusClass.BAD_RESPONSE


_MALFORMED = _Problem("malformed stream chunk")


def _check_end(assembly: _Assembly) -> _Problem | None:
    """What is wrong with a stream that ended (None: it is an answer)."""
    reason = assembly.finish_reason
    if reason is None:
        return _Problem("stream ended without a finish reason")
    if reason in POLICY_FINISH_REASONS:
        return _Problem(f"{CONTENT_POLICY_VIOLATION}: finish_reason {reason}", CLIENT_ERROR)
    if reason in ERROR_FINISH_REASONS:
        return _Problem(f"finish_reason {reason}")
    if not assembly.answered:
        return _Problem("stream carried no content")
    return None


async def _read_events(
    response: httpx.Response, assembly: _Assembly, started: float, limits: CallLimits
) -> _Problem | None:
    """Fold the server-sent events into ``assembly``; the problem found, if any.

    Ends at ``[DONE]``, at the end of the body, or as soon as the finish reason and the
    usage have both come (nothing else is to come: a server that then holds the
    connection open without ``[DONE]`` does not hold the answer back).
    """
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, bad UTF-8, 5,000-digit numbers, nesting
            return _MALFORMED
        if not isinstance(chunk, dict):
            return _MALFORMED
        if "error" in chunk:
            code = policy_code_of(chunk["error"])
            if code is not None:
                return _Problem(f"{code}: error event in stream", CLIENT_ERROR)
            return _Problem("error event in stream")
        limits.event(assembly.take(chunk, _ms(started)))
        if assembly.finish_reason is not None and assembly.usage is not None:
            return None
    return None


def _reasons(delta: dict[str, Any]) -> bool:
    """Whether a delta carries reasoning (DeepSeek's, vLLM's, llama.cpp's field names):
    not part of the answer, but the model is at work."""
    return any(
        isinstance(v, str) and v for v in (delta.get("reasoning_content"), delta.get("reasoning"))
    )


def _tool_call_deltas(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [call for call in value if isinstance(call, dict)]


def _whole_json(response: httpx.Response) -> bool:
    """A server that ignored ``stream: true`` and sent the whole completion as JSON."""
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("application/json")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _failed(kind: StatusClass, error: str, started: float, assembly: _Assembly) -> CallResult:
    return CallResult(kind, None, _ms(started), error=error, first_token_ms=assembly.first_token_ms)


def _ended(
    kind: StatusClass,
    status: int,
    started: float,
    assembly: _Assembly,
    *,
    completion: dict[str, Any] | None = None,
    error: str | None = None,
) -> CallResult:
    """A stream that came to its end: its usage and finish reason are counted."""
    usage = usage_of(assembly.usage)
    return CallResult(
        kind,
        status,
        _ms(started),
        tokens_in=usage.tokens_in,
        tokens_out=usage.tokens_out,
        tokens_cached=usage.tokens_cached,
        finish_reason=assembly.finish_reason,
        completion=completion,
        error=error,
        first_token_ms=assembly.first_token_ms,
    )
