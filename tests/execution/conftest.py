"""The executor's provider call, against real servers on 127.0.0.1.

LLMock plays the provider for the standard cases (completions, scripted HTTP
errors, delays). A small aiohttp server of our own covers what LLMock cannot
produce: malformed 2xx bodies, cached-token usage shapes, an HTTP-date
Retry-After, a body that trickles in, and a look at the request headers. A raw
asyncio server hangs up without answering. Every network test runs through
both transports.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from aiohttp import web
from call_helpers import ScriptedServer
from llmock.testing import LLMockServer

from app.execution.http import Transport, make_client

# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def llmock() -> Iterator[LLMockServer]:
    with LLMockServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_llmock(request: pytest.FixtureRequest) -> None:
    if "llmock" in request.fixturenames:
        request.getfixturevalue("llmock").state.reset()


@pytest.fixture(scope="module")
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer(url="")

    async def dispatch(request: web.Request) -> web.StreamResponse:
        server.seen.append((dict(request.headers), await request.json()))
        assert server.handler is not None, "test did not script a reply"
        return await server.handler(request)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", dispatch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


@pytest.fixture
def scripted(scripted_server: ScriptedServer) -> ScriptedServer:
    scripted_server.handler = None
    scripted_server.seen.clear()
    return scripted_server


@pytest.fixture(scope="module")
async def hang_up_url() -> AsyncIterator[str]:
    """A server that reads the request and closes the connection without a word."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    server.close()
    await server.wait_closed()


@pytest.fixture
def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # bound then closed, never listening: connections are refused
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(params=["aiohttp", "httpx"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    transport: Transport = request.param
    async with make_client(transport=transport, max_connections=16) as http_client:
        yield http_client
