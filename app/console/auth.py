"""Who may open the console: the worker's admin policy (app/web_auth.py), for a browser.

With ``SWITCHYARD_ADMIN_TOKEN`` set, a request needs ``Authorization: Bearer <token>``
(scripts, ``/admin/trace``) or the console's cookie, which ``/login`` sets once the
token is typed in (HttpOnly, SameSite=Strict); pages without it are sent to
``/login``, JSON views get 401. Without a token the console answers loopback
clients only (403 otherwise), as the worker does. Both checks are web_auth's:
:func:`app.web_auth.bearer_matches` (constant time) and :func:`app.web_auth.is_loopback`.
The token is never echoed or logged.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from pydantic import SecretStr

from app.console.html import esc, page
from app.web_auth import bearer_matches, is_loopback

COOKIE = "switchyard_console"
#: Served to anyone: the login form and the package's static assets (no data in them).
OPEN_PREFIXES = ("/login", "/static/")


def _allowed(request: web.Request, token: SecretStr) -> bool:
    if bearer_matches(request.headers.get("Authorization"), token):
        return True
    cookie = request.cookies.get(COOKIE)
    return cookie is not None and bearer_matches(f"Bearer {cookie}", token)


def console_gate(token: SecretStr | None) -> Middleware:
    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(OPEN_PREFIXES):
            return await handler(request)
        if token is None:
            if is_loopback(request.remote):
                return await handler(request)
            return web.json_response(
                {"error": "forbidden: without SWITCHYARD_ADMIN_TOKEN, served to loopback only"},
                status=403,
            )
        if _allowed(request, token):
            return await handler(request)
        if request.path.startswith("/admin/"):
            return web.json_response(
                {"error": "unauthorized: send Authorization: Bearer <SWITCHYARD_ADMIN_TOKEN>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="switchyard"'},
            )
        raise web.HTTPSeeOther("/login?next=" + quote(request.path_qs, safe=""))

    return gate


def _form(next_path: str, failed: bool) -> str:
    warning = "<p class=error>That is not the token.</p>" if failed else ""
    return page(
        "Sign in",
        warning + '<form method=post action="/login" class=login>'
        f'<input type=hidden name=next value="{esc(next_path)}">'
        "<label>SWITCHYARD_ADMIN_TOKEN <input type=password name=token id=token "
        "autocomplete=current-password required></label> <button type=submit>Sign in</button>"
        "</form>",
    )


def _local(path: str) -> str:
    """Only a path on this server (no ``//host`` or scheme): no open redirect."""
    return path if path.startswith("/") and not path.startswith("//") else "/requests"


def login_handlers(token: SecretStr | None) -> list[web.RouteDef]:
    async def show(request: web.Request) -> web.Response:
        return web.Response(
            text=_form(_local(request.query.get("next", "")), False), content_type="text/html"
        )

    async def submit(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        next_path = _local(str(form.get("next", "")))
        given = str(form.get("token", ""))
        if token is None or not bearer_matches(f"Bearer {given}", token):
            return web.Response(text=_form(next_path, True), status=401, content_type="text/html")
        reply = web.HTTPSeeOther(next_path)
        reply.set_cookie(COOKIE, given, httponly=True, samesite="Strict", path="/")
        raise reply

    return [web.get("/login", show), web.post("/login", submit)]
