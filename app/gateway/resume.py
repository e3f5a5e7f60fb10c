"""A stream resumed on any gateway: the request's deltas and answer read back from the log.

A client that lost its stream (its connection, or the gateway it streamed from) sends
``Last-Event-ID`` with the request's id (docs/gateway.md, "Resuming a stream"). The
gateway that gets it may not be the one the stream came from, so nothing is taken from
memory: the request's record on ``llm.requests`` (keyed by request id) says who asked
(its tenant, its key's name) and which partition its deltas and reply go to (its
``reply_to``); the answer, once there, is on ``llm.responses``. While the request is
still going on, :func:`follow` reads that partition of the deltas and replies topics,
from ``window`` records before their end (the trade-off of :mod:`app.gateway.lookup`: a
stream older than the window is not found), and yields the request's items in the
order they come, as the gateway it streamed from saw them; the relay
(app/gateway/relay.py) holds back the text the client has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from aiokafka import TopicPartition
from pydantic import ValidationError

from app.compat.tansu import fetch_max_wait_ms
from app.config.schema import GatewayKey
from app.contract import Response, StreamDelta
from app.gateway.errors import GatewayError, invalid
from app.gateway.lookup import partition_of
from app.kafka import standalone_consumer

#: The id prefix of OpenAI's chunks and completions: a client may name the request by it.
CHUNK_ID_PREFIX = "chatcmpl-"
#: Longest ``Last-Event-ID`` read (digits).
MAX_EVENT_ID_DIGITS = 12


def last_event_id(value: str) -> int:
    """The characters of text the client has, from its ``Last-Event-ID`` (400 otherwise)."""
    text = value.strip()
    if not text.isdigit() or not text.isascii() or len(text) > MAX_EVENT_ID_DIGITS:
        message = (
            f"Last-Event-ID: {value[:40]!r} is not an event id of this stream "
            "(the `id:` of the last event received: a whole number of characters)"
        )
        raise invalid(message, "invalid_last_event_id")
    return int(text)


def asked_id(value: str) -> str:
    """The id a client names a request by: its own, the gateway's, or a chunk's ``id``."""
    return value.removeprefix(CHUNK_ID_PREFIX)


def not_found(request_id: str) -> GatewayError:
    message = f"no request {request_id!r} of this key (unknown, or older than the window)"
    return GatewayError(404, message, "request_not_found")


def owns(key: GatewayKey, record: dict[str, Any]) -> bool:
    """Whether ``key`` may read the request: its tenant's (a key with no tenant: its own)."""
    if key.tenant is not None:
        return bool(record.get("tenant") == key.tenant)
    return record.get("tenant") is None and record.get("key_name") == key.name


def deltas_partition(record: dict[str, Any], replies_topic: str, partitions: int) -> int:
    """The partition of the deltas and replies topics the request's pieces go to."""
    reply_to = record.get("reply_to")
    if isinstance(reply_to, dict) and reply_to.get("topic") == replies_topic:
        partition = reply_to.get("partition")
        if isinstance(partition, int) and 0 <= partition < partitions:
            return partition
    return partition_of(str(record.get("request_id", "")).encode(), partitions)


async def follow(
    bootstrap: str,
    topics: tuple[str, str],
    record: dict[str, Any],
    window: int,
    wait_s: float,
) -> AsyncGenerator[StreamDelta | Response | None, None]:
    """The request's deltas and reply from partition of ``topics`` (deltas, replies) its
    ``record`` names, from ``window`` records back, as they come; None once ``wait_s``
    passed with no end. Close it when done."""
    deltas_topic, replies_topic = topics
    key = str(record["request_id"]).encode()
    consumer = standalone_consumer(bootstrap, fetch_max_wait_ms=fetch_max_wait_ms())
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        count = len(consumer.partitions_for_topic(deltas_topic) or {0})
        partition = deltas_partition(record, replies_topic, count)
        assigned = [TopicPartition(t, partition) for t in topics]
        consumer.assign(assigned)
        first = await consumer.beginning_offsets(assigned)
        end = await consumer.end_offsets(assigned)
        for tp in assigned:
            consumer.seek(tp, max(first[tp], end[tp] - window))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for tp in sorted(batches, key=lambda tp: tp.topic != deltas_topic):
                for record_ in batches[tp]:
                    if record_.key != key:
                        continue
                    item = _item(record_.value, tp.topic == deltas_topic)
                    if item is not None and item.request_id == key.decode():
                        yield item
        yield None
    finally:
        await consumer.stop()


def _item(value: bytes | None, delta: bool) -> StreamDelta | Response | None:
    try:
        if delta:
            return StreamDelta.model_validate_json(value or b"")
        return Response.model_validate_json(value or b"")
    except ValidationError:
        return None
