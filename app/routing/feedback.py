"""Fold one attempt outcome into its arm: bandit, latency EMA and EWMAs, breaker, rate limits."""

from __future__ import annotations

from app.events import Outcome, StatusClass
from app.routing import adaptive, bandit, breaker, evidence
from app.routing.policy import Policy
from app.routing.reliability import ACCOUNTING, Availability
from app.routing.state import ArmState, Breaker, Recent
from app.understanding.modes import ema_throughput, throughput_sample


def apply_outcome(arm: ArmState, outcome: Outcome, now: float, policy: Policy) -> ArmState:
    """Fold one attempt outcome into its arm: bandit, latency EMAs, breaker, rate limits."""
    if outcome.status_class is StatusClass.EXPIRED:
        # The request ran out of time (a backlog, a worker that was down): the slot is
        # free again, and nothing is learnt or held against the deployment (issue 17).
        return arm.model_copy(update={"in_flight": max(0, arm.in_flight - 1)})
    accounting = ACCOUNTING[outcome.status_class]
    alpha, beta = bandit.thompson_update(arm.alpha, arm.beta, outcome.reward)
    update: dict[str, object] = {
        "pulls": arm.pulls + 1,
        "total_reward": arm.total_reward + outcome.reward,
        "alpha": alpha,
        "beta": beta,
        "in_flight": max(0, arm.in_flight - 1),
    }
    if accounting.availability is not Availability.NEUTRAL:
        update.update(_health_update(arm, outcome, accounting.availability, now, policy))
    if outcome.status_class is StatusClass.SUCCESS:
        sample = throughput_sample(outcome.tokens_out, outcome.latency_ms)
        if sample is not None:
            update["tokens_per_s"] = ema_throughput(
                arm.tokens_per_s, sample, arm.throughput_samples
            )
            update["throughput_samples"] = arm.throughput_samples + 1
    if outcome.status_class is StatusClass.RATE_LIMITED:
        update["rate_limited"] = arm.rate_limited + 1
        if outcome.retry_after_s:
            update["retry_after_until"] = max(arm.retry_after_until, now + outcome.retry_after_s)
    update["recent"] = _recent(arm, outcome, accounting.availability, update, now, policy)
    # Issue 10: answers and their real cost, per context bucket (quality comes with grades).
    update["evidence"] = evidence.observe_outcome(arm.evidence, outcome, policy)
    return arm.model_copy(update=update)


def _recent(
    arm: ArmState,
    outcome: Outcome,
    availability: Availability,
    update: dict[str, object],
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
    moved = update.get("breaker")
    if isinstance(moved, Breaker) and breaker.closed_again(arm.breaker, moved):
        recent = adaptive.forget_failures(recent)
    return recent


def _health_update(
    arm: ArmState, outcome: Outcome, availability: Availability, now: float, policy: Policy
) -> dict[str, object]:
    """Latency EMA (seed 000), failure and latency EWMAs (seed 003) and the breaker."""
    alpha = policy.params.ewma_alpha
    failed = availability is Availability.DOWN
    ewma_failure = alpha * float(failed) + (1 - alpha) * arm.ewma_failure
    if arm.observations == 0:
        ewma_latency = outcome.latency_ms
    else:
        ewma_latency = alpha * outcome.latency_ms + (1 - alpha) * arm.ewma_latency_ms
    update: dict[str, object] = {
        "avg_latency_s": bandit.ema_latency(
            arm.avg_latency_s, outcome.latency_ms / 1000.0, arm.latency_samples
        ),
        "latency_samples": arm.latency_samples + 1,
        "ewma_failure": ewma_failure,
        "ewma_latency_ms": ewma_latency,
        "observations": arm.observations + 1,
    }
    params = policy.breaker
    if not failed:
        moved = breaker.on_success(arm.breaker, params)
    elif params.ewma:
        moved = breaker.on_ewma_failure(
            arm.breaker, ewma_failure, arm.observations + 1, now, params
        )
    else:
        moved = breaker.on_failure(arm.breaker, now, params)
    update["breaker"] = moved
    if params.ewma and breaker.closed_again(arm.breaker, moved):
        update.update(ewma_failure=0.0, observations=0)
    return update
