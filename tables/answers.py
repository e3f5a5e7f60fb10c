"""The answers table: per request id, how it was answered and the grades applied to it.

Co-partitioned with ``llm.outcomes`` and the feedback matching topic (both keyed
by request id, same partition count): one agent (agents/feedback.py) reads both
and is the table's single writer. Rows are :class:`app.grades.matching.AnswerRow`
as JSON: route, deployment, context, status, times, grades per source and
feedback ids. No prompt, completion or free text.

Pruning: each row has an expiry (its answer + ``feedback_window_s``, or the wait
of early feedback + ``feedback_match_grace_s``). A second table indexes rows by
expiry (key ``<ms, 15 digits>/<request id>``), so RocksDB keeps each partition's
index in expiry order and a sweep reads only the rows that are due, oldest first.
Both tables live in RocksDB: memory stays bounded whatever the window holds.

The index is derived from the rows, so it is written to the local store only (no
changelog record: one record fewer per answer). A row restored from the answers
changelog (a new host, a standby) is indexed as it is restored
(:class:`AnswersTable`), so every row a worker holds is swept in time.

Pruning writes nothing to the changelogs for an answered row (two records fewer
per request): the row and its index entry are deleted from the local store only,
and the changelog topics drop old records by time (``cleanup.policy``
``compact,delete``, retention: the feedback window plus the match grace plus an
hour, counted from a row's last write). A row a restore brings back after its
expiry is refused feedback as ``expired`` (its answer time says so) and swept
again. A row still waiting for its answer is deleted with a tombstone: brought
back, its refused feedback could be applied to a late answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import faust
from faust.types import EventT

from app.grades.matching import AnswerRow
from app.settings import get_settings
from app.worker.faust_app import table_store_options, worker_app

app = worker_app()
settings = get_settings()


def _schema() -> Any:
    return faust.Schema(key_serializer="json", value_serializer="json")


def changelog_configs(window_s: float, grace_s: float) -> dict[str, str]:
    """The changelogs keep a row's last record at least as long as the row can live."""
    retention_ms = int((window_s + grace_s + 3600.0) * 1000)
    return {"cleanup.policy": "compact,delete", "retention.ms": str(retention_ms)}


class AnswersTable(faust.Table[str, Any]):
    """The answers table; a row restored from its changelog is indexed by expiry at once."""

    def apply_changelog_batch(self, batch: Iterable[EventT[Any]]) -> None:
        events = list(batch)
        super().apply_changelog_batch(events)
        for event in events:
            index_restored(event.message.partition, event.message.key, event.message.value)


_CHANGELOGS = changelog_configs(settings.feedback_window_s, settings.feedback_match_grace_s)
answers = AnswersTable(
    app,
    name="feedback-answers",
    default=None,
    beacon=app.tables.beacon,
    partitions=settings.partitions,
    schema=_schema(),
    options=table_store_options(settings),
    extra_topic_configs=_CHANGELOGS,
)
app.tables.add(answers)  # what ``app.Table`` does, with this class
expiry_index = app.Table(
    "feedback-expiry",
    default=None,
    partitions=settings.partitions,
    schema=_schema(),
    options=table_store_options(settings),
    extra_topic_configs=_CHANGELOGS,
)


def expiry_key(expires_at: float, request_id: str) -> str:
    """Sorts by expiry (fixed-width milliseconds), then request id."""
    return f"{int(expires_at * 1000):015d}/{request_id}"


def load_answer(request_id: str) -> AnswerRow | None:
    row = answers.get(request_id)
    return None if row is None else AnswerRow.model_validate(row)


def save_answer(request_id: str, row: AnswerRow, before: AnswerRow | None, partition: int) -> None:
    """Write the row (in the stream of an event of ``partition``) and index a new expiry."""
    answers[request_id] = row.model_dump(mode="json")
    if before is None or before.expires_at != row.expires_at:
        _index(partition, row.expires_at, request_id)


def index_restored(partition: int, raw_key: bytes | None, raw_row: bytes | None) -> None:
    """Index a row the answers changelog restores (a tombstone: nothing to index)."""
    if raw_key is None or raw_row is None:
        return
    row = json.loads(raw_row)
    if isinstance(row, dict) and isinstance(row.get("expires_at"), int | float):
        _index(partition, float(row["expires_at"]), str(json.loads(raw_key)))


def _index(partition: int, expires_at: float, request_id: str) -> None:
    """An index entry, in ``partition``'s local store only (derived from the row)."""
    key, value = expiry_key(expires_at, request_id), {"r": request_id, "p": partition}
    store: Any = expiry_index.data
    open_db = getattr(store, "_db_for_partition", None)
    if open_db is None:  # the in-memory store
        store.data[key] = value
        store._key_partition[key] = partition
    else:
        open_db(partition).put(store._encode_key(key), store._encode_value(value))


def delete_answer(request_id: str, key: str, *, answered: bool) -> None:
    """Delete the row and its index entry ``key``: an ``answered`` row from the local
    store only, a row still waiting for its answer with a tombstone too."""
    if answers.get(request_id) is not None:
        if answered:
            del answers.data[request_id]
        else:
            del answers[request_id]
    delete_index(key)


def delete_index(key: str) -> None:
    """From the local store only: an entry a restore brings back is swept again."""
    if expiry_index.get(key) is not None:
        del expiry_index.data[key]


def due(partition: int, now: float, limit: int) -> list[tuple[str, str, float]]:
    """Up to ``limit`` index entries of ``partition`` expiring at or before ``now``, oldest
    first, as (index key, request id, expiry)."""
    found: list[tuple[str, str, float]] = []
    for key, value in _entries(partition):
        expires = int(key.split("/", 1)[0]) / 1000
        if expires > now or len(found) >= limit:
            break
        if isinstance(value, dict) and value.get("p") == partition:
            found.append((key, str(value.get("r")), expires))
    return found


def _entries(partition: int) -> Any:
    """The partition's index entries in key order: straight from its RocksDB database
    (a seek-free ordered scan that stops at the first entry not due)."""
    store: Any = expiry_index.data
    open_db = getattr(store, "_db_for_partition", None)
    if open_db is None:  # the in-memory store (tests without RocksDB): sort what is there
        yield from sorted(expiry_index.items())
        return
    db = open_db(partition)
    for raw_key, raw_value in db.items():
        if raw_key.startswith(b'"') and raw_value is not None:  # not faust's offset key
            yield json.loads(raw_key), json.loads(raw_value)
