"""Ingest validation: every kind of bad input gets a reason; nothing raises."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from app.config import parse_config
from app.events import DeadLetter, LogPosition, RequestAccepted
from app.ingest import accept

CONFIG = parse_config(
    {
        "providers": [{"id": "p", "base_url": "http://127.0.0.1:1/v1", "models": [{"name": "m"}]}],
        "routes": {"chat": {"providers": ["p"]}, "code": {"providers": ["p"]}},
    },
    env={},
)
WHERE = LogPosition(topic="llm.requests", partition=2, offset=41)
WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def run(raw: bytes | None) -> RequestAccepted | DeadLetter:
    return accept(raw, WHERE, WHEN, CONFIG, max_request_bytes=2048, deadletter_max_bytes=64)


def valid(**extra: object) -> bytes:
    body = {"request_id": "r1", "messages": [{"role": "user", "content": "Bonjour"}], **extra}
    return json.dumps(body).encode()


def test_valid_request_is_accepted_with_default_route_and_log_time() -> None:
    result = run(valid(unknown="ignored", metadata={"team": "a"}))
    assert isinstance(result, RequestAccepted)
    assert result.route == "chat"
    assert result.occurred_at == WHEN
    assert result.source == WHERE
    assert result.prompt_chars == len("Bonjour")
    assert result.request.metadata == {"team": "a"}


def test_model_names_the_route() -> None:
    result = run(valid(model="code"))
    assert isinstance(result, RequestAccepted) and result.route == "code"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "not_json"),
        (None, "not_json"),
        (b"{", "not_json"),
        (b"\xff\xfe", "not_json"),
        (b'"a string"', "not_object"),
        (b"[]", "not_object"),
        (b'{"request_id": "r"}', "schema_violation"),
        (b'{"request_id": "", "messages": [{"role": "user", "content": "x"}]}', "schema_violation"),
        (b'{"request_id": "r", "messages": []}', "schema_violation"),
        (
            b'{"request_id": "r", "messages": [{"role": "robot", "content": "x"}]}',
            "schema_violation",
        ),
        (b'{"request_id": "r", "messages": "hi"}', "schema_violation"),
        (
            b'{"request_id": "r", "max_tokens": 0, "messages": [{"role": "user"}]}',
            "schema_violation",
        ),
        (valid(model="nope"), "unknown_route"),
        (b"{" + b" " * 3000 + b"}", "oversized"),
    ],
)
def test_bad_input_is_dead_lettered_with_reason(raw: bytes | None, reason: str) -> None:
    result = run(raw)
    assert isinstance(result, DeadLetter)
    assert result.reason == reason
    assert result.detail
    assert result.source == WHERE
    kept = base64.b64decode(result.original_base64)
    assert kept == (raw or b"")[:64]
    assert result.original_truncated == (len(raw or b"") > 64)


def test_dead_letter_id_is_stable_per_log_position() -> None:
    first, second = run(b"{"), run(b"{")
    assert isinstance(first, DeadLetter) and first.id == second.id


def test_derived_ids_are_uuid5_of_the_joined_parts() -> None:
    import uuid

    from app.events import _ID_NAMESPACE, derived_id

    for parts in [("decision", "r1", 1), ("x",), ("ünï", "cødé", 3)]:
        expected = uuid.uuid5(_ID_NAMESPACE, "/".join(map(str, parts)))
        assert derived_id(*parts) == str(expected)
