"""Where a record belongs, read from its text without parsing it, or from its event.

A parallel replay (:mod:`app.audit.replay_parallel`) sends each routing-log key's
records to one worker, so its parent needs every record's key before any worker parses
it: :func:`guess_key` reads it where the router's JSON puts it. A worker takes the
recorded decisions and responses whose id it re-derived: :func:`text_id` reads the id a
published record's text starts with. Neither is trusted: the worker that parses a
record checks its key (:func:`key_of`) and its id.

This module imports the event contract only: the workers import it.
"""

from __future__ import annotations

import json

from pydantic import TypeAdapter

from app.contract import (
    AttemptFinished,
    RequestAccepted,
    RoutingEvent,
    RoutingLogEvent,
    route_of,
)
from app.contract.budget import ledger_key

#: A routing-log record's text to its event, as app.audit.log parses it.
ROUTING_RECORD: TypeAdapter[RoutingEvent] = TypeAdapter(RoutingLogEvent)
#: The key of records that name none (a budget ask whose index is past its scopes):
#: folding one raises before it touches any state, and is reported as an error.
UNROUTABLE = "\x00unroutable"
#: How a published record's text starts: its id comes first.
ID_PREFIX = b'{"id":"'

_TYPE = b'","type":"'


def key_of(event: RoutingEvent) -> str:
    """The event's routing-log key, :func:`~app.contract.route_of`; the common two without
    a call, :data:`UNROUTABLE` for one that names none."""
    if type(event) is RequestAccepted:
        return event.route
    if type(event) is AttemptFinished:
        return event.outcome.route
    try:
        return route_of(event)
    except Exception:  # its fold raises the same
        return UNROUTABLE


def guess_key(data: bytes, start: int, stop: int) -> str | None:
    """The routing-log key of the event whose text is ``data[start:stop]``, read where the
    router's JSON (``model_dump_json``: fields in their declared order) puts it; None
    when the text is laid out otherwise or is of another kind (it is then parsed).

    A string value cannot hold ``","`` unescaped, so what is found is a field of the
    event, not text inside one: the first ``type`` (after the envelope's flat fields),
    an attempt's first ``route`` (its outcome's, after flat fields), a request's last
    ``route`` before its last ``prompt_sha256`` (the fields after them hold no such
    pair). The worker that parses the record checks the key all the same."""
    at = data.find(_TYPE, start, min(stop, start + 200))
    if at < 0:
        return None
    at += len(_TYPE)
    if data.startswith(b'attempt.finished","outcome":{', at):
        found = data.find(b',"route":"', at, stop)
        return None if found < 0 else _string(data, found + 10, stop)
    if data.startswith(b'request.accepted",', at):
        sha = data.rfind(b'","prompt_sha256":"', at, stop)
        found = data.rfind(b',"route":"', at, sha) if sha >= 0 else -1
        return None if found < 0 else plain(data[found + 10 : sha])
    if data.startswith(b'route.tick","route":"', at):
        return _string(data, at + 21, stop)
    if data.startswith(b'budget.verdict","route":"', at):
        return _string(data, at + 25, stop)
    if data.startswith(b'budget.settle","scope":"', at):
        scope = _string(data, at + 24, stop)
        return None if scope is None else ledger_key(scope)
    if data.startswith(b'budget.ask","route":"', at):
        return _ask_key(data, at, stop)
    return None


def _ask_key(data: bytes, at: int, stop: int) -> str | None:
    """A budget ask's ledger: ``scopes[index]``."""
    scopes_at = data.find(b',"scopes":[', at, stop)
    index_at = data.find(b'],"index":', scopes_at, stop) if scopes_at >= 0 else -1
    if index_at < 0:
        return None
    digits_end = index_at + 10
    while digits_end < stop and data[digits_end : digits_end + 1].isdigit():
        digits_end += 1
    try:
        scopes = json.loads(data[scopes_at + 10 : index_at + 1])
        index = int(data[index_at + 10 : digits_end])
    except ValueError:
        return None
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        return None
    return ledger_key(scopes[index]) if index < len(scopes) else UNROUTABLE


def _string(data: bytes, start: int, stop: int) -> str | None:
    end = data.find(b'"', start, stop)
    return None if end < 0 else plain(data[start:end])


def plain(value: bytes) -> str | None:
    """A JSON string's text when it holds no escape (else None: parse the record)."""
    if b"\\" in value or b'"' in value:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text_id(text: bytes) -> bytes | None:
    """The id a published record's text starts with; None for a text laid out otherwise."""
    if not text.startswith(ID_PREFIX):
        return None
    end = text.find(b'"', 7)
    if end < 0:
        return None
    found = text[7:end]
    return None if b"\\" in found else found


def is_utf8(text: bytes) -> bool:
    """Whether a text decodes (one that does not makes the log unreadable)."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
