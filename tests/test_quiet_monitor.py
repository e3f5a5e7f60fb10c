"""The worker's Faust monitor (app/worker/quiet_monitor.py) does no per-record work: each
hook Faust calls for a record read, sent or a table access leaves it as it was."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.sensors import Monitor
from faust.types import TP as TopicPartition

from app.worker.quiet_monitor import QuietMonitor

TP = TopicPartition("t", 0)


class _Task:
    """A stream's owner (the monitor keys a weak dict by it)."""


class _Stream:
    """What the monitor reads of a stream (it keys a weak dict by it)."""

    def __init__(self) -> None:
        self.task_owner = _Task()


def _calls(monitor: Monitor) -> None:
    message: Any = SimpleNamespace(time_in=None)
    table: Any = SimpleNamespace(name="table")
    stream: Any = _Stream()
    monitor.on_message_in(TP, 1, message)
    state = monitor.on_stream_event_in(TP, 1, stream, None)  # type: ignore[arg-type]
    monitor.on_stream_event_out(TP, 1, stream, None, state)  # type: ignore[arg-type]
    monitor.on_message_out(TP, 1, message)
    monitor.on_table_get(table, "k")
    monitor.on_table_set(table, "k", "v")
    monitor.on_table_del(table, "k")
    sent = monitor.on_send_initiated(None, "t", None, 1, 1)  # type: ignore[arg-type]
    monitor.on_send_completed(None, sent, None)  # type: ignore[arg-type]


def _counts(monitor: Monitor) -> tuple[Any, ...]:
    return (
        monitor.messages_received_total,
        monitor.events_total,
        monitor.messages_sent,
        len(monitor.tables),
        dict(monitor.stream_inbound_time),
        len(monitor.send_latency),
    )


def test_faust_s_monitor_counts_each_record_and_table_access() -> None:
    faust_s = Monitor()
    _calls(faust_s)
    assert _counts(faust_s) != _counts(Monitor())  # what the quiet one must not do


def test_the_quiet_monitor_does_nothing_per_record() -> None:
    quiet = QuietMonitor()
    _calls(quiet)
    assert _counts(quiet) == _counts(Monitor())


def test_the_worker_uses_it() -> None:
    from agents.app import app

    assert type(app.monitor) is QuietMonitor
