"""Find a request's response on ``llm.responses`` by its id, in a bounded recent window.

Responses are keyed by request id, so one lives on the partition Kafka's default
partitioner (murmur2 of the key) picks: the lookup reads that partition only, from
``window`` records before its end to its end, and keeps the first response with the
id. A gateway killed mid-request loses nothing: the request completes in the log, and
any gateway finds the answer here (trade-off: a response older than the window is not
found, and a lookup costs reading up to ``window`` records of one partition; keeping
answers in the gateway instead would be free but dies with it).
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2
from pydantic import ValidationError

from app.compat.tansu import fetch_max_wait_ms
from app.events import Response
from app.kafka import client_security

#: Give up on a lookup after this long.
LOOKUP_TIMEOUT_S = 10.0


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the default (Java-compatible) partitioner sends ``key`` to."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class ResponseLookup:
    def __init__(self, bootstrap: str, topic: str, window: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.window = window
        self._lock = asyncio.Semaphore(4)  # lookups at once

    async def find(self, request_id: str) -> Response | None:
        async with self._lock:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                enable_auto_commit=False,
                group_id=None,
                fetch_max_wait_ms=fetch_max_wait_ms(),
                **client_security(),
            )
            await consumer.start()
            try:
                return await asyncio.wait_for(
                    self._scan(consumer, request_id), timeout=LOOKUP_TIMEOUT_S
                )
            except TimeoutError:
                return None
            finally:
                await consumer.stop()

    async def _scan(self, consumer: AIOKafkaConsumer, request_id: str) -> Response | None:
        key = request_id.encode()
        count = len(await _partitions(consumer, self.topic))
        tp = TopicPartition(self.topic, partition_of(key, count))
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]  # may be short of the true end
        consumer.seek(tp, max(first, end - self.window))
        idle = 0
        while idle < 2:  # read past the reported end until nothing more comes
            batches = await consumer.getmany(tp, timeout_ms=200)
            records = batches.get(tp, [])
            idle = idle + 1 if not records and await consumer.position(tp) >= end else 0
            for record in records:
                if record.key == key:
                    found = _response(record.value)
                    if found is not None and found.request_id == request_id:
                        return found
        return None


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    found = consumer.partitions_for_topic(topic)
    if not found:
        raise LookupError(f"topic {topic!r} does not exist")
    return set(found)


def _response(value: bytes | None) -> Response | None:
    try:
        return Response.model_validate_json(value or b"")
    except ValidationError:
        return None
