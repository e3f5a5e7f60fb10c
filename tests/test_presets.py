"""Named presets: chosen per request, by a gateway key or for a tenant; their lists,
allowed models, mode and data rules narrow every routing path, their prompt and
parameter defaults are applied at ingest, and a preset the policy lacks is refused."""

from __future__ import annotations

from typing import Any

import pytest
from factories import fold

from app.config.schema import ConfigError, ProviderLists, parse_config
from app.contract import ChatRequest, DeadLetter, LogPosition, ReplyTo, RequestAccepted
from app.gateway.errors import GatewayError
from app.gateway.translate import request_event
from app.ingest import accept
from app.routing.fold import at
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.presets import narrow, with_defaults

CONFIG: dict[str, Any] = {
    "providers": [
        {"id": "a", "base_url": "https://a.test/v1", "models": [{"name": "big"}]},
        {"id": "b", "base_url": "https://b.test/v1", "models": [{"name": "small"}]},
        {"id": "c", "base_url": "https://c.test/v1", "models": [{"name": "small"}]},
    ],
    "routes": {"chat": {"providers": ["a", "b", "c"]}},
    "presets": {
        "smalls": {"models": ["small"], "mode": "price", "temperature": 0.2},
        "no-c": {"ignore": ["c"], "system_prompt": "Answer in French.", "max_tokens": 300},
    },
    "tenants": {"acme": {"preset": "no-c"}},
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams())


def request(request_id: str, **fields: Any) -> RequestAccepted | DeadLetter:
    body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}], **fields}
    raw = ChatRequest.model_validate(body).model_dump_json(exclude_none=True).encode()
    where = LogPosition(topic="llm.requests", partition=0, offset=0)
    return accept(
        raw, where, at(0.0), POLICY.config, max_request_bytes=10**6, deadletter_max_bytes=64
    )


def accepted(request_id: str, **fields: Any) -> RequestAccepted:
    found = request(request_id, **fields)
    assert isinstance(found, RequestAccepted), found
    return found


def deployments(event: RequestAccepted) -> set[str]:
    run = fold([event], POLICY)
    (decision,) = [d.decision for d in run.dispatches]
    return {c.deployment for c in decision.candidates}


def test_lists_narrow_and_never_widen() -> None:
    wide = ProviderLists(only=["a", "b"], ignore=["x"], models=["big", "small"])
    narrowed = narrow(wide, ProviderLists(only=["b", "c"], ignore=["y"], models=["small", "huge"]))
    assert narrowed.only == ["b"] and narrowed.ignore == ["x", "y"]
    assert narrowed.models == ["small"]
    assert narrow(wide, ProviderLists()) == wide


def test_a_chosen_preset_allows_its_models_only_with_its_mode() -> None:
    event = accepted("p1", preset="smalls")
    run = fold([event], POLICY)
    (dispatch,) = run.dispatches
    decision = dispatch.decision
    assert {c.deployment for c in decision.candidates} == {"b:small", "c:small"}
    assert ("a:big", "model_not_allowed") in {(e.deployment, e.reason) for e in decision.excluded}
    assert decision.mode == "price"


def test_a_tenants_preset_and_a_chosen_one_both_hold() -> None:
    assert deployments(accepted("t1", tenant="acme")) == {"a:big", "b:small"}
    assert deployments(accepted("t2", tenant="acme", preset="smalls")) == {"b:small"}


@pytest.mark.parametrize("model", ["a:big", "c:small"])
def test_a_pin_cannot_escape_a_preset(model: str) -> None:
    run = fold([accepted("x1", tenant="acme", preset="smalls", model=model)], POLICY)
    assert run.dispatches == []
    (response,) = run.responses
    assert response.error is not None and response.error.code == "deployment_not_allowed"
    assert response.error.http_status == 403


def test_the_defaults_are_applied_at_ingest_where_the_request_sets_none() -> None:
    event = accepted("d1", tenant="acme", preset="smalls", temperature=0.9)
    sent = event.request
    assert [m.role for m in sent.messages] == ["system", "user"]
    assert sent.messages[0].content == "Answer in French."
    assert (sent.temperature, sent.max_tokens) == (0.9, 300)  # the request's own kept
    assert accepted("d2", preset="smalls").request.temperature == 0.2
    plain = ChatRequest.model_validate(
        {"request_id": "d3", "messages": [{"role": "user", "content": "x"}]}
    )
    assert with_defaults(plain, []) is plain


def test_an_unknown_preset_is_refused_at_ingest_and_in_the_fold() -> None:
    letter = request("u1", preset="nope")
    assert isinstance(letter, DeadLetter) and letter.reason == "unknown_preset"
    # A policy that no longer has the preset the request was accepted under.
    event = accepted("u2", preset="smalls")
    without = {**CONFIG, "presets": {"no-c": CONFIG["presets"]["no-c"]}}
    run = fold([event], Policy(parse_config(without, env={}), RoutingParams()))
    (response,) = run.responses
    assert response.error is not None and response.error.code == "unknown_preset"


def test_the_config_refuses_a_tenant_or_key_bound_to_an_unknown_preset() -> None:
    with pytest.raises(ConfigError, match=r"tenants\.acme\.preset"):
        parse_config({**CONFIG, "tenants": {"acme": {"preset": "nope"}}}, env={})
    key = {"sha256": "0" * 64, "name": "k", "preset": "nope"}
    with pytest.raises(ConfigError, match="gateway_keys"):
        parse_config({**CONFIG, "gateway_keys": [key]}, env={})


def test_a_gateway_key_sets_its_preset_and_refuses_another() -> None:
    reply = ReplyTo(topic="replies", partition=0)
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    event = request_event(body, "g1", None, reply, "k", key_preset="smalls")
    assert event["preset"] == "smalls"
    same = request_event({**body, "preset": "smalls"}, "g2", None, reply, "k", "smalls")
    assert same["preset"] == "smalls"
    with pytest.raises(GatewayError) as refused:
        request_event({**body, "preset": "no-c"}, "g3", None, reply, "k", key_preset="smalls")
    assert (refused.value.status, refused.value.code) == (403, "preset_not_allowed")
    assert request_event({**body, "preset": "no-c"}, "g4", None, reply)["preset"] == "no-c"
