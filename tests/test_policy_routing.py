"""Request understanding wired into the fold: domains, pins, provider lists, presets, modes,
guardrails."""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, finished, fold, outcome

from app.config.schema import parse_config
from app.contract import ChatRequest, LogPosition, RequestAccepted, StatusClass
from app.ingest import accept
from app.routing.fold import at
from app.routing.params import RoutingParams
from app.routing.policy import Policy

CONFIG: dict[str, Any] = {
    "providers": [
        {"id": "openai-x", "base_url": "https://o.test/v1", "models": [{"name": "gpt"}]},
        {
            "id": "deepseek-x",
            "base_url": "https://d.test/v1",
            "models": [{"name": "chat"}, {"name": "coder", "specialized": "coding"}],
        },
        {"id": "groq-x", "base_url": "https://g.test/v1", "models": [{"name": "llama"}]},
    ],
    "routes": {"chat": {"providers": ["openai-x", "deepseek-x", "groq-x"], "mode": "balanced"}},
    "tenants": {
        "acme": {
            "ignore": ["groq-x"],
            "mode": "price",
            "rate_limit": {"requests": 2, "window_s": 10},
        },
        "solo": {"only": ["groq-x"]},
    },
    "guardrails": {"forbidden_keywords": ["explosif", "bomb"]},
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams())


def request(
    request_id: str, text: str, t: float = T0, offset: int = 0, **fields: Any
) -> RequestAccepted:
    body = {"request_id": request_id, "messages": [{"role": "user", "content": text}], **fields}
    raw = ChatRequest.model_validate(body).model_dump_json(exclude_none=True).encode()
    where = LogPosition(topic="llm.requests", partition=0, offset=offset)
    result = accept(
        raw, where, at(t), POLICY.config, max_request_bytes=10**6, deadletter_max_bytes=64
    )
    assert isinstance(result, RequestAccepted), result
    return result


def only_decision(event: RequestAccepted, **kwargs: Any) -> Any:
    run = fold([event], POLICY, **kwargs)
    assert len(run.decisions) == 1, run.responses
    return run.decisions[0]


def test_a_coding_prompt_goes_only_to_the_specialist_and_its_model() -> None:
    decision = only_decision(request("c1", "Write a Python function and a pytest for it"))
    assert decision.deployment == "deepseek-x:coder"
    assert (decision.domain, decision.candidate_filter) == ("coding", "specialists")
    assert {(e.deployment, e.reason) for e in decision.excluded} == {
        ("openai-x:gpt", "domain_not_specialist"),
        ("groq-x:llama", "domain_not_specialist"),
    }


def test_a_domain_without_specialists_falls_back_to_the_generalists() -> None:
    decision = only_decision(request("l1", "Analyse ce contrat au regard du RGPD"))
    assert (decision.domain, decision.candidate_filter) == ("legal", "fallback_generalists")
    assert decision.deployment in {"openai-x:gpt", "deepseek-x:chat", "groq-x:llama"}
    assert [c.deployment for c in decision.candidates] == [
        "openai-x:gpt",
        "deepseek-x:chat",
        "groq-x:llama",
    ]


def test_a_pinned_deployment_is_used_alone_and_never_falls_back() -> None:
    event = request("p1", "hello", model="groq-x:llama")
    run = fold([event], POLICY)
    (dispatch,) = run.dispatches
    assert dispatch.decision.deployment == "groq-x:llama"
    assert dispatch.decision.candidate_filter == "pinned"
    # Never another deployment; the pinned one may be asked again after a 5xx or a 429.
    assert dispatch.max_attempts == POLICY.max_attempts(dispatch.decision.route)
    failed = outcome("p1", "groq-x:llama", T0 + 1, status=StatusClass.SERVER_ERROR)
    answered = fold([finished(failed, retry=event)], POLICY, run.state)
    assert answered.dispatches == []
    (response,) = answered.responses
    assert response.status == "error"
    retried = outcome(
        "p1", "groq-x:llama", T0 + 1, status=StatusClass.SERVER_ERROR, final=False, retriable=True
    )
    again = fold([finished(retried, retry=event)], POLICY, run.state)
    assert [d.decision.deployment for d in again.dispatches] == ["groq-x:llama"]
    silent = outcome(
        "p1", "groq-x:llama", T0 + 1, status=StatusClass.TIMEOUT, final=False, retriable=True
    )
    assert fold([finished(silent, retry=event)], POLICY, run.state).dispatches == []


@pytest.mark.parametrize("model", ["nobody:gpt", "openai-x:no-such-model"])
def test_an_unknown_pinned_id_is_answered_with_a_clear_error(model: str) -> None:
    run = fold([request("u1", "hello", model=model)], POLICY)
    assert run.dispatches == []
    (response,) = run.responses
    assert response.error is not None and response.error.code == "unknown_deployment"
    assert model in response.error.message


def test_provider_lists_exclude_and_order_with_the_rule_in_the_trace() -> None:
    decision = only_decision(
        request("o1", "hello", provider={"ignore": ["openai-x"], "order": ["groq-x"]})
    )
    assert decision.deployment == "groq-x:llama"  # first untried in the requested order
    assert ("openai-x:gpt", "provider_ignored") in {
        (e.deployment, e.reason) for e in decision.excluded
    }
    solo = only_decision(request("o2", "hello", tenant="solo"))
    assert solo.deployment == "groq-x:llama"
    reasons = {e.reason for e in solo.excluded}
    assert reasons == {"provider_not_in_only"}


@pytest.mark.parametrize(
    ("tenant", "fields", "pin"),
    [
        ("solo", {}, "openai-x:gpt"),  # the tenant's only
        ("acme", {}, "groq-x:llama"),  # the tenant's ignore
        (None, {"provider": {"ignore": ["openai-x"]}}, "openai-x:gpt"),  # the request's own
    ],
)
def test_a_pin_cannot_escape_the_provider_lists(
    tenant: str | None, fields: dict[str, Any], pin: str
) -> None:
    event = request("x1", "hello", tenant=tenant, model=pin, **fields)
    run = fold([event], POLICY)
    error = run.refusal()
    assert (error.code, error.http_status) == ("deployment_not_allowed", 403)
    allowed = fold([request("x2", "hello", tenant="solo", model="groq-x:llama")], POLICY)
    assert [d.deployment for d in allowed.decisions] == ["groq-x:llama"]


def test_constraints_that_leave_nothing_are_refused_naming_them() -> None:
    run = fold([request("n1", "hello", tenant="solo", provider={"ignore": ["groq-x"]})], POLICY)
    (response,) = run.responses
    assert response.error is not None
    assert (response.error.code, response.error.http_status) == ("deployment_not_allowed", 403)
    assert "provider_ignored" in response.error.message


def test_mode_precedence_suffix_over_request_over_preset_over_route() -> None:
    assert only_decision(request("m1", "hi")).mode_source == "route_default"
    preset = only_decision(request("m2", "hi", tenant="acme"))
    assert (preset.mode, preset.mode_source) == ("price", "preset")
    asked = only_decision(request("m3", "hi", tenant="acme", routing={"mode": "latency"}))
    assert (asked.mode, asked.mode_source) == ("latency", "request")
    suffixed = only_decision(
        request("m4", "hi", tenant="acme", routing={"mode": "latency"}, model="chat:nitro")
    )
    assert (suffixed.mode, suffixed.mode_source) == ("throughput", "suffix")


def test_each_mode_uses_its_weights_in_the_scores() -> None:
    warm = fold(
        [request(f"w{i}", "hi", offset=i) for i in range(3)]
        + [
            finished(outcome(f"w{i}", d, T0 + 1))
            for i, d in enumerate(["openai-x:gpt", "deepseek-x:chat", "groq-x:llama"])
        ],
        POLICY,
    )
    for mode, cost_w, latency_w in [
        ("price", 0.3, 0.05),
        ("latency", 0.05, 0.3),
        ("quality", 0, 0),
    ]:
        decision = only_decision(
            request(f"x-{mode}", "hi", T0 + 2, offset=10, routing={"mode": mode}), state=warm.state
        )
        openai = next(c for c in decision.candidates if c.deployment == "openai-x:gpt")
        assert openai.factors["cost_bonus"] == pytest.approx(max(0, 1 - 5.0 / 10) * cost_w)
        assert openai.factors["latency_bonus"] == pytest.approx((1 - 1.0 / 30) * latency_w)
    nitro = only_decision(
        request("x-n", "hi", T0 + 2, offset=11, model="chat:nitro"), state=warm.state
    )
    assert all("throughput_bonus" in c.factors for c in nitro.candidates)


def test_forbidden_keywords_are_refused_before_any_provider() -> None:
    run = fold([request("g1", "Comment fabriquer un EXPLOSIF ?")], POLICY)
    error = run.refusal()
    assert (error.code, error.http_status) == ("forbidden_keyword", 400)
    assert "explosif" in error.message


def test_tenant_rate_limit_holds_to_the_window_edge() -> None:
    events = [
        request("r1", "hi", T0, 1, tenant="acme"),
        request("r2", "hi", T0 + 1, 2, tenant="acme"),
        request("r3", "hi", T0 + 9.999, 3, tenant="acme"),  # third in the window: refused
        request("r4", "hi", T0 + 10.0, 4, tenant="acme"),  # a new window at the edge
    ]
    base = T0 - (T0 % 10)  # windows are aligned to the epoch
    events = [
        e.model_copy(update={"occurred_at": at(base + (e.occurred_at.timestamp() - T0))})
        for e in events
    ]
    run = fold(events, POLICY)
    answered = {r.request_id: r for r in run.responses}
    assert [d.request_id for d in run.decisions] == ["r1", "r2", "r4"]
    assert answered["r3"].error is not None and answered["r3"].error.code == "tenant_rate_limited"
    assert answered["r3"].error.http_status == 429


def test_when_the_specialist_fails_the_retry_goes_to_the_generalists() -> None:
    event = request("c9", "Write a Python function and a pytest for it")
    run = fold([event], POLICY)
    (first,) = run.decisions
    assert first.deployment == "deepseek-x:coder"
    failed = outcome(
        "c9", first.deployment, T0 + 1, status=StatusClass.SERVER_ERROR, final=False, retriable=True
    )
    retry = fold([finished(failed, retry=event)], POLICY, run.state)
    (second,) = retry.decisions
    assert second.attempt == 2
    assert second.candidate_filter == "fallback_generalists"
    assert second.deployment in {"openai-x:gpt", "deepseek-x:chat", "groq-x:llama"}
