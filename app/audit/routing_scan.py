"""The routing log as a parallel replay's parent reads it: each record's key and place.

The parent (:mod:`app.audit.replay_parallel`) parses none of the common records: it
reads each routing-log record's key from its text (:func:`~app.audit.record_keys.guess_key`)
and keeps where the text is, for the worker that folds it. It parses only the records it
needs itself (policy changes, for the book; grades, for their check) and those whose text
it cannot read a key from. An export's ``routing.jsonl`` is read through a memory map
(:func:`scan_export`); a broker's texts (:func:`scan_texts`) and a parsed log's entries
(:func:`scan_entries`) are kept in memory.
"""

from __future__ import annotations

import mmap
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from app.audit.log import RecordedLog
from app.audit.log_texts import LogTexts, UnreadableLog
from app.audit.record_keys import ROUTING_RECORD, guess_key, key_of, plain
from app.contract import AttemptFinished, GradeApplied, PolicyChanged, RequestAccepted


@dataclass
class RoutingScan:
    """The routing log as the parent reads it: each record's key, place and text."""

    #: Each record's key, in log order (None: unreadable, folded nowhere).
    keys: list[str | None] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    #: The records' texts (as bytes, or as a parsed log's strings), or (``path``) where
    #: each is in a file.
    texts: list[bytes] | None = None
    strings: list[str] | None = None
    path: str | None = None
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: (index, event) of the policy changes and grades, parsed here, in log order.
    special: list[tuple[int, PolicyChanged | GradeApplied]] = field(default_factory=list)
    unreadable: int = 0

    def groups(self) -> int:
        return len({key for key in self.keys if key is not None})


def _keyed(scan: RoutingScan, text: bytes, key: str | None) -> str | None:
    """``key`` when the text gave one; else the record parsed here (None: unreadable)."""
    if key is not None:
        return key
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnreadableLog(f"a routing-log record is not UTF-8: {exc}") from None
    try:
        event = ROUTING_RECORD.validate_json(text)
    except ValidationError:
        scan.unreadable += 1
        return None
    if isinstance(event, PolicyChanged | GradeApplied):
        scan.special.append((len(scan.keys), event))
    return key_of(event)


def scan_entries(log: RecordedLog) -> RoutingScan:
    """A parsed log's keys (from its events); its texts are the entries' ``raw``."""
    scan = RoutingScan(strings=[entry.raw for entry in log.routing])
    for index, entry in enumerate(log.routing):
        event = entry.event
        scan.partitions.append(entry.partition)
        scan.offsets.append(entry.offset)
        if event is None:
            scan.keys.append(None)
            scan.unreadable += 1
            continue
        if type(event) is RequestAccepted:
            scan.keys.append(event.route)
        elif type(event) is AttemptFinished:
            scan.keys.append(event.outcome.route)
        else:
            if isinstance(event, PolicyChanged | GradeApplied):
                scan.special.append((index, event))
            scan.keys.append(key_of(event))
    return scan


def scan_texts(texts: LogTexts) -> RoutingScan:
    """Keys read from the texts (:func:`~app.audit.record_keys.guess_key`)."""
    scan = RoutingScan(texts=[])
    assert scan.texts is not None
    for partition, offset, text in texts.routing:
        key = guess_key(text, 0, len(text))
        scan.keys.append(_keyed(scan, text, key))
        scan.partitions.append(partition)
        scan.offsets.append(offset)
        scan.texts.append(text)
    return scan


#: A line of ``routing.jsonl`` as :mod:`app.audit.export` writes it, up to its event's key
#: when the event is an attempt (group 3) or up to its type when it is a request (4).
_LINE = re.compile(
    rb'\{"partition":(\d+),"offset":(\d+),"event":(?:\{"id":"[^"]*","schema_version":\d+,'
    rb'"occurred_at":"[^"]*","type":"(?:attempt\.finished","outcome":\{"id":"[^"]*",'
    rb'"schema_version":\d+,"occurred_at":"[^"]*","type":"attempt\.outcome",'
    rb'"request_id":"(?:[^"\\]|\\.)*","attempt":\d+,"route":"([^"\\]*)"|(request\.accepted)"))?'
)


def scan_export(path: Path) -> RoutingScan | None:
    """Keys and byte ranges of an export's routing records, read from ``routing.jsonl``
    without parsing it; None when a line is laid out otherwise than
    :func:`app.audit.export.write_export` writes it (the export is then read parsed).

    One regular expression finds every line and reads the two common events' keys where
    :func:`~app.audit.record_keys.guess_key` reads them (the loop runs once per record:
    every call it saves counts); any other event goes through ``guess_key``."""
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return RoutingScan(path=str(path))
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return None if data.find(b"\r") >= 0 else _scan_export(data, str(path))


def _scan_export(data: mmap.mmap, path: str) -> RoutingScan | None:
    scan = RoutingScan(path=path)
    keys, partitions, offsets = scan.keys, scan.partitions, scan.offsets
    starts, ends = scan.starts, scan.ends
    named: dict[bytes, str | None] = {}  # a key's bytes -> the key (None: has an escape)
    find, rfind = data.find, data.rfind
    size, at = len(data), 0
    for line in _LINE.finditer(data):
        if line.start() != at and data[at : line.start()].strip(b"\n"):
            return None  # a line laid out otherwise
        end = find(b"\n", line.end())
        if end < 0:
            end = size
        if data[end - 1] != 0x7D:  # "}"
            return None
        partition, offset, route, request = line.groups()
        start, stop = line.start() + 32 + len(partition) + len(offset), end - 1
        if request is not None:
            sha = rfind(b'","prompt_sha256":"', start, stop)
            found = rfind(b',"route":"', start, sha) if sha >= 0 else -1
            route = data[found + 10 : sha] if found >= 0 else None
        key: str | None = None
        if route is not None:
            key = named[route] if route in named else named.setdefault(route, plain(route))
        if key is None:
            text = data[start:stop]
            if text == b"null":  # unreadable when it was exported
                scan.unreadable += 1
            else:
                key = _keyed(scan, text, guess_key(text, 0, len(text)))
        keys.append(key)
        partitions.append(int(partition))
        offsets.append(int(offset))
        starts.append(start)
        ends.append(stop)
        at = end + 1
    if at < size and data[at:].strip(b"\n"):
        return None
    _in_log_order(scan)
    return scan


def _in_log_order(scan: RoutingScan) -> None:
    """Records sorted by partition, then offset (as :func:`~app.audit.log.read_export`
    sorts them; a file :mod:`app.audit.export` wrote already is)."""
    places = list(zip(scan.partitions, scan.offsets, strict=True))
    if all(map(operator.le, places, places[1:])):
        return
    order = sorted(range(len(places)), key=places.__getitem__)
    moved = {old: new for new, old in enumerate(order)}
    scan.keys = [scan.keys[i] for i in order]
    scan.partitions = [scan.partitions[i] for i in order]
    scan.offsets = [scan.offsets[i] for i in order]
    scan.starts = [scan.starts[i] for i in order]
    scan.ends = [scan.ends[i] for i in order]
    scan.special = sorted((moved[i], event) for i, event in scan.special)
