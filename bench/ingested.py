"""Requests accepted as the ingest agent accepts them, for the benches' in-process worlds
(and the tests that build theirs the same way)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.config.schema import RoutingConfig
from app.contract import DeadLetter, LogPosition, RequestAccepted
from app.ingest import accept

#: Ingest's limits here: far above any simulated request.
MAX_REQUEST_BYTES = 10_000_000
DEADLETTER_MAX_BYTES = 4096


def ingest(
    body: dict[str, Any],
    offset: int,
    when: datetime,
    config: RoutingConfig,
    *,
    partition: int = 0,
) -> RequestAccepted | DeadLetter:
    """What :func:`app.ingest.accept` makes of ``body`` (a chat request's JSON), the record
    at ``offset`` of ``llm.requests`` partition ``partition``, published at ``when``."""
    return accept(
        json.dumps(body).encode(),
        LogPosition(topic="llm.requests", partition=partition, offset=offset),
        when,
        config,
        max_request_bytes=MAX_REQUEST_BYTES,
        deadletter_max_bytes=DEADLETTER_MAX_BYTES,
    )


def admitted(event: RequestAccepted | DeadLetter) -> RequestAccepted:
    """The request ingest accepted (:func:`ingest`); RuntimeError saying why when it refused
    it."""
    if not isinstance(event, RequestAccepted):
        refused = event.source.offset
        raise RuntimeError(f"ingest refused record {refused}: {event.reason} ({event.detail})")
    return event
