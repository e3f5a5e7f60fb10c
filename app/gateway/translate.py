"""An OpenAI chat-completions body as a ``ChatRequest`` of the event contract (pure).

What the event contract knows is carried over: ``model`` (a route alias, a
``provider:model`` pin, a ``:nitro``/``:floor`` suffix), ``messages``,
``max_tokens`` (or ``max_completion_tokens``), ``temperature``, ``tools``,
``tool_choice``, ``response_format``, ``stop``, ``session_id``, ``metadata``, ``provider``
preferences and ``routing``. ``user`` becomes ``metadata.user``; ``stream: true`` asks
the executor for the answer's deltas. The tenant is the API key's, never the body's;
the request id is the gateway's; ``reply_to`` names the gateway's replies partition
(and deltas partition). Anything else in the body is ignored.
"""

from __future__ import annotations

from typing import Any

from app.contract import ReplyTo
from app.gateway.errors import GatewayError, invalid

#: Body fields copied into the request event as they are (the schema checks them).
PASSED: tuple[str, ...] = (
    "model",
    "messages",
    "temperature",
    "tools",
    "tool_choice",
    "response_format",
    "stop",
    "session_id",
    "provider",
    "routing",
    "preset",
)
MAX_METADATA_ITEMS = 16
MAX_METADATA_CHARS = 512


def request_event(
    body: Any,
    request_id: str,
    tenant: str | None,
    reply_to: ReplyTo,
    key_name: str | None = None,
    key_preset: str | None = None,
    key_routes: list[str] | None = None,
) -> dict[str, Any]:
    """The ``llm.requests`` record for an HTTP body. Raises GatewayError(400) on a bad shape.
    ``key_name``: the API key's name (its budget and dynamic route apply; never the key);
    ``key_preset``: the preset its requests are under (403 for a body naming another);
    ``key_routes``: the routes it may use, carried as ``routing.allowed_routes`` so that
    no dynamic route or fallback model takes its request elsewhere."""
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object", "invalid_body")
    if body.get("n") not in (None, 1):
        raise invalid("only n=1 is supported", "unsupported_parameter")
    event: dict[str, Any] = {k: body[k] for k in PASSED if body.get(k) is not None}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        event["max_tokens"] = max_tokens
    metadata = _metadata(body.get("metadata"), body.get("user"))
    if metadata:
        event["metadata"] = metadata
    event["request_id"] = request_id
    event["tenant"] = tenant
    if key_name is not None:
        event["key_name"] = key_name
    if key_preset is not None:
        if event.get("preset", key_preset) != key_preset:
            raise GatewayError(
                403,
                f"this API key's requests are under preset {key_preset!r}; "
                f"it may not choose {event['preset']!r}",
                "preset_not_allowed",
                should_retry=False,
            )
        event["preset"] = key_preset
    if key_routes is not None:
        routing = dict(event.get("routing") or {})
        own = routing.get("allowed_routes")
        allowed = key_routes if not isinstance(own, list) else [r for r in own if r in key_routes]
        event["routing"] = {**routing, "allowed_routes": allowed}
    event["reply_to"] = reply_to.model_dump()
    if wants_stream(body)[0]:
        event["stream"] = True  # the executor publishes the answer's deltas
    return event


def _metadata(metadata: Any, user: Any) -> dict[str, str]:
    if metadata is None:
        found: dict[str, Any] = {}
    elif isinstance(metadata, dict):
        found = dict(metadata)
    else:
        raise invalid("metadata must be an object", "invalid_metadata")
    if user is not None:
        found["user"] = user
    if len(found) > MAX_METADATA_ITEMS or not all(
        isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MAX_METADATA_CHARS
        for k, v in found.items()
    ):
        raise GatewayError(
            400,
            f"metadata: at most {MAX_METADATA_ITEMS} string pairs of {MAX_METADATA_CHARS} chars",
            "invalid_metadata",
            should_retry=False,
        )
    return found


def wants_stream(body: Any) -> tuple[bool, bool]:
    """(``stream``, ``stream_options.include_usage``) of a body."""
    if not isinstance(body, dict):
        return False, False
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return body.get("stream") is True, usage
