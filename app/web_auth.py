"""Who may read the worker's HTTP views (docs/design.md#robustness).

* ``/``, ``/healthz`` and ``/readyz`` are open: probes need no credentials, and they
  answer only ``{"status": ...}``.
* ``/metrics`` is open unless ``SWITCHYARD_METRICS_TOKEN`` is set; then it needs
  ``Authorization: Bearer <SWITCHYARD_METRICS_TOKEN>`` (or the admin token), 401 otherwise.
  It carries no request content (counters with provider, status and reason labels).
* Every other path (``/admin/*``, and Faust's ``/table/*`` and ``/router/*`` when
  ``SWITCHYARD_WEB_BUILTIN_VIEWS`` turns them on) needs ``Authorization: Bearer
  <SWITCHYARD_ADMIN_TOKEN>`` when a token is set (401 otherwise), and is served only
  to loopback clients when none is (403 to anyone else).

Tokens are compared in constant time and never echoed, logged or counted; a refusal is
the same for a missing, a malformed and a wrong token.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from pydantic import SecretStr

from app.config.schema import ConfigError
from app.settings import Settings

#: Paths served to anyone.
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz"})
#: Served to anyone unless ``SWITCHYARD_METRICS_TOKEN`` is set.
METRICS_PATH = "/metrics"


def faust_web_options(settings: Settings) -> dict[str, Any]:
    """``faust.App`` arguments for its built-in views: all off but ``/table`` and ``/router``
    with ``SWITCHYARD_WEB_BUILTIN_VIEWS``; the statistics, graph and ``/performance`` views
    always off (``/metrics`` serves what an operator needs).
    """
    if settings.web_builtin_views and admin_token(settings) is None:
        raise ConfigError("SWITCHYARD_WEB_BUILTIN_VIEWS needs SWITCHYARD_ADMIN_TOKEN set")
    return {
        "web_router_enabled": settings.web_builtin_views,
        "web_tables_enabled": settings.web_builtin_views,
        "web_stats_enabled": False,
        "web_graph_enabled": False,
        "web_metrics_enabled": False,
    }


def admin_token(settings: Settings) -> SecretStr | None:
    """The token in force: an empty ``SWITCHYARD_ADMIN_TOKEN`` counts as unset."""
    return _set(settings.admin_token)


def metrics_token(settings: Settings) -> SecretStr | None:
    """``/metrics``' token: an empty ``SWITCHYARD_METRICS_TOKEN`` counts as unset."""
    return _set(settings.metrics_token)


def _set(token: SecretStr | None) -> SecretStr | None:
    return token if token is not None and token.get_secret_value() else None


def is_loopback(remote: str | None) -> bool:
    """True for 127.0.0.0/8 and ::1 (an IPv4-mapped loopback included)."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def bearer_matches(header: str | None, token: SecretStr) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    scheme, _, given = (header or "").partition(" ")
    expected = token.get_secret_value().encode()
    # compare_digest runs even on a wrong scheme, so timing says nothing about which part failed.
    same = hmac.compare_digest(given.strip().encode(), expected)
    return scheme.lower() == "bearer" and same


def unauthorized(setting: str) -> web.Response:
    """401, naming the setting whose token to send: nothing about what was sent."""
    return web.json_response(
        {"error": f"unauthorized: send Authorization: Bearer <{setting}>"},
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="switchyard"'},
    )


def admin_gate(token: SecretStr | None, metrics: SecretStr | None = None) -> Middleware:
    """An aiohttp middleware enforcing the policy above (``metrics``: ``/metrics``' token)."""

    token, metrics = _set(token), _set(metrics)  # an empty token would match "Bearer " alone

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization")
        if request.path == METRICS_PATH:
            if metrics is None:
                return await handler(request)
            as_admin = token is not None and bearer_matches(header, token)
            if bearer_matches(header, metrics) or as_admin:
                return await handler(request)
            return unauthorized("SWITCHYARD_METRICS_TOKEN")
        if token is not None:
            if bearer_matches(header, token):
                return await handler(request)
            return unauthorized("SWITCHYARD_ADMIN_TOKEN")
        if is_loopback(request.remote):
            return await handler(request)
        return web.json_response(
            {"error": "forbidden: without SWITCHYARD_ADMIN_TOKEN, served to loopback only"},
            status=403,
        )

    return gate
