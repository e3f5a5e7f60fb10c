"""The console's HTTP side without a browser: who may read, the trace view, what pages hold."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from pydantic import SecretStr

from app.analytics.load import fold_log
from app.analytics.store import Store
from app.analytics.trace import store_trace
from app.console.auth import COOKIE, console_gate
from app.console.server import build_app
from app.settings import Topics
from bench.logs.sample import sample_log

TOKEN = SecretStr("console-test-token-0123")


@pytest.fixture(scope="module")
def store() -> Store:
    filled = Store()
    fold_log(filled, sample_log(300, policy_every=100), Topics())
    return filled


@pytest.fixture
async def client(store: Store) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with TestClient(TestServer(build_app(store, None))) as running:
        yield running


@pytest.fixture
async def guarded(store: Store) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with TestClient(TestServer(build_app(store, TOKEN))) as running:
        yield running


def a_fallback(store: Store) -> str:
    return str(store.query("SELECT request_id FROM decisions WHERE attempt = 2 LIMIT 1")[0][0])


async def test_the_trace_view_reads_the_store(client: TestClient, store: Store) -> None:  # type: ignore[type-arg]
    request_id = a_fallback(store)
    reply = await client.get(f"/admin/trace/{request_id}")
    assert reply.status == 200
    assert await reply.json() == store_trace(store, request_id)
    missing = await client.get("/admin/trace/nope")
    assert missing.status == 404 and "nope" in (await missing.json())["error"]


async def test_pages_hold_no_content_and_nothing_from_elsewhere(
    client: TestClient,  # type: ignore[type-arg]
    store: Store,
) -> None:
    request_id = a_fallback(store)
    for path in ("/requests", f"/requests/{request_id}", "/providers", "/policies",
                 "/requests?page=2&tenant=acme"):  # fmt: skip
        reply = await client.get(path)
        html = await reply.text()
        assert reply.status == 200, path
        assert "synthetic prompt" not in html and "synthetic answer" not in html
        assert not re.search(r"(src|href)=\"?(https?:)?//", html), path  # same origin only
        assert reply.headers["Content-Security-Policy"].startswith("default-src 'none'")
    css = await client.get("/static/console.css")
    assert css.status == 200 and css.content_type == "text/css"
    assert (await client.get("/static/../server.py")).status in (403, 404)
    assert (await client.get("/requests/no-such-request")).status == 404


async def test_with_a_token_pages_need_the_login_and_json_needs_the_bearer(
    guarded: TestClient,  # type: ignore[type-arg]
) -> None:
    page = await guarded.get("/requests?tenant=acme", allow_redirects=False)
    assert page.status == 303 and page.headers["Location"].startswith("/login?next=")
    trace = await guarded.get("/admin/trace/x")
    assert trace.status == 401 and TOKEN.get_secret_value() not in await trace.text()
    bearer = {"Authorization": f"Bearer {TOKEN.get_secret_value()}"}
    assert (await guarded.get("/admin/trace/x", headers=bearer)).status == 404
    assert (await guarded.get("/login")).status == 200  # open

    wrong = await guarded.post("/login", data={"token": "guess", "next": "/providers"})
    assert wrong.status == 401 and COOKIE not in guarded.session.cookie_jar.filter_cookies(
        guarded.make_url("/")
    )
    right = await guarded.post(
        "/login",
        data={"token": TOKEN.get_secret_value(), "next": "//elsewhere.example/x"},
        allow_redirects=False,
    )
    assert right.status == 303 and right.headers["Location"] == "/requests"  # no open redirect
    assert (
        "HttpOnly" in right.headers["Set-Cookie"]
        and "SameSite=Strict" in right.headers["Set-Cookie"]
    )
    assert (await guarded.get("/providers")).status == 200  # the cookie now


async def test_without_a_token_only_loopback_clients_are_served() -> None:
    async def ok(_: web.Request) -> web.StreamResponse:
        return web.Response(text="served")

    def request(remote: str) -> web.Request:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: (
            (remote, 40000) if name == "peername" else default
        )
        return make_mocked_request("GET", "/requests", transport=transport)

    gate = console_gate(None)
    assert (await gate(request("127.0.0.1"), ok)).status == 200
    assert (await gate(request("10.1.2.3"), ok)).status == 403


def test_a_decision_shows_its_dynamic_route_and_auto_router_traces() -> None:
    from app.console.pages_requests import _decision

    decision = {
        "deployment": "c:m1",
        "strategy": "ucb1",
        "algorithm_version": "seed000-ucb1/2",
        "config_hash": "h",
        "state_version": 7,
        "propensity": 1.0,
        "occurred_at": "2026-12-01T00:00:00Z",
        "candidates": [],
        "excluded": [],
        "context": {
            "policy_version": 3,
            "dynamic": {
                "graph": "rollout",
                "path": {"steps": [{"node": "split", "exit": "canary"}], "end": "canary"},
                "target": "cheap",
                "fallbacks": ["chat"],
                "attempt_base": 2,
                "forwarded_from": "chat",
            },
            "auto": {"workload": "code", "complexity": 0.7, "confidence": 0.9,
                     "objective": "quality", "spend_profile": "standard",
                     "max_input_usd_per_mtok": 3.0, "max_output_usd_per_mtok": 15.0,
                     "capability_floor": 0.8, "chosen": "c:m1", "fallbacks": ["a:m1"],
                     "classifier": "local", "algorithm_version": "auto-router/1"},
        },
    }  # fmt: skip
    page = _decision(decision)
    assert "split (canary) → canary" in page and "cheap" in page
    assert "fallbacks left" in page and "attempts before this model" in page
    assert "code (complexity 0.7000" in page and "quality" in page and "auto-router/1" in page
    assert "{" not in page  # no dict dumped as text
