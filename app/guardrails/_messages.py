"""The input rules on a request's messages: each message's text screened on its own (a
string content, or the ``text`` of its text parts), so a find never spans two of them; an
embeddings request's texts likewise, each on its own."""

from __future__ import annotations

from typing import Any

from app.contract.request import ChatRequest
from app.guardrails._screen import Rules, Screened, screen


def screen_messages(request: ChatRequest, rules: Rules) -> Screened:
    """What the rules make of the request: the rules that fired and the blocking one
    (``text`` is empty: the messages are :func:`redact_messages`'s)."""
    fired: dict[str, None] = {}
    for text in _texts(request):
        screened = screen(text, rules)
        fired.update(dict.fromkeys(screened.fired))
        if screened.blocked is not None:
            return Screened("", tuple(fired), screened.blocked)
    return Screened("", tuple(fired))


def redact_messages(request: ChatRequest, rules: Rules) -> ChatRequest:
    """The request with its messages' text redacted by the rules (itself when unchanged)."""
    if not rules:
        return request
    if request.is_embeddings:
        texts = [screen(text, rules).text for text in request.input or ()]
        return request.model_copy(update={"input": texts}) if texts != request.input else request
    messages, changed = [], False
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            new: str | list[dict[str, Any]] | None = screen(content, rules).text
        elif isinstance(content, list):
            new = [_redacted_part(part, rules) for part in content]
        else:
            new = content
        changed = changed or new != content
        messages.append(message.model_copy(update={"content": new}) if new != content else message)
    return request.model_copy(update={"messages": messages}) if changed else request


def _redacted_part(part: dict[str, Any], rules: Rules) -> dict[str, Any]:
    text = part.get("text")
    if part.get("type") != "text" or not isinstance(text, str):
        return part
    return {**part, "text": screen(text, rules).text}


def _texts(request: ChatRequest) -> list[str]:
    if request.is_embeddings:
        return list(request.input or ())
    texts = []
    for message in request.messages:
        if isinstance(message.content, str):
            texts.append(message.content)
        elif isinstance(message.content, list):
            texts += [
                p["text"]
                for p in message.content
                if p.get("type") == "text" and isinstance(p.get("text"), str)
            ]
    return texts
