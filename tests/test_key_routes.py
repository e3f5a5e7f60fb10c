"""A gateway key's route allowlist holds on every route a request is sent to: the gateway
carries it as ``routing.allowed_routes``, and the fold refuses a route outside it
(``route_not_allowed``, 403) whether the request named it, a dynamic route chose it or a
fallback model pointed to it; a fallback model on an allowed route still serves."""

from __future__ import annotations

from typing import Any

from factories import T0, accepted, params, provider
from log_harness import Log

from app.config.schema import RouteConfig, RoutingConfig
from app.contract import ReplyTo, RequestAccepted, RoutingOptions
from app.gateway.translate import request_event
from app.routing.policy import Policy

GRAPH: dict[str, Any] = {
    "bind": [{"api_key": "mobile"}],
    "start": "main",
    "nodes": {"main": {"kind": "model", "target": "premium", "fallback_models": ["cheap"]}},
}


def policy() -> Policy:
    config = RoutingConfig(
        providers=[provider("a"), provider("b"), provider("c")],
        routes={
            "chat": RouteConfig(providers=["a"]),
            "premium": RouteConfig(providers=["b"]),
            "cheap": RouteConfig(providers=["c"]),
        },
        dynamic_routes={"g": GRAPH},  # type: ignore[arg-type]
    )
    return Policy(config, params(cb_failure_threshold=10_000, max_attempts=2))


def request(n: int, allowed: list[str] | None, *, key: str | None = "mobile") -> RequestAccepted:
    event = accepted(f"r{n}", T0 + n, offset=n)
    options = RoutingOptions(allowed_routes=allowed)
    body = event.request.model_copy(update={"key_name": key, "routing": options})
    return event.model_copy(update={"request": body})


def test_a_dynamic_route_cannot_take_a_keys_request_off_its_routes() -> None:
    log = Log(policy())
    log.run([request(0, ["chat", "cheap"])])
    assert {d.route for d in log.decisions} == {"cheap"}  # premium refused, cheap served
    (answer,) = log.responses
    assert answer.status == "ok"


def test_nothing_allowed_is_a_403_naming_the_route() -> None:
    log = Log(policy())
    log.run([request(0, ["chat"])])
    assert log.decisions == []
    (answer,) = log.responses
    assert answer.error is not None and answer.error.code == "route_not_allowed"
    assert answer.error.http_status == 403


def test_without_a_list_the_dynamic_route_is_followed() -> None:
    log = Log(policy())
    log.run([request(0, None)])
    assert {d.route for d in log.decisions} == {"premium"}


def test_the_gateway_carries_the_keys_routes() -> None:
    reply = ReplyTo(topic="replies", partition=0)
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    event = request_event(body, "g1", None, reply, "mobile", key_routes=["chat", "cheap"])
    assert event["routing"] == {"allowed_routes": ["chat", "cheap"]}
    own = {**body, "routing": {"mode": "price", "allowed_routes": ["cheap", "premium"]}}
    narrowed = request_event(own, "g2", None, reply, "mobile", key_routes=["chat", "cheap"])
    assert narrowed["routing"] == {"mode": "price", "allowed_routes": ["cheap"]}
    assert "routing" not in request_event(body, "g3", None, reply, "mobile")
