"""Data rules, price caps and request controls in the fold: regions, zero data
retention, no training on the data, certifications, ``max_price``, ``sort``,
``allow_fallbacks``; every path (pins, local-first, auto, dynamic routes and their
fallbacks, retries) goes through the same filter, and unknown controls are refused."""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, fold
from log_harness import Log, always
from pydantic import ValidationError

from app.config.schema import parse_config
from app.contract import ChatRequest, LogPosition, RequestAccepted, StatusClass
from app.contract.request import ProviderPreferences
from app.ingest import accept
from app.routing.answers import at
from app.routing.params import RoutingParams
from app.routing.policy import Policy

CONFIG: dict[str, Any] = {
    "providers": [
        {
            "id": "us-cheap",
            "base_url": "https://a.test/v1",
            "models": [{"name": "m"}],
            "region": "us",
            "data_retention": 30,
            "trains_on_data": True,
            "cost_per_mtok_input": 0.1,
            "cost_per_mtok_output": 0.4,
        },
        {
            "id": "eu-zdr",
            "base_url": "https://b.test/v1",
            "models": [{"name": "m"}],
            "region": "eu",
            "data_retention": "none",
            "trains_on_data": False,
            "certifications": ["soc2"],
            "cost_per_mtok_input": 3.0,
            "cost_per_mtok_output": 15.0,
        },
        {
            "id": "eu-keeps",
            "base_url": "https://c.test/v1",
            "models": [{"name": "m"}],
            "region": "eu",
            "data_retention": 7,
            "trains_on_data": False,
            "cost_per_mtok_input": 1.0,
            "cost_per_mtok_output": 2.0,
        },
    ],
    "routes": {
        "chat": {"providers": ["us-cheap", "eu-zdr", "eu-keeps"]},
        "eu": {"providers": ["us-cheap", "eu-zdr", "eu-keeps"], "regions": ["eu"]},
    },
    "tenants": {"bank": {"zdr": True}, "gdpr": {"regions": ["eu"], "data_collection": "deny"}},
    "dynamic_routes": {
        "g": {
            "bind": [{"tenant": "dyn"}],
            "start": "m",
            "nodes": {
                "m": {
                    "kind": "model",
                    "target": "us-cheap:m",
                    "fallback_models": ["eu-keeps:m", "eu-zdr:m"],
                }
            },
        }
    },
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams(CB_FAILURE_THRESHOLD=10_000))


def request(request_id: str, **fields: Any) -> RequestAccepted:
    body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}], **fields}
    raw = ChatRequest.model_validate(body).model_dump_json(exclude_none=True).encode()
    where = LogPosition(topic="llm.requests", partition=0, offset=0)
    event = accept(
        raw, where, at(T0), POLICY.config, max_request_bytes=10**6, deadletter_max_bytes=64
    )
    assert isinstance(event, RequestAccepted), event
    return event


def deployments_of(event: RequestAccepted) -> set[str]:
    """Every deployment the request reaches while each attempt fails (retries, fallback
    models and forwards included), through the one driver."""
    log = Log(POLICY, status=always(StatusClass.SERVER_ERROR))
    log.run([event])
    assert log.responses, "the request was answered"
    return {d.deployment for d in log.decisions}


@pytest.mark.parametrize(
    ("fields", "allowed"),
    [
        ({"tenant": "bank"}, {"eu-zdr:m"}),
        ({"tenant": "gdpr"}, {"eu-zdr:m", "eu-keeps:m"}),
        ({"provider": {"zdr": True}}, {"eu-zdr:m"}),
        ({"provider": {"regions": ["eu"]}}, {"eu-zdr:m", "eu-keeps:m"}),
        ({"provider": {"data_collection": "deny"}}, {"eu-zdr:m", "eu-keeps:m"}),
        ({"provider": {"max_price": {"completion": 5.0}}}, {"us-cheap:m", "eu-keeps:m"}),
        ({"model": "eu"}, {"eu-zdr:m", "eu-keeps:m"}),
    ],
)
def test_a_request_reaches_only_what_its_rules_allow_even_under_failover(
    fields: dict[str, Any], allowed: set[str]
) -> None:
    reached = deployments_of(request("d1", **fields))
    assert reached and reached <= allowed


@pytest.mark.parametrize(
    "fields",
    [
        {"tenant": "bank", "model": "us-cheap:m"},  # a pin
        {"provider": {"zdr": True}, "model": "eu-keeps:m"},
    ],
)
def test_a_pin_the_rules_forbid_is_refused_with_the_rule(fields: dict[str, Any]) -> None:
    run = fold([request("p1", **fields)], POLICY)
    error = run.refusal()
    assert (error.code, error.http_status) == ("no_deployment_allowed", 403)
    assert "retains_data" in error.message


def test_a_zdr_request_never_reaches_a_retaining_deployment_through_a_dynamic_route() -> None:
    """The graph targets a retaining deployment and lists another as fallback: only the
    zero-retention one is ever called."""
    reached = deployments_of(request("z1", tenant="dyn", provider={"zdr": True}))
    assert reached == {"eu-zdr:m"}


def test_sort_price_tries_the_cheapest_first() -> None:
    run = fold([request("s1", provider={"sort": "price"})], POLICY)
    (decision,) = run.decisions
    assert (decision.deployment, decision.selection_rule) == ("us-cheap:m", "sort_price")


def test_allow_fallbacks_false_makes_one_attempt() -> None:
    event = request("f1", provider={"allow_fallbacks": False})
    run = fold([event], POLICY)
    (dispatch,) = run.dispatches
    assert dispatch.max_attempts == 1
    alone = request("f2", tenant="dyn", provider={"allow_fallbacks": False})
    assert deployments_of(alone) == {"us-cheap:m"}


def test_an_unknown_routing_control_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="sorting"):
        ProviderPreferences.model_validate({"sorting": "price"})
    with pytest.raises(ValidationError, match="modee"):
        ChatRequest.model_validate(
            {
                "request_id": "u",
                "messages": [{"role": "user", "content": "x"}],
                "routing": {"modee": "x"},
            }
        )
