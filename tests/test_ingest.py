"""Ingest validation: every kind of bad input gets a reason; nothing raises."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from app.config.schema import parse_config
from app.contract import REQUEST_REFUSED, DeadLetter, LogPosition, ReplyTo, RequestAccepted
from app.gateway.errors import from_error_body
from app.ingest import accept, dead_letter, refusal_reply

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

    from app.contract.base import _ID_NAMESPACE, derived_id

    for parts in [("decision", "r1", 1), ("x",), ("ünï", "cødé", 3)]:
        expected = uuid.uuid5(_ID_NAMESPACE, "/".join(map(str, parts)))
        assert derived_id(*parts) == str(expected)


# --------------------------------------------------------------------------- poison


def run_big(raw: bytes) -> RequestAccepted | DeadLetter:
    return accept(raw, WHERE, WHEN, CONFIG, max_request_bytes=10**6, deadletter_max_bytes=64)


def nested(depth: int) -> bytes:
    """A valid request whose ignored ``extra`` field nests ``depth`` containers in all."""
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    return valid()[:-1] + b', "extra": ' + inner.encode() + b"}"


def text_case(where: str) -> bytes:
    lone = '"\\ud800"'  # the JSON escape of a lone high surrogate
    body = {
        "content": '{"request_id": "r", "messages": [{"role": "user", "content": %s}]}',
        "metadata": '{"request_id": "r", "messages": [{"role": "user"}], "metadata": {"k": %s}}',
        "key": '{"request_id": "r", "messages": [{"role": "user"}], "metadata": {%s: "v"}}',
        "tenant": '{"request_id": "r", "messages": [{"role": "user"}], "tenant": %s}',
        "ignored": '{"request_id": "r", "messages": [{"role": "user"}], "x": [%s]}',
    }[where]
    return (body % lone).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 10_000 + b"]" * 10_000, "too_deep"),  # RecursionError in json.loads
        (b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "too_deep"),
        (nested(65), "too_deep"),
        (b'{"a": ' + b"9" * 5000 + b"}", "bad_number"),  # ValueError: int str limit
        (b'{"a": -' + b"9" * 101 + b"}", "bad_number"),
        (b'{"request_id": "r", "messages": [{"role": "user"}], "temperature": NaN}', "bad_number"),
        (b'{"a": Infinity}', "bad_number"),
        (text_case("content"), "bad_text"),
        (text_case("metadata"), "bad_text"),
        (text_case("key"), "bad_text"),
        (text_case("tenant"), "bad_text"),
        (text_case("ignored"), "bad_text"),
        # A surrogate written as raw bytes: json.loads decodes them with 'surrogatepass'.
        (
            b'{"request_id": "r", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
            "bad_text",
        ),
    ],
)
def test_poison_is_dead_lettered_with_its_reason(raw: bytes, reason: str) -> None:
    result = run_big(raw)
    assert isinstance(result, DeadLetter), result
    assert result.reason == reason
    assert result.original_size == len(raw)
    assert base64.b64decode(result.original_base64) == raw[:64]
    result.model_dump_json()  # the dead letter itself always serialises


def test_limits_are_inclusive() -> None:
    assert isinstance(run_big(nested(64)), RequestAccepted)
    assert isinstance(run_big(valid(extra=10**99, other=-(10**99))), RequestAccepted)
    assert isinstance(run_big(valid(extra="\U0001f600 é")), RequestAccepted)  # a proper pair


def test_limits_come_from_the_caller() -> None:
    def with_limits(raw: bytes, depth: int, digits: int) -> RequestAccepted | DeadLetter:
        return accept(
            raw,
            WHERE,
            WHEN,
            CONFIG,
            max_request_bytes=10**6,
            deadletter_max_bytes=64,
            max_json_depth=depth,
            max_int_digits=digits,
        )

    deep = with_limits(nested(10), depth=9, digits=100)
    assert isinstance(deep, DeadLetter) and deep.reason == "too_deep"
    long = with_limits(valid(x=10**30), depth=64, digits=30)
    assert isinstance(long, DeadLetter) and long.reason == "bad_number"
    assert isinstance(with_limits(valid(x=10**29), depth=64, digits=30), RequestAccepted)


def test_a_request_just_under_the_limit_is_accepted_and_forwardable() -> None:
    from app.ingest import encode_accepted
    from app.settings import Settings

    settings = Settings()
    raw = valid(messages=[{"role": "user", "content": "x" * 999_600}])
    assert 999_600 < len(raw) <= settings.max_request_bytes
    result = run_big(raw)
    assert isinstance(result, RequestAccepted)
    value = encode_accepted(
        result, raw, max_accepted_bytes=settings.max_accepted_bytes, deadletter_max_bytes=64
    )
    assert isinstance(value, bytes) and len(value) > len(raw)


def test_a_request_that_grows_when_re_serialised_is_oversized_not_a_crash() -> None:
    from app.ingest import encode_accepted

    # 60,000 messages without content: each gains '"content":null' when re-serialised.
    body = {"request_id": "r", "messages": [{"role": "user"}] * 60_000}
    raw = json.dumps(body, separators=(",", ":")).encode()
    result = run_big(raw)
    assert isinstance(result, RequestAccepted)
    letter = encode_accepted(result, raw, max_accepted_bytes=10**6, deadletter_max_bytes=64)
    assert isinstance(letter, DeadLetter)
    assert letter.reason == "oversized" and "re-serialised" in letter.detail
    assert letter.source == WHERE


def test_a_refused_gateway_request_is_answered_at_its_reply_address() -> None:
    """A gateway a policy version behind publishes a model the worker no longer routes:
    its client gets the 404 now (a copy to the reply address), not a 504 at the deadline."""
    raw = valid(model="gone", reply_to={"topic": "switchyard.replies", "partition": 3})
    letter = run(raw)
    assert isinstance(letter, DeadLetter) and letter.reason == "unknown_route"
    reply = refusal_reply(raw, letter, max_request_bytes=2048)
    assert reply is not None
    response, address = reply
    assert address == ReplyTo(topic="switchyard.replies", partition=3)
    assert response.request_id == "r1" and response.status == "error"
    assert response.error is not None and response.error.type == REQUEST_REFUSED
    assert response.error.code == "unknown_route"
    assert response.occurred_at == WHEN and response.attempts == 0
    answer = from_error_body(response.error)
    assert (answer.status, answer.code, answer.should_retry) == (404, "model_not_found", False)


@pytest.mark.parametrize(
    "raw",
    [
        valid(model="gone"),  # no reply address: a platform's request, the dead letter only
        b'{"model": "gone", "reply_to": {"topic": "t", "partition": 0}}',  # not a request
    ],
)
def test_a_refusal_without_a_reply_address_is_only_dead_lettered(raw: bytes) -> None:
    letter = run(raw)
    assert isinstance(letter, DeadLetter)
    assert refusal_reply(raw, letter, max_request_bytes=2048) is None


def test_only_refusals_a_gateway_can_meet_are_replied() -> None:
    raw = valid(reply_to={"topic": "switchyard.replies", "partition": 0})
    letter = dead_letter("internal", "x", raw, WHERE, WHEN, 64)
    assert refusal_reply(raw, letter, max_request_bytes=2048) is None
    letter = dead_letter("unknown_route", "x", raw, WHERE, WHEN, 64)
    assert refusal_reply(raw, letter, max_request_bytes=len(raw) - 1) is None  # not re-read
