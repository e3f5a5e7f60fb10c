"""The Responses API's HTTP handlers: ``POST /v1/responses`` and ``GET /v1/responses/{id}``.

A create is a chat request on ``llm.requests`` like any other, published and answered
through the gateway's own machinery (``Gateway.prepare``, ``submit``,
``stream_items``; a stream through the relay, written by
app/gateway/responses_api/frames.py), with a ``turn`` the gateway sets: the
conversation's previous turn, read from the log by position (turns.py), and where its
own answer will be (marks.py). Errors before an answer are HTTP errors in OpenAI's
format, as for chat completions (app/gateway/errors.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from app.config.schema import GatewayKey
from app.contract import LogPosition
from app.contract.turn import PreviousTurn, Turn
from app.gateway import shape, wire
from app.gateway.errors import GatewayError, from_error_body, invalid
from app.gateway.relay import Relay
from app.gateway.responses_api import history, ids, inputs, objects
from app.gateway.responses_api.frames import ResponsesFrames
from app.gateway.responses_api.marks import AnswerMarks
from app.gateway.responses_api.turns import StoredTurn, read_turn
from app.gateway.service import Gateway, Prepared, event_request_id

#: The header a client names its request by (as for chat completions).
REQUEST_ID_HEADER = "x-switchyard-request-id"


class ResponsesApi:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.marks = AnswerMarks(gateway.settings)

    def install(self, app: web.Application) -> None:
        """Its routes on ``app``, and its reader of the answers' partitions closed with it."""
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{response_id}", self.retrieve)
        app.on_cleanup.append(self._close)

    async def _close(self, _app: web.Application) -> None:
        await self.marks.close()

    async def create(self, request: web.Request) -> web.StreamResponse:
        gateway = self.gateway
        key = gateway.keys.authenticate(request.headers.get("Authorization"))
        gateway.check_room()
        asked = inputs.read(await wire.read_body(request, gateway.settings))
        request_id = event_request_id(key, request.headers.get(REQUEST_ID_HEADER))
        previous = None
        if asked.previous_response_id is not None:
            previous = await self._previous(key, asked.previous_response_id)
        messages, instructed = history.next_messages(
            asked.input,
            asked.instructions,
            (previous.record, previous.answer) if previous and previous.answer else None,
        )
        turn = Turn(
            store=asked.store,
            instructions=instructed,
            previous=_link(previous),
            answer_after=await self.marks.mark(request_id) if asked.store else None,
        )
        body = {**asked.chat, "messages": messages, "stream": asked.stream}
        extra = {"turn": turn.model_dump(mode="json", exclude_none=True)}
        prepared = gateway.prepare(body, key, request_id, extra)
        record = json.loads(prepared.value)
        if asked.stream:
            return await self._stream(request, prepared, record)
        places: list[LogPosition] = []
        answer = await gateway.submit(prepared, places.append)
        if answer.status != "ok":
            error = from_error_body(answer.error)
            error.extra_headers.update(shape.headers_of(answer))
            raise error
        response_id = ids.response_id(request_id, places[0])
        body = objects.response_object(record, answer, response_id)
        return web.json_response(body, headers=shape.headers_of(answer))

    async def _stream(
        self, request: web.Request, prepared: Prepared, record: dict[str, Any]
    ) -> web.StreamResponse:
        """The answer's events as it comes (nothing is sent before the relay commits, so an
        error until then is an HTTP error, as for chat completions)."""
        skeleton = objects.skeleton(record, "", int(time.time()), "")
        frames = ResponsesFrames(prepared.request_id, skeleton)

        def sent(position: LogPosition) -> None:
            frames.name(ids.response_id(prepared.request_id, position))

        relay = Relay(prepared.request_id, frames=frames)
        items = self.gateway.stream_items(prepared, sent)
        return await wire.relay_stream(request, relay, items, self.gateway.wait_s)

    async def _previous(self, key: GatewayKey, response_id: str) -> StoredTurn:
        """The turn a request continues: answered, and successfully."""
        found = await read_turn(self.gateway, key, response_id, "previous_response_not_found")
        if found.answer is None:
            message = f"previous response {response_id!r} is still in progress"
            raise GatewayError(409, message, "previous_response_in_progress", retry_after_s=1.0)
        if found.answer.status != "ok":
            message = f"previous response {response_id!r} failed: there is nothing to continue"
            raise invalid(message, "previous_response_failed")
        return found

    async def retrieve(self, request: web.Request) -> web.Response:
        """``GET /v1/responses/{id}``: the Response object once its request is complete
        (a failed one: ``status: failed`` and its error); 409 ``request_in_progress``
        before; 404 for an unknown id, another tenant's, or one created with ``store:
        false``."""
        gateway = self.gateway
        key = gateway.keys.authenticate(request.headers.get("Authorization"))
        found = await read_turn(gateway, key, request.match_info["response_id"])
        if found.answer is None:
            message = f"response {found.response_id!r} is still in progress"
            raise GatewayError(409, message, "request_in_progress", retry_after_s=1.0)
        response_id = ids.response_id(found.request_id, found.request)
        body = objects.response_object(found.record, found.answer, response_id)
        return web.json_response(body, headers=shape.headers_of(found.answer))


def _link(previous: StoredTurn | None) -> PreviousTurn | None:
    if previous is None or previous.response is None:
        return None
    return PreviousTurn(
        response_id=previous.response_id, request=previous.request, response=previous.response
    )
