"""``model: "auto"``: workloads, caps, patterns, objective, trace,
fallbacks, learned quality — through the one driver, replayed exactly."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from auto_factories import PROVIDERS, CacheLog, auto_policy, config, replayed, request
from factories import T0, open_breaker
from log_harness import Log, always

from app.config.schema import ConfigError, parse_config
from app.contract import (
    DeadLetter,
    Decision,
    GradeApplied,
    LogPosition,
    RequestAccepted,
    StatusClass,
    derived_id,
)
from app.ingest import accept
from app.routing.answers import at
from app.routing.auto_classify import WORKLOADS, classify
from app.routing.policy import Policy

PRICES = {
    f"{p['id']}:{m['name']}": (p["in"], p["out"])
    for p in PROVIDERS
    for m in p["models"]
    if p["in"] is not None
}
PRIORS = {f"{p['id']}:{m['name']}": m["quality_prior"] for p in PROVIDERS for m in p["models"]}

CODE = (
    "```python\ndef add(a, b):\n    return a - b\n```\n"
    "Fix the bug in this Python function and write unit tests for it."
)
REASONING = (
    "Reason step by step: explain why the sum of two odd numbers is always even, "
    "then deduce what happens with three odd numbers. Think carefully."
)
TRANSLATION = "Traduis ce paragraphe en anglais : le chat dort sur le canapé depuis ce matin."
SUMMARY = "Résume ce compte rendu en trois points clés : la réunion a validé le budget."
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}

WORKLOAD_REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "code": (CODE, {}),
    "reasoning": (REASONING, {}),
    "tool_use": ("Where is my parcel?", {"tools": TOOLS}),
    "structured_output": ("List three colours.", {"response_format": SCHEMA}),
    "translation": (TRANSLATION, {}),
    "summary": (SUMMARY, {}),
    "general": ("hello", {}),
}


def decide(policy: Policy, *requests: RequestAccepted, log: Log | None = None) -> list[Decision]:
    log = log or Log(policy)
    driver = None
    for accepted in requests:
        driver = log.run([accepted], driver)
    return log.decisions


@pytest.mark.parametrize("workload", list(WORKLOAD_REQUESTS))
@pytest.mark.parametrize("profile", ["economy", "standard", "premium"])
def test_each_workload_class_picks_within_its_caps(workload: str, profile: str) -> None:
    policy = auto_policy({"spend_profile": profile})
    text, fields = WORKLOAD_REQUESTS[workload]
    (decision,) = decide(policy, request(policy, 1, text, **fields))
    trace = decision.auto
    assert trace is not None and trace.workload == workload
    assert abs(sum(trace.breakdown.values()) - 1.0) < 1e-3
    assert 0.0 <= trace.complexity <= 1.0 and 0.5 <= trace.confidence <= 1.0
    cap_in, cap_out = trace.max_input_usd_per_mtok, trace.max_output_usd_per_mtok
    assert cap_in is not None and cap_out is not None
    for deployment in [decision.deployment, *trace.fallbacks]:
        price_in, price_out = PRICES[deployment]
        assert 0 < price_in <= cap_in and price_out <= cap_out
    reasons = {e.deployment: e.reason for e in decision.excluded}
    assert reasons["unpriced:local"] == "price_unknown"
    over = [d for d, (i, o) in PRICES.items() if i > cap_in or o > cap_out]
    assert all(reasons[d].startswith("over_") for d in over)
    if not trace.floor_relaxed:
        assert PRIORS[decision.deployment] >= trace.capability_floor
    assert decision.selection_rule == "auto" and decision.propensity == 1.0
    assert decision.model == decision.deployment.partition(":")[2] == trace.model


def test_harder_workloads_need_more_capable_models() -> None:
    policy = auto_policy()
    general = decide(policy, request(policy, 1, "hello"))[0]
    code = decide(policy, request(policy, 1, CODE))[0]
    assert general.deployment == "cheap:small"  # the cheapest model clears a low floor
    assert code.auto is not None and general.auto is not None
    assert code.auto.complexity > general.auto.complexity
    assert code.auto.capability_floor > PRIORS["cheap:small"]
    assert code.deployment != "cheap:small"
    assert {"deployment": "cheap:small", "reason": "below_capability_floor"} in [
        e.model_dump() for e in code.excluded
    ]


@pytest.mark.parametrize(
    ("objective", "expected"),
    [("quality", "pro:pro-1"), ("price", "cheap:small"), ("balanced", "cheap:small")],
)
def test_the_route_objective_weighs_the_factors(objective: str, expected: str) -> None:
    policy = auto_policy({"objective": objective})
    (decision,) = decide(policy, request(policy, 1, "hello"))
    assert decision.deployment == expected
    assert decision.mode == objective and decision.mode_source == "route_default"


def test_the_request_cannot_change_objective_caps_or_patterns() -> None:
    policy = auto_policy({"deny": ["pro/*"]})
    plain = decide(policy, request(policy, 1, CODE))[0]
    widened = request(
        policy,
        1,
        CODE,
        routing={"mode": "quality"},
        auto={"objective": "quality", "spend_profile": "unrestricted", "allow": ["*"]},
        metadata={"spend_profile": "unrestricted"},
    )
    again = decide(policy, widened)[0]
    assert (again.deployment, again.auto, again.mode) == (plain.deployment, plain.auto, plain.mode)
    assert again.mode == "balanced"
    # Provider lists only narrow: asking for the big model alone leaves no candidate.
    log = Log(policy)
    only_big = request(policy, 2, CODE, provider={"only": ["big", "pro"]})
    assert decide(policy, only_big, log=log) == []
    (refused,) = log.responses
    assert refused.error is not None and refused.error.code == "no_candidate"
    assert "over_input_price_cap" in refused.error.message
    assert "denied_by_pattern" in refused.error.message


def test_allow_patterns_narrow_the_candidates() -> None:
    policy = auto_policy({"allow": ["pro:*", "medium"]})
    (decision,) = decide(policy, request(policy, 1, "hello"))
    assert decision.auto is not None
    assert {decision.deployment, *decision.auto.fallbacks} == {
        "mid:medium",
        "pro:pro-1",
        "pro:pro-mini",
    }
    reasons = {e.deployment: e.reason for e in decision.excluded}
    assert reasons["cheap:small"] == "not_in_allowed_patterns"


def test_a_fixed_model_bypasses_auto() -> None:
    policy = auto_policy()
    (decision,) = decide(policy, request(policy, 1, "hello", model="big:large"))
    assert (decision.deployment, decision.auto, decision.candidate_filter) == (
        "big:large",
        None,
        "pinned",
    )
    (routed,) = decide(policy, request(policy, 2, "hello", model="chat"))
    assert routed.auto is None and routed.selection_rule != "auto"


def test_the_trace_is_complete_and_content_free() -> None:
    policy = auto_policy()
    secret = "Résume le dossier confidentiel Zanzibar-4471 en trois points."
    (decision,) = decide(policy, request(policy, 1, secret))
    trace = decision.auto
    assert trace is not None
    assert trace.algorithm_version == "auto-router/1" and trace.classifier == "local"
    assert set(trace.breakdown) == set(WORKLOADS) and trace.workload == "summary"
    assert trace.objective == "balanced" and trace.spend_profile == "standard"
    assert trace.chosen == decision.deployment
    ranked = [c.deployment for c in decision.candidates]
    assert ranked[0] == decision.deployment and ranked[1:] == trace.fallbacks
    for candidate in decision.candidates:
        assert set(candidate.factors) == {"quality", "reliability", "latency", "price"}
        assert candidate.score == pytest.approx(sum(candidate.factors.values()), abs=1e-5)
        assert set(trace.inputs[candidate.deployment]) == {
            "capability",
            "reliability",
            "latency_s",
            "cost_usd",
            "free",
        }
    scores = [c.score or 0.0 for c in decision.candidates]
    assert scores == sorted(scores, reverse=True)
    excluded = {e.deployment: e.reason for e in decision.excluded}
    assert excluded == {"big:large": "over_input_price_cap", "unpriced:local": "price_unknown"}
    text = decision.model_dump_json()
    for word in ("Zanzibar", "confidentiel", "dossier", "support assistant"):
        assert word not in text


def test_a_retriable_failure_goes_down_the_ranking() -> None:
    def first_fails(decision: Decision) -> StatusClass:
        return StatusClass.SERVER_ERROR if decision.attempt == 1 else StatusClass.SUCCESS

    policy = auto_policy()
    log = Log(policy, status=first_fails)
    first, second = decide(policy, request(policy, 1, "hello"), log=log)
    assert first.auto is not None and second.auto is not None
    assert second.deployment == first.auto.fallbacks[0]
    assert log.responses[0].status == "ok"

    off = auto_policy({"fallbacks": False})
    log = Log(off, status=always(StatusClass.SERVER_ERROR))
    decisions = decide(off, request(off, 1, "hello"), log=log)
    # No other model tried: the one model's deployment again, after each 5xx.
    assert [(d.deployment, d.selection_rule) for d in decisions] == [
        ("cheap:small", "auto"),
        ("cheap:small", "retry_same_deployment"),
        ("cheap:small", "retry_same_deployment"),
    ]
    (answer,) = log.responses
    assert answer.status == "error" and answer.error is not None
    assert "server_error" in answer.error.message


def test_an_open_breaker_skips_the_first_choice() -> None:
    policy = auto_policy()
    log = Log(policy)
    driver = log.run([request(policy, 1, "hello")])
    state = driver.states["chat"]
    opened = replace(state.arm("cheap:small"), breaker=open_breaker(T0 + 1))
    driver.states["chat"] = replace(state, arms={**state.arms, "cheap:small": opened})
    log.run([request(policy, 2, "hello")], driver)
    first, second = log.decisions
    assert first.deployment == "cheap:small" and second.deployment != "cheap:small"
    assert ("cheap:small", "breaker_open") in [(e.deployment, e.reason) for e in second.excluded]
    assert second.auto is not None and "cheap:small" not in second.auto.fallbacks


def test_learned_quality_revises_the_prior() -> None:
    policy = auto_policy()
    log = Log(policy)
    driver = None
    for n in range(1, 31):
        driver = log.run([request(policy, n, "hello")], driver)
    assert {d.deployment for d in log.decisions} == {"cheap:small"}
    grades = [
        GradeApplied(
            id=derived_id("grade", d.request_id),
            occurred_at=at(T0 + 40),
            request_id=d.request_id,
            route="chat",
            deployment=d.deployment,
            context=d.context,
            source="judge",
            score=0.1,
            feedback_id=derived_id("feedback", d.request_id),
        )
        for d in log.decisions
    ]
    driver = log.run(list(grades), driver)
    log.run([request(policy, 50, "hello")], driver)
    last = log.decisions[-1]
    assert last.deployment != "cheap:small"
    assert last.auto is not None and "cheap:small" not in last.auto.inputs
    assert {"deployment": "cheap:small", "reason": "below_capability_floor"} in [
        e.model_dump() for e in last.excluded
    ]


def test_the_classifier_is_deterministic_and_bounded() -> None:
    policy = auto_policy()
    for text, fields in WORKLOAD_REQUESTS.values():
        accepted = request(policy, 1, text, **fields)
        first, second = classify(accepted), classify(accepted)
        assert first == second
        assert 0.0 <= first.complexity <= 1.0 and 0.5 <= first.confidence <= 1.0
    long = request(policy, 1, REASONING + " " + "détail " * 5000)
    assert classify(long).complexity > classify(request(policy, 1, REASONING)).complexity


def test_custom_caps_need_the_custom_profile() -> None:
    policy = auto_policy({"spend_profile": "custom", "max_input_usd_per_mtok": 1.0})
    (decision,) = decide(policy, request(policy, 1, CODE))
    assert decision.auto is not None and decision.auto.max_output_usd_per_mtok is None
    assert PRICES[decision.deployment][0] <= 1.0
    with pytest.raises(ConfigError):
        auto_policy({"max_input_usd_per_mtok": 1.0})
    with pytest.raises(ConfigError):
        auto_policy({"spend_profile": "custom"})


def test_model_auto_goes_to_the_route_with_auto() -> None:
    policy = auto_policy()
    assert request(policy, 1, "hello").route == "chat"


def test_a_log_with_auto_and_affinity_replays_exactly() -> None:
    def flaky(decision: Decision) -> StatusClass:
        failing = decision.attempt == 1 and decision.request_id.endswith("3")
        return StatusClass.SERVER_ERROR if failing else StatusClass.SUCCESS

    policy = auto_policy()
    log = CacheLog(policy, status=flaky, cached=lambda d: 1500 if d.request_id != "r0" else 0)
    texts = [text for text, _ in WORKLOAD_REQUESTS.values()]
    driver = None
    for n in range(60):
        text = texts[n % len(texts)]
        fields = WORKLOAD_REQUESTS[list(WORKLOAD_REQUESTS)[n % len(texts)]][1]
        model = "auto" if n % 4 else "chat"
        driver = log.run(
            [request(policy, n, text, t=T0 + 30 * n, session=f"s{n % 5}", model=model, **fields)],
            driver,
        )
    rules = {d.selection_rule for d in log.decisions}
    assert {"auto", "affinity"} <= rules
    report = replayed(log, policy)
    assert report.ok and report.mismatched == 0
    assert report.reproduced == len(log.decisions) >= 60


def test_a_dynamic_routes_fixed_model_replaces_auto_and_says_so() -> None:
    base = auto_policy()
    data = base.config.model_dump(mode="json", exclude={"gateway_keys"})
    data["providers"] = [{**p, "api_key": "k"} for p in data["providers"]]
    data["dynamic_routes"] = {
        "g": {
            "bind": [{"tenant": "acme"}],
            "start": "fixed",
            "nodes": {"fixed": {"kind": "model", "target": "mid:medium"}},
        }
    }
    policy = Policy(parse_config(data, {}), base.params)
    (decision,) = decide(policy, request(policy, 1, "hello", tenant="acme"))
    assert decision.deployment == "mid:medium" and decision.candidate_filter == "pinned"
    assert decision.auto is not None
    assert (decision.auto.substituted_by, decision.auto.chosen) == ("dynamic_route:g", "mid:medium")
    assert decision.auto.fallbacks == []


def test_model_auto_without_an_auto_route_is_dead_lettered() -> None:
    plain = Policy(config(None), auto_policy().params)
    raw = json.dumps({"request_id": "r", "messages": [{"role": "user", "content": "hi"}]})
    when = at(T0)
    source = LogPosition(topic="llm.requests", partition=0, offset=0)
    refused = accept(
        raw.replace('"r",', '"r", "model": "auto",').encode(),
        source,
        when,
        plain.config,
        max_request_bytes=10_000,
        deadletter_max_bytes=100,
    )
    assert isinstance(refused, DeadLetter) and refused.reason == "unknown_route"
