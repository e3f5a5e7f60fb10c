"""A time limit on a request's line and headers (aiohttp has none): ``408`` and close.

aiohttp closes a connection idle between requests after its keep-alive timeout, and
the gateway bounds the body (``SWITCHYARD_GATEWAY_BODY_TIMEOUT_S``), but a client that
starts a request and sends its headers a byte at a time would hold a connection for
the whole keep-alive timeout. :class:`HeadTimedHandler` starts a clock on the first byte
of a request's head and, if the head is not complete within
``SWITCHYARD_GATEWAY_HEADER_TIMEOUT_S``, answers 408 (OpenAI's error format,
``x-should-retry: false``) and closes the connection.

Which bytes are a head's: those that arrive while the connection waits for its next
request (aiohttp's ``RequestHandler.start`` awaits its ``_waiter`` future, the one
internal this relies on). Once a head is parsed aiohttp resolves that future, and it
waits again only after the request was answered and its body read to the end, so the
bytes of a body, and anything arriving while a handler runs, never start the clock, and
a request whose head arrived is never answered 408 by it, however long its handler
takes. (Telling heads from bodies by "no request being handled and none queued" is
wrong: between aiohttp taking a parsed request off its queue and starting its handler
task neither holds, and a body arriving then started the clock, which fired while the
handler waited for its answer.) Checked by tests/test_gateway_head_timeout.py.

:class:`HeadTimedSite` is aiohttp's ``TCPSite`` listening with that handler.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

_BODY = json.dumps(
    {
        "error": {
            "message": "the request's headers did not arrive in time",
            "type": "timeout_error",
            "param": None,
            "code": "header_timeout",
        }
    }
).encode()
TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
    b"x-should-retry: false\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BODY)}\r\n\r\n".encode()
    + _BODY
)


class HeadTimedHandler(RequestHandler):
    def __init__(self, manager: Server, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._head_clock: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        head = bool(data) and self._awaiting_request()  # before: a parsed head ends the wait
        super().data_received(data)
        if not self._awaiting_request():
            self._stop_clock()  # a whole head arrived (or the connection is closing)
        elif head and self._head_clock is None:
            loop = asyncio.get_running_loop()
            self._head_clock = loop.call_later(self.header_timeout_s, self._head_too_slow)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def _awaiting_request(self) -> bool:
        """The connection waits for its next request's head: none is being parsed into a
        request, handled, answered or having its body read."""
        waiter: asyncio.Future[None] | None = getattr(self, "_waiter", None)
        return waiter is not None and not waiter.done()

    def _stop_clock(self) -> None:
        if self._head_clock is not None:
            self._head_clock.cancel()
            self._head_clock = None

    def _head_too_slow(self) -> None:
        self._head_clock = None
        transport = self.transport
        if not self._awaiting_request() or transport is None or transport.is_closing():
            return
        transport.write(TIMEOUT_RESPONSE)
        self.force_close()  # closes the transport once the 408 is written


class HeadTimedSite(web.TCPSite):
    """``TCPSite`` whose connections are :class:`HeadTimedHandler`s."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, *, header_timeout_s: float
    ) -> None:
        super().__init__(runner, host, port)
        self.header_timeout_s = header_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None

        def handler() -> HeadTimedHandler:
            return HeadTimedHandler(
                server,
                header_timeout_s=self.header_timeout_s,
                loop=server._loop,
                **server._kwargs,
            )

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            handler, self._host, self._port, backlog=self._backlog
        )
