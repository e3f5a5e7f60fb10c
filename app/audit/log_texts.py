"""The recorded topics as their texts, unparsed: what a parallel replay reads.

A parallel replay (:mod:`app.audit.replay_parallel`) parses each record once, in the
worker process that folds or compares it, so its parent reads the log without parsing
it (:mod:`app.audit.log` parses every record as it reads it). Two kinds:

* :class:`ExportTexts`: an export directory, left where it is. The parent finds each
  routing-log record's place in ``routing.jsonl`` (and its key, from the text); every
  worker reads the lines of its records there, and all of ``decisions.jsonl`` and
  ``responses.jsonl``, itself. Only the feedback is parsed here (the grades' check
  needs it, and it is small).
* :class:`LogTexts`: the texts in memory: read from the broker (:func:`read_broker_texts`),
  or taken from a parsed :class:`~app.audit.log.RecordedLog` (:func:`texts_of`).

A text is the record's exact JSON as UTF-8 bytes: what :mod:`app.audit.log` parses, so
:meth:`parsed` gives back the log it reads, for the one-process replay.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.audit.gc_pause import no_cycle_collection
from app.audit.log import (
    STREAMS,
    Entry,
    RecordedLog,
    consume,
    export_manifest,
    parse,
    read_export,
)
from app.contract import Feedback
from app.settings import Topics

#: The streams a replay reads (outcomes are in the routing log too).
REPLAY_STREAMS = ("routing", "decisions", "responses", "feedback")
#: (partition, offset, text) of one record.
Text = tuple[int, int, bytes]


class UnreadableLog(ValueError):
    """The log could not be read (as :mod:`app.audit.log` would fail to read it too)."""


@dataclass
class LogTexts:
    """Each stream's records as (partition, offset, text), in log order (partition, then
    offset). A routing-log text ``null`` is a record unreadable when it was exported."""

    source: str
    routing: list[Text] = field(default_factory=list)
    decisions: list[Text] = field(default_factory=list)
    responses: list[Text] = field(default_factory=list)
    feedback: list[Entry[Feedback]] = field(default_factory=list)
    routing_start: dict[int, int] = field(default_factory=dict)
    #: Unreadable outcomes (a parsed log's: replay reads no outcome, but reports them).
    unreadable_outcomes: int = 0
    #: The parsed log these texts were taken from, if they were.
    original: RecordedLog | None = None

    def routing_records(self) -> int:
        return len(self.routing)

    def parsed(self) -> RecordedLog:
        """The log as :mod:`app.audit.log` reads it (every record parsed)."""
        if self.original is None:
            log = RecordedLog(self.source, routing_start=dict(self.routing_start))
            for name in ("routing", "decisions", "responses"):
                texts: list[Text] = getattr(self, name)
                log.stream(name).extend(
                    parse(name, p, o, text.decode("utf-8")) for p, o, text in texts
                )
            log.feedback = list(self.feedback)
            self.original = log
        return self.original


@dataclass
class ExportTexts:
    """An export directory whose records the replay's workers read themselves."""

    directory: Path
    source: str
    routing_start: dict[int, int]
    feedback: list[Entry[Feedback]]
    #: The streams read (a stream outside them is empty).
    streams: tuple[str, ...] = REPLAY_STREAMS
    #: Routing-log records, as the manifest counts them.
    counted: int = 0
    original: RecordedLog | None = None

    def routing_records(self) -> int:
        return self.counted

    def path(self, stream: str) -> Path | None:
        """The stream's file; None when it is not read or not there (no records)."""
        path = self.directory / f"{stream}.jsonl"
        return path if stream in self.streams and path.is_file() else None

    def parsed(self) -> RecordedLog:
        if self.original is None:
            try:
                self.original = read_export(self.directory, streams=self.streams)
            except (OSError, LookupError, ValueError) as exc:
                raise UnreadableLog(str(exc)) from exc
        return self.original


def read_export_texts(directory: Path, streams: tuple[str, ...] = REPLAY_STREAMS) -> ExportTexts:
    """The export's manifest and feedback, read as :func:`~app.audit.log.read_export`
    reads them; the other streams are left in their files."""
    manifest = export_manifest(directory)
    routing_start = {int(p): int(o) for p, o in manifest.get("routing_start", {}).items()}
    counted = int(manifest.get("counts", {}).get("routing", 0))
    texts = ExportTexts(directory, f"export {directory}", routing_start, [], streams, counted)
    if "feedback" in streams:
        texts.feedback = read_export(directory, streams=("feedback",)).feedback
    return texts


def has_carriage_return(path: Path) -> bool:
    """Whether the file holds a ``\\r`` (its lines are then read as text: a ``\\r\\n`` or
    a lone ``\\r`` ends a line there)."""
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return False
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b"\r") >= 0


def texts_of(log: RecordedLog) -> LogTexts:
    """A parsed log's texts (each entry's ``raw``: the text its event was parsed from)."""

    def encoded(entries: list[Entry[Any]]) -> list[Text]:
        return [(e.partition, e.offset, e.raw.encode("utf-8")) for e in entries]

    return LogTexts(
        log.source,
        [
            (e.partition, e.offset, b"null" if e.event is None else e.raw.encode("utf-8"))
            for e in log.routing
        ],
        encoded(log.decisions),
        encoded(log.responses),
        list(log.feedback),
        dict(log.routing_start),
        unreadable_outcomes=log.unreadable()["outcomes"],
        original=log,
    )


async def read_broker_texts(
    bootstrap: str,
    topics: Topics,
    *,
    streams: tuple[str, ...] = REPLAY_STREAMS,
    timeout_s: float = 120.0,
) -> LogTexts:
    """:func:`~app.audit.log.read_broker` without parsing (but the feedback): each
    record's value, decoded as it decodes it (an invalid UTF-8 sequence replaced)."""
    texts = LogTexts(source=f"broker {bootstrap}")

    def take(stream: str, partition: int, records: list[Any], end: int) -> None:
        with no_cycle_collection():  # nothing awaited: see app/audit/gc_pause.py
            _take(stream, partition, records, end)

    def _take(stream: str, partition: int, records: list[Any], end: int) -> None:
        if stream == "feedback":
            for record in records:
                if record.offset < end:
                    raw = (record.value or b"").decode("utf-8", errors="replace")
                    texts.feedback.append(parse("feedback", partition, record.offset, raw))
            return
        kept: list[Text] = getattr(texts, stream)
        for record in records:
            if record.offset >= end:
                return
            value = record.value or b""
            if not value.isascii():
                value = value.decode("utf-8", errors="replace").encode("utf-8")
            kept.append((partition, record.offset, value))

    def counts() -> dict[str, int]:
        return {name: len(getattr(texts, name)) for name in STREAMS if name != "outcomes"}

    texts.routing_start = await consume(bootstrap, topics, streams, timeout_s, take, counts)
    for name in ("routing", "decisions", "responses"):
        getattr(texts, name).sort(key=lambda text: (text[0], text[1]))
    texts.feedback.sort(key=lambda entry: (entry.partition, entry.offset))
    return texts
