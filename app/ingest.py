"""Validate one raw record of ``llm.requests``: accept it, or say exactly why not.

Pure: bytes, where they were in the log, their log timestamp and the config in;
a ``RequestAccepted`` or a ``DeadLetter`` out. Never raises on input.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from app.config import RoutingConfig
from app.events import ChatRequest, DeadLetter, LogPosition, RequestAccepted, derived_id


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


def prompt_text(request: ChatRequest) -> str:
    """The text of all messages, for hashing and length only (never logged or emitted)."""
    chunks: list[str] = []
    for message in request.messages:
        if isinstance(message.content, str):
            chunks.append(message.content)
        elif isinstance(message.content, list):
            chunks.extend(str(part.get("text", "")) for part in message.content)
    return "\n".join(chunks)


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
    route = config.resolve_route(request.model)
    if route is None:
        detail = (
            f"model {request.model!r} names no route (known: {', '.join(config.route_names())})"
        )
        return dead_letter("unknown_route", detail, raw, source, when, deadletter_max_bytes)
    text = prompt_text(request)
    return RequestAccepted(
        id=derived_id("accepted", request.request_id),
        occurred_at=when,
        request=request,
        route=route,
        prompt_sha256=hashlib.sha256(text.encode()).hexdigest(),
        prompt_chars=len(text),
        source=source,
    )
