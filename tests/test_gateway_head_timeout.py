"""The gateway's header timeout (app/gateway/head_timeout.py): a request's line and headers
that take longer than the timeout get a 408 and the connection is closed; a request whose
head arrived is never timed by it, however long its handler takes, wherever its body
arrives; the clock never raises (nothing logged as an error)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

from app.gateway.head_timeout import HeadTimedHandler, HeadTimedSite

HEADER_TIMEOUT_S = 0.3
#: A handler three header timeouts long.
HANDLER_S = 3 * HEADER_TIMEOUT_S
BODY = b'{"question": "slow?"}'
HEAD = (
    b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _ok(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _slow(request: web.Request) -> web.Response:
    body = await request.read()
    await asyncio.sleep(HANDLER_S)
    return web.json_response({"read": len(body)})


async def _slow_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await reply.prepare(request)
    for piece in (b"data: 1\n\n", b"data: 2\n\n"):
        await asyncio.sleep(HANDLER_S / 2)
        await reply.write(piece)
    await reply.write_eof()
    return reply


@asynccontextmanager
async def _serving() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/", _ok)
    app.router.add_post("/slow", _slow)
    app.router.add_post("/stream", _slow_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await HeadTimedSite(runner, "127.0.0.1", 0, header_timeout_s=HEADER_TIMEOUT_S).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_headers_that_do_not_arrive_in_time_get_408(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _serving() as port:
        async with httpx.AsyncClient() as http:  # a prompt client is served, twice
            for _ in range(2):
                assert (await http.get(f"http://127.0.0.1:{port}/")).status_code == 200
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=5)  # to the close
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and b"header_timeout" in answer
    assert b"x-should-retry: false" in answer
    assert not _errors(caplog)


async def test_a_head_sent_byte_by_byte_too_slowly_gets_408_and_is_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a first request on the connection, the second's head comes a byte every
    20 ms (about 2.4 s for the head, eight header timeouts): 408, then the close."""
    async with _serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")

        async def dribble() -> None:
            for byte in HEAD:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.02)

        sending = asyncio.create_task(dribble())
        answer = await asyncio.wait_for(reader.read(), timeout=5)  # to the close
        head_left = not sending.done()
        sending.cancel()
        writer.close()
    assert head_left  # the 408 came before the head was complete
    assert b"HTTP/1.1 408 " in answer and b"header_timeout" in answer  # after the first's rest
    assert not _errors(caplog)


@pytest.mark.parametrize("path", ["/slow", "/stream"])
async def test_a_handler_slower_than_the_timeout_is_answered(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The head, then the body as a segment of its own, then a handler three header
    timeouts long (plain and streamed): answered 200, twice on the same connection."""
    head = HEAD.replace(b"/slow", path.encode())
    async with _serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(head)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(BODY)
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), timeout=5)
            assert status.startswith(b"HTTP/1.1 200 "), status
            headers = await reader.readuntil(b"\r\n\r\n")
            if path == "/slow":
                length = int(headers.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                assert await reader.readexactly(length) == b'{"read": %d}' % len(BODY)
            else:
                assert (await reader.readuntil(b"0\r\n\r\n")).count(b"data: ") == 2
        writer.close()
    assert not _errors(caplog)


async def test_a_body_arriving_as_its_handler_starts_is_not_timed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The body arrives 0 to 4 turns of the event loop after its head: among them, once
    aiohttp took the parsed request off its queue and before its handler task started
    (no request queued, none handled). Each connection is driven through the asyncio
    ``Protocol`` interface, bytes in by ``data_received``, on a socket pair."""
    loop = asyncio.get_running_loop()
    server = web.Server(_slow)

    async def one(turns: int) -> bytes:
        ours, theirs = socket.socketpair()
        protocol = HeadTimedHandler(server, header_timeout_s=HEADER_TIMEOUT_S, loop=loop)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=ours)
        reader, writer = await asyncio.open_connection(sock=theirs)
        await asyncio.sleep(0)  # aiohttp's handler starts waiting for a request
        protocol.data_received(HEAD)
        for _ in range(turns):
            await asyncio.sleep(0)
        protocol.data_received(BODY)
        status = await asyncio.wait_for(reader.readline(), timeout=5)
        writer.close()
        transport.close()
        return status

    try:
        statuses = await asyncio.gather(*(one(turns) for turns in range(5)))
    finally:
        await server.shutdown()
    assert all(s.startswith(b"HTTP/1.1 200 ") for s in statuses), statuses
    assert not _errors(caplog)
