"""Builders shared by the gateway's unit tests (relay, resume, Responses API)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.contract import StreamDelta

WHEN = datetime(2025, 1, 1, tzinfo=UTC)
#: The request every delta belongs to (tenant ``acme``).
REQUEST_ID = "acme.r1"


def stream_delta(
    seq: int, content: str = "", call: str = "c1", attempt: int = 1, **kw: Any
) -> StreamDelta:
    """Piece ``seq`` of call ``call`` (attempt ``attempt``) of request ``acme.r1``."""
    return StreamDelta(
        id=f"{call}-{seq}",
        occurred_at=WHEN,
        request_id=REQUEST_ID,
        attempt=attempt,
        call_id=call,
        seq=seq,
        deployment="prov:model-x",
        content=content,
        **kw,
    )
