"""A ``Response`` event as OpenAI's answer: a completion, or server-sent chunks (pure).

``model`` is the model of the deployment that answered (``provider:model`` →
``model``); the headers name the request id, the deployment and the attempts. A
stream is built from the whole answer once it has arrived (the executor does not
publish deltas): a role chunk, the content in pieces, tool calls, the finish
reason, a usage chunk when asked for, then ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from app.contract import Response

#: Characters per content chunk of a stream built from a whole answer.
CHUNK_CHARS = 64


def headers_of(response: Response) -> dict[str, str]:
    return {
        "x-switchyard-request-id": response.request_id,
        "x-switchyard-deployment": response.deployment or "",
        "x-switchyard-attempts": str(response.attempts),
    }


def model_of(response: Response) -> str:
    return (response.deployment or "").partition(":")[2] or (response.deployment or "")


def completion_of(response: Response) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` of a successful response (an embeddings request's:
    OpenAI's list of embeddings, as recorded)."""
    completion = dict(response.completion or {})
    if completion.get("object") == "list":
        return {**completion, "model": model_of(response)}
    completion.setdefault("id", f"chatcmpl-{response.request_id}")
    completion.setdefault("object", "chat.completion")
    completion.setdefault("created", int(response.occurred_at.timestamp()))
    completion["model"] = model_of(response)
    completion.setdefault("choices", [])
    return completion


def sse(data: dict[str, Any] | str, event_id: int | None = None) -> bytes:
    """One server-sent event; ``event_id``: its ``id:`` line (what ``Last-Event-ID`` resumes
    from: the characters of the answer's text up to and with this event)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}data: {text}\n\n".encode()


def text_of(content: Any) -> str:
    """A message's text: its ``content`` string, or its content parts' text joined."""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def stream_chunks(response: Response, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a whole answer, in order."""
    completion = completion_of(response)
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion.get("created", int(time.time())),
        "model": completion["model"],
    }
    choices = completion.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") or {}
    yield _chunk(base, {"role": "assistant", "content": ""})
    yield from _content_chunks(base, message.get("content"))
    for index, call in enumerate(message.get("tool_calls") or []):
        yield _chunk(base, {"tool_calls": [{"index": index, **call}]})
    if message.get("refusal"):
        yield _chunk(base, {"refusal": message["refusal"]})
    yield _chunk(base, {}, first.get("finish_reason") or "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": completion.get("usage")}


def _content_chunks(base: dict[str, Any], content: Any) -> Iterator[dict[str, Any]]:
    if isinstance(content, list):  # content parts: their text, in order
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        return
    for start in range(0, len(content), CHUNK_CHARS):
        yield _chunk(base, {"content": content[start : start + CHUNK_CHARS]})


def _chunk(
    base: dict[str, Any], delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**base, "choices": [choice]}
