"""The Response object (``object: "response"``) of a Responses request (pure).

Built from the request's record on ``llm.requests`` (what was asked: instructions,
tools, knobs, its ``turn``) and its answer on ``llm.responses``, so ``POST`` and ``GET
/v1/responses/{id}`` show the same object. The answer's chat message becomes the
``output``: a ``message`` item (``output_text``, or a ``refusal`` part) unless the answer
is only tool calls, then one ``function_call`` item per tool call. A ``length`` finish is
``status: incomplete`` (``max_output_tokens``), a failed request ``status: failed`` with
its error.
"""

from __future__ import annotations

from typing import Any

from app.contract import Response
from app.gateway import shape
from app.gateway.errors import from_error_body
from app.gateway.responses_api import ids, tools

#: Chat finish reasons that leave a response incomplete, and the reason it shows.
INCOMPLETE: dict[str, str] = {"length": "max_output_tokens", "content_filter": "content_filter"}


def skeleton(
    record: dict[str, Any], response_id: str, created_at: int, model: str
) -> dict[str, Any]:
    """The object as its request makes it, before any answer (``in_progress``)."""
    turn = record.get("turn") or {}
    previous = turn.get("previous") or {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": instructions_of(record),
        "max_output_tokens": record.get("max_tokens"),
        "metadata": record.get("metadata") or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": previous.get("response_id"),
        "store": turn.get("store", True),
        "temperature": record.get("temperature"),
        "text": tools.text_format(record.get("response_format")),
        "tool_choice": tools.responses_tool_choice(record.get("tool_choice")),
        "tools": tools.responses_tools(record.get("tools")),
        "top_p": None,
        "truncation": "disabled",
        "usage": None,
        "user": None,
    }


def instructions_of(record: dict[str, Any]) -> str | None:
    """The turn's ``instructions``: its first message, when its ``turn`` says so."""
    messages = record.get("messages") or []
    if not (record.get("turn") or {}).get("instructions") or not messages:
        return None
    return shape.text_of(messages[0].get("content")) if isinstance(messages[0], dict) else None


def response_object(record: dict[str, Any], answer: Response, response_id: str) -> dict[str, Any]:
    """The whole object of a request and its answer."""
    created = int(answer.occurred_at.timestamp())
    base = skeleton(record, response_id, created, shape.model_of(answer))
    if answer.status != "ok":
        error = from_error_body(answer.error)
        failure = {"code": error.code or "server_error", "message": error.message}
        return {**base, "status": "failed", "error": failure}
    completion = shape.completion_of(answer)
    first = (completion.get("choices") or [{}])[0]
    message = first.get("message") or {}
    status, details = status_of(first.get("finish_reason"))
    return {
        **base,
        "status": status,
        "incomplete_details": details,
        "output": output_items(answer.request_id, message, status),
        "usage": usage_of(completion.get("usage")),
    }


def status_of(finish_reason: Any) -> tuple[str, dict[str, str] | None]:
    """(``status``, ``incomplete_details``) for a chat finish reason."""
    reason = INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def output_items(request_id: str, message: dict[str, Any], status: str) -> list[dict[str, Any]]:
    """The ``output`` of an answer's chat message."""
    text = shape.text_of(message.get("content"))
    refusal = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    items = []
    if text or refusal or not calls:
        items.append(
            message_item(request_id, text if text or not refusal else None, refusal, status)
        )
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        items.append(
            call_item(
                request_id,
                index,
                str(call.get("id") or ""),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    return items


def message_item(
    request_id: str, text: str | None, refusal: str | None, status: str
) -> dict[str, Any]:
    content = []
    if text is not None:
        content.append(text_part(text))
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "type": "message",
        "id": ids.message_id(request_id),
        "status": status,
        "role": "assistant",
        "content": content,
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(
    request_id: str, index: int, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": ids.function_call_id(request_id, index),
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def usage_of(usage: Any) -> dict[str, Any] | None:
    """The Responses API's ``usage`` of chat's."""
    if not isinstance(usage, dict):
        return None
    given = {k: v for k, v in usage.items() if isinstance(v, int)}
    prompt, completion = given.get("prompt_tokens", 0), given.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": given.get("total_tokens", prompt + completion),
    }
