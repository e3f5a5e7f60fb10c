"""A time limit on a request's line and headers (aiohttp has none): ``408`` and close.

aiohttp closes a connection idle between requests after its keep-alive timeout, and
the gateway bounds the body (``SWITCHYARD_GATEWAY_BODY_TIMEOUT_S``), but a client that
starts a request and sends its headers a byte at a time would hold a connection for
ever. :class:`HeadTimedHandler` starts a clock on the first byte of a request's head
and, if the head is not complete within ``SWITCHYARD_GATEWAY_HEADER_TIMEOUT_S``, answers
408 (OpenAI's error format, ``x-should-retry: false``) and closes the connection.

:class:`HeadTimedSite` is aiohttp's ``TCPSite`` listening with that handler. Both lean
on aiohttp's ``RequestHandler`` internals (``_request_count``, ``_messages``,
``_current_request``), checked by tests/test_streaming_gateway.py.
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
        self._heads_at_start = 0

    def data_received(self, data: bytes) -> None:
        heads = self._request_count
        super().data_received(data)
        if self._request_count != heads:
            self._stop_clock()  # a whole head arrived
        if self._head_clock is None and self._awaiting_head() and data:
            loop = asyncio.get_running_loop()
            self._heads_at_start = self._request_count
            self._head_clock = loop.call_later(self.header_timeout_s, self._head_too_slow)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        """Between requests: no request handled, none parsed and waiting (the bytes that
        came are the start of the next head, not a body)."""
        return self._current_request is None and not self._messages and not self._force_close

    def _stop_clock(self) -> None:
        if self._head_clock is not None:
            self._head_clock.cancel()
            self._head_clock = None

    def _head_too_slow(self) -> None:
        self._head_clock = None
        if self._request_count != self._heads_at_start or self.transport is None:
            return
        self.transport.write(TIMEOUT_RESPONSE)
        self.force_close()
        self.transport.close()


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
