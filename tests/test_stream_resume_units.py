"""Resuming a stream, the pure parts: the ``id:`` of every event (the characters of the
answer's text the client has), the relay holding back what a resumed client has, the
``Last-Event-ID`` check and who may resume a request."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from gateway_factories import stream_delta

from app.config.schema import GatewayKey
from app.contract import Response, StreamDelta
from app.gateway.errors import GatewayError
from app.gateway.relay import STREAM_INTERRUPTED, Relay
from app.gateway.resume import asked_id, deltas_partition, last_event_id, owns

WHEN = datetime(2025, 1, 1, tzinfo=UTC)


def _response(content: str, attempts: int = 1, **message: Any) -> Response:
    choice = {"index": 0, "message": {"role": "assistant", "content": content, **message}}
    return Response(
        id="x",
        occurred_at=WHEN,
        request_id="acme.r1",
        status="ok",
        attempts=attempts,
        deployment="prov:model-x",
        completion={"choices": [choice], "usage": {"total_tokens": 9}},
    )


def _events(frames: list[bytes]) -> list[tuple[int, Any]]:
    """(id, data) of each event."""
    out = []
    for frame in frames:
        head, _, data = frame.decode().rpartition("data: ")
        assert head.startswith("id: ") and head.endswith("\n")
        text = data.strip()
        out.append((int(head[4:-1]), text if text == "[DONE]" else json.loads(text)))
    return out


def _text(events: list[tuple[int, Any]]) -> str:
    return "".join(
        d["choices"][0]["delta"].get("content") or ""
        for _, d in events
        if isinstance(d, dict) and d.get("choices")
    )


#: A stream broken after "Hello wo" and continued by attempt 2 (mid-stream failover).
FAILOVER = [
    stream_delta(0, "Hello"),
    stream_delta(1, " wo"),
    stream_delta(2, end="failed", error="bad_response: broken"),
    stream_delta(0, "rld, ", attempt=2, call="c2", offset=8),
    stream_delta(
        1,
        "how are you?",
        attempt=2,
        call="c2",
        end="ok",
        finish_reason="stop",
        usage={"total_tokens": 9},
    ),
]
WHOLE = "Hello world, how are you?"


def _run(relay: Relay, items: list[StreamDelta | Response]) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for item in items:
        out += _events(relay.take(item).frames)
    return out


def test_every_event_names_the_characters_of_text_the_client_has() -> None:
    events = _run(Relay("acme.r1", include_usage=True, created=1), FAILOVER)
    assert [i for i, _ in events] == [0, 5, 8, 13, 25, 25, 25, 25]
    assert events[-1] == (25, "[DONE]") and _text(events) == WHOLE
    whole = _events(Relay("acme.r1", include_usage=False, created=1).take(_response(WHOLE)).frames)
    assert whole[-1] == (25, "[DONE]") and _text(whole) == WHOLE


@pytest.mark.parametrize("cut", range(len(WHOLE) + 1))
def test_a_resumed_stream_sends_exactly_the_text_after_the_id_across_a_failover(cut: int) -> None:
    relay = Relay("acme.r1", include_usage=True, created=1, resume_after=cut)
    events = _run(relay, FAILOVER)
    assert WHOLE[:cut] + _text(events) == WHOLE
    assert all(not d["choices"][0]["delta"].get("role") for _, d in events[:-2])  # no role chunk
    assert events[-1] == (25, "[DONE]") and events[-2][1]["usage"] == {"total_tokens": 9}
    assert relay.done
    # The same from the whole answer (the request complete), and from an answer that
    # overtakes the continuing call's deltas.
    whole = Relay("acme.r1", include_usage=False, created=1, resume_after=cut)
    step = whole.take(_response(WHOLE, attempts=2))
    assert step.headers is not None and WHOLE[:cut] + _text(_events(step.frames)) == WHOLE
    overtaken = Relay("acme.r1", include_usage=False, created=1, resume_after=cut)
    events = _run(overtaken, [*FAILOVER[:3], _response(WHOLE, attempts=2)])
    assert WHOLE[:cut] + _text(events) == WHOLE and events[-1][1] == "[DONE]"


def test_an_id_beyond_the_answer_is_refused() -> None:
    step = Relay("acme.r1", False, 1, resume_after=26).take(_response(WHOLE))
    assert step.error is not None and step.error.status == 400
    assert step.error.code == "invalid_last_event_id"
    live = _run(Relay("acme.r1", False, 1, resume_after=99), FAILOVER)
    (_, event) = live[-1]
    assert event["error"]["code"] == STREAM_INTERRUPTED and "beyond" in event["error"]["message"]


def test_a_stream_with_a_tool_call_is_not_resumed_as_text() -> None:
    call = {"index": 0, "id": "t", "function": {"name": "f", "arguments": "{}"}}
    events = _run(
        Relay("acme.r1", False, 1, resume_after=2), [stream_delta(0, "Hi", tool_calls=[call])]
    )
    assert events[-1][1]["error"]["code"] == STREAM_INTERRUPTED
    step = Relay("acme.r1", False, 1, resume_after=0).take(_response("", tool_calls=[call]))
    assert step.error is not None and step.error.status == 409


@pytest.mark.parametrize("value", ["", "abc", "-1", "1.5", "١٢", "9" * 13, "0x10"])
def test_a_bad_last_event_id_is_a_clear_400(value: str) -> None:
    with pytest.raises(GatewayError) as raised:
        last_event_id(value)
    assert raised.value.status == 400 and raised.value.code == "invalid_last_event_id"
    assert "Last-Event-ID" in raised.value.message


def test_the_id_and_the_owner_of_a_request() -> None:
    assert last_event_id(" 42 ") == 42 and last_event_id("0") == 0
    assert asked_id("chatcmpl-acme.r1") == "acme.r1" and asked_id("r1") == "r1"
    record = {"request_id": "acme.r1", "tenant": "acme", "key_name": "a"}
    assert owns(GatewayKey(sha256="0" * 64, name="b", tenant="acme"), record)
    assert not owns(GatewayKey(sha256="0" * 64, name="a", tenant="globex"), record)
    assert not owns(GatewayKey(sha256="0" * 64, name="a"), record)  # no tenant: not acme's
    mine = {"request_id": "r2", "tenant": None, "key_name": "a"}
    assert owns(GatewayKey(sha256="0" * 64, name="a"), mine)
    assert not owns(GatewayKey(sha256="0" * 64, name="b"), mine)
    replies = "switchyard.replies"
    at_three = {**record, "reply_to": {"topic": replies, "partition": 3}}
    assert deltas_partition(at_three, replies, 4) == 3
    assert deltas_partition(
        {**at_three, "reply_to": {"topic": "x", "partition": 3}}, replies, 4
    ) in range(4)
