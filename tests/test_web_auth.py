"""Who may read the worker's views (app/web_auth.py), without a worker."""

from __future__ import annotations

from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from app.config.schema import ConfigError
from app.settings import Settings
from app.web_auth import admin_gate, bearer_matches, faust_web_options, is_loopback

TOKEN = SecretStr("s3cret-token-for-tests")


async def ok(_: web.Request) -> web.StreamResponse:
    return web.json_response({"served": True})


def request(path: str, remote: str = "127.0.0.1", authorization: str | None = None) -> web.Request:
    headers = {} if authorization is None else {"Authorization": authorization}
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (remote, 40000) if name == "peername" else default
    )
    return make_mocked_request("GET", path, headers=headers, transport=transport)


async def status(
    token: SecretStr | None, path: str, remote: str = "127.0.0.1", authorization: str | None = None
) -> int:
    reply = await admin_gate(token)(request(path, remote, authorization), ok)
    return reply.status


async def test_with_a_token_every_view_but_metrics_and_index_needs_it() -> None:
    for path in ("/admin/bandit/stats", "/admin/trace/r-1", "/table/route-state/", "/router/"):
        assert await status(TOKEN, path) == 401
        assert await status(TOKEN, path, authorization="Bearer wrong") == 401
        assert await status(TOKEN, path, authorization=f"Basic {TOKEN.get_secret_value()}") == 401
        assert await status(TOKEN, path, authorization=f"Bearer {TOKEN.get_secret_value()}") == 200
    for path in ("/metrics", "/"):
        assert await status(TOKEN, path, remote="10.0.0.7") == 200


async def test_the_refusal_names_the_setting_not_the_token() -> None:
    reply = await admin_gate(TOKEN)(
        request("/admin/routes", authorization="Bearer guess"),
        ok,
    )
    assert isinstance(reply, web.Response) and reply.text is not None
    assert "SWITCHYARD_ADMIN_TOKEN" in reply.text and TOKEN.get_secret_value() not in reply.text
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")


async def test_without_a_token_admin_views_answer_loopback_only() -> None:
    for token in (None, SecretStr("")):  # an empty token is no token
        assert await status(token, "/admin/bandit/stats") == 200
        assert await status(token, "/admin/bandit/stats", remote="::1") == 200
        assert await status(token, "/admin/bandit/stats", remote="10.0.0.7") == 403
        assert await status(token, "/admin/bandit/stats", authorization="Bearer ") == 200
        assert await status(token, "/admin/bandit/stats", remote="10.0.0.7",
                            authorization="Bearer ") == 403  # fmt: skip
        assert await status(token, "/metrics", remote="10.0.0.7") == 200


def test_loopback_and_bearer_parsing() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("::ffff:127.0.0.1")
    assert not any(is_loopback(r) for r in ("10.0.0.1", "::ffff:10.0.0.1", "", None, "host"))
    secret = TOKEN.get_secret_value()
    assert bearer_matches(f"Bearer {secret}", TOKEN) and bearer_matches(f"bearer {secret}", TOKEN)
    assert not bearer_matches(None, TOKEN) and not bearer_matches(secret, TOKEN)
    assert not bearer_matches(f"Bearer {secret}x", TOKEN)


def test_faust_builtin_views_are_off_unless_enabled_and_then_need_a_token() -> None:
    off = faust_web_options(Settings())
    assert not any(off.values())
    on = faust_web_options(Settings(web_builtin_views=True, admin_token=TOKEN))
    assert on["web_tables_enabled"] and on["web_router_enabled"]
    assert not (on["web_stats_enabled"] or on["web_graph_enabled"] or on["web_metrics_enabled"])
    with pytest.raises(ConfigError, match="SWITCHYARD_ADMIN_TOKEN"):
        faust_web_options(Settings(web_builtin_views=True))
    with pytest.raises(ConfigError):
        faust_web_options(Settings(web_builtin_views=True, admin_token=SecretStr("")))


def test_the_token_does_not_show_in_the_settings() -> None:
    settings = Settings(admin_token=TOKEN)
    assert TOKEN.get_secret_value() not in repr(settings)
    assert TOKEN.get_secret_value() not in str(settings.model_dump())


METRICS = SecretStr("metrics-token-for-tests")


async def metrics_status(
    token: SecretStr | None, metrics: SecretStr | None, authorization: str | None = None
) -> tuple[int, str]:
    reply = await admin_gate(token, metrics)(
        request("/metrics", remote="10.0.0.7", authorization=authorization), ok
    )
    assert isinstance(reply, web.Response)
    return reply.status, reply.text or ""


async def test_metrics_are_open_unless_a_metrics_token_is_set() -> None:
    assert (await metrics_status(TOKEN, None))[0] == 200
    assert (await metrics_status(None, SecretStr("")))[0] == 200  # empty: unset
    secret = METRICS.get_secret_value()
    refusals = [
        await metrics_status(TOKEN, METRICS, authorization)
        for authorization in (None, "Bearer wrong", f"Basic {secret}", f"Bearer {secret}x")
    ]
    # 401, and the same answer whatever was sent: nothing tells a guess from a missing header.
    assert {status for status, _ in refusals} == {401}
    assert len({text for _, text in refusals}) == 1
    assert "SWITCHYARD_METRICS_TOKEN" in refusals[0][1] and secret not in refusals[0][1]
    assert (await metrics_status(TOKEN, METRICS, f"Bearer {secret}"))[0] == 200
    admin = f"Bearer {TOKEN.get_secret_value()}"
    assert (await metrics_status(TOKEN, METRICS, admin))[0] == 200  # the admin token too
    assert (await metrics_status(None, METRICS, admin))[0] == 401
    # The metrics token opens /metrics only.
    reply = await admin_gate(TOKEN, METRICS)(
        request("/admin/bandit/stats", authorization=f"Bearer {secret}"), ok
    )
    assert reply.status == 401


async def test_the_probes_are_open_to_anyone() -> None:
    for path in ("/healthz", "/readyz", "/"):
        assert await status(TOKEN, path, remote="10.0.0.7") == 200
        reply = await admin_gate(None, METRICS)(request(path, remote="10.0.0.7"), ok)
        assert reply.status == 200


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every comparison goes through ``hmac.compare_digest``, even on a wrong scheme."""
    import hmac

    from app import web_auth

    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(web_auth.hmac, "compare_digest", spy)
    assert not bearer_matches("Basic abc", TOKEN)
    assert bearer_matches(f"Bearer {TOKEN.get_secret_value()}", TOKEN)
    assert len(calls) == 2
