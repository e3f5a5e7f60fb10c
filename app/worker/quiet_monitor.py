"""Faust's monitor without its per-record bookkeeping.

Faust adds its ``Monitor`` sensor to every app, and calls it for every record read
(``on_message_in``, ``on_stream_event_in`` / ``_out``, ``on_message_out``), every
table read and write and every record sent: counters, per-topic and per-stream
dicts, clock reads. Switchyard's metrics are its own (app/metrics.py, Prometheus)
and nothing reads the monitor's, so on a worker this one keeps only what Faust's
consumer reads from it directly (end offsets, commits) and the rebalance hooks.

``switchyard bench record_cost`` measures a record consumed with either
(``RC_MONITOR=faust``; docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

from faust.sensors import Monitor


class QuietMonitor(Monitor):
    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> None:
        return None

    def on_stream_event_out(
        self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        return None

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_table_get(self, table: Any, key: Any) -> None:
        return None

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        return None

    def on_table_del(self, table: Any, key: Any) -> None:
        return None

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> None:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        return None
