"""What every API the gateway serves does on the wire: read a request's JSON body (its
size, its time and ingest's JSON checks) and write a relayed stream as server-sent
events (app/gateway/relay.py decides what; its ``Frames`` how). Bodies are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web

from app.contract import Response, StreamDelta
from app.gateway.errors import GatewayError, invalid
from app.gateway.relay import Relay
from app.ingest import read_json
from app.settings import Settings


async def read_body(request: web.Request, settings: Settings) -> Any:
    """The request's JSON body: 413 over ``max_request_bytes``, 408 when it does not
    arrive within ``gateway_body_timeout_s``, 400 when ingest would refuse its JSON."""
    limit = settings.max_request_bytes
    if request.content_length is not None and request.content_length > limit:
        raise GatewayError(413, f"body of {request.content_length} bytes > {limit}", "oversized")
    try:
        raw = await asyncio.wait_for(request.read(), settings.gateway_body_timeout_s)
    except TimeoutError:
        raise GatewayError(408, "the body did not arrive in time", "body_timeout") from None
    data, problem = read_json(raw, settings.max_int_digits, settings.max_json_depth)
    if problem is not None:
        raise invalid(f"{problem[0]}: {problem[1]}", problem[0])
    return data


async def relay_stream(
    request: web.Request,
    relay: Relay,
    stream: AsyncGenerator[StreamDelta | Response | None, None],
    wait_s: float,
) -> web.StreamResponse:
    """Server-sent events of ``stream``'s items as ``relay`` makes them. Nothing is sent
    before the relay commits, so an error until then is raised (an HTTP error); a client
    that goes away leaves the request to complete in the log. ``wait_s``: the wait a None
    item (the end of the wait) reports."""
    reply: web.StreamResponse | None = None
    async with contextlib.aclosing(stream) as items:
        async for item in items:
            step = relay.take(item) if item is not None else relay.timed_out(wait_s)
            if step.error is not None:
                raise step.error
            if step.headers is not None:
                reply = await _open_stream(request, step.headers)
            if reply is not None and not await _write(reply, step.frames):
                return reply  # the client went away; the request goes on in the log
            if relay.done:
                break
    if reply is None:
        raise GatewayError(500, "the stream ended before it started", "internal_error")
    with contextlib.suppress(ConnectionError):
        await reply.write_eof()
    return reply


async def _open_stream(request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
    reply = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **headers,
        }
    )
    await reply.prepare(request)
    return reply


async def _write(reply: web.StreamResponse, frames: list[bytes]) -> bool:
    """Write ``frames``; False when the client has gone away."""
    try:
        for frame in frames:
            await reply.write(frame)
    except ConnectionError:
        return False
    return True
