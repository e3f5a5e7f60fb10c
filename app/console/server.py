"""``switchyard console``: the analytics sink and the console's pages, in one process.

One process, because a DuckDB file has one writer: the sink folds the topics into
the store (app/analytics/sink.py) while the pages read it. Pages:

* ``/requests``: the request log (filters: status, tenant, route, deployment, time;
  paginated);
* ``/requests/{id}``: one request's routing observability, attempt by attempt;
* ``/providers``: provider health, share of traffic and breaker timeline;
* ``/policies``: policy versions and the config hashes decisions were made under;
* ``/admin/trace/{id}``: ``switchyard audit --json``'s trace, from the store.

Every asset is the package's (``app/console/static/``); the content security policy
allows nothing else. Who may read: app/console/auth.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import SecretStr

from app.analytics.sink import Sink
from app.analytics.store import Store
from app.analytics.trace import store_trace
from app.console import pages_providers, pages_requests
from app.console.auth import console_gate, login_handlers
from app.console.html import esc, page
from app.settings import Settings
from app.web_auth import admin_token

STATIC = Path(str(resources.files("app.console") / "static"))
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STORE = web.AppKey("store", Store)


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        reply = await handler(request)
    except web.HTTPException as exc:
        reply = exc
        if exc.status >= 400 and exc.content_type != "text/html":
            reply = web.Response(
                text=page(exc.reason, f"<p>{esc(exc.reason)}</p>"),
                status=exc.status,
                content_type="text/html",
            )
        elif exc.status < 400:
            exc.headers.update(SECURITY_HEADERS)
            raise
    for name, value in SECURITY_HEADERS.items():
        reply.headers.setdefault(name, value)
    return reply


#: A page: (store, path parameters, query, footer) -> HTML, or None for 404.
Render = Callable[[Store, dict[str, str], dict[str, str], str], "str | None"]


def _html(render: Render) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        store = request.app[STORE]
        path, query = dict(request.match_info), dict(request.query)
        text = await asyncio.to_thread(render, store, path, query, _footer(store))
        if text is None:
            raise web.HTTPNotFound(reason="No record of this request in the store")
        return web.Response(text=text, content_type="text/html")

    return handler


def _footer(store: Store) -> str:
    where = "in memory" if store.path is None else str(store.path)
    return f"analytics store: {esc(where)} · no prompt or completion text is stored"


async def trace_view(request: web.Request) -> web.Response:
    request_id = request.match_info["request_id"]
    trace = await asyncio.to_thread(store_trace, request.app[STORE], request_id)
    if trace is None:
        return web.json_response({"error": f"no record of request {request_id!r}"}, status=404)
    return web.json_response(trace)


def build_app(store: Store, token: SecretStr | None) -> web.Application:
    app = web.Application(middlewares=[security_headers, console_gate(token)])
    app[STORE] = store

    app.add_routes(
        [
            web.get("/", lambda _: _redirect("/requests")),
            web.get("/requests", _html(lambda s, _, q, f: pages_requests.log_page(s, q, f))),
            web.get(
                "/requests/{request_id}",
                _html(lambda s, p, _, f: pages_requests.request_page(s, p["request_id"], f)),
            ),
            web.get(
                "/providers", _html(lambda s, _, q, f: pages_providers.providers_page(s, q, f))
            ),
            web.get("/policies", _html(lambda s, _, __, f: pages_providers.policies_page(s, f))),
            web.get("/admin/trace/{request_id}", trace_view),
            web.static("/static", STATIC, append_version=False),
            *login_handlers(token),
        ]
    )
    return app


async def _redirect(location: str) -> web.StreamResponse:
    raise web.HTTPFound(location)


class RunningConsole:
    """A started console: its HTTP server and, unless read-only, its sink."""

    def __init__(self, runner: web.AppRunner, store: Store, url: str) -> None:
        self.runner = runner
        self.store = store
        self.url = url
        self.sink_task: asyncio.Task[Any] | None = None
        self._stop = asyncio.Event()

    async def stop(self) -> None:
        self._stop.set()
        if self.sink_task is not None:
            with contextlib.suppress(Exception):
                await self.sink_task
        await self.runner.cleanup()
        self.store.close()


async def start_console(
    settings: Settings,
    *,
    store: Store | None = None,
    sink: bool = True,
    host: str | None = None,
    port: int | None = None,
) -> RunningConsole:
    """Open the store (``settings.analytics_db``), start the sink and serve the pages."""
    if store is None:
        store = Store(settings.analytics_db, read_only=not sink)
    runner = web.AppRunner(build_app(store, admin_token(settings)), access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner,
        host or settings.console_host,
        settings.console_port if port is None else port,
    )
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    running = RunningConsole(runner, store, f"http://{bound_host}:{bound_port}/")
    if sink:
        running.sink_task = asyncio.create_task(Sink(store, settings).run(running._stop))
    return running
