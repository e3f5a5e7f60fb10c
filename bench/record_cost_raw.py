"""``switchyard bench record_cost``'s app without Faust: what a record costs aiokafka alone.

It does what bench/record_cost_app.py does (for each record of ``RC_IN``, send
``RC_SENDS`` records to ``RC_OUT`` with the producer; ``last`` also sends a marker to
``RC_DONE``), with one aiokafka consumer reading batches (``getmany``, through
:class:`app.client.TopicFollower`) and one producer: no agent, stream, event,
conductor or sensor per record. The difference with the Faust app is what Faust's
per-record layers cost a worker here: the price of the worker's shape
(docs/benchmarks.md), measured, not guessed.

    python -m bench.record_cost_raw        # env: RC_BOOTSTRAP, RC_IN, RC_OUT, ...
"""

from __future__ import annotations

import asyncio
import os
import signal

from aiokafka import AIOKafkaProducer

from app.client import TopicFollower
from app.kafka import client_security
from app.settings import get_settings


async def forward(stop: asyncio.Event) -> None:
    follower = await _follow(os.environ["RC_IN"])
    producer = AIOKafkaProducer(
        bootstrap_servers=os.environ["RC_BOOTSTRAP"],
        linger_ms=get_settings().producer_linger_ms,
        **client_security(),
    )
    await producer.start()
    try:
        await _loop(follower, producer, stop)
    finally:
        await follower.stop()
        await producer.stop()


async def _follow(topic: str) -> TopicFollower:
    """The project's plain consumer (no group, from the beginning, paced fetches), once the
    bench has created the topic."""
    while True:
        try:
            return await TopicFollower(os.environ["RC_BOOTSTRAP"], [topic]).start()
        except LookupError:
            await asyncio.sleep(0.2)


async def _loop(follower: TopicFollower, producer: AIOKafkaProducer, stop: asyncio.Event) -> None:
    sends, out, done = int(os.environ["RC_SENDS"]), os.environ["RC_OUT"], os.environ["RC_DONE"]
    while not stop.is_set():
        for record in await follower.poll():
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
