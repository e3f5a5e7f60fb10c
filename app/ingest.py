"""Validate one raw record of ``llm.requests``: accept it, or say exactly why not.

Pure: bytes, where they were in the log, their log timestamp and the config in;
a ``RequestAccepted`` or a ``DeadLetter`` out. Never raises on input.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from app.config import RoutingConfig
from app.events import ChatRequest, DeadLetter, LogPosition, RequestAccepted, derived_id
from app.understanding.features import extract_features
from app.understanding.guardrails import KeywordRule, check_request, compile_keywords
from app.understanding.modes import ModelRef, parse_model_id
from app.understanding.text import prompt_text


def dead_letter(
    reason: str, detail: str, raw: bytes, source: LogPosition, when: datetime, max_bytes: int
) -> DeadLetter:
    kept = raw[:max_bytes]
    return DeadLetter(
        id=derived_id("deadletter", source.topic, source.partition, source.offset),
        occurred_at=when,
        reason=reason,  # type: ignore[arg-type]
        detail=detail[:1000],
        source=source,
        original_size=len(raw),
        original_truncated=len(kept) < len(raw),
        original_base64=base64.b64encode(kept).decode("ascii"),
    )


def _schema_detail(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


@lru_cache(maxsize=8)
def _keyword_rules(keywords: tuple[str, ...]) -> tuple[KeywordRule, ...]:
    return compile_keywords(keywords)


def _route_of(ref: ModelRef, config: RoutingConfig) -> str | None:
    """The route a request goes to. A pin goes to a route listing its provider (the
    router answers an unknown or invalid id with an error, it is not dead-lettered)."""
    if ref.kind == "route":
        return config.resolve_route(ref.route)
    candidates = config.routes_with(ref.provider) if ref.provider else []
    return candidates[0] if candidates else config.default_route


def accept(
    raw: bytes | None,
    source: LogPosition,
    when: datetime,
    config: RoutingConfig,
    *,
    max_request_bytes: int,
    deadletter_max_bytes: int,
) -> RequestAccepted | DeadLetter:
    raw = raw or b""
    if len(raw) > max_request_bytes:
        detail = f"{len(raw)} bytes > limit {max_request_bytes}"
        return dead_letter("oversized", detail, raw, source, when, deadletter_max_bytes)
    try:
        data: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return dead_letter("not_json", str(exc)[:200], raw, source, when, deadletter_max_bytes)
    if not isinstance(data, dict):
        detail = f"expected a JSON object, got {type(data).__name__}"
        return dead_letter("not_object", detail, raw, source, when, deadletter_max_bytes)
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as exc:
        return dead_letter(
            "schema_violation", _schema_detail(exc), raw, source, when, deadletter_max_bytes
        )
    ref = parse_model_id(request.model, config.deployment_ids())
    route = _route_of(ref, config)
    if route is None:
        detail = (
            f"model {request.model!r} names no route (known: {', '.join(config.route_names())})"
        )
        return dead_letter("unknown_route", detail, raw, source, when, deadletter_max_bytes)
    text = prompt_text(request)
    hit = check_request(request, _keyword_rules(tuple(config.guardrails.forbidden_keywords)))
    return RequestAccepted(
        id=derived_id("accepted", request.request_id),
        occurred_at=when,
        request=request,
        route=route,
        prompt_sha256=hashlib.sha256(text.encode()).hexdigest(),
        prompt_chars=len(text),
        source=source,
        features=extract_features(request),
        pinned=ref.deployment if ref.kind == "pinned" else None,
        suffix=ref.suffix,
        model_error=ref.error,
        guardrail=hit.keyword if hit else None,
    )
