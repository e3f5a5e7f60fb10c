"""The ``adaptive`` strategy: its memories, its change tests, its value and its decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import (
    T0,
    accepted,
    dep,
    finish,
    fold,
    outcome,
    params,
    policy,
    provider,
    route_state,
)

from app.contract import StatusClass
from app.contract.mode import RoutingMode
from app.routing import adaptive, strategies
from app.routing.feedback import apply_outcome
from app.routing.params import Strategy
from app.routing.policy import Policy
from app.routing.state import ArmState, Breaker, BreakerPhase, Recent, Sums

PARAMS = params(strategy=Strategy.ADAPTIVE)
CHEAP = provider(
    "deepseek-v3",
    cost_per_mtok_input=0.27,
    cost_per_mtok_output=0.42,
    p95_latency_baseline_ms=620,
    quality_prior=0.81,
)
FAST = provider(
    "gemini-flash",
    cost_per_mtok_input=0.30,
    cost_per_mtok_output=2.50,
    p95_latency_baseline_ms=380,
    quality_prior=0.83,
)


def adaptive_policy(**overrides: object) -> Policy:
    return policy(CHEAP, FAST, strategy=Strategy.ADAPTIVE, **overrides)


def observed(recent: Recent, t: float, *, answered: bool = True, reward: float = 1.0) -> Recent:
    return adaptive.observe(
        recent, t, PARAMS, counted=True, failed=not answered, answered=answered,
        reward=reward, latency_s=0.3,
    )  # fmt: skip


def test_memories_halve_after_their_half_lives() -> None:
    recent = Recent(at=T0, slow=Sums(answers=8.0, reward=4.0), fast=Sums(answers=8.0))
    later = adaptive.decayed(recent, T0 + PARAMS.adaptive_fast_half_life_s, PARAMS)
    assert later.fast.answers == pytest.approx(4.0)
    assert later.slow.answers == pytest.approx(
        8.0 * 0.5 ** (PARAMS.adaptive_fast_half_life_s / PARAMS.adaptive_half_life_s)
    )
    slow_later = adaptive.decayed(recent, T0 + PARAMS.adaptive_half_life_s, PARAMS)
    assert (slow_later.slow.answers, slow_later.slow.reward) == pytest.approx((4.0, 2.0))
    # A clock that goes back (events from another partition) changes nothing.
    assert adaptive.decayed(recent, T0 - 100, PARAMS) is recent


def test_rate_limits_and_client_errors_are_not_evidence_about_health() -> None:
    arm = apply_outcome(
        ArmState(), outcome("r", dep("gemini-flash"), status=StatusClass.RATE_LIMITED), T0,
        adaptive_policy(),
    )  # fmt: skip
    assert arm.recent.slow == Sums() and arm.recent.fast == Sums()
    failed = apply_outcome(
        ArmState(), outcome("r", dep("gemini-flash"), status=StatusClass.SERVER_ERROR), T0,
        adaptive_policy(),
    )  # fmt: skip
    assert (failed.recent.slow.calls, failed.recent.slow.failures) == (1.0, 1.0)
    ok = apply_outcome(
        ArmState(), outcome("r", dep("gemini-flash"), latency_ms=250.0, reward=0.0), T0,
        adaptive_policy(),
    )  # fmt: skip
    assert ok.recent.slow == Sums(calls=1.0, answers=1.0, reward=0.0, latency_s=0.25)


def test_a_prior_holds_until_the_outcomes_contradict_it() -> None:
    arms = adaptive_policy().arms("chat")
    gemini = arms[1]
    agreeing = Recent()
    for i in range(200):  # 80 % accepted: within the noise of the 0.83 prior
        agreeing = observed(agreeing, T0 + i, reward=1.0 if i % 5 else 0.0)
    assert adaptive.estimate(gemini, agreeing, T0 + 200, adaptive_policy()).quality == 0.83
    contradicting = Recent()
    for i in range(200):  # 50 % accepted: far below it
        contradicting = observed(contradicting, T0 + i, reward=float(i % 2))
    quality = adaptive.estimate(gemini, contradicting, T0 + 200, adaptive_policy()).quality
    assert quality == pytest.approx(0.5, abs=0.01)


def test_a_regression_restarts_the_slow_memory_from_the_fast_one() -> None:
    recent = Recent()
    for i in range(1000):  # a long good history ...
        recent = observed(recent, T0 + i)
    assert recent.slow.answers > 900
    for i in range(60):  # ... then nothing is accepted any more
        recent = observed(recent, T0 + 1000 + i, reward=0.0)
    # Without the restart the slow memory would hold ~1,040 answers, 94 % accepted.
    assert recent.slow.answers < 300
    assert recent.slow.reward / recent.slow.answers < 0.75


def test_closing_a_breaker_again_forgets_the_outage() -> None:
    pol = adaptive_policy()
    failing = Recent(at=T0, slow=Sums(calls=30.0, failures=6.0), fast=Sums(calls=10, failures=6))
    half_open = Breaker(state=BreakerPhase.HALF_OPEN, failures=6, success_count=2)
    arm = ArmState(breaker=half_open, recent=failing)
    closed = apply_outcome(arm, outcome("r", dep("gemini-flash"), T0 + 1), T0 + 1, pol)
    assert closed.breaker.state is BreakerPhase.CLOSED
    assert closed.recent.slow.failures == closed.recent.fast.failures == 0.0
    # Still half-open (not enough successes yet): the failures stay.
    probing = ArmState(breaker=replace(half_open, success_count=0), recent=failing)
    still = apply_outcome(probing, outcome("r", dep("gemini-flash"), T0 + 1), T0 + 1, pol)
    assert still.recent.slow.failures > 0


def test_value_is_success_times_quality_net_of_cost_minus_waiting() -> None:
    pol = adaptive_policy()
    deepseek, gemini = pol.arms("chat")
    value = adaptive.estimate(gemini, Recent(), T0, pol)
    cost = (800 * 0.30 + 250 * 2.50) / 1e6
    expected = 0.99 * (0.83 - cost / 0.05) - 0.1 * 0.38 + 0.005
    assert value.value == pytest.approx(expected)
    assert value.factors() == {
        "success_rate": 0.99, "quality": 0.83, "latency_s": 0.38,
        "cost_usd": pytest.approx(cost), "exploration": 0.005,
    }  # fmt: skip
    assert adaptive.estimate(deepseek, Recent(), T0, pol).value < value.value


def test_without_quality_priors_every_deployment_starts_at_the_default() -> None:
    pol = adaptive_policy(adaptive_quality_priors=False)
    assert {adaptive.estimate(a, Recent(), T0, pol).quality for a in pol.arms("chat")} == {0.8}


def test_a_model_prior_overrides_its_providers() -> None:
    coder = {"name": "m1-code", "specialized": "coding", "quality_prior": 0.95}
    special = provider("openai-x", quality_prior=0.7, models=[{"name": "m1"}, coder])
    assert special.quality_prior_of("m1-code") == 0.95
    assert special.quality_prior_of("m1") == 0.7
    assert provider("plain").quality_prior_of("m1") is None


def test_decisions_carry_the_estimate_and_follow_a_regression() -> None:
    pol = adaptive_policy()
    first = fold([accepted("a-0")], pol, route_state())
    decision = first.decisions[0]
    assert (decision.deployment, decision.strategy) == (dep("gemini-flash"), "adaptive")
    assert decision.algorithm_version == "switchyard-adaptive/2"
    assert {c.deployment for c in decision.candidates} == {dep("gemini-flash"), dep("deepseek-v3")}
    assert set(decision.candidates[0].factors) == {
        "success_rate", "quality", "latency_s", "cost_usd", "exploration",
    }  # fmt: skip
    # Gemini's answers are no longer accepted, DeepSeek's are: traffic moves and stays.
    state = first.state
    chosen: list[str] = []
    for i in range(400):
        t = T0 + 10 + i * 2
        step = fold([accepted(f"a-{i + 1}", t)], pol, state)
        deployment = step.decisions[0].deployment
        chosen.append(deployment)
        reward = 0.0 if deployment == dep("gemini-flash") else 1.0
        done = finish(f"a-{i + 1}", deployment, t + 1, reward=reward, latency_ms=300)
        state = fold([done], pol, step.state).state
    assert chosen[:20] == [dep("gemini-flash")] * 20
    assert chosen[-300:] == [dep("deepseek-v3")] * 300


def test_the_same_log_gives_the_same_decisions() -> None:
    pol = adaptive_policy()
    events = [accepted(f"d-{i}", T0 + i) for i in range(30)]
    assert fold(events, pol).decisions == fold(events, pol).decisions


def test_modes_weigh_cost_and_waiting_as_seed_000_weighs_ucb1s_bonuses() -> None:
    dear = provider(
        "openai-x", cost_per_mtok_input=3.0, cost_per_mtok_output=8.0,
        p95_latency_baseline_ms=850, quality_prior=0.90,
    )  # fmt: skip
    pol = policy(CHEAP, FAST, dear, strategy=Strategy.ADAPTIVE)
    eligible = [(arm, ArmState()) for arm in pol.arms("chat")]

    def pick(mode: RoutingMode) -> str:
        ranking = strategies.rank(eligible, 0, "r", 1, pol, mode, T0)
        return ranking.candidates[ranking.chosen].deployment

    assert pick(RoutingMode.BALANCED) == dep("gemini-flash")
    assert pick(RoutingMode.PRICE) == dep("deepseek-v3")
    assert pick(RoutingMode.QUALITY) == dep("openai-x")
    throughput = strategies.rank(eligible, 0, "r", 1, pol, RoutingMode.THROUGHPUT, T0)
    assert "throughput_bonus" in throughput.candidates[0].factors
