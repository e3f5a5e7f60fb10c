"""Learning from grades: context buckets, grades, real cost, pacer, strategies with grades."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from factories import T0, accepted, dep, finish, params, policy, provider

from app.config.schema import RouteConfig, RoutingConfig, TenantPolicy
from app.contract import GradeApplied, derived_id
from app.routing import context, estimates, evidence, pacer
from app.routing.fold import at, handle
from app.routing.grading import apply_grade
from app.routing.learning import Learning
from app.routing.params import Strategy
from app.routing.policy import Policy
from app.routing.state import ArmState, Evidence, Pacer, RouteState
from app.routing.strategies import algorithm_version, rank
from app.understanding.features import extract_features

A, B = dep("a-x"), dep("b-x")


def _policy(**overrides: Any) -> Policy:
    return policy(provider("a-x"), provider("b-x"), **overrides)


def grade(
    score: float,
    deployment: str = A,
    *,
    key: str | None = "-|math|short|0",
    replaces: float | None = None,
    request: str = "r1",
) -> GradeApplied:
    return GradeApplied(
        id=derived_id("grade", request, score, replaces),
        occurred_at=at(T0),
        request_id=request,
        route="chat",
        deployment=deployment,
        context=key,
        source="judge",
        score=score,
        feedback_id=derived_id("feedback", request, score),
        replaces_score=replaces,
        replaces_weight=None if replaces is None else 1.0,
    )


# --------------------------------------------------------------------------- context


def test_context_key_and_levels_from_ingest_features() -> None:
    event = accepted("r1", content="Solve the equation 2x + 3 = 7 and give x.")
    event = event.model_copy(update={"features": extract_features(event.request)})
    key = context.context_key(event)
    assert key is not None and key.startswith("-|") and key.endswith("|short|0")
    domain = key.split("|")[1]
    assert context.levels(key) == (f"*|{domain}|short|0", f"*|{domain}|*|*", "*")
    assert context.levels("acme|math|short|1") == (
        "acme|math|short|1",
        "*|math|short|1",
        "*|math|*|*",
        "*",
    )
    assert context.levels(None) == ("*",)
    assert context.tenant_of("acme|math|short|1") == "acme"
    assert context.context_key(accepted("r2")) is None  # no features: only "*"


# --------------------------------------------------------------------------- grades


def test_a_grade_counts_in_every_bucket_and_a_replacement_takes_the_old_one_back() -> None:
    pol = _policy()
    buckets = evidence.observe_grade({}, grade(0.2), pol)
    assert set(buckets) == {"*|math|short|0", "*|math|*|*", "*"}
    assert buckets["*"] == Evidence(graded=1, weight=1.0, score=0.2, square=0.2 * 0.2, wins=0.0)
    replaced = evidence.observe_grade(buckets, grade(0.9, replaces=0.2), pol)
    star = replaced["*"]
    assert star.graded == 1 and star.weight == pytest.approx(1.0)
    assert star.score == pytest.approx(0.9) and star.wins == pytest.approx(1.0)


def test_apply_grade_through_the_fold_is_applied_once() -> None:
    pol = _policy()
    state = RouteState(position=3)
    step = handle(state, grade(0.7), 4, pol)
    assert step.state.arms[A].evidence["*"].score == pytest.approx(0.7)
    again = handle(step.state, grade(0.7), 4, pol)  # redelivered: same position
    assert again.state == step.state and not again.applied
    graded = apply_grade(state, grade(0.7), pol)
    assert graded is not None and graded.arms[A].pulls == 0  # availability untouched


def test_a_grade_resent_at_a_later_position_is_counted_once() -> None:
    """The matcher re-sends the same record (same id) after a crash: a new position."""
    pol = _policy()
    once = handle(RouteState(position=3), grade(0.7), 4, pol)
    twice = handle(once.state, grade(0.7), 9, pol)
    assert not twice.applied
    assert twice.state.arms[A].evidence == once.state.arms[A].evidence


def test_outcomes_count_answers_and_real_cost() -> None:
    pol = _policy()
    event = finish("r1", A)
    outcome = event.outcome.model_copy(
        update={"cost_usd": 0.002, "tokens_in": 100, "tokens_out": 50, "context": "-|math|short|0"}
    )
    buckets = evidence.observe_outcome({}, outcome, pol)
    assert buckets["*|math|*|*"] == Evidence(
        answers=1, costed=1, cost_usd=0.002, tokens_in=100.0, tokens_out=50.0
    )


def test_buckets_are_bounded_least_evidence_first_never_everything() -> None:
    buckets = {
        "*": Evidence(answers=1),
        "k1": Evidence(answers=5),
        "k2": Evidence(answers=1),
        "k3": Evidence(answers=3),
    }
    assert set(evidence.bounded(buckets, 2)) == {"*", "k1", "k3"}


# --------------------------------------------------------------------------- estimates


def test_quality_is_optimistic_without_grades_and_falls_back_to_coarser_buckets() -> None:
    p = params()
    chain = context.levels("-|math|short|0")
    fresh = estimates.quality(ArmState(), chain, 0.8, 1.0, p)
    assert fresh.mean == 0.8 and fresh.bound == 1.0 and fresh.level == "*"
    thin = {"*": Evidence(graded=50, weight=50, score=45, square=41, answers=50)}
    thin["*|math|*|*"] = Evidence(graded=5, weight=5, score=1, square=0.2, answers=5)
    estimate = estimates.quality(ArmState(evidence=thin), chain, 0.8, 1.0, p)
    assert estimate.level == "*" and estimate.mean == pytest.approx((0.8 + 45) / 51)
    rich = {**thin, "*|math|*|*": Evidence(graded=40, weight=40, score=8, square=2, answers=40)}
    estimate = estimates.quality(ArmState(evidence=rich), chain, 0.8, 1.0, p)
    coarse = (0.8 + 45) / 51
    assert estimate.level == "*|math|*|*"
    assert estimate.mean == pytest.approx((10 * coarse + 8) / 50)


def test_answers_waiting_for_a_grade_narrow_the_bound() -> None:
    p = params()
    graded = Evidence(graded=2, weight=2, score=1.6, square=1.28, answers=2)
    waiting = replace(graded, answers=30)
    few = estimates.quality(ArmState(evidence={"*": graded}), ("*",), 0.8, 1.0, p)
    many = estimates.quality(ArmState(evidence={"*": waiting}), ("*",), 0.8, 1.0, p)
    assert many.bound < few.bound and many.mean == few.mean


def test_cost_prior_is_price_times_observed_tokens_then_observed_cost() -> None:
    arm = _policy().arms("chat")[0]
    priced = arm.provider.model_copy(
        update={"cost_per_mtok_input": 1.0, "cost_per_mtok_output": 10.0}
    )
    arm = type(arm)(arm.deployment, priced, arm.model)
    other = ArmState(
        evidence={"*": Evidence(costed=2, cost_usd=0.0, tokens_in=200, tokens_out=400)}
    )
    tokens = estimates.token_means([ArmState(), other])
    assert tokens == (100.0, 200.0)
    assert estimates.cost(arm, ArmState(), ("*",), tokens) == pytest.approx(100e-6 + 2000e-6)
    seen = ArmState(evidence={"*": Evidence(costed=3, cost_usd=0.03)})
    expected = (1 * (100e-6 + 2000e-6) + 0.03) / 4
    assert estimates.cost(arm, seen, ("*",), tokens) == pytest.approx(expected)


def test_thompson_posterior_from_grades_threshold_or_fractional() -> None:
    state = ArmState(evidence={"*": Evidence(graded=2, weight=2, score=1.2, square=0.72, wins=1)})
    assert estimates.thompson_params(state, "*", False) == (2.0, 2.0)
    assert estimates.thompson_params(state, "*", True) == pytest.approx((2.2, 1.8))
    assert algorithm_version(
        _policy(strategy=Strategy.THOMPSON, thompson_fractional=True)
    ).endswith("fractional/3")


# --------------------------------------------------------------------------- strategies


def _graded(mean: float, n: int, cost: float) -> ArmState:
    found = Evidence(
        answers=n, graded=n, weight=n, score=mean * n, square=mean * mean * n,
        wins=n * float(mean >= 0.5), costed=n, cost_usd=cost * n,
    )  # fmt: skip
    return ArmState(pulls=n, total_reward=n, evidence={"*": found})


def test_adaptive_weighs_graded_quality_against_real_cost() -> None:
    pol = _policy(strategy=Strategy.ADAPTIVE)
    arms = pol.arms("chat")
    cheap_worse, dear_better = _graded(0.80, 200, 0.0001), _graded(0.93, 200, 0.0005)
    ranking = rank(list(zip(arms, [cheap_worse, dear_better], strict=True)), 400, "r", 1, pol)
    assert ranking.chosen == 1
    too_dear = _graded(0.95, 200, 0.05)  # $0.05 is a whole answer's worth
    ranking = rank(list(zip(arms, [cheap_worse, too_dear], strict=True)), 400, "r", 1, pol)
    assert ranking.chosen == 0


def test_adaptive_tries_an_untried_deployment_once_the_route_is_graded() -> None:
    pol = _policy(strategy=Strategy.ADAPTIVE)
    arms = pol.arms("chat")
    ranking = rank(
        list(zip(arms, [_graded(0.9, 10, 0.001), ArmState()], strict=True)), 10, "r", 1, pol
    )
    assert ranking.chosen == 1 and ranking.rule == "untried_first"


def test_ucb1_mean_reward_is_graded_quality_once_graded() -> None:
    pol = _policy()
    arms = pol.arms("chat")
    ranking = rank(
        list(zip(arms, [_graded(0.5, 50, 0), _graded(0.9, 50, 0)], strict=True)), 100, "r", 1, pol
    )
    factors = ranking.candidates[0].factors
    assert factors["mean_reward"] == pytest.approx((0.8 + 25) / 51)
    assert ranking.chosen == 1


# --------------------------------------------------------------------------- pacer


def test_pacer_moves_with_spend_against_the_target() -> None:
    pol = _policy()
    start = pacer.advance(None, 0.0, 0.001, True, pol)
    assert start.multiplier == pytest.approx(0.001 / 0.05 - 0.005)
    over = pacer.advance(start, 0.003, 0.001, True, pol)  # spent 3 targets for one request
    assert over.multiplier == pytest.approx(start.multiplier + 0.005 * 2)
    under = pacer.advance(Pacer(multiplier=-0.9999, spent=0.0), 0.0, 0.001, True, pol)
    assert under.multiplier == -1.0  # the floor


def test_tenant_target_takes_precedence_and_is_traced_in_the_decision() -> None:
    config = RoutingConfig(
        providers=[provider("a-x"), provider("b-x")],
        routes={"chat": RouteConfig(providers=["a-x", "b-x"], cost_target_usd=0.01)},
        tenants={"acme": TenantPolicy(cost_target_usd=0.002)},
    )
    pol = Policy(config, params(strategy=Strategy.ADAPTIVE))
    event = accepted("r1", content="What is the derivative of x squared?")
    event = event.model_copy(update={"features": extract_features(event.request)})
    tenant = event.model_copy(
        update={"request": event.request.model_copy(update={"tenant": "acme"})}
    )
    assert pacer.target_of(event, pol) == pacer.Target("route", 0.01)
    assert pacer.target_of(tenant, pol) == pacer.Target("tenant:acme", 0.002)
    step = handle(RouteState(), tenant, 0, pol)
    decision = step.dispatches[0].decision
    assert decision.context is not None and decision.context.startswith("acme|")
    assert decision.cost_target_usd == 0.002 and decision.context_level == "*"
    assert decision.pacer_multiplier == pytest.approx(0.002 / 0.05 - 0.005)
    assert step.state.budgets.pacers["tenant:acme"].requests == 1


def test_learning_defaults_trace_nothing() -> None:
    assert Learning().multiplier is None and Learning().chain == ("*",)
    assert math.isclose(estimates.coverage([]), 1.0)
