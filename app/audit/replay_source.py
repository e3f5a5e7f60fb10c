"""What a parallel replay's parent reads of a log before its workers start.

The routing log's keys and places (:mod:`app.audit.routing_scan`), where the workers
read the recorded decisions and responses (:class:`~app.audit.replay_tasks.Stream`),
and what the parent keeps for itself: the recorded texts by position (it parses those
no worker took), the feedback, the routing partitions' starts. Three kinds of log
(:data:`AnyLog`): an export read in place, texts read from a broker, a parsed log.
An export whose files are laid out otherwise than :mod:`app.audit.export` writes them
(CR LF line ends, another layout) is read parsed instead (:func:`read_source`).

Texts held in memory are written once to files (:func:`spooled`), which each worker
reads itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Any

from app.audit.log import Entry, RecordedLog
from app.audit.log_texts import ExportTexts, LogTexts, has_carriage_return
from app.audit.replay_tasks import Stream
from app.audit.routing_scan import RoutingScan, scan_entries, scan_export, scan_texts

#: Bytes written at once to a spool file (texts of about a kilobyte each, one by one).
SPOOL_BUFFER = 1 << 20
#: A parsed, a read-as-texts or an export-directory log.
AnyLog = RecordedLog | LogTexts | ExportTexts


@dataclass
class Source:
    """What the parent reads of a log before the workers start."""

    source: str
    scan: RoutingScan
    decisions: Stream
    responses: Stream
    #: The recorded texts by position (the parent parses those no worker took).
    decision_texts: Callable[[], Sequence[bytes]]
    response_texts: Callable[[], Sequence[bytes]]
    feedback: list[Entry[Any]]
    routing_start: dict[int, int]
    unreadable_outcomes: int = 0
    #: A parsed log's decision and response texts (``decisions`` and ``responses`` are
    #: made of them when the workers are about to start).
    strings: tuple[list[str], list[str]] | None = None


def _lines(path: Path | None) -> Callable[[], Sequence[bytes]]:
    def read() -> Sequence[bytes]:
        return [] if path is None else path.read_bytes().split(b"\n")

    return read


def read_source(log: AnyLog) -> Source:
    """What the parent reads of ``log``: an export whose files are laid out otherwise is
    read parsed (and then replayed in the workers all the same)."""
    source = _source(log)
    if source is None:
        assert isinstance(log, ExportTexts)
        source = _source(log.parsed())
        assert source is not None
    return source


def _source(log: AnyLog) -> Source | None:
    """None: an export whose files are laid out otherwise (read it parsed instead)."""
    if isinstance(log, ExportTexts):
        routing, decided, answered = (log.path(n) for n in ("routing", "decisions", "responses"))
        if any(has_carriage_return(p) for p in (decided, answered) if p is not None):
            return None
        scan = RoutingScan() if routing is None else scan_export(routing)
        if scan is None:
            return None
        return Source(
            log.source,
            scan,
            Stream(path=None if decided is None else str(decided)),
            Stream(path=None if answered is None else str(answered)),
            _lines(decided),
            _lines(answered),
            log.feedback,
            log.routing_start,
        )
    if isinstance(log, RecordedLog):
        parsed = log
        return Source(
            log.source,
            scan_entries(log),
            Stream(),
            Stream(),
            lambda: [entry.raw.encode("utf-8") for entry in parsed.decisions],
            lambda: [entry.raw.encode("utf-8") for entry in parsed.responses],
            log.feedback,
            log.routing_start,
            log.unreadable()["outcomes"],
            ([entry.raw for entry in log.decisions], [entry.raw for entry in log.responses]),
        )
    decisions = [text for _, _, text in log.decisions]
    responses = [text for _, _, text in log.responses]
    return Source(
        log.source,
        scan_texts(log),
        Stream(texts=decisions),
        Stream(texts=responses),
        lambda: decisions,
        lambda: responses,
        log.feedback,
        log.routing_start,
        log.unreadable_outcomes,
    )


def spooled(source: Source, spool: Path) -> Source:
    """Texts held in memory written once to files in ``spool``, which each worker reads
    itself: sent in the tasks, every worker's copy would be pickled, pushed through a
    pipe and unpickled, one worker after the other (half a second for 20,000 requests).
    A recorded stream goes line by line, as an export's does, unless one of its texts is
    empty or spans lines (it is then sent). Written text by text: joined first, the
    copies alone cost more than the writing (fresh memory, page by page)."""
    scan = source.scan
    if scan.texts is not None or scan.strings is not None:
        path = spool / "routing"
        if scan.texts is not None:
            texts: Iterable[bytes] = scan.texts
            sizes: Iterable[int] = map(len, scan.texts)
        else:
            assert scan.strings is not None
            texts = map(str.encode, scan.strings)
            ascii = all(map(str.isascii, scan.strings))
            sizes = map(len, scan.strings if ascii else map(str.encode, scan.strings))
        with path.open("wb", buffering=SPOOL_BUFFER) as file:
            file.writelines(texts)
        scan.ends = list(accumulate(sizes))
        scan.starts = [0, *scan.ends[:-1]]
        scan.path, scan.texts, scan.strings = str(path), None, None
    if source.strings is not None:
        decided, answered = source.strings
        decisions = _file(decided, spool / "decisions")
        responses = _file(answered, spool / "responses")
    else:
        decisions, responses = source.decisions, source.responses
        if decisions.texts is not None:
            decisions = _file(decisions.texts, spool / "decisions")
        if responses.texts is not None:
            responses = _file(responses.texts, spool / "responses")
    return replace(source, decisions=decisions, responses=responses, strings=None)


def _file(texts: Sequence[bytes] | Sequence[str] | None, path: Path) -> Stream:
    """The texts as the lines of a file (or, when one of them is empty or spans lines,
    as they are)."""
    if not texts:
        return Stream(texts=[])
    encoded = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    if not all(encoded) or any(b"\n" in text for text in encoded):
        return Stream(texts=encoded)
    with path.open("wb", buffering=SPOOL_BUFFER) as file:
        file.writelines(chain.from_iterable(zip(encoded, repeat(b"\n"))))
    return Stream(path=str(path))
