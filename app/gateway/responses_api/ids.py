"""A response's id: its request's id and where its request record is on the log (pure).

``resp_<request id>_<partition>_<offset>``: the request id under the key's tenant (as
the gateway publishes it, ``x-switchyard-request-id``), then the partition and offset of
its record on ``llm.requests``. So the request record of any turn, however old, is read
at its position (one fetch), never searched for; the record's own ``request_id`` and
tenant are checked against the id and the key, so a made-up position finds nothing.
Request ids never contain ``_`` (``[A-Za-z0-9._:-]``), so the id splits back without
ambiguity. ``resp_<request id>`` alone (no position) is accepted too, and looked up in
the recent window like ``GET /v1/chat/completions/{id}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.contract import LogPosition

PREFIX = "resp_"
#: Longest response id read (a request id is at most 128 characters after its tenant's).
MAX_ID_CHARS = 400


@dataclass(frozen=True)
class ResponseRef:
    """What a response id names: its request id and, when it has one, its record's place."""

    request_id: str
    #: (partition, offset) of the request's record on ``llm.requests``.
    place: tuple[int, int] | None = None

    def position(self, requests_topic: str) -> LogPosition | None:
        if self.place is None:
            return None
        return LogPosition(topic=requests_topic, partition=self.place[0], offset=self.place[1])


def response_id(request_id: str, request: LogPosition) -> str:
    return f"{PREFIX}{request_id}_{request.partition}_{request.offset}"


def parse(value: str) -> ResponseRef | None:
    """The request a response id names; None for what no response id looks like."""
    if not value.startswith(PREFIX) or len(value) > MAX_ID_CHARS:
        return None
    rest = value.removeprefix(PREFIX)
    parts = rest.split("_")
    if len(parts) == 1 and parts[0]:
        return ResponseRef(parts[0])
    if len(parts) != 3 or not parts[0] or not all(_number(p) for p in parts[1:]):
        return None
    return ResponseRef(parts[0], (int(parts[1]), int(parts[2])))


def message_id(request_id: str) -> str:
    """The id of the answer's ``message`` output item."""
    return f"msg_{request_id}"


def function_call_id(request_id: str, index: int) -> str:
    """The id of the answer's ``index``-th ``function_call`` output item."""
    return f"fc_{request_id}_{index}"


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 19
