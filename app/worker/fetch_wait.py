"""The worker's consumer: a short fetch wait while records flow, on every broker.

aiokafka keeps at most one fetch in flight per broker node, and leaves out of it every
partition whose records the application has not taken yet. A record that lands on such
a partition, once the application has taken the earlier ones, waits for the fetch in
flight to come back: when nothing lands on the partitions it names, that is the whole
fetch wait. Faust's consumer waits 1,500 ms. Under load this happens all the time: on
Apache Kafka a saturated worker stalled for about 1.5 s every few seconds, each time
with every outstanding request waiting between the routing log and its decision
(``switchyard bench throughput --broker kafka``: p95 at saturation 1.5-1.7 s).

:func:`install` gives the worker's consumer ``Settings.fetch_max_wait_ms`` (10 ms) while
its fetches bring records, so such a record waits at most that, and a longer wait once
it has had none for a second (:class:`app.compat.fetch_pacing.FetchPacer`), so an idle
worker does not poll the broker every few milliseconds. The idle wait is
:data:`IDLE_WAIT_MS` on Apache Kafka, where a fetch returns as soon as a record lands
on a partition it names and an idle consumer names them all; Tansu holds such fetches,
so there it stays short (``Settings.fetch_idle_wait_ms``, app/compat/tansu.py).
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer
from faust.transport.drivers import aiokafka as driver

from app.compat.fetch_pacing import FetchPacer, paced_on_start

#: The idle worker's fetch wait on Apache Kafka (the Java client's default).
IDLE_WAIT_MS = 500

_installed: FetchPacer | None = None


def install(busy_ms: int, idle_ms: int) -> None:
    """Make the worker's Faust consumer wait ``busy_ms`` per fetch while records come,
    ``idle_ms`` once idle. Idempotent (the first call's waits stay)."""
    global _installed
    if _installed is not None:
        return
    _installed = template = FetchPacer(busy_ms, idle_ms)
    thread_class: Any = driver.AIOKafkaConsumerThread
    create_consumer = thread_class._create_worker_consumer

    def _create_worker_consumer(self: Any, transport: Any) -> AIOKafkaConsumer:
        consumer: AIOKafkaConsumer = create_consumer(self, transport)
        consumer._fetch_max_wait_ms = template.busy_ms  # read by the fetcher at start()
        return paced_on_start(consumer, FetchPacer(template.busy_ms, template.idle_ms))

    thread_class._create_worker_consumer = _create_worker_consumer


def installed() -> FetchPacer | None:
    """The waits :func:`install` gave the worker's consumer (None: not installed)."""
    return _installed
