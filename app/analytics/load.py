"""Folding a recorded log (a broker read, an export, a synthetic log) into a store.

The same path the sink takes (:meth:`Store.apply`), record by record in log order,
so ``switchyard export --format parquet`` and the tests fill a store exactly as the
live sink does.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.analytics.rows import STREAMS
from app.analytics.store import Applied, SourceRecord, Store
from app.audit.log import RecordedLog, topic_names
from app.settings import Topics

#: Records per transaction.
CHUNK = 5000


def log_records(log: RecordedLog, topics: Topics, offset_base: int = 0) -> Iterator[SourceRecord]:
    """Every record of the log, stream by stream (``offset_base`` is added to offsets)."""
    names = topic_names(topics)
    for stream in STREAMS:
        for entry in log.stream(stream):
            yield SourceRecord(
                stream,
                names[stream],
                entry.partition,
                entry.offset + offset_base,
                entry.raw.encode("utf-8"),
            )


def fold_log(store: Store, log: RecordedLog, topics: Topics, offset_base: int = 0) -> Applied:
    total = Applied()
    chunk: list[SourceRecord] = []
    for record in log_records(log, topics, offset_base):
        chunk.append(record)
        if len(chunk) >= CHUNK:
            total.add(store.apply(chunk))
            chunk = []
    if chunk:
        total.add(store.apply(chunk))
    return total
