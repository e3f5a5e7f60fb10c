"""The recorded topics as one ordered, in-memory log: from a broker or from an export.

Five streams matter to replay and audit:

* ``routing``: the routing log (``switchyard.routing``), every ``RequestAccepted``,
  ``AttemptFinished`` and ``RouteTick`` in the order the router applied them. A record's
  offset is the ``position`` the live router passed to ``handle``.
* ``decisions``, ``outcomes``, ``responses``: the public topics.
* ``feedback``: ``llm.feedback``, each record validated as the worker validates it
  and kept as the valid feedback (no free text) or as unreadable; the evidence the
  routing log's ``GradeApplied`` events are checked against (app/audit/grades.py).
  Optional: a log without the topic has no feedback.

Each record keeps its partition, offset and exact JSON text (so an export is
byte-faithful) next to the parsed event. A record that does not parse is kept
with ``event=None`` and a short reason (never its content): the live router
dead-letters such a routing record without folding it, and replay does the same.

Reading a topic "to the end" on Tansu needs :func:`app.compat.tansu.true_end_offsets`
(its ListOffsets answers short); the broker reader snapshots the end offsets of
all four streams first and then reads each partition exactly up to them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import TypeAdapter, ValidationError

from app.audit.gc_pause import no_cycle_collection
from app.compat.tansu import fetch_max_wait_ms, true_end_offsets
from app.contract import (
    Decision,
    Feedback,
    FeedbackAccepted,
    LogPosition,
    Outcome,
    Response,
    RoutingLogEvent,
)
from app.contract import RoutingEvent as RoutingEvent  # the audit tools import it from here
from app.grades.intake import accept_feedback
from app.kafka import client_security
from app.settings import Topics

E = TypeVar("E")
STREAMS = ("routing", "decisions", "outcomes", "responses", "feedback")
#: Streams a log may lack (the topic did not exist when it was recorded).
OPTIONAL_STREAMS = frozenset({"feedback"})
#: Bounds of a feedback record as the worker reads it (settings' defaults).
_FEEDBACK_MAX_BYTES = 16 * 1024
Keep = Callable[[str, str], bool]
EXPORT_FORMAT = "switchyard-export/1"

_routing_adapter: TypeAdapter[RoutingEvent] = TypeAdapter(RoutingLogEvent)
_PARSERS: dict[str, Callable[[str], Any]] = {
    "routing": _routing_adapter.validate_json,
    "decisions": Decision.model_validate_json,
    "outcomes": Outcome.model_validate_json,
    "responses": Response.model_validate_json,
}
#: The line layout :mod:`app.audit.export` writes; anything else is parsed as plain JSON.
_ROUTING_LINE = re.compile(r'^\{"partition":(\d+),"offset":(\d+),"event":(.*)\}$', re.DOTALL)


@dataclass(frozen=True, slots=True)
class Entry(Generic[E]):
    """One record: where it was, its exact text, and the event (None when unreadable)."""

    partition: int
    offset: int
    raw: str
    event: E | None
    error: str | None = None


@dataclass
class RecordedLog:
    source: str
    routing: list[Entry[RoutingEvent]] = field(default_factory=list)
    decisions: list[Entry[Decision]] = field(default_factory=list)
    outcomes: list[Entry[Outcome]] = field(default_factory=list)
    responses: list[Entry[Response]] = field(default_factory=list)
    feedback: list[Entry[Feedback]] = field(default_factory=list)
    #: Routing partition -> first offset still in the log (> 0: history was truncated).
    routing_start: dict[int, int] = field(default_factory=dict)

    def stream(self, name: str) -> list[Entry[Any]]:
        entries: list[Entry[Any]] = getattr(self, name)
        return entries

    def counts(self) -> dict[str, int]:
        return {name: len(self.stream(name)) for name in STREAMS}

    def unreadable(self) -> dict[str, int]:
        return {
            name: sum(1 for entry in self.stream(name) if entry.event is None) for name in STREAMS
        }

    def sort(self) -> RecordedLog:
        for name in STREAMS:
            self.stream(name).sort(key=lambda entry: (entry.partition, entry.offset))
        return self


def events(entries: list[Entry[E]]) -> Iterator[E]:
    """The readable events of a stream, in order."""
    return (entry.event for entry in entries if entry.event is not None)


def parse(stream: str, partition: int, offset: int, raw: str) -> Entry[Any]:
    if stream == "feedback":
        return _parse_feedback(partition, offset, raw)
    try:
        return Entry(partition, offset, raw, _PARSERS[stream](raw))
    except ValidationError as exc:
        # The count only: a validation message can echo the input, prompts included.
        return Entry(partition, offset, raw, None, f"{exc.error_count()} validation error(s)")


def _parse_feedback(partition: int, offset: int, raw: str) -> Entry[Feedback]:
    """Validated as the worker's intake validates it; kept as the valid feedback only."""
    where = LogPosition(topic="feedback", partition=partition, offset=offset)
    result = accept_feedback(
        raw.encode("utf-8", errors="replace"),
        where,
        datetime.fromtimestamp(0, tz=UTC),
        max_bytes=_FEEDBACK_MAX_BYTES,
        deadletter_max_bytes=64,
    )
    if not isinstance(result, FeedbackAccepted):
        return Entry(partition, offset, raw, None, result.reason)
    return Entry(partition, offset, result.feedback.model_dump_json(), result.feedback)


def wanted(stream: str, raw: str, only_request: str | None, keep: Keep | None) -> bool:
    """Whether a reader restricted to ``only_request`` (and what ``keep`` adds) takes it."""
    if only_request is None or mentions(raw, only_request):
        return True
    return keep is not None and keep(stream, raw)


def mentions(raw: str, request_id: str) -> bool:
    """Cheap pre-filter: could this record be about ``request_id``?"""
    return json.dumps(request_id, ensure_ascii=False) in raw


# --------------------------------------------------------------------------- export files


def read_export(
    directory: Path,
    only_request: str | None = None,
    streams: Collection[str] = STREAMS,
    keep: Keep | None = None,
) -> RecordedLog:
    """Read what :func:`app.audit.export.write_export` wrote (only ``streams``)."""
    manifest = export_manifest(directory)
    log = RecordedLog(source=f"export {directory}")
    log.routing_start = {int(p): int(o) for p, o in manifest.get("routing_start", {}).items()}
    for name in STREAMS:
        path = directory / f"{name}.jsonl"
        if name not in streams or not path.is_file():
            continue
        entries = log.stream(name)
        with path.open(encoding="utf-8") as lines, no_cycle_collection():
            for number, line in enumerate(lines):
                line = line.rstrip("\n")
                if not line or not wanted(name, line, only_request, keep):
                    continue
                if name == "routing":
                    entries.append(_routing_line(line))
                else:
                    entries.append(parse(name, 0, number, line))
    return log.sort()


def export_manifest(directory: Path) -> dict[str, Any]:
    """The export's ``manifest.json``, checked to be one."""
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{directory} is not a switchyard export (no manifest.json)")
    manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{manifest_path}: unknown format {manifest.get('format')!r}")
    return manifest


def _routing_line(line: str) -> Entry[Any]:
    match = _ROUTING_LINE.match(line)
    if match is not None:
        partition, offset, raw = int(match[1]), int(match[2]), match[3]
    else:  # rewritten by another tool: same columns, other layout
        row = json.loads(line)
        partition, offset = int(row["partition"]), int(row["offset"])
        raw = json.dumps(row["event"], separators=(",", ":"), ensure_ascii=False)
    if raw == "null":
        return Entry(partition, offset, raw, None, "unreadable when exported")
    return parse("routing", partition, offset, raw)


# --------------------------------------------------------------------------- broker


def topic_names(topics: Topics) -> dict[str, str]:
    return {
        "routing": topics.routing,
        "decisions": topics.decisions,
        "outcomes": topics.outcomes,
        "responses": topics.responses,
        "feedback": topics.feedback,
    }


async def read_broker(
    bootstrap: str,
    topics: Topics,
    *,
    only_request: str | None = None,
    streams: Collection[str] = STREAMS,
    timeout_s: float = 120.0,
    keep: Keep | None = None,
) -> RecordedLog:
    """Read the streams from the beginning to the end offsets seen at the start."""
    log = RecordedLog(source=f"broker {bootstrap}")
    filters = (only_request, keep)

    def take(stream: str, partition: int, records: list[Any], end: int) -> None:
        with no_cycle_collection():  # nothing awaited: see app/audit/gc_pause.py
            _take(log.stream(stream), stream, partition, records, end, filters)

    log.routing_start = await consume(bootstrap, topics, streams, timeout_s, take, log.counts)
    return log.sort()


#: What :func:`consume` does with a fetched batch: (stream, partition, records, end offset).
Take = Callable[[str, int, list[Any], int], None]


async def consume(
    bootstrap: str,
    topics: Topics,
    streams: Collection[str],
    timeout_s: float,
    take: Take,
    counts: Callable[[], dict[str, int]],
) -> dict[int, int]:
    """Fetch each stream's partitions from their beginning to the end offsets seen at the
    start, giving every batch to ``take``; the routing partitions' first offsets.
    ``counts``: what was read so far (said when the deadline passes)."""
    names = {name: topic for name, topic in topic_names(topics).items() if name in streams}
    stream_of = {topic: name for name, topic in names.items()}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        # The log is what was committed: records of an aborted transaction (exactly-once,
        # docs/design.md) were never folded or answered. Without transactions, the same.
        isolation_level="read_committed",
        fetch_max_wait_ms=fetch_max_wait_ms(),
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **client_security(),
    )
    await consumer.start()
    try:
        optional = {names[name] for name in OPTIONAL_STREAMS if name in names}
        partitions = await _partitions(consumer, list(names.values()), optional)
        consumer.assign(partitions)
        starts: Mapping[TopicPartition, int] = await consumer.beginning_offsets(partitions)
        reported: Mapping[TopicPartition, int] = await consumer.end_offsets(partitions)
        ends = await true_end_offsets(bootstrap, reported)
        routing_start = {
            tp.partition: starts[tp] for tp in partitions if tp.topic == names.get("routing")
        }
        pending = {tp for tp in partitions if ends[tp] > starts[tp]}
        for tp in pending:
            consumer.seek(tp, starts[tp])
        deadline = asyncio.get_running_loop().time() + timeout_s
        while pending:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(
                    f"read {counts()} before the deadline; still pending: "
                    + ", ".join(f"{tp.topic}[{tp.partition}]" for tp in pending)
                )
            batches = await consumer.getmany(*pending, timeout_ms=500)
            for tp, records in batches.items():
                take(stream_of[tp.topic], tp.partition, records, ends[tp])
                if records and records[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    finally:
        await consumer.stop()
    return routing_start


def _take(
    entries: list[Entry[Any]],
    stream: str,
    partition: int,
    records: list[Any],
    end: int,
    filters: tuple[str | None, Keep | None],
) -> None:
    """Parse a fetched batch of one partition into ``entries``, up to ``end``."""
    for record in records:
        if record.offset >= end:
            return
        raw = (record.value or b"").decode("utf-8", errors="replace")
        if wanted(stream, raw, *filters):
            entries.append(parse(stream, partition, record.offset, raw))


async def _partitions(
    consumer: AIOKafkaConsumer, topics: list[str], optional: Collection[str] = ()
) -> list[TopicPartition]:
    await consumer._client.force_metadata_update()
    found: list[TopicPartition] = []
    for topic in topics:
        numbers = consumer.partitions_for_topic(topic)
        if not numbers and topic in optional:
            continue
        if not numbers:
            raise LookupError(f"topic {topic!r} does not exist on the broker")
        found.extend(TopicPartition(topic, n) for n in sorted(numbers))
    return found
