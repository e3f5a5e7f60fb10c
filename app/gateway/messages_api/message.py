"""An answer (a ``Response`` event's OpenAI completion) as an Anthropic Message (pure).

``content``: the text (a refusal's too) as a ``text`` block, each tool call as a
``tool_use`` block (its arguments parsed: a tool call whose arguments are not a JSON
object is a provider's fault, answered 502). ``stop_reason`` from the finish reason:
``stop`` → ``end_turn`` (``stop_sequence``, with the sequence, when the provider names
which one it met, as vLLM does in the choice's ``stop_reason``), ``length`` →
``max_tokens``, ``tool_calls`` → ``tool_use``, ``content_filter`` or a refusal →
``refusal``. ``usage``: Anthropic counts ``input_tokens`` without the tokens read from
the prompt cache, which are ``cache_read_input_tokens`` (given when the provider said).
"""

from __future__ import annotations

import json
import math
from typing import Any

from app.contract import Response
from app.gateway import shape
from app.gateway.errors import GatewayError

#: OpenAI's finish reasons as Anthropic's stop reasons (anything else: ``end_turn``).
STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
MESSAGE_ID_PREFIX = "msg_"


def message_id(request_id: str) -> str:
    return f"{MESSAGE_ID_PREFIX}{request_id}"


def message_of(response: Response, stops: list[str]) -> dict[str, Any]:
    """The Message of a successful response; ``stops``: the request's stop sequences."""
    completion = shape.completion_of(response)
    choice = (completion.get("choices") or [{}])[0]
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    text = shape.text_of(message.get("content")) + (message.get("refusal") or "")
    if text:
        content.append({"type": "text", "text": text})
    for index, call in enumerate(message.get("tool_calls") or []):
        content.append(tool_use_block(call, index, response))
    reason, sequence = stop_reason_of(choice, stops, refused=bool(message.get("refusal")))
    return {
        "id": message_id(response.request_id),
        "type": "message",
        "role": "assistant",
        "model": completion["model"],
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(completion.get("usage")),
    }


def tool_use_block(call: Any, index: int, response: Response) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        message = (
            f"{response.deployment} answered a tool call whose arguments are not a JSON object"
        )
        raise GatewayError(502, message, "bad_tool_call")
    return {
        "type": "tool_use",
        "id": tool_use_id(call, index, response.request_id),
        "name": str(function.get("name") or ""),
        "input": arguments,
    }


def tool_use_id(call: Any, index: int, request_id: str) -> str:
    """The provider's tool call id, or one made from the request id and the call's index."""
    found = call.get("id") if isinstance(call, dict) else None
    return found if isinstance(found, str) and found else f"toolu_{request_id}_{index}"


def stop_reason_of(
    choice: dict[str, Any], stops: list[str], refused: bool = False
) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) of an OpenAI choice."""
    if refused:
        return "refusal", None
    finish = choice.get("finish_reason")
    named = choice.get("stop_reason")  # vLLM: the stop string met
    if finish == "stop" and isinstance(named, str) and named in stops:
        return "stop_sequence", named
    return STOP_REASONS.get(str(finish), "end_turn"), None


def usage_of(usage: Any) -> dict[str, int]:
    """Anthropic's usage of an OpenAI ``usage`` (zeros for what the provider did not say)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt, output = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    cached = _cached(usage)
    if cached is None:
        return {"input_tokens": prompt, "output_tokens": output}
    return {
        "input_tokens": max(0, prompt - cached),
        "output_tokens": output,
        "cache_read_input_tokens": cached,
    }


def _cached(usage: dict[str, Any]) -> int | None:
    """Prompt tokens read from the cache, where providers report them (None: not said)."""
    details = usage.get("prompt_tokens_details")
    for found in (
        details.get("cached_tokens") if isinstance(details, dict) else None,
        usage.get("cached_tokens"),
        usage.get("cache_read_input_tokens"),
    ):
        if found is not None:
            return _count(found)
    return None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value)) if math.isfinite(value) else 0
