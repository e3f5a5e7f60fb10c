"""The worker's publisher sends a record the producer gave up on for a passing reason
again until a copy is delivered; the delivery future waits for that copy. A record the
broker refuses for itself fails the future at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, NodeNotReadyError

import agents.app as worker_app


class Producer:
    """Each send's future, for the test to settle."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, asyncio.Future[Any]]] = []

    async def send(self, topic: str, key: Any, value: bytes, *rest: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((value, future))
        return future


class Metadata:
    partition, offset = 0, 7


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Producer:
    fake = Producer()
    monkeypatch.setattr(worker_app, "app", type("App", (), {"producer": fake})())
    monkeypatch.setattr(worker_app, "RESEND_BACKOFF_S", (0.01,))
    return fake


async def test_a_send_that_times_out_is_sent_again_until_delivered(producer: Producer) -> None:
    publisher = worker_app.Publisher("topic")
    seen: list[tuple[int, int, bytes]] = []
    publisher.on_delivered = lambda p, o, v: seen.append((p, o, v))
    delivered = await publisher.send(key=b"k", value="record")
    producer.sent[0][1].set_exception(NodeNotReadyError())
    await asyncio.sleep(0.05)
    assert len(producer.sent) == 2 and not delivered.done()
    producer.sent[1][1].set_exception(KafkaTimeoutError())
    await asyncio.sleep(0.05)
    assert len(producer.sent) == 3 and not delivered.done()
    producer.sent[2][1].set_result(Metadata())
    await asyncio.sleep(0)
    assert delivered.result().offset == 7
    assert [value for value, _ in producer.sent] == [b"record"] * 3
    assert seen == [(0, 7, b"record")]  # told once, for the copy delivered


async def test_a_record_the_broker_refuses_for_itself_fails_at_once(producer: Producer) -> None:
    delivered = await worker_app.Publisher("topic").send(key=None, value=b"x" * 10)
    producer.sent[0][1].set_exception(MessageSizeTooLargeError())
    await asyncio.sleep(0.05)
    assert len(producer.sent) == 1
    assert isinstance(delivered.exception(), MessageSizeTooLargeError)
