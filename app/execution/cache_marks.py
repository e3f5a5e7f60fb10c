"""Prompt-cache marks (Anthropic's ``cache_control``) in an OpenAI request body (pure).

A request can carry ``cache_control`` marks where OpenRouter and LiteLLM's proxy take
them in the OpenAI format: on content parts (``{"type": "text", "text": ...,
"cache_control": {"type": "ephemeral"}}``), on a message, on a tool. The gateway's
Anthropic Messages API puts them there (app/gateway/anthropic/). They reach only a
deployment whose provider declares ``cache_control: true``: a strict OpenAI-compatible
server answers an unknown key with a 400, so for every other one they are taken out.
"""

from __future__ import annotations

from typing import Any

#: The key of a prompt-cache mark.
CACHE_CONTROL = "cache_control"


def without_cache_marks(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with no ``cache_control`` on its messages, their content parts or its tools
    (the rest is shared, not copied; ``body`` itself when it has none)."""
    if not _marked(body):
        return body
    out = dict(body)
    out["messages"] = [_message(m) for m in body.get("messages") or []]
    if isinstance(body.get("tools"), list):
        out["tools"] = [_unmarked(t) for t in body["tools"]]
    return out


def _message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = _unmarked(message)
    if isinstance(out.get("content"), list):
        out["content"] = [_unmarked(part) for part in out["content"]]
    return out


def _unmarked(item: Any) -> Any:
    if not isinstance(item, dict) or CACHE_CONTROL not in item:
        return dict(item) if isinstance(item, dict) else item
    return {k: v for k, v in item.items() if k != CACHE_CONTROL}


def _marked(body: dict[str, Any]) -> bool:
    items: list[Any] = [*(body.get("messages") or []), *(body.get("tools") or [])]
    for item in items:
        if not isinstance(item, dict):
            continue
        if CACHE_CONTROL in item:
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and CACHE_CONTROL in part for part in content
        ):
            return True
    return False
