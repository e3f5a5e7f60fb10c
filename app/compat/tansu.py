"""Workarounds for Tansu 0.6.0, the embedded Kafka-compatible broker. All of them live here.

Tansu's ListOffsets(latest) answers *start of the last record batch + 1*
instead of *last offset + 1*. When the producer batched several records, every
reader that trusts the end offset stops early: Faust's table recovery drops the
last updates of a changelog partition (or raises ConsistencyError when the
committed offset is past the reported end), and a replay reads a short log.

:func:`true_end_offsets` asks the broker for the last batch itself and returns
the offset after its last record. On a broker that answers correctly the probe
returns the same numbers, so it is safe anywhere; it is only switched on for
Tansu (``SWITCHYARD_TANSU_COMPAT``) because it costs one fetch per partition.

Tansu also holds a fetch that finds no record, looking for records again only
partway through its ``fetch_max_wait_ms`` (most often halfway) and at its end
(measured with aiokafka, a 400 ms wait: a record landing 22-152 ms into a held fetch
was answered at 203 ms, one landing at 12 or 213-303 ms at 403 ms; Apache Kafka
answers as soon as a record lands). Every hop between agents
therefore cost about a quarter of Faust's hard-coded 1,500 ms (p50 393 ms per
hop). Every consumer of Switchyard waits ``Settings.fetch_max_wait_ms``
(:func:`fetch_max_wait_ms`; the worker's: app/worker/fetch_wait.py). An idle consumer
waits longer (:mod:`app.compat.fetch_pacing`), which on Tansu delays the first record
after a quiet spell by part of that wait: :func:`idle_fetch_wait_ms` keeps it short.

The other Tansu quirks are handled by design, not code: no transactions, so
processing is at-least-once with idempotent state updates; no static
membership; no GlobalTable; short sessions (6 s) to keep joins fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from aiokafka import TopicPartition

from app.kafka import standalone_consumer
from app.settings import Settings, get_settings

TP = TypeVar("TP", bound=tuple[str, int])


def fetch_max_wait_ms() -> int:
    """The fetch long-poll of Switchyard's consumers (``SWITCHYARD_FETCH_MAX_WAIT_MS``)."""
    return get_settings().fetch_max_wait_ms


def idle_fetch_wait_ms(settings: Settings) -> int:
    """An idle consumer's fetch wait on Tansu (``SWITCHYARD_FETCH_IDLE_WAIT_MS``): Tansu
    holds a fetch past a record's landing, so a long wait would delay every first record
    after a quiet spell."""
    return settings.fetch_idle_wait_ms


_installed = False


async def true_end_offsets(
    bootstrap_servers: str | Sequence[str],
    reported: Mapping[TP, int],
    *,
    timeout_s: float = 10.0,
) -> dict[TP, int]:
    """Correct reported end offsets by reading each partition's last batch."""
    probe = {tp: end for tp, end in reported.items() if end is not None and end > 0}
    result = dict(reported)
    if not probe:
        return result
    consumer = standalone_consumer(bootstrap_servers)
    await consumer.start()
    try:
        by_kafka_tp = {TopicPartition(tp[0], tp[1]): tp for tp in probe}
        consumer.assign(list(by_kafka_tp))
        for kafka_tp, tp in by_kafka_tp.items():
            consumer.seek(kafka_tp, probe[tp] - 1)
        pending = set(by_kafka_tp)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while pending and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(*pending, timeout_ms=200)
            for kafka_tp, records in batches.items():
                if records:
                    tp = by_kafka_tp[kafka_tp]
                    result[tp] = max(result[tp], records[-1].offset + 1)
                    pending.discard(kafka_tp)
            for kafka_tp in list(pending):
                # Read past the end with nothing given: the last offset is a transaction's
                # marker (Apache Kafka), which no consumer is given; the end stands.
                if await consumer.position(kafka_tp) >= probe[by_kafka_tp[kafka_tp]]:
                    pending.discard(kafka_tp)
    finally:
        await consumer.stop()
    return result


def install() -> None:
    """Make Faust's table recovery use :func:`true_end_offsets`. Idempotent."""
    global _installed
    if _installed:
        return
    from faust.transport.drivers import aiokafka as faust_aiokafka

    thread_class: Any = faust_aiokafka.AIOKafkaConsumerThread
    original = thread_class._highwaters

    async def _highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
        reported: Mapping[Any, int] = await original(self, partitions)
        if self.consumer.in_transaction:
            return reported
        transport = self.transport
        servers = faust_aiokafka.server_list(transport.url, transport.default_port)
        return await true_end_offsets(servers, reported)

    thread_class._highwaters = _highwaters
    _installed = True
