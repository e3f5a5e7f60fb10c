"""``switchyard bench record_cost``'s app without Faust: what a record costs aiokafka alone.

It does what bench/record_cost_app.py does (for each record of ``RC_IN``, send
``RC_SENDS`` records to ``RC_OUT`` with the producer; ``last`` also sends a marker to
``RC_DONE``), with one aiokafka consumer reading batches (``getmany``) and one
producer: no agent, stream, event, conductor or sensor per record. The difference
with the Faust app is what Faust's per-record layers cost a worker here: the price
of the worker's shape (docs/benchmarks.md), measured, not guessed.

    python -m bench.record_cost_raw        # env: RC_BOOTSTRAP, RC_IN, RC_OUT, ...
"""

from __future__ import annotations

import asyncio
import os
import signal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from app.compat import tansu
from app.compat.fetch_pacing import pace_fetches
from app.kafka import client_security
from app.settings import get_settings


async def forward(stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=os.environ["RC_BOOTSTRAP"],
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=tansu.fetch_max_wait_ms(),
        **client_security(),
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=os.environ["RC_BOOTSTRAP"],
        linger_ms=get_settings().producer_linger_ms,
        **client_security(),
    )
    await consumer.start()
    await producer.start()
    pace_fetches(consumer)
    try:
        source = TopicPartition(os.environ["RC_IN"], 0)
        while not consumer.partitions_for_topic(source.topic):  # the bench creates it
            await consumer._client.force_metadata_update()
            await asyncio.sleep(0.2)
        consumer.assign([source])
        await consumer.seek_to_beginning(source)
        await _loop(consumer, producer, stop)
    finally:
        await consumer.stop()
        await producer.stop()


async def _loop(
    consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, stop: asyncio.Event
) -> None:
    sends, out, done = int(os.environ["RC_SENDS"]), os.environ["RC_OUT"], os.environ["RC_DONE"]
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=200)
        for records in batches.values():
            for record in records:
                for _ in range(sends):
                    await producer.send(out, record.value, key=record.key)
                if record.value == b"last":
                    await producer.send(done, b"done", key=b"done")


def main() -> None:
    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await forward(stop)

    asyncio.run(run())


if __name__ == "__main__":
    main()
