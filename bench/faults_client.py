"""One request of ``switchyard bench faults`` through the gateway with the official ``openai``
SDK (no retries), and what the client got: an :class:`Result` with its class.

Classes, judged from the client's side only:

* ``rescued``: 200 and exactly the canonical answer;
* ``clean_error``: an HTTP error with an OpenAI error body within the error bound;
  ``slow_error``: the same, later;
* ``stream_error``: a stream that began, then ended with an error event (the SDK raises);
* ``truncated``: the call ended without an error but the text is not the canonical one;
* ``hang``: the client timed out;
* ``broken``: anything else (a connection closed on the client, a body the SDK cannot read).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from bench.fault_answer import canonical_text, canonical_tokens

CLASSES = (
    "rescued",
    "clean_error",
    "slow_error",
    "stream_error",
    "truncated",
    "hang",
    "broken",
)


@dataclass
class Result:
    scenario: str
    mode: str  # "json" | "stream"
    index: int
    request_id: str
    outcome: str = "broken"
    status: int | None = None
    error_code: str | None = None
    error_type: str | None = None
    elapsed_s: float = 0.0
    first_token_s: float | None = None
    deployment: str | None = None
    attempts: str | None = None
    #: How many of the canonical tokens the text received begins with, and whether the
    #: text is a start of the canonical answer at all.
    tokens_matched: int = 0
    prefix: bool = True
    chars: int = 0
    finish_reason: str | None = None
    detail: str | None = None
    started_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def messages_for(request_id: str) -> list[dict[str, Any]]:
    """The prompt of one request (unique, so the provider counts its calls apart)."""
    return [
        {"role": "user", "content": f"Fault bench request {request_id}: answer in sixty words."}
    ]


def compare(result: Result, text: str, messages: list[dict[str, Any]]) -> None:
    """Fill what the text received is, measured against the canonical answer."""
    canonical = canonical_text(messages)
    result.chars = len(text)
    result.prefix = canonical.startswith(text)
    matched, sent = 0, ""
    for token in canonical_tokens(messages):
        if not text.startswith(sent + token):
            break
        sent += token
        matched += 1
    result.tokens_matched = matched


async def one_request(
    client: openai.AsyncOpenAI,
    result: Result,
    *,
    timeout_s: float,
    error_bound_s: float,
    origin: float,
) -> Result:
    """Send the request ``result`` names, fill ``result`` with what came back."""
    messages = messages_for(result.request_id)
    started = time.monotonic()
    result.started_s = round(started - origin, 3)
    text: list[str] = []
    try:
        async with asyncio.timeout(timeout_s + 10.0):  # beyond the SDK's own read timeout
            if result.mode == "stream":
                await _stream(client, result, messages, text, started)
            else:
                await _complete(client, result, messages, text)
        result.outcome = "rescued" if "".join(text) == canonical_text(messages) else "truncated"
    except (openai.APITimeoutError, TimeoutError):
        result.outcome = "hang"
    except openai.APIStatusError as exc:
        result.status = exc.status_code
        body = exc.body if isinstance(exc.body, dict) else {}
        result.error_code = _str(body.get("code"))
        result.error_type = _str(body.get("type"))
        result.deployment = exc.response.headers.get("x-switchyard-deployment") or None
        result.attempts = exc.response.headers.get("x-switchyard-attempts")
        openai_body = isinstance(body.get("message"), str) and result.error_type is not None
        in_time = time.monotonic() - started <= error_bound_s
        result.outcome = ("clean_error" if in_time else "slow_error") if openai_body else "broken"
        result.detail = None if openai_body else "an error without an OpenAI error body"
    except openai.APIConnectionError as exc:
        result.outcome = "broken"
        result.detail = f"{type(exc).__name__}: {type(exc.__cause__).__name__}"
    except openai.APIError as exc:  # an error event in a stream that had begun
        body = exc.body if isinstance(exc.body, dict) else {}
        result.outcome = "stream_error" if result.status == 200 else "broken"
        result.error_code = _str(body.get("code"))
        result.error_type = _str(body.get("type"))
    except Exception as exc:  # what the SDK lets through (e.g. a body it cannot read)
        result.outcome = "broken"
        result.detail = type(exc).__name__
    result.elapsed_s = round(time.monotonic() - started, 3)
    compare(result, "".join(text), messages)
    return result


async def _complete(
    client: openai.AsyncOpenAI, result: Result, messages: list[dict[str, Any]], text: list[str]
) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=result.scenario,
        messages=_sdk(messages),
        extra_headers={"x-switchyard-request-id": result.request_id},
    )
    result.status = raw.status_code
    _headers(result, raw.headers)
    completion = raw.parse()
    choice = completion.choices[0] if completion.choices else None
    if choice is not None:
        result.finish_reason = choice.finish_reason
        text.append(choice.message.content or "")


async def _stream(
    client: openai.AsyncOpenAI,
    result: Result,
    messages: list[dict[str, Any]],
    text: list[str],
    started: float,
) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=result.scenario,
        messages=_sdk(messages),
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-switchyard-request-id": result.request_id},
    )
    result.status = raw.status_code
    _headers(result, raw.headers)
    stream = raw.parse()
    try:
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    if result.first_token_s is None:
                        result.first_token_s = round(time.monotonic() - started, 3)
                    text.append(choice.delta.content)
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
            if chunk.usage is not None:
                result.extra["usage"] = True
    finally:
        await stream.close()


def _headers(result: Result, headers: Any) -> None:
    result.deployment = headers.get("x-switchyard-deployment") or None
    result.attempts = headers.get("x-switchyard-attempts")


def _sdk(messages: list[dict[str, Any]]) -> Any:
    """The messages as the SDK's typed dicts (they are plain dicts at run time)."""
    return messages


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
