"""Where a request's answer will be on ``llm.responses``, known before it is published.

A response is keyed by request id, so it goes to the partition the id hashes to, and it
is written after its request was published: at or after the end that partition had
before. That end is the request's ``turn.answer_after``; a later turn, or ``GET
/v1/responses/{id}``, reads forward from there to the answer (app/gateway/lookup.py),
however old the conversation, instead of searching a window. An end read earlier is
still before the answer, so one read (``ListOffsets``, every partition at once) serves
every request for :data:`MAX_AGE_S`: the forward read starts at most that much earlier.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.contract import LogPosition
from app.gateway.errors import GatewayError
from app.gateway.lookup import partition_of
from app.kafka import bootstrap_servers, client_security
from app.settings import Settings

#: How long one read of the partitions' ends serves.
MAX_AGE_S = 1.0


class AnswerMarks:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topics.responses
        self._consumer: AIOKafkaConsumer | None = None
        self._ends: dict[int, int] = {}
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def mark(self, request_id: str) -> LogPosition:
        """Where ``request_id``'s answer will be: at or after this position (call it before
        publishing the request). 503 when the broker cannot say."""
        try:
            ends = await self._current()
        except Exception as exc:
            message = f"could not read {self.topic}'s ends ({type(exc).__name__})"
            raise GatewayError(503, message, "broker_unavailable", retry_after_s=1.0) from None
        partition = partition_of(request_id.encode(), len(ends))
        return LogPosition(topic=self.topic, partition=partition, offset=ends[partition])

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _current(self) -> dict[int, int]:
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._ends and loop.time() - self._read_at < MAX_AGE_S:
                return self._ends
            started = loop.time()
            consumer = await self._started()
            found = consumer.partitions_for_topic(self.topic)
            if not found:
                await consumer._client.force_metadata_update()
                found = consumer.partitions_for_topic(self.topic)
            if not found:
                raise LookupError(f"topic {self.topic!r} does not exist")
            tps = [TopicPartition(self.topic, p) for p in sorted(found)]
            ends = await consumer.end_offsets(tps)
            self._ends = {tp.partition: offset for tp, offset in ends.items()}
            self._read_at = started
            return self._ends

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap_servers(self.settings.broker),
                enable_auto_commit=False,
                group_id=None,
                **client_security(self.settings),
            )
            await consumer.start()
            self._consumer = consumer
        return self._consumer
