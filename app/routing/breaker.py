"""Seed 000 §7: the three-state circuit breaker, as pure transitions on event time."""

from __future__ import annotations

from dataclasses import dataclass

from app.routing.state import Breaker, BreakerPhase


@dataclass(frozen=True, slots=True)
class BreakerParams:
    failure_threshold: int = 5
    timeout_s: float = 60.0
    half_open_max_calls: int = 3


def on_clock(breaker: Breaker, now: float, params: BreakerParams) -> Breaker:
    """OPEN -> HALF_OPEN once more than ``timeout_s`` has passed since the last failure."""
    if breaker.state is BreakerPhase.OPEN and now - breaker.last_failure_time > params.timeout_s:
        return breaker.model_copy(update={"state": BreakerPhase.HALF_OPEN, "success_count": 0})
    return breaker


def on_success(breaker: Breaker, params: BreakerParams) -> Breaker:
    if breaker.state is BreakerPhase.HALF_OPEN:
        successes = breaker.success_count + 1
        if successes >= params.half_open_max_calls:
            return Breaker()
        return breaker.model_copy(update={"success_count": successes})
    if breaker.state is BreakerPhase.CLOSED:
        # Self-healing: each success in CLOSED takes one failure back.
        return breaker.model_copy(update={"failures": max(0, breaker.failures - 1)})
    return breaker


def on_failure(breaker: Breaker, now: float, params: BreakerParams) -> Breaker:
    failures = breaker.failures + 1
    if breaker.state is BreakerPhase.HALF_OPEN or failures >= params.failure_threshold:
        return Breaker(
            state=BreakerPhase.OPEN, failures=failures, last_failure_time=now, success_count=0
        )
    return breaker.model_copy(update={"failures": failures})
