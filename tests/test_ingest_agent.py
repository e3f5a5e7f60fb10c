"""The ingest agent never stops for a record.

Whatever goes wrong while one record is accepted, serialised or forwarded ends as
a dead letter with a reason and the original bytes, and the log line about it
names the reason and the position only. Only the broker's own trouble is raised.
No broker here: the topics are fakes, ``accept`` is the real one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError
from factories import policy

import agents.ingest as ingest
from app.contract import DeadLetter, LogPosition

WHERE = LogPosition(topic="llm.requests", partition=1, offset=7)
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
MARKER = "MARKER-prompt-text-never-in-logs"


class FakeTopic:
    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[bytes, bytes]] = []
        self.error = error

    async def send(self, *, key: bytes, value: str | bytes) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append((key, value.encode() if isinstance(value, str) else value))

    def letters(self) -> list[DeadLetter]:
        return [DeadLetter.model_validate_json(value) for _, value in self.sent]


class Holder:
    current = policy()


@pytest.fixture
def topics(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeTopic]:
    wired = {"routing_log": FakeTopic(), "deadletter_topic": FakeTopic()}
    for name, topic in wired.items():
        monkeypatch.setattr(ingest, name, topic)
    monkeypatch.setattr(ingest, "policy_holder", lambda: Holder())
    return wired


def request(content: str = MARKER) -> bytes:
    body = {"request_id": "r1", "messages": [{"role": "user", "content": content}]}
    return json.dumps(body).encode()


async def test_a_valid_request_is_forwarded(topics: dict[str, FakeTopic]) -> None:
    await ingest.ingest_one(request(), WHERE, WHEN)
    assert len(topics["routing_log"].sent) == 1
    assert topics["deadletter_topic"].sent == []


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 10_000 + b"]" * 10_000,
        b'{"a": ' + b"1" * 5000 + b"}",
        b'{"request_id": "r", "messages": [{"role": "user", "content": "\\ud800"}]}',
        b'{"request_id": "r", "messages": [{"role": "user"}], "tenant": "\\udfff"}',
    ],
)
async def test_poison_records_are_dead_lettered(topics: dict[str, FakeTopic], raw: bytes) -> None:
    await ingest.ingest_one(raw, WHERE, WHEN)
    (letter,) = topics["deadletter_topic"].letters()
    assert letter.reason in {"too_deep", "bad_number", "bad_text"}
    assert letter.source == WHERE
    assert topics["routing_log"].sent == []


async def test_an_unforeseen_error_is_an_internal_dead_letter_and_logs_no_content(
    topics: dict[str, FakeTopic], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(raw: bytes, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"choked on {raw.decode()}")

    monkeypatch.setattr(ingest, "accept", broken)
    caplog.set_level(logging.DEBUG)
    raw = request()
    await ingest.ingest_one(raw, WHERE, WHEN)
    (letter,) = topics["deadletter_topic"].letters()
    assert letter.reason == "internal"
    assert letter.detail == "RuntimeError"
    assert raw.startswith(base64.b64decode(letter.original_base64))
    assert letter.original_size == len(raw)
    assert "llm.requests/1@7" in caplog.text and "internal" in caplog.text
    assert MARKER not in caplog.text


async def test_a_record_the_producer_refuses_for_size_is_oversized(
    topics: dict[str, FakeTopic], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ingest, "routing_log", FakeTopic(MessageSizeTooLargeError(MARKER)))
    caplog.set_level(logging.DEBUG)
    await ingest.ingest_one(request(), WHERE, WHEN)
    (letter,) = topics["deadletter_topic"].letters()
    assert letter.reason == "oversized"
    assert MARKER not in caplog.text


async def test_the_broker_s_own_trouble_is_raised_not_dead_lettered(
    topics: dict[str, FakeTopic], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "routing_log", FakeTopic(KafkaConnectionError()))
    with pytest.raises(KafkaConnectionError):
        await ingest.ingest_one(request(), WHERE, WHEN)
    assert topics["deadletter_topic"].sent == []


class Event:
    def __init__(self, offset: int, raw: bytes) -> None:
        self.value = raw
        self.message = type(
            "M", (), {"topic": "llm.requests", "partition": 0, "offset": offset, "timestamp": 1.0}
        )()


class Deferred:
    """A routing log whose deliveries the test settles."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[None]] = []

    async def send(self, *, key: bytes, value: str | bytes) -> asyncio.Future[None]:
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(sent)
        return sent


async def _events(raws: list[bytes]) -> AsyncIterator[Event]:
    for offset, raw in enumerate(raws):
        yield Event(offset, raw)
        await asyncio.sleep(0)


def _recorder() -> tuple[list[int], Callable[[Event], Awaitable[None]]]:
    """The offsets acked, and the ack that records them."""
    acked: list[int] = []

    async def ack(event: Event) -> None:
        acked.append(event.message.offset)

    return acked, ack


def _requests(count: int) -> list[bytes]:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    return [json.dumps({**body, "request_id": f"r{i}"}).encode() for i in range(count)]


async def test_a_record_is_acked_in_order_once_its_forward_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = Deferred()
    monkeypatch.setattr(ingest, "routing_log", log)
    monkeypatch.setattr(ingest, "policy_holder", lambda: Holder())
    acked, ack = _recorder()

    await ingest.forward_all(_events(_requests(3)), ack)
    assert acked == [] and len(log.pending) == 3  # sent, not delivered: nothing acked
    log.pending[1].set_result(None)
    await asyncio.sleep(0.01)
    assert acked == []  # the first is still in flight
    log.pending[0].set_result(None)
    log.pending[2].set_result(None)
    await asyncio.sleep(0.01)
    assert acked == [0, 1, 2]


async def test_a_forward_the_broker_refuses_is_dead_lettered_then_acked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, letters = Deferred(), Deferred()
    monkeypatch.setattr(ingest, "routing_log", log)
    monkeypatch.setattr(ingest, "deadletter_topic", letters)
    monkeypatch.setattr(ingest, "policy_holder", lambda: Holder())
    acked, ack = _recorder()
    await ingest.forward_all(_events(_requests(2)), ack)
    log.pending[0].set_exception(MessageSizeTooLargeError())  # the record itself
    log.pending[1].set_result(None)
    await asyncio.sleep(0.01)
    assert acked == [] and len(letters.pending) == 1  # its dead letter, not acked yet
    letters.pending[0].set_result(None)
    await asyncio.sleep(0.01)
    assert acked == [0, 1]
