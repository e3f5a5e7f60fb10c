"""Validate one raw record of ``llm.requests``: accept it, or say exactly why not.

Pure: bytes, where they were in the log, their log timestamp and the config in;
a ``RequestAccepted`` or a ``DeadLetter`` out. Never raises on input.

Besides the schema, three things Python's ``json`` lets through (or chokes on) are
checked explicitly, each with its dead-letter reason: nesting deeper than
``max_json_depth`` (``too_deep``; 10,000 levels used to raise RecursionError),
integers longer than ``max_int_digits`` and NaN/Infinity (``bad_number``; past
4,300 digits ``int()`` raises ValueError), and strings, keys included, holding a
lone UTF-16 surrogate such as ``"\ud800"`` (``bad_text``; they cannot be
re-serialised as UTF-8).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

from pydantic import ValidationError

from app.config.auto import AUTO_MODEL, auto_route
from app.config.cache import CacheConfig
from app.config.schema import RoutingConfig
from app.contract import (
    REQUEST_REFUSED,
    ChatRequest,
    DeadLetter,
    ErrorBody,
    LogPosition,
    ReplyTo,
    RequestAccepted,
    Response,
    derived_id,
)
from app.guardrails import rules_for, screen_messages
from app.routing.presets import UNKNOWN_PRESET, applying, with_defaults
from app.routing.presets import unknown as unknown_preset
from app.settings import DEFAULT_MAX_INT_DIGITS, DEFAULT_MAX_JSON_DEPTH
from app.understanding.cache_key import cache_key
from app.understanding.features import extract_features
from app.understanding.guardrails import KeywordRule, check_request, compile_keywords
from app.understanding.modes import ModelRef, parse_model_id
from app.understanding.prefix import prefix_sha256
from app.understanding.text import prompt_text

#: A lone UTF-16 surrogate: valid in a Python str, not encodable as UTF-8.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class _Refused(Exception):
    """Raised by the JSON parser's hooks: the record is dead-lettered with this reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


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
        if ref.raw == AUTO_MODEL and AUTO_MODEL not in config.route_names():
            # The route whose auto router picks the model (its workspace's rules).
            return auto_route(config.routes, config.default_route)
        return config.resolve_route(ref.route)
    candidates = config.routes_with(ref.provider) if ref.provider else []
    return candidates[0] if candidates else config.default_route


def parse_json(raw: bytes, max_int_digits: int) -> Any:
    """``json.loads``, refusing long integers and NaN/Infinity as it meets them."""

    def integer(text: str) -> int:
        digits = len(text) - text.startswith("-")
        if digits > max_int_digits:
            raise _Refused("bad_number", f"an integer of {digits} digits > limit {max_int_digits}")
        return int(text)

    def constant(text: str) -> float:
        raise _Refused("bad_number", f"{text} is not a JSON number")

    return json.loads(raw, parse_int=integer, parse_constant=constant)


def inspect_json(data: Any, max_depth: int) -> tuple[str, str] | None:
    """(reason, detail) for nesting deeper than ``max_depth`` or a lone surrogate in any
    string or key; None when neither. Iterative: depth costs no stack."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return "bad_text", "a string holds a lone UTF-16 surrogate"
            continue
        if not isinstance(value, dict | list):
            continue
        if depth >= max_depth:
            return "too_deep", f"nesting deeper than {max_depth} levels"
        if isinstance(value, dict):
            stack.extend((key, depth) for key in value)
            stack.extend((item, depth + 1) for item in value.values())
        else:
            stack.extend((item, depth + 1) for item in value)
    return None


def read_json(
    raw: bytes, max_int_digits: int, max_depth: int
) -> tuple[Any, tuple[str, str] | None]:
    """The parsed JSON value, or (reason, detail) when it cannot be taken: every check
    above, for any input that must not stop a worker (requests, feedback)."""
    try:
        data = parse_json(raw, max_int_digits)
        return data, inspect_json(data, max_depth)
    except _Refused as exc:
        return None, (exc.reason, exc.detail)
    except RecursionError:  # deeper than the interpreter's stack, let alone max_depth
        return None, ("too_deep", f"nesting deeper than {max_depth} levels")
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return None, ("not_json", str(exc)[:200])


def encode_accepted(
    accepted: RequestAccepted, raw: bytes, *, max_accepted_bytes: int, deadletter_max_bytes: int
) -> bytes | DeadLetter:
    """The record forwarded to the routing log, or an ``oversized`` dead letter when the
    re-serialised request (defaults filled in) outgrows what every envelope has room for."""
    value = accepted.model_dump_json().encode()
    if len(value) <= max_accepted_bytes:
        return value
    detail = f"re-serialised request {len(value)} bytes > limit {max_accepted_bytes}"
    when, source = accepted.occurred_at, accepted.source
    return dead_letter("oversized", detail, raw, source, when, deadletter_max_bytes)


def accept(
    raw: bytes | None,
    source: LogPosition,
    when: datetime,
    config: RoutingConfig,
    *,
    max_request_bytes: int,
    deadletter_max_bytes: int,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_int_digits: int = DEFAULT_MAX_INT_DIGITS,
) -> RequestAccepted | DeadLetter:
    raw = raw or b""
    if len(raw) > max_request_bytes:
        detail = f"{len(raw)} bytes > limit {max_request_bytes}"
        return dead_letter("oversized", detail, raw, source, when, deadletter_max_bytes)
    data, problem = read_json(raw, max_int_digits, max_json_depth)
    if problem is not None:
        return dead_letter(*problem, raw, source, when, deadletter_max_bytes)
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
    named = config.named_models.get(ref.route or "") if ref.kind == "route" else None
    if named is not None and ref.suffix is None:  # a bare model name: that deployment
        ref = parse_model_id(named, config.deployment_ids())
    route = _route_of(ref, config)
    if route is None:
        detail = (
            f"model {request.model!r} names no route (known: {', '.join(config.route_names())})"
        )
        return dead_letter("unknown_route", detail, raw, source, when, deadletter_max_bytes)
    missing = unknown_preset(config, request)
    if missing is not None:
        detail = f"preset {missing!r} is not configured (known: {', '.join(config.presets)})"
        return dead_letter(UNKNOWN_PRESET, detail, raw, source, when, deadletter_max_bytes)
    request = with_defaults(request, applying(config, request))
    text = prompt_text(request)
    hit = check_request(request, _keyword_rules(tuple(config.guardrails.forbidden_keywords)))
    screened = screen_messages(request, rules_for(config.guardrails.input, route, request.tenant))
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
        input_rules=list(screened.fired),
        input_blocked=screened.blocked,
        prefix_sha256=prefix_sha256(request),
        cache=cache_key(request, route, _cache_config(config, route)),
    )


def _cache_config(config: RoutingConfig, route: str) -> CacheConfig | None:
    configured = config.routes.get(route)
    return configured.cache if configured is not None else None


#: Refusals a policy version newer than the one checked against may lift (a route or a
#: preset it adds): ingest and the gateway read the policy topic again before they stand.
POLICY_REFUSALS: Final = frozenset({"unknown_route", UNKNOWN_PRESET})

#: Dead letters a gateway can have published: its own checks passed, the worker's did
#: not (its policy a version behind or ahead of the worker's, a larger envelope).
_REFUSALS_REPLIED: Final = POLICY_REFUSALS | {"oversized"}


def refusal_reply(
    raw: bytes, letter: DeadLetter, max_request_bytes: int
) -> tuple[Response, ReplyTo] | None:
    """The error answer for the reply address of a request ingest refused, when it has one.

    A gateway publishes a request only after the checks ingest makes, against the policy
    version it last read; when ingest refuses it all the same (a route a rollback took away
    a moment ago), the gateway's client gets the refusal now rather than a 504 at the
    deadline. Only a copy for the reply address: a refused request was never accepted and
    has no record on ``llm.responses``.
    """
    if letter.reason not in _REFUSALS_REPLIED or len(raw) > max_request_bytes:
        return None
    try:
        request = ChatRequest.model_validate_json(raw)
    except ValidationError:
        return None
    if request.reply_to is None:
        return None
    error = ErrorBody(type=REQUEST_REFUSED, message=letter.detail, code=letter.reason)
    response = Response(
        id=derived_id("response", request.request_id),
        occurred_at=letter.occurred_at,
        request_id=request.request_id,
        status="error",
        attempts=0,
        error=error,
    )
    return response, request.reply_to
