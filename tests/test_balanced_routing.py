"""Routing fidelity: balanced mode's tail latency and token fit in the composite score,
declared-free versus unknown prices, and deployment status (demoted, preview)."""

from __future__ import annotations

from typing import Any

import pytest
from auto_factories import replayed, request
from factories import T0, dep, outcome, params, provider, route_state
from log_harness import Log

from app.audit.replay import replay
from app.config.schema import ConfigError, RoutingConfig, parse_config
from app.contract import Decision, StatusClass
from app.contract.mode import RoutingMode
from app.routing import tail
from app.routing.capabilities import Needs
from app.routing.feedback import apply_outcome
from app.routing.policy import Policy
from app.routing.rows import dumps, loads, to_row
from app.routing.state import ArmState
from app.routing.strategies import composite
from bench.logs.synthetic import Profile, synthetic_log

# --------------------------------------------------------------------------- helpers


def _config(models: dict[str, dict[str, Any]], **route: Any) -> RoutingConfig:
    """One provider per entry (``id: fields``), each with model ``m1`` unless given."""
    providers = []
    for pid, fields in models.items():
        fields = dict(fields)
        model = {"name": "m1", **fields.pop("model", {})}
        providers.append(
            {
                "id": pid,
                "base_url": f"https://{pid}.example.test/v1",
                "api_key": "k",
                "cost_per_mtok_input": 1.0,
                "cost_per_mtok_output": 2.0,
                **fields,
                "models": [model],
            }
        )
    chat = {"providers": list(models), **route}
    return parse_config({"providers": providers, "routes": {"chat": chat}}, {})


def _policy(models: dict[str, dict[str, Any]], strategy: str = "ucb1", **route: Any) -> Policy:
    return Policy(_config(models, **route), params(strategy=strategy, max_attempts=3))


def _decide(policy: Policy, *fields: dict[str, Any], log: Log | None = None) -> list[Decision]:
    log = log or Log(policy)
    driver = None
    for n, body in enumerate(fields, start=1):
        driver = log.run([request(policy, n, model="chat", **body)], driver)
    return log.decisions


def _reasons(decision: Decision) -> dict[str, str]:
    return {e.deployment: e.reason for e in decision.excluded}


# --------------------------------------------------------------------------- tail latency


def test_the_tail_tracker_follows_the_95th_percentile() -> None:
    # 100 ms answers with one in ten at 1,000 ms: p90 is 100 ms, p95 and above 1,000.
    samples = [1000.0 if i % 10 == 9 else 100.0 for i in range(2000)]
    p95 = 0.0
    for n, latency in enumerate(samples):
        p95 = tail.track_p95(p95, latency, n, 0.3)
    assert 400.0 < p95 < 1000.0  # well above the mean (190 ms), within the range
    steady = [tail.track_p95(200.0, 200.0, 5, 0.3)]
    assert steady == [200.0]  # a constant latency is its own tail
    assert tail.track_p95(0.0, 750.0, 0, 0.3) == 750.0  # the first sample as is
    assert tail.track_p95(0.0, 750.0, 40, 0.3) == 750.0  # a row saved without a tail


def test_the_fold_keeps_the_tail_and_the_row_round_trips_it() -> None:
    pol = _policy({"a": {}})
    arm = ArmState()
    for n, latency in enumerate([500.0, 500.0, 3000.0, 500.0]):
        arm = apply_outcome(arm, outcome(f"r{n}", dep("a"), latency_ms=latency), T0, pol)
    assert arm.ewma_p95_ms > arm.ewma_latency_ms > 500.0
    state = route_state({dep("a"): arm})
    assert loads(dumps(state)) == state
    assert to_row(loads(dumps(state))) == to_row(state)
    # A neutral result (a 429) teaches nothing, the tail included.
    limited = outcome("r9", dep("a"), status=StatusClass.RATE_LIMITED, latency_ms=9000.0)
    assert apply_outcome(arm, limited, T0, pol).ewma_p95_ms == arm.ewma_p95_ms


def test_balanced_composite_traces_tail_latency_and_token_fit() -> None:
    pol = _policy({"steady": {}, "spiky": {}}, strategy="composite")
    arms = pol.arms("chat")
    # Same mean latency, the spiky one's tail at three times its 1 s baseline.
    steady = ArmState(ewma_latency_ms=800.0, ewma_p95_ms=900.0, observations=30)
    spiky = ArmState(ewma_latency_ms=800.0, ewma_p95_ms=3000.0, observations=30)
    ranking = composite(list(zip(arms, [steady, spiky], strict=True)), mode=RoutingMode.BALANCED)
    by_name = {c.deployment: c for c in ranking.candidates}
    assert by_name[dep("steady")].factors["tail_latency_penalty"] == 1.0
    assert by_name[dep("spiky")].factors["tail_latency_penalty"] == pytest.approx(3.0)
    assert by_name[dep("spiky")].factors["token_fit_penalty"] == 1.0  # nothing declared
    assert arms[ranking.chosen].deployment == dep("steady")
    for candidate in ranking.candidates:
        product = 1.0
        for value in candidate.factors.values():
            product *= value
        assert candidate.score == pytest.approx(product)
    # Other modes keep the three-factor composite score alone.
    price = composite(list(zip(arms, [steady, spiky], strict=True)), mode=RoutingMode.PRICE)
    assert all("tail_latency_penalty" not in c.factors for c in price.candidates)
    assert price.candidates[0].score == price.candidates[1].score


def test_token_fit_prefers_the_roomier_window() -> None:
    pol = _policy(
        {
            "narrow": {"model": {"context_window": 8000, "max_output_tokens": 4000}},
            "wide": {"model": {"context_window": 128000, "max_output_tokens": 16000}},
        },
        strategy="composite",
    )
    arms = pol.arms("chat")
    same = ArmState(ewma_latency_ms=800.0, ewma_p95_ms=900.0, observations=30)
    eligible = list(zip(arms, [same, same], strict=True))
    big = Needs(frozenset(), 5000, 2000)  # 7,000 of narrow's 8,000 tokens
    ranking = composite(eligible, mode=RoutingMode.BALANCED, needs=big)
    fit = {c.deployment: c.factors["token_fit_penalty"] for c in ranking.candidates}
    assert fit[dep("narrow")] == pytest.approx(1.0 + 2.0 * (7000 / 8000 - 0.5))
    assert fit[dep("wide")] == 1.0
    assert arms[ranking.chosen].deployment == dep("wide")
    small = Needs(frozenset(), 100, 100)
    assert all(
        c.factors["token_fit_penalty"] == 1.0
        for c in composite(eligible, mode=RoutingMode.BALANCED, needs=small).candidates
    )


def test_a_decision_traces_the_request_size_fit() -> None:
    pol = _policy(
        {
            "narrow": {"model": {"context_window": 2000}},
            "wide": {"model": {"context_window": 128000}},
        },
        strategy="composite",
    )
    (decision,) = _decide(pol, {"max_tokens": 1500})
    fit = {c.deployment: c.factors["token_fit_penalty"] for c in decision.candidates}
    assert fit[dep("narrow")] > 1.0 and fit[dep("wide")] == 1.0
    assert decision.algorithm_version == "seed003-composite/3"


def test_composite_with_the_tail_replays_exactly() -> None:
    config = _config(
        {
            "cerebras-x": {"cost_per_mtok_input": 0.2, "cost_per_mtok_output": 0.6},
            "groq-x": {"cost_per_mtok_input": 0.3, "cost_per_mtok_output": 0.9},
            "openai-x": {"cost_per_mtok_input": 5.0, "cost_per_mtok_output": 15.0},
        }
    )
    pol = Policy(config, params(strategy="composite"))
    profiles = {
        dep("cerebras-x"): Profile(success=0.85, latency_ms=1500.0),
        dep("groq-x"): Profile(success=0.9, latency_ms=900.0, failure=StatusClass.TIMEOUT),
        dep("openai-x"): Profile(success=0.97, latency_ms=600.0),
    }
    log = synthetic_log(pol, profiles, 300, seed=11)
    report = replay(log, pol)
    assert report.ok and report.reproduced == report.recorded > 300
    assert report.mismatched == 0
    factors = [c.factors for e in log.decisions if e.event for c in e.event.candidates]
    assert any(f.get("tail_latency_penalty", 1.0) > 1.0 for f in factors)


# --------------------------------------------------------------------------- prices


def test_a_declared_zero_price_is_free_and_an_absent_one_unknown() -> None:
    config = _config(
        {
            "free": {"cost_per_mtok_input": 0, "cost_per_mtok_output": 0},
            "unknown": {"cost_per_mtok_input": None, "cost_per_mtok_output": None},
            "half": {"cost_per_mtok_output": None},
        }
    )
    free, unknown, half = config.providers
    assert (free.cost_per_mtok_input, free.cost_per_mtok_output) == (0.0, 0.0)
    assert free.price_known and free.free
    assert (unknown.cost_per_mtok_input, unknown.cost_per_mtok_output) == (None, None)
    assert not unknown.price_known and not unknown.free
    assert not half.price_known
    # Nothing to bill by when unknown.
    assert (unknown.input_price, unknown.output_price) == (0.0, 0.0)
    bare = provider("bare")
    assert bare.cost_per_mtok_input is None and bare.cost_per_mtok_output is None


def test_free_and_unknown_survive_the_policy_document() -> None:
    config = _config(
        {
            "free": {"cost_per_mtok_input": 0, "cost_per_mtok_output": 0},
            "unknown": {"cost_per_mtok_input": None, "cost_per_mtok_output": None},
            "old": {"model": {"status": "demoted"}},
        },
        preview=True,
    )
    again = parse_config(config.routing_view() | {"gateway_keys": []}, {})
    assert [(p.cost_per_mtok_input, p.cost_per_mtok_output) for p in again.providers] == [
        (0.0, 0.0),
        (None, None),
        (1.0, 2.0),
    ]
    assert again.providers[2].models[0].status == "demoted" and again.routes["chat"].preview
    assert again.config_hash == config.config_hash


def test_the_auto_router_ranks_a_free_model_and_leaves_an_unknown_price_out() -> None:
    pol = _policy(
        {
            "paid": {"model": {"quality_prior": 0.9}},
            "free": {
                "cost_per_mtok_input": 0.0,
                "cost_per_mtok_output": 0.0,
                "model": {"quality_prior": 0.9},
            },
            "unknown": {
                "cost_per_mtok_input": None,
                "cost_per_mtok_output": None,
                "model": {"quality_prior": 0.99},
            },
        },
        auto={"objective": "price"},
    )
    log = Log(pol)
    log.run([request(pol, 1)])
    (decision,) = log.decisions
    assert decision.deployment == dep("free")
    assert _reasons(decision)[dep("unknown")] == "price_unknown"
    assert decision.auto is not None
    assert decision.auto.inputs[dep("free")]["free"] == 1.0
    assert decision.auto.inputs[dep("free")]["cost_usd"] == 0.0
    assert decision.auto.inputs[dep("paid")]["free"] == 0.0
    scores = {c.deployment: c.factors["price"] for c in decision.candidates}
    assert scores[dep("free")] > scores[dep("paid")]
    assert replayed(log, pol).ok


# --------------------------------------------------------------------------- status


def test_status_is_validated() -> None:
    assert _config({"a": {"model": {"status": "preview"}}}).providers[0].models[0].status == (
        "preview"
    )
    with pytest.raises(ConfigError):
        _config({"a": {"model": {"status": "retired"}}})
    with pytest.raises(ConfigError):
        _config({"a": {}}, preview="sometimes")


def test_a_preview_deployment_needs_an_opt_in() -> None:
    models = {"stable": {}, "beta": {"model": {"status": "preview"}}}
    pol = _policy(models)
    decisions = _decide(pol, {}, {}, {})
    assert {d.deployment for d in decisions} == {dep("stable")}
    assert all(_reasons(d)[dep("beta")] == "preview_not_opted_in" for d in decisions)
    # The request opts in: the preview deployment is a candidate (untried: tried first).
    opted = _decide(pol, {"routing": {"preview": True}})
    assert dep("beta") not in _reasons(opted[0])
    assert {c.deployment for c in opted[0].candidates} == {dep("stable"), dep("beta")}
    # So does the route.
    route_opted = _decide(_policy(models, preview=True), {})
    assert dep("beta") not in _reasons(route_opted[0])


def test_a_route_of_preview_deployments_only_refuses_without_opt_in() -> None:
    pol = _policy({"beta": {"model": {"status": "preview"}}})
    log = Log(pol)
    log.run([request(pol, 1, model="chat")])
    assert log.decisions == []
    (response,) = log.responses
    assert response.error is not None and response.error.code == "no_candidate"
    assert "routing.preview" in response.error.message


def test_an_unknown_routing_control_is_refused() -> None:
    pol = _policy({"a": {}})
    with pytest.raises(AssertionError):
        request(pol, 1, model="chat", routing={"preview": "sometimes"})


def test_a_demoted_deployment_serves_only_when_no_active_one_can() -> None:
    pol = _policy({"old": {"model": {"status": "demoted"}}, "new": {}})
    decisions = _decide(pol, {}, {})
    assert {d.deployment for d in decisions} == {dep("new")}
    assert all(_reasons(d)[dep("old")] == "demoted" for d in decisions)
    # The active deployment failed (a 5xx): the retry cannot use it again, and the
    # demoted one serves, the decision saying why the active one could not.
    failing = Log(
        pol, status=lambda d: StatusClass.SERVER_ERROR if d.attempt == 1 else StatusClass.SUCCESS
    )
    first, retry = _decide(pol, {}, log=failing)
    assert first.deployment == dep("new") and _reasons(first)[dep("old")] == "demoted"
    assert retry.deployment == dep("old") and retry.attempt == 2
    assert _reasons(retry)[dep("new")] == "already_tried"


def test_status_replays_exactly() -> None:
    pol = _policy(
        {
            "old": {"model": {"status": "demoted"}},
            "new": {},
            "beta": {"model": {"status": "preview"}},
        }
    )
    log = Log(
        pol, status=lambda d: StatusClass.SERVER_ERROR if d.attempt == 1 else StatusClass.SUCCESS
    )
    driver = None
    for n in range(1, 8):
        body = {"routing": {"preview": True}} if n % 2 else {}
        driver = log.run([request(pol, n, model="chat", **body)], driver)
    assert any(d.deployment == dep("old") for d in log.decisions)  # after the others failed
    report = replayed(log, pol)
    assert report.ok and report.mismatched == 0
