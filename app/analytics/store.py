"""The analytics store: an embedded DuckDB database the recorded events are folded into.

:meth:`Store.apply` folds a batch of records in one transaction: the rows (inserted
with ``ON CONFLICT DO NOTHING`` on the event id, so a redelivered or duplicated event
changes nothing) and, in the same transaction, the next offset of every topic
partition the batch came from (``sink_offsets``). A sink that stops anywhere, even
killed mid-batch, restarts from the offsets of its last committed batch: what it
folds again is either not in the store yet or is dropped by its id. Records below
a partition's committed offset are not even looked at.

The views (app/analytics/views.py) are made with the tables; docs/analytics.md
describes both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from app.analytics.rows import Position, Skip, rows_of
from app.analytics.schema import SINK_OFFSETS, SKIPPED, TABLES, arrow_schema, create_statements
from app.analytics.views import create_views, link_decisions


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record as read: which stream it belongs to, where it was, its bytes."""

    stream: str
    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass
class Applied:
    """What one :meth:`Store.apply` did."""

    records: int = 0
    #: Records at or above the committed offsets (the others were folded before).
    folded: int = 0
    inserted: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    def add(self, other: Applied) -> None:
        self.records += other.records
        self.folded += other.folded
        self.skipped += other.skipped
        for name, count in other.inserted.items():
            self.inserted[name] = self.inserted.get(name, 0) + count


class Store:
    """One DuckDB database; ``path`` None is an in-memory one."""

    def __init__(self, path: Path | None = None, *, read_only: bool = False) -> None:
        if path is not None and not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._con = duckdb.connect(":memory:" if path is None else str(path), read_only=read_only)
        self._con.execute("SET TimeZone = 'UTC'")
        self._local = threading.local()
        self._write_lock = threading.Lock()
        if not read_only:
            with self._write_lock:
                for table in TABLES.values():
                    for statement in create_statements(table):
                        self._con.execute(statement)
                create_views(self._con)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (DuckDB connections are not shared between threads)."""
        cursor: duckdb.DuckDBPyConnection | None = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._con.cursor()
            cursor.execute("SET TimeZone = 'UTC'")
            self._local.cursor = cursor
        return cursor

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.cursor().execute(sql, list(params)).fetchall()

    def close(self) -> None:
        self._con.close()

    def offsets(self) -> dict[tuple[str, int], int]:
        """Committed next offsets, per (topic, partition)."""
        rows = self.query("SELECT kafka_topic, kafka_partition, next_offset FROM sink_offsets")
        return {(topic, partition): offset for topic, partition, offset in rows}

    def counts(self) -> dict[str, int]:
        return {name: int(self.query(f"SELECT count(*) FROM {name}")[0][0]) for name in TABLES}

    # ----------------------------------------------------------------------- folding

    def apply(self, records: Sequence[SourceRecord]) -> Applied:
        """Fold ``records`` and commit them with their offsets, all or nothing."""
        with self._write_lock:
            committed = self.offsets()
            result = Applied(records=len(records))
            batches: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
            ends: dict[tuple[str, int], int] = {}
            for record in records:
                where = (record.topic, record.partition)
                if record.offset < committed.get(where, 0):
                    continue
                result.folded += 1
                ends[where] = max(ends.get(where, 0), record.offset + 1)
                position = Position(record.topic, record.partition, record.offset)
                found = rows_of(record.stream, record.value, position)
                if isinstance(found, Skip):
                    result.skipped += 1
                    found = [(SKIPPED.name, {**position.columns(), "reason": found.reason})]
                for table_name, row in found:
                    key = tuple(row[k] for k in TABLES[table_name].key)
                    batches.setdefault(table_name, {}).setdefault(key, row)  # first copy wins
            if not ends:
                return result
            cursor = self.cursor()
            cursor.execute("BEGIN TRANSACTION")
            try:
                for table_name, rows in batches.items():
                    inserted = self._insert(cursor, table_name, rows.values())
                    result.inserted[table_name] = inserted
                if result.inserted.get("decisions"):
                    link_decisions(cursor, {row["route"] for row in batches["decisions"].values()})
                self._insert_offsets(cursor, ends)
                cursor.execute("COMMIT")
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            return result

    @staticmethod
    def _insert(
        cursor: duckdb.DuckDBPyConnection, table_name: str, rows: Iterable[dict[str, Any]]
    ) -> int:
        table = TABLES[table_name]
        batch = pa.Table.from_pylist(list(rows), schema=arrow_schema(table))
        columns = ", ".join(table.names)
        cursor.register("_batch", batch)
        try:
            done = cursor.execute(
                f"INSERT INTO {table.name} ({columns}) SELECT {columns} FROM _batch "
                "ON CONFLICT DO NOTHING"
            ).fetchone()
        finally:
            cursor.unregister("_batch")
        return int(done[0]) if done else 0

    @staticmethod
    def _insert_offsets(
        cursor: duckdb.DuckDBPyConnection, ends: dict[tuple[str, int], int]
    ) -> None:
        cursor.executemany(
            f"INSERT INTO {SINK_OFFSETS.name} VALUES (?, ?, ?) ON CONFLICT DO UPDATE "
            "SET next_offset = greatest(next_offset, excluded.next_offset)",
            [[topic, partition, end] for (topic, partition), end in sorted(ends.items())],
        )

    # ----------------------------------------------------------------------- export

    def export_parquet(self, directory: Path) -> dict[str, int]:
        """One Parquet file per table (``TABLE.parquet``); returns the row counts."""
        directory.mkdir(parents=True, exist_ok=True)
        counts: dict[str, int] = {}
        cursor = self.cursor()
        for name in TABLES:
            target = str(directory / f"{name}.parquet").replace("'", "''")
            cursor.execute(f"COPY (SELECT * FROM {name}) TO '{target}' (FORMAT parquet)")
            counts[name] = int(cursor.execute(f"SELECT count(*) FROM {name}").fetchone()[0])  # type: ignore[index]
        return counts
