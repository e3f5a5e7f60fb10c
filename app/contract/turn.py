"""A Responses API turn: how a request on ``llm.requests`` is linked to its conversation.

Set by the gateway on a ``POST /v1/responses`` request (docs/gateway.md, "Responses
API"), never taken from a body. Log positions and flags only, never text: the
conversation itself is the request's ``messages`` (the previous turn's, its answer, the
new input). Each turn names where its previous turn's request and answer records are,
so a conversation is read back by position, turn by turn, however old (as long as the
topics keep it), never searched for in a window.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.contract.base import LogPosition


class PreviousTurn(BaseModel):
    """The turn a request continues (its ``previous_response_id``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    #: The response id the client continued from.
    response_id: Annotated[str, Field(min_length=1, max_length=400)]
    #: Its request's record on ``llm.requests`` (its messages: the conversation up to it).
    request: LogPosition
    #: Its answer's record on ``llm.responses``.
    response: LogPosition


class Turn(BaseModel):
    """A Responses API request's place in its conversation."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    #: ``false`` (the request's ``store: false``): the gateway neither answers it by id
    #: (``GET /v1/responses/{id}``: 404) nor continues a conversation from it (404). The
    #: records stay on the log, as every request's do (routing and replay read them).
    store: bool = True
    #: The first message is the turn's ``instructions``: not carried into the next turn.
    instructions: bool = False
    previous: PreviousTurn | None = None
    #: Where the answer will be: at or after this position of ``llm.responses`` (the end of
    #: its partition before the request was published). None with ``store: false``.
    answer_after: LogPosition | None = None
