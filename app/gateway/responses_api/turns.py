"""A Responses API turn read back from the log, by position, on any gateway.

Its response id names its request record's place on ``llm.requests``
(app/gateway/responses_api/ids.py): the record is read there (one fetch), and must be
that request's, the key's tenant's (``owns``), a Responses request (it has a ``turn``)
and stored (``turn.store``); otherwise the id is unknown here (404, whatever the
reason, but ``store: false`` is said so to the tenant that made it). Its answer is read
forward from where its ``turn`` said it would be (``answer_after``). Nothing in the
gateway's memory is needed: a conversation goes on on any gateway, after any restart,
however long ago its last turn was (as long as the topics' retention keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.config.schema import GatewayKey
from app.contract import LogPosition, Response
from app.contract.turn import Turn
from app.gateway.errors import GatewayError
from app.gateway.responses_api import ids
from app.gateway.resume import owns
from app.gateway.service import Gateway, event_request_id


@dataclass(frozen=True)
class StoredTurn:
    """A turn as the log has it: its request record, and its answer once there is one."""

    response_id: str
    request_id: str
    record: dict[str, Any]
    turn: Turn
    request: LogPosition
    answer: Response | None
    response: LogPosition | None


async def read_turn(
    gateway: Gateway, key: GatewayKey, response_id: str, code: str = "response_not_found"
) -> StoredTurn:
    """The turn ``response_id`` names, as ``key`` may read it; 404 (``code``) otherwise."""
    ref = ids.parse(response_id)
    if ref is None:
        raise _missing(response_id, code)
    try:
        request_id = event_request_id(key, ref.request_id)
    except GatewayError:
        raise _missing(response_id, code) from None
    position = ref.position(gateway.settings.topics.requests)
    found = await gateway.lookup.request_at(request_id, position)
    if found is None or not owns(key, found[0]):
        raise _missing(response_id, code)
    record, at = found
    turn = _turn_of(record)
    if turn is None:
        raise _missing(response_id, code)
    if not turn.store:
        message = (
            f"response {response_id!r} was created with store: false: it is neither "
            "retrieved nor continued"
        )
        raise GatewayError(404, message, code, should_retry=False)
    after = turn.answer_after
    if after is None or after.topic != gateway.settings.topics.responses:
        raise _missing(response_id, code)
    answered = await gateway.lookup.response_after(request_id, after)
    answer, where = answered if answered is not None else (None, None)
    return StoredTurn(response_id, request_id, record, turn, at, answer, where)


def _turn_of(record: dict[str, Any]) -> Turn | None:
    try:
        return Turn.model_validate(record.get("turn"))
    except ValidationError:
        return None


def _missing(response_id: str, code: str) -> GatewayError:
    message = f"no response {response_id[:200]!r} for this key (unknown, or another's)"
    return GatewayError(404, message, code, should_retry=False)
