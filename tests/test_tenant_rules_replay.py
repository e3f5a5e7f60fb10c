"""A log that uses every tenant and data rule replays exactly: presets (bound to a
tenant and chosen per request, with their models and defaults), provider lists, data
rules, input rules, pins the rules forbid, a dynamic route bound to a gateway key with
fallback models, a key's route allowlist, and limits in requests and tokens per minute
of a tenant, a key and the requests without a tenant, with attempts failing and
retried."""

from __future__ import annotations

import json
from typing import Any

from log_harness import Log, replayed

from app.config.schema import parse_config
from app.contract import Decision, LogPosition, RequestAccepted, StatusClass
from app.ingest import accept
from app.routing.fold import at
from app.routing.params import RoutingParams
from app.routing.policy import Policy

T0 = 1_700_000_000.0


def provider(pid: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"id": pid, "base_url": f"https://{pid}.test/v1", "models": [{"name": model}], **extra}


CONFIG: dict[str, Any] = {
    "providers": [
        provider("eu-big", "big", region="eu", data_retention="none"),
        provider("eu-small", "small", region="eu", data_retention=30),
        provider("us-big", "big-us", region="us", data_retention="none"),
        provider("us-small", "small-us", region="us"),
    ],
    "routes": {
        "chat": {"providers": ["eu-big", "eu-small", "us-big", "us-small"]},
        "eu": {"providers": ["eu-big", "eu-small"], "regions": ["eu"]},
        "us": {"providers": ["us-big", "us-small"]},
    },
    "presets": {
        "smalls": {"models": ["small", "small-us"], "mode": "price", "temperature": 0.1},
        "careful": {"zdr": True, "system_prompt": "Be careful."},
    },
    "tenants": {
        "acme": {"ignore": ["us-small"], "preset": "careful"},
        "eu-only": {"regions": ["eu"]},
    },
    # Limits: requests of a tenant and of a key per minute, tokens of the requests that
    # name no tenant per minute (the log spans a minute's end).
    "budgets": [
        {"scope": "tenant", "name": "acme", "requests_per_minute": 3},
        {"scope": "key", "name": "mobile", "requests_per_minute": 2},
        {"scope": "tenant", "name": "*", "tokens_per_minute": 20_000},
    ],
    "guardrails": {"input": [{"name": "topic", "action": "block", "keywords": ["forbidden"]}]},
    "dynamic_routes": {
        "mobile": {
            "bind": [{"api_key": "mobile"}],
            "start": "main",
            "nodes": {"main": {"kind": "model", "target": "us", "fallback_models": ["eu"]}},
        }
    },
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams())


def accepted(n: int, **fields: Any) -> RequestAccepted:
    text = fields.pop("text", f"question {n}")
    body = {"request_id": f"r{n}", "messages": [{"role": "user", "content": text}], **fields}
    where = LogPosition(topic="llm.requests", partition=n % 4, offset=n)
    found = accept(
        json.dumps(body).encode(), where, at(T0 + n), POLICY.config,
        max_request_bytes=10**6, deadletter_max_bytes=64,
    )  # fmt: skip
    assert isinstance(found, RequestAccepted), found
    return found


REQUESTS: list[dict[str, Any]] = [
    {},
    {"tenant": "acme"},
    {"tenant": "acme", "preset": "smalls"},  # zdr and smalls together leave nothing
    {"preset": "smalls"},
    {"tenant": "eu-only"},
    {"tenant": "eu-only", "model": "us-big:big-us"},  # a pin the regions forbid
    {"preset": "smalls", "model": "eu-big:big"},  # a pin the preset's models forbid
    {"text": "a forbidden question"},  # an input rule blocks it
    {"key_name": "mobile"},  # the dynamic route: us, then eu
    {"key_name": "mobile", "routing": {"allowed_routes": ["eu"]}},  # us refused, eu serves
    {"key_name": "mobile", "routing": {"allowed_routes": ["chat"]}},  # neither: refused
    {"model": "eu", "provider": {"only": ["eu-small"]}},
]


def test_a_log_using_every_rule_replays_exactly() -> None:
    def flaky(decision: Decision) -> StatusClass:
        return StatusClass.SERVER_ERROR if decision.attempt == 1 else StatusClass.SUCCESS

    log = Log(POLICY, status=flaky, tokens=3000)
    driver = None
    for n in range(48):
        driver = log.run([accepted(n, **REQUESTS[n % len(REQUESTS)])], driver)
    codes = {r.error.code for r in log.responses if r.error is not None}
    assert {
        "deployment_not_allowed",
        "input_blocked",
        "route_not_allowed",
        "budget_exceeded",
    } <= codes
    reasons = {e.reason for d in log.decisions for e in d.excluded}
    assert {"model_not_allowed", "provider_ignored", "region_not_allowed"} <= reasons
    assert {d.route for d in log.decisions} >= {"chat", "eu", "us"}
    report = replayed(log, POLICY)
    assert report.ok and report.mismatched == 0
    assert report.reproduced == len(log.decisions) > 20
    assert report.responses_reproduced == len(log.responses) == 48
