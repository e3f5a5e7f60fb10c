"""The Faust application of ``switchyard bench record_cost``: one agent, nothing else.

It reads ``RC_IN`` and, for each record, sends ``RC_SENDS`` records to ``RC_OUT``
(Faust's producer, as the worker's agents do); the record whose value is ``last``
also sends a marker to ``RC_DONE``. Built like the worker's app (app/compat/tansu.py
installed, the same linger and serializers), so its CPU per record is what one
consume and one produce cost a worker on this machine.

    python -m bench.record_cost_app worker -l warn     # env: RC_BROKER, RC_IN, ...
"""

from __future__ import annotations

import os

import faust
from faust.sensors import Monitor

from app.compat import tansu
from app.kafka import faust_security
from app.settings import get_settings
from app.worker import fast_delivery
from app.worker.quiet_monitor import QuietMonitor

tansu.install()
if os.environ.get("RC_FAST_DELIVERY") != "0":  # as the worker (agents/app.py)
    fast_delivery.install()
app = faust.App(
    os.environ["RC_APP_ID"],
    broker=os.environ["RC_BROKER"],
    store="memory://",
    datadir=os.environ["RC_DATADIR"],
    topic_partitions=int(os.environ["RC_PARTITIONS"]),
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    consumer_auto_offset_reset="earliest",
    key_serializer="raw",
    value_serializer="raw",
    web_enabled=False,
    producer_linger_ms=get_settings().producer_linger_ms,
    processing_guarantee="at_least_once",
    **faust_security(get_settings()),
    # As the worker's app (agents/app.py), unless RC_MONITOR=faust: Faust's own monitor.
    Monitor=Monitor if os.environ.get("RC_MONITOR") == "faust" else QuietMonitor,
)
SENDS = int(os.environ["RC_SENDS"])
DIRECT = os.environ.get("RC_DIRECT") == "1"
OUT = os.environ["RC_OUT"]
source = app.topic(os.environ["RC_IN"], key_type=bytes, value_type=bytes)
sink = app.topic(os.environ["RC_OUT"], key_type=bytes, value_type=bytes)
done = app.topic(os.environ["RC_DONE"], key_type=bytes, value_type=bytes)


@app.agent(source)
async def forward(stream: faust.StreamT[bytes]) -> None:
    async for event in stream.events():
        for _ in range(SENDS):
            if DIRECT:
                await app.producer.send(OUT, event.key, event.value, None, None, None)
            else:
                await sink.send(key=event.key, value=event.value)
        if event.value == b"last":
            await done.send(key=b"done", value=b"done")


if __name__ == "__main__":
    app.main()
