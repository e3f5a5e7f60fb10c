"""What a request gets: its response on ``llm.responses`` (or its error), and the dead
letter of an input that could not be accepted."""

from __future__ import annotations

from typing import Any, Literal

from app.contract.base import Envelope, Frozen, LogPosition

#: The ``ErrorBody.type`` of the answer sent to a gateway's reply address when ingest
#: refuses a request that gateway published (app/ingest.py ``refusal_reply``); its code is
#: the dead letter's reason.
REQUEST_REFUSED = "request_refused"


class ErrorBody(Frozen):
    type: str
    message: str
    code: str | None = None
    http_status: int | None = None
    #: When asking again may succeed (a limit's next window), seconds from the answer.
    retry_after_s: float | None = None


class Response(Envelope):
    """Exactly one per accepted request, on ``llm.responses``."""

    type: Literal["chat.response"] = "chat.response"
    request_id: str
    status: Literal["ok", "error"]
    attempts: int
    deployment: str | None = None
    completion: dict[str, Any] | None = None
    error: ErrorBody | None = None


class DeadLetter(Envelope):
    """An input that could not be accepted, with a machine-readable reason."""

    type: Literal["deadletter"] = "deadletter"
    reason: Literal[
        "not_json",
        "not_object",
        "schema_violation",
        "unknown_route",
        "unknown_preset",
        "oversized",
        "internal",
        "too_deep",
        "bad_number",
        "bad_text",
        "bad_feedback",
        "unmatched_feedback",
    ]
    detail: str
    source: LogPosition
    original_size: int
    original_truncated: bool
    #: The original bytes (up to the bound), base64-encoded: lossless for any input.
    original_base64: str
