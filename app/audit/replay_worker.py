"""What a worker process of a parallel replay does (:mod:`app.audit.replay_parallel`).

A worker gets some routing-log keys' records, each as its text (in memory, or where it
is in an export's ``routing.jsonl``) with its index in the whole log, partition and
offset. It parses them and folds them exactly as :func:`app.audit.replay.rederive`
folds the whole log (the same :class:`~app.routing.driver.Driver`, the same policy
book), and checks that every record is one of its keys' (the parent read the keys from
the texts without parsing them: a record that is not where its key says is reported,
and the parent replays in one process instead).

Then it compares what it re-derived with the record, as :mod:`app.audit.replay`
compares: it reads every recorded decision and response (their texts in memory, or the
export's files) and takes those whose id it re-derived. The id is read from the text's
start (``{"id":"...``, the layout the router publishes); a text laid out otherwise is
parsed to learn it. A recorded text that is the JSON of a record re-derived here
(``model_dump_json``, what the router publishes) is that record: JSON round-trips every
record exactly, so it is not parsed; any other is parsed and compared field by field.
The worker sends back counts, the mismatches (each with its rank: where the one-process
replay lists it among those of its kind and origin), the final states, the routing
partitions' progress and a byte per recorded position saying which records it took:
never the records themselves. Records no worker took (recorded, never re-derived) are
the parent's.

This module imports the fold and the event contract only: a worker starts in a fresh
interpreter and imports no broker client, log reader or CLI
(``tests/test_replay_parallel.py``).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import ValidationError

from app.audit.gc_pause import no_cycle_collection
from app.audit.mismatch import Mismatch, differences, mismatch
from app.audit.record_keys import ID_PREFIX, ROUTING_RECORD, is_utf8, key_of, text_id
from app.contract import (
    AttemptFinished,
    Decision,
    GradeApplied,
    PolicyChanged,
    Response,
    StatusClass,
)
from app.routing.answers import answers, success_response
from app.routing.book import PolicyBook
from app.routing.driver import Driver
from app.routing.keys import KeyState
from app.routing.policy import Policy
from app.routing.propensity import forget_propensities

#: Events the parent parses itself (the policy book, the grades' check).
SPECIAL = (PolicyChanged, GradeApplied)

R = TypeVar("R", Decision, Response)
#: (partition, offset) of a routing-log event.
Origin = tuple[int, int]
#: Where a mismatch goes among those of its kind and origin, as the one-process replay
#: lists them: (0, position of the id's first recorded copy, n) for a recorded id,
#: (1, index, ordinal of its first re-derived copy, n) for one that is not.
Rank = tuple[int, ...]
#: (index of the first event, route, deployment, context) of a request's final success.
Answer = tuple[int, str, str, str | None]


@dataclass(frozen=True, slots=True)
class Records:
    """Records' texts: in memory, or the byte ranges ``starts[i]:ends[i]`` of a file."""

    texts: list[bytes] | None = None
    path: str | None = None
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def load(self) -> list[bytes]:
        if self.texts is not None:
            return self.texts
        if self.path is None or not self.starts:
            return []
        with (
            open(self.path, "rb") as file,
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            return [data[start:end] for start, end in zip(self.starts, self.ends, strict=True)]


@dataclass(frozen=True, slots=True)
class Stream:
    """A recorded stream (decisions or responses): its texts in log order, in memory (a
    record's position is its index), or an export file's lines (its line number; an
    empty line holds none). None of either: no record."""

    texts: list[bytes] | None = None
    path: str | None = None

    def positions(self) -> tuple[list[bytes], list[int]]:
        """The text at each position, and the positions that hold no record."""
        if self.texts is not None:
            return self.texts, []
        if self.path is None:
            return [], []
        lines = Path(self.path).read_bytes().split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        return lines, [n for n, line in enumerate(lines) if not line]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Some keys' routing-log records, in log order: four columns of one length."""

    #: The keys the parent put here: every record must be one of theirs.
    keys: frozenset[str]
    #: Each record's index in the whole routing log (its place in the fold's order).
    indices: list[int]
    partitions: list[int]
    offsets: list[int]
    records: Records


@dataclass(frozen=True, slots=True)
class FoldTask:
    """A chunk, what folding it needs (the replay policy and every policy version) and
    the recorded streams to compare with."""

    policy: Policy
    book: PolicyBook
    chunk: Chunk
    decisions: Stream = Stream()
    responses: Stream = Stream()
    #: Send back each request's answer (the log has grades, whose check needs them).
    answers: bool = False


@dataclass(slots=True)
class Compared:
    """One recorded stream against what this worker re-derived."""

    #: Re-derived records, each copy counted.
    made: int = 0
    #: Distinct recorded copies of the ids re-derived here, and those reproduced.
    recorded: int = 0
    reproduced: int = 0
    #: Texts taken here (their id was re-derived here) that do not parse.
    unreadable: int = 0
    mismatches: list[tuple[Rank, Mismatch]] = field(default_factory=list)
    #: A byte per position: 1 where a record was taken here, else 0.
    taken: bytes = b""
    #: Positions that hold no record (an export's empty lines).
    empty: list[int] = field(default_factory=list)
    #: Ids re-derived here that no readable recorded copy has.
    unrecorded: list[str] = field(default_factory=list)
    #: Decisions: config hash -> (rank of its first copy, distinct copies).
    config_hashes: dict[str, tuple[tuple[int, int], int]] = field(default_factory=dict)
    #: Texts taken for an id that parse to another id (read as another layout).
    misfiled: int = 0
    #: A taken text that is not UTF-8: its stream and position.
    not_utf8: str | None = None


@dataclass(slots=True)
class Folded:
    """What a worker re-derived from its chunk and found comparing it with the record."""

    decisions: Compared = field(default_factory=Compared)
    responses: Compared = field(default_factory=Compared)
    states: dict[str, KeyState] = field(default_factory=dict)
    #: Route -> index of the event whose fold first stored its state (the serial
    #: replay's ``states`` are in that order).
    stored_at: dict[str, int] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    unreadable: int = 0
    #: (index, message) of each record whose fold raised.
    errors: list[tuple[int, str]] = field(default_factory=list)
    #: Routing partition -> offset of the last event whose output is in the record.
    progress: dict[int, int] = field(default_factory=dict)
    #: Indices of the policy changes and grades folded here.
    special: list[int] = field(default_factory=list)
    #: Records whose key is not one of the chunk's.
    misplaced: int = 0
    #: Request id -> its answer (when the task asks).
    answers: dict[str, Answer] = field(default_factory=dict)
    #: A routing record whose text is not UTF-8.
    not_utf8: str | None = None
    #: CPU seconds: all of the chunk, and the fold alone (reading and parsing included).
    cpu_s: float = 0.0
    fold_s: float = 0.0
    #: When the worker began the chunk (epoch seconds).
    received_at: float = 0.0


@dataclass(slots=True)
class _Made(Generic[R]):
    """A re-derived record, where it was made, and its JSON once asked for."""

    record: R
    origin: Origin
    index: int
    ordinal: int
    json: bytes | None = None

    def text(self) -> bytes:
        if self.json is None:
            self.json = self.record.__pydantic_serializer__.to_json(self.record)
        return self.json


@dataclass(slots=True)
class _Copy(Generic[R]):
    """A distinct recorded copy: its position, its event (for a text that is a re-derived
    record's JSON, that record) and that record."""

    position: int
    event: R
    same: _Made[R] | None


def ready() -> int:
    """A worker's first call (the pool's initializer warms it): its process id."""
    return os.getpid()


def fold_chunk(task: FoldTask) -> Folded:
    """Parse and fold a chunk as :func:`app.audit.replay.rederive` folds a whole log, then
    compare what it made with the recorded decisions and responses.

    Each chunk starts with Thompson's propensity cache empty, as a fresh worker does
    (a pure cache: the same numbers either way, but a pool that folds again is timed
    as the first time)."""
    received = time.time()
    forget_propensities()
    started = time.process_time()
    with no_cycle_collection():
        folded, decisions, responses = _fold(task)
        folded.fold_s = time.process_time() - started
        folded.decisions = compare(decisions, task.decisions, Decision, folded.progress)
        folded.responses = compare(responses, task.responses, Response, folded.progress)
    folded.cpu_s = time.process_time() - started
    folded.received_at = received
    return folded


def _fold(task: FoldTask) -> tuple[Folded, list[_Made[Decision]], list[_Made[Response]]]:
    policy = task.policy
    out = Folded()
    decisions: list[_Made[Decision]] = []
    responses: list[_Made[Response]] = []
    states = out.states
    driver = Driver(lambda: policy, states=states, book=task.book)
    chunk = task.chunk
    keys = chunk.keys
    parse = ROUTING_RECORD.validate_json
    ordinal = 0
    for index, partition, offset, text in zip(
        chunk.indices, chunk.partitions, chunk.offsets, chunk.records.load(), strict=True
    ):
        if not text.isascii() and not is_utf8(text):
            out.not_utf8 = f"routing record at partition {partition} offset {offset}"
            continue
        try:
            event = parse(text)
        except ValidationError:  # unreadable: the router dead-letters it
            out.unreadable += 1
            continue
        if key_of(event) not in keys:
            out.misplaced += 1
        if isinstance(event, SPECIAL):
            out.special.append(index)
        elif task.answers and isinstance(event, AttemptFinished):
            _answer(out.answers, event, index)
        where = (partition, offset)
        out.events += 1
        known = len(states)
        try:
            step = driver.fold(event, offset)
        except Exception as exc:  # the router dead-letters these and keeps the row
            out.errors.append((index, f"partition {partition} offset {offset}: {exc!r}"))
            continue
        finally:
            if len(states) != known:
                out.stored_at[next(reversed(states))] = index
        if not step.applied:
            out.skipped += 1
            if isinstance(event, AttemptFinished) and event.answered and answers(event):
                copy = success_response(event)  # as app.audit.replay._executor_copy
                responses.append(_Made(copy, where, index, ordinal))
                ordinal += 1
            continue
        out.applied += 1
        for dispatch in step.dispatches:
            decisions.append(_Made(dispatch.decision, where, index, ordinal))
            ordinal += 1
        for decision in step.decisions:  # answered from the response cache
            decisions.append(_Made(decision, where, index, ordinal))
            ordinal += 1
        for response in step.responses:
            responses.append(_Made(response, where, index, ordinal))
            ordinal += 1
    return out, decisions, responses


def _answer(found: dict[str, Answer], event: AttemptFinished, index: int) -> None:
    """As :func:`app.audit.grades.answer_of`: a final success answers its request."""
    outcome = event.outcome
    if outcome.final and outcome.status_class is StatusClass.SUCCESS:
        context = getattr(outcome, "context", None)
        found.setdefault(outcome.request_id, (index, outcome.route, outcome.deployment, context))


def compare(
    made: list[_Made[R]], stream: Stream, model: type[R], progress: dict[int, int]
) -> Compared:
    """What :func:`app.audit.replay._pair` finds for the ids re-derived here."""
    result = Compared(made=len(made))
    by_id: dict[str, list[_Made[R]]] = {}
    for item in made:  # distinct copies per id, in log order, as replay._made_by_id
        record_id = item.record.id
        same_id = by_id.get(record_id)
        if same_id is None:
            by_id[record_id] = [item]
        elif item.record not in [copy.record for copy in same_id]:
            same_id.append(item)
    found = _take(by_id, stream, model, result)
    hashes = result.config_hashes
    for record_id, lines in found.items():
        made_here = by_id[record_id]
        if len(lines) == 1 and len(made_here) == 1 and lines[0][2] is None:
            item, (position, text, _) = made_here[0], lines[0]
            if item.text() == text:  # the common case: one copy each, the same JSON
                result.recorded += 1
                result.reproduced += 1
                partition, offset = item.origin
                if offset > progress.get(partition, -1):
                    progress[partition] = offset
                if isinstance(item.record, Decision):
                    _count_hash(hashes, item.record.config_hash, (position, 0))
                continue
        copies = _copies(record_id, made_here, lines, model, result)
        if not copies:  # none readable: as never recorded
            continue
        result.recorded += len(copies)
        _pair(copies, made_here, result, progress)
        first = copies[0].position
        for n, copy in enumerate(copies):
            if isinstance(copy.event, Decision):
                _count_hash(hashes, copy.event.config_hash, (first, n))
    for record_id, derived in by_id.items():
        if found.get(record_id):
            continue
        result.unrecorded.append(record_id)
        first_made = derived[0]
        for n, item in enumerate(derived):
            unrecorded = replace(mismatch("not_recorded", item.record), origin=item.origin)
            result.mismatches.append(((1, first_made.index, first_made.ordinal, n), unrecorded))
    return result


#: A taken text: (position, text, its event when it was parsed to learn its id).
_Line = tuple[int, bytes, R | None]


def _take(
    by_id: dict[str, list[_Made[R]]], stream: Stream, model: type[R], result: Compared
) -> dict[str, list[_Line[R]]]:
    """The recorded texts whose id was re-derived here, by id in log order (and
    :attr:`Compared.taken`, :attr:`Compared.empty`).

    A text that starts ``{"id":"`` and a re-derived id and ``"`` has that id; one that
    starts with another plain id is another record's; any other is parsed to learn its
    id (an id with an escape in it, or a text laid out otherwise)."""
    wanted = {record_id.encode("utf-8"): record_id for record_id in by_id}
    get = wanted.get
    texts, result.empty = stream.positions()
    taken = bytearray(len(texts))
    found: dict[str, list[_Line[R]]] = {}
    for position, text in enumerate(texts):
        event: R | None = None
        record_id = get(text[7:43])
        if record_id is None or text[43:44] != b'"' or not text.startswith(ID_PREFIX):
            if not text and result.empty:
                continue  # an empty line: no record
            prefix = text_id(text)
            if prefix is not None:
                record_id = get(prefix)
            else:  # laid out otherwise: parsed to learn its id
                try:
                    event = model.model_validate_json(text)
                except ValidationError:
                    event = None
                record_id = event.id if event is not None and event.id in by_id else None
            if record_id is None:
                continue
        taken[position] = 1
        if not text.isascii() and not is_utf8(text):
            result.not_utf8 = f"{model.__name__.lower()} at position {position}"
        found.setdefault(record_id, []).append((position, text, event))
    result.taken = bytes(taken)
    return found


def _copies(
    record_id: str,
    derived: list[_Made[R]],
    lines: list[_Line[R]],
    model: type[R],
    result: Compared,
) -> list[_Copy[R]]:
    """The distinct readable recorded copies, as :func:`app.audit.replay._entries_by_id`
    finds them (identical copies count once)."""
    copies: list[_Copy[R]] = []
    for position, text, parsed in lines:
        same: _Made[R] | None = None
        event = parsed
        if event is None:
            same = next((item for item in derived if item.text() == text), None)
            if same is not None:
                event = same.record
            else:
                try:
                    event = model.model_validate_json(text)
                except ValidationError:
                    result.unreadable += 1
                    continue
                if event.id != record_id:
                    result.misfiled += 1
                    continue
        if event not in [copy.event for copy in copies]:
            copies.append(_Copy(position, event, same))
    return copies


def _pair(
    copies: list[_Copy[R]], derived: list[_Made[R]], result: Compared, progress: dict[int, int]
) -> None:
    """One id's copies paired in log order, as :func:`app.audit.replay._pair` pairs them."""
    position = copies[0].position
    n = 0
    for copy, item in zip(copies, derived, strict=False):
        partition, offset = item.origin
        if offset > progress.get(partition, -1):
            progress[partition] = offset
        found = None if copy.same is item else differences(copy.event, item.record)
        if found is None:
            result.reproduced += 1
            continue
        differs = replace(mismatch("differs", item.record, found), origin=item.origin)
        result.mismatches.append(((0, position, n), differs))
        n += 1
    for copy in copies[len(derived) :]:
        result.mismatches.append(((0, position, n), mismatch("not_rederived", copy.event)))
        n += 1
    for item in derived[len(copies) :]:
        unrecorded = replace(mismatch("not_recorded", item.record), origin=item.origin)
        result.mismatches.append(((0, position, n), unrecorded))
        n += 1


def _count_hash(
    hashes: dict[str, tuple[tuple[int, int], int]], config_hash: str, rank: tuple[int, int]
) -> None:
    """One more distinct decision with ``config_hash``, ranked by where the one-process
    replay counts it (its id's first copy, then the copy's place among the id's)."""
    seen = hashes.get(config_hash)
    hashes[config_hash] = (rank, 1) if seen is None else (min(seen[0], rank), seen[1] + 1)
