"""Fold one attempt outcome into its arm: bandit, latency EMA and EWMAs, breaker, rate limits.

The reliability accounting decides what an outcome may teach: a neutral one (a
client error, a 429, a passed deadline) frees its slot and is counted apart, and
moves neither the bandit (pulls, rewards, Thompson's beta) nor the latency averages
nor the breaker.
"""

from __future__ import annotations

from app.contract import Outcome, StatusClass
from app.routing import adaptive, bandit, breaker, evidence, tail
from app.routing.policy import Policy
from app.routing.reliability import ACCOUNTING, Availability
from app.routing.state import ArmState, Breaker, Recent, evolve_arm
from app.routing.throughput import ema_throughput, throughput_sample


def apply_outcome(arm: ArmState, outcome: Outcome, now: float, policy: Policy) -> ArmState:
    """Fold one attempt outcome into its arm: bandit, latency EMAs, breaker, rate limits."""
    status = outcome.status_class
    in_flight = max(0, arm.in_flight - 1)
    if status is StatusClass.EXPIRED:
        # The request ran out of time (a backlog, a worker that was down): the slot is
        # free again, and nothing is learnt or held against the deployment.
        return evolve_arm(arm, in_flight=in_flight)
    availability = ACCOUNTING[status].availability
    if availability is Availability.NEUTRAL:
        return _neutral(arm, outcome, in_flight, now)
    alpha, beta = bandit.thompson_update(arm.alpha, arm.beta, outcome.reward)
    health = _health(arm, outcome, availability, now, policy)
    tokens_per_s, throughput_samples = arm.tokens_per_s, arm.throughput_samples
    if status is StatusClass.SUCCESS:
        sample = throughput_sample(outcome.tokens_out, outcome.latency_ms)
        if sample is not None:
            tokens_per_s = ema_throughput(arm.tokens_per_s, sample, arm.throughput_samples)
            throughput_samples += 1
    # Positional, in ArmState's field order (a keyword call costs twice as much).
    return ArmState(
        arm.pulls + 1,  # pulls
        arm.total_reward + outcome.reward,  # total_reward
        alpha,
        beta,
        health.avg_latency_s,
        health.latency_samples,
        in_flight,
        arm.rate_limited,
        arm.retry_after_until,
        health.breaker,
        health.ewma_failure,
        health.ewma_latency_ms,
        health.ewma_p95_ms,
        health.observations,
        tokens_per_s,
        throughput_samples,
        _recent(arm, outcome, availability, health.breaker, now, policy),  # recent
        # Answers and their real cost, per context bucket (quality comes with grades).
        evidence.observe_outcome(arm.evidence, outcome, policy),
        arm.refused_tokens,
    )


def _neutral(arm: ArmState, outcome: Outcome, in_flight: int, now: float) -> ArmState:
    """A result that says nothing of the deployment's worth or health (a client error, a
    429): no pull, no reward, no latency or breaker change; a 429 is a capacity signal,
    counted apart, and its Retry-After keeps the deployment out until it ends."""
    if outcome.status_class is not StatusClass.RATE_LIMITED:
        return evolve_arm(arm, in_flight=in_flight)
    retry_after_until = arm.retry_after_until
    if outcome.retry_after_s:
        retry_after_until = max(retry_after_until, now + outcome.retry_after_s)
    return evolve_arm(
        arm,
        in_flight=in_flight,
        rate_limited=arm.rate_limited + 1,
        retry_after_until=retry_after_until,
    )


def _recent(
    arm: ArmState,
    outcome: Outcome,
    availability: Availability,
    moved: Breaker,
    now: float,
    policy: Policy,
) -> Recent:
    """The ``adaptive`` strategy's discounted sums (kept whatever the strategy, so a
    switch to it starts informed)."""
    recent = adaptive.observe(
        arm.recent,
        now,
        policy.params,
        counted=availability is not Availability.NEUTRAL,
        failed=availability is Availability.DOWN,
        answered=outcome.status_class is StatusClass.SUCCESS,
        reward=outcome.reward,
        latency_s=outcome.latency_ms / 1000.0,
    )
    if breaker.closed_again(arm.breaker, moved):
        recent = adaptive.forget_failures(recent)
    return recent


def _health(
    arm: ArmState, outcome: Outcome, availability: Availability, now: float, policy: Policy
) -> ArmState:
    """Latency EMA, failure and latency EWMAs (composite score) and the breaker: an arm
    whose other fields are ``arm``'s (only these are read from it)."""
    alpha = policy.params.ewma_alpha
    failed = availability is Availability.DOWN
    ewma_failure = alpha * float(failed) + (1 - alpha) * arm.ewma_failure
    if arm.observations == 0:
        ewma_latency = outcome.latency_ms
    else:
        ewma_latency = alpha * outcome.latency_ms + (1 - alpha) * arm.ewma_latency_ms
    ewma_p95 = tail.track_p95(arm.ewma_p95_ms, outcome.latency_ms, arm.observations, alpha)
    observations = arm.observations + 1
    params = policy.breaker
    if not failed:
        moved = breaker.on_success(arm.breaker, params)
    elif params.ewma:
        moved = breaker.on_ewma_failure(arm.breaker, ewma_failure, observations, now, params)
    else:
        moved = breaker.on_failure(arm.breaker, now, params)
    if params.ewma and breaker.closed_again(arm.breaker, moved):
        ewma_failure, observations = 0.0, 0
    return evolve_arm(
        arm,
        avg_latency_s=bandit.ema_latency(
            arm.avg_latency_s, outcome.latency_ms / 1000.0, arm.latency_samples
        ),
        latency_samples=arm.latency_samples + 1,
        ewma_failure=ewma_failure,
        ewma_latency_ms=ewma_latency,
        ewma_p95_ms=ewma_p95,
        observations=observations,
        breaker=moved,
    )
