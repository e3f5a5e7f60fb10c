"""The one pooled HTTP client of a process, for every provider call.

``make_client()`` builds it; whoever builds it owns it and closes it on shutdown
(``await client.aclose()``, or ``async with client_lifespan() as client``).
Nothing here keeps a module-level client.

Two transports, both behind the ``httpx.AsyncClient`` interface:

* ``"aiohttp"`` (default): httpx-aiohttp's transport on an aiohttp connection
  pool. httpx 0.28's own pool degrades at high concurrency (httpx issue #3215:
  ``_assign_requests_to_connections`` rescans every connection for every queued
  request). ``bench/http_transport.py`` measures both; on a 2-CPU box aiohttp
  did ~1,380 req/s at 50 concurrent and ~1,280 at 200, httpx ~80 and ~9, with
  ~0.7 against 12-110 ms of client CPU per request (httpx with its own default
  pool, 20 keep-alive connections, did ~310 and ~140). Its aiohttp session is
  created on the first request, in that request's event loop: use the client
  from one loop only.
* ``"httpx"``: httpx's own transport (httpcore), kept for comparison and as a
  fallback.

httpx-aiohttp 0.2.0 maps every ``aiohttp.ClientConnectionError`` to
``httpx.ConnectTimeout``, so a refused connection or a server hanging up would
read as a timeout; it lets some aiohttp errors (a malformed status line)
escape unmapped; and it raises ``ValueError`` for a URL with credentials (which
httpx has already sent as an Authorization header). ``_AiohttpTransport``
corrects all three, so callers see the same httpx exception classes whichever
transport is in use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, Literal, NoReturn

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from app.settings import DEFAULT_HTTP_KEEPALIVE_EXPIRY_S, DEFAULT_HTTP_MAX_CONNECTIONS

Transport = Literal["httpx", "aiohttp"]

DEFAULT_TRANSPORT: Final[Transport] = "aiohttp"
#: The settings' pool defaults (a worker passes ``Settings.http_max_connections`` and
#: ``http_keepalive_expiry_s``; benches and tests take these).
DEFAULT_MAX_CONNECTIONS: Final = DEFAULT_HTTP_MAX_CONNECTIONS
DEFAULT_KEEPALIVE_EXPIRY_S: Final = DEFAULT_HTTP_KEEPALIVE_EXPIRY_S
#: Per-operation default; each provider call passes its own timeout.
DEFAULT_TIMEOUT_S: Final = 30.0


def make_client(
    *,
    transport: Transport = DEFAULT_TRANSPORT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trust_env: bool = False,
) -> httpx.AsyncClient:
    """A pooled async client. The caller owns it and must ``aclose()`` it.

    ``trust_env`` (proxy variables, ``.netrc``) is off by default: provider URLs
    come from the config, not from the environment.
    """
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive_expiry_s,
    )
    return httpx.AsyncClient(
        transport=_transport(transport, limits, trust_env),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=trust_env,
    )


@asynccontextmanager
async def client_lifespan(
    *, transport: Transport = DEFAULT_TRANSPORT, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> AsyncIterator[httpx.AsyncClient]:
    """``make_client()`` for the length of an ``async with`` block, closed on exit."""
    client = make_client(transport=transport, max_connections=max_connections)
    try:
        yield client
    finally:
        await client.aclose()


def _transport(kind: Transport, limits: httpx.Limits, trust_env: bool) -> httpx.AsyncBaseTransport:
    if kind == "aiohttp":
        return _AiohttpTransport(limits=limits, trust_env=trust_env)
    if kind == "httpx":
        return httpx.AsyncHTTPTransport(limits=limits, trust_env=trust_env)
    raise ValueError(f"unknown transport {kind!r}; expected 'httpx' or 'aiohttp'")


_ErrorMap = tuple[tuple[type[aiohttp.ClientError], type[httpx.TransportError]], ...]

#: The httpx class for an aiohttp failure; the first aiohttp class that matches wins.
_AIOHTTP_TO_HTTPX: Final[_ErrorMap] = (
    (aiohttp.ClientProxyConnectionError, httpx.ProxyError),
    (aiohttp.ClientHttpProxyError, httpx.ProxyError),
    (aiohttp.ClientConnectorError, httpx.ConnectError),  # refused, DNS, TLS handshake
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),  # unparsable status line, headers
    (aiohttp.ClientError, httpx.ReadError),  # payload errors, resets, other OS errors
)


class _AiohttpTransport(AiohttpTransport):
    """httpx-aiohttp's transport, raising the httpx exception that matches the failure."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.userinfo:
            # httpx has already turned URL credentials into an Authorization header;
            # aiohttp refuses a request that has both.
            request.url = request.url.copy_with(userinfo=b"")
        try:
            response = await super().handle_async_request(request)
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            _reraise(exc, request)
        response.stream = _RemappedStream(response.stream, request)
        return response


class _RemappedStream(httpx.AsyncByteStream):
    """A response body whose read errors are corrected like the request's."""

    def __init__(
        self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, request: httpx.Request
    ) -> None:
        if not isinstance(inner, httpx.AsyncByteStream):
            raise TypeError("the aiohttp transport returned a synchronous stream")
        self._inner = inner
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            _reraise(exc, self._request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _reraise(exc: Exception, request: httpx.Request) -> NoReturn:
    error = _httpx_error(exc, request)
    if error is exc:
        raise exc
    raise error from exc


def _httpx_error(exc: Exception, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception for what actually went wrong.

    Messages name the aiohttp class only: aiohttp's own text quotes the host.
    """
    cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
    if isinstance(cause, TimeoutError):  # aiohttp's timeouts: mapped right already
        if isinstance(exc, httpx.TimeoutException):
            return exc
        return httpx.TimeoutException(type(cause).__name__, request=request)
    for aiohttp_class, httpx_class in _AIOHTTP_TO_HTTPX:
        if isinstance(cause, aiohttp_class):
            return httpx_class(type(cause).__name__, request=request)
    if isinstance(exc, httpx.TransportError):
        return exc
    return httpx.TransportError(type(exc).__name__, request=request)
