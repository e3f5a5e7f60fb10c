"""A request's response-cache keys, computed once at ingest (hashes, no text).

:func:`cache_key` says whether a request may be answered from its route's cache and, if
so, what identifies its question:

* ``key``: a SHA-256 of everything that makes two requests the same question — the
  route, the model asked, the messages (every field of each), tools, tool_choice,
  response_format, the sampling parameters (temperature, max_tokens, stop), and what
  decides who may answer it and how (tenant, provider preferences, preset). Not the
  request id, session, metadata, stream flag, reply address or trace context.
* ``scope``: the same without the last message; the semantic cache compares only
  requests that share it (the same conversation before a paraphrased question).
* ``vector``: the last user message's embedding (:mod:`app.understanding.embedding`),
  only when the route's cache is semantic and that message is text.

A request may be cached with ``temperature: 0`` or with ``routing.cache: true``, never
with ``routing.cache: false``; an embeddings request and a mid-stream continuation
(``answered_prefix``) never.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from app.contract import CacheKey
from app.understanding import embedding
from app.understanding.text import part_text

if TYPE_CHECKING:
    from app.config.cache import CacheConfig
    from app.contract import ChatMessage, ChatRequest

#: Bumped when what the key covers changes (old entries then simply stop matching).
KEY_VERSION = 1


def cacheable(request: ChatRequest) -> bool:
    """Whether the request's answer may come from, and go into, a response cache."""
    if request.is_embeddings:
        return False
    opted = request.routing.cache if request.routing is not None else None
    if opted is not None:
        return opted
    return request.temperature == 0.0


def _message(message: ChatMessage) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_none=True)


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _last_user_text(request: ChatRequest) -> str | None:
    """The last message's text when it is a user message of text only (else None)."""
    last = request.messages[-1]
    if last.role != "user" or last.model_extra:
        return None
    if isinstance(last.content, str):
        return last.content
    if isinstance(last.content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in last.content
    ):
        return "\n".join(part_text(p) for p in last.content)
    return None


def cache_key(request: ChatRequest, route: str, config: CacheConfig | None) -> CacheKey | None:
    """The request's keys on a route whose cache is ``config`` (None: it caches nothing)."""
    if config is None or not config.enabled or not cacheable(request):
        return None
    provider = request.provider.model_dump(mode="json") if request.provider else None
    params = {
        "v": KEY_VERSION,
        "route": route,
        "model": request.model,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stop": request.stop,
        "tenant": request.tenant,
        "provider": provider,
        "preset": request.preset,
    }
    messages = [_message(m) for m in request.messages]
    key = _digest({**params, "messages": messages})
    scope = _digest({**params, "context": messages[:-1], "last": request.messages[-1].role})
    vector = embedder = None
    if config.semantic is not None:
        text = _last_user_text(request)
        quantised = embedding.quantised_or_none(text) if text else None
        if quantised is not None:
            vector, embedder = embedding.encode(quantised), embedding.EMBEDDER
    return CacheKey(key=key, scope=scope, vector=vector, embedder=embedder)
