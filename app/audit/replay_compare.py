"""A parallel replay's worker compares what it re-derived with the recorded texts.

As :func:`app.audit.replay.replay` compares, for the ids re-derived here: the worker
reads every recorded decision and response (their texts in memory, or the export's
files) and takes those whose id it re-derived. The id is read from the text's start
(:func:`~app.audit.record_keys.text_id`: ``{"id":"...``, the layout the router
publishes); a text laid out otherwise is parsed to learn it. A recorded text that is
the JSON of a record re-derived here (``model_dump_json``, what the router publishes)
is that record: JSON round-trips every record exactly, so it is not parsed; any other
is parsed and compared field by field.

This module imports the fold and the event contract only: the workers import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import ValidationError

from app.audit.mismatch import advance, differences, mismatch
from app.audit.record_keys import ID_PREFIX, is_utf8, text_id
from app.audit.replay_fold import Made, distinct_by_id
from app.audit.replay_tasks import Compared, Stream
from app.contract import Decision, Response

R = TypeVar("R", Decision, Response)
#: A taken text: (position, text, its event when it was parsed to learn its id).
_Line = tuple[int, bytes, R | None]


@dataclass(slots=True)
class _Copy(Generic[R]):
    """A distinct recorded copy: its position, its event (for a text that is a re-derived
    record's JSON, that record) and that record."""

    position: int
    event: R
    same: Made[R] | None


def compare(
    made: list[Made[R]], stream: Stream, model: type[R], progress: dict[int, int]
) -> Compared:
    """What the one-process replay's pairing finds for the ids re-derived here (and in
    ``progress``, per routing partition, the offset of the last event whose output is
    recorded)."""
    result = Compared(made=len(made))
    by_id = distinct_by_id(made)
    found = _take(by_id, stream, model, result)
    for record_id, lines in found.items():
        made_here = by_id[record_id]
        if len(lines) == 1 and len(made_here) == 1 and lines[0][2] is None:
            item, (position, text, _) = made_here[0], lines[0]
            if item.text() == text:  # the common case: one copy each, the same JSON
                result.recorded += 1
                result.reproduced += 1
                advance(progress, item.origin)
                if isinstance(item.record, Decision):
                    result.count_hash(item.record.config_hash, (position, 0))
                continue
        copies = _copies(record_id, made_here, lines, model, result)
        if not copies:  # none readable: as never recorded
            continue
        result.recorded += len(copies)
        _pair(copies, made_here, result, progress)
        first = copies[0].position
        for n, copy in enumerate(copies):
            if isinstance(copy.event, Decision):
                result.count_hash(copy.event.config_hash, (first, n))
    for record_id, derived in by_id.items():
        if found.get(record_id):
            continue
        result.unrecorded.append(record_id)
        first_made = derived[0]
        for n, item in enumerate(derived):
            unrecorded = mismatch("not_recorded", item.record, origin=item.origin)
            result.mismatches.append(((1, first_made.index, first_made.ordinal, n), unrecorded))
    return result


def _take(
    by_id: dict[str, list[Made[R]]], stream: Stream, model: type[R], result: Compared
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
    derived: list[Made[R]],
    lines: list[_Line[R]],
    model: type[R],
    result: Compared,
) -> list[_Copy[R]]:
    """The distinct readable recorded copies, as the one-process replay finds them
    (identical copies count once)."""
    copies: list[_Copy[R]] = []
    for position, text, parsed in lines:
        same: Made[R] | None = None
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
    copies: list[_Copy[R]], derived: list[Made[R]], result: Compared, progress: dict[int, int]
) -> None:
    """One id's copies paired in log order, as the one-process replay pairs them."""
    position = copies[0].position
    n = 0
    for copy, item in zip(copies, derived, strict=False):
        advance(progress, item.origin)
        found = None if copy.same is item else differences(copy.event, item.record)
        if found is None:
            result.reproduced += 1
            continue
        differs = mismatch("differs", item.record, found, item.origin)
        result.mismatches.append(((0, position, n), differs))
        n += 1
    for copy in copies[len(derived) :]:
        result.mismatches.append(((0, position, n), mismatch("not_rederived", copy.event)))
        n += 1
    for item in derived[len(copies) :]:
        unrecorded = mismatch("not_recorded", item.record, origin=item.origin)
        result.mismatches.append(((0, position, n), unrecorded))
        n += 1
