"""Ingest: validate each ``llm.requests`` record; accept it or dead-letter it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from faust import StreamT
from faust.types import EventT

from app import metrics
from app.events import DeadLetter, LogPosition
from app.faust_app import app, deadletter_topic, requests_topic, routing_topic, settings
from app.ingest import accept
from app.runtime import policy_holder

log = logging.getLogger(__name__)


def position_of(event: EventT[bytes]) -> LogPosition:
    message = event.message
    return LogPosition(topic=message.topic, partition=message.partition, offset=message.offset)


def log_time(event: EventT[bytes]) -> datetime:
    """The record's log timestamp: the only clock a request brings."""
    return datetime.fromtimestamp(event.message.timestamp, tz=UTC)


@app.agent(requests_topic)
async def ingest(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        result = accept(
            event.value,
            position_of(event),
            log_time(event),
            policy_holder().current.config,
            max_request_bytes=settings.max_request_bytes,
            deadletter_max_bytes=settings.deadletter_max_bytes,
        )
        if isinstance(result, DeadLetter):
            metrics.REQUESTS.labels(result=result.reason).inc()
            log.info("dead-lettered %s: %s", result.source, result.reason)
            await deadletter_topic.send(key=result.id.encode(), value=result.model_dump_json())
            continue
        metrics.REQUESTS.labels(result="accepted").inc()
        await routing_topic.send(key=result.route.encode(), value=result.model_dump_json())
