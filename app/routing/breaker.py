"""Circuit breakers as pure transitions on event time.

The rules: docs/design.md#circuit-breaker.

Counting (``CB_MODE=seed000``, the default): CLOSED -> OPEN after ``failure_threshold``
failures (each success in CLOSED takes one back), OPEN -> HALF_OPEN once ``timeout_s``
passed, ``half_open_max_calls`` successes close it, one failure reopens it.

EWMA (``CB_MODE=ewma``): the trip condition is an EWMA failure rate above
``ewma_threshold`` over at least ``ewma_min_observations`` outcomes; it stays
open ``timeout_s`` (30 s); HALF_OPEN and closing work as in the counting mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.routing.state import Breaker, BreakerPhase


@dataclass(frozen=True, slots=True)
class BreakerParams:
    failure_threshold: int = 5
    timeout_s: float = 60.0
    half_open_max_calls: int = 3
    ewma: bool = False
    ewma_threshold: float = 0.5
    ewma_min_observations: int = 20


def on_clock(breaker: Breaker, now: float, params: BreakerParams) -> Breaker:
    """OPEN -> HALF_OPEN once more than ``timeout_s`` has passed since the last failure."""
    if breaker.state is BreakerPhase.OPEN and now - breaker.last_failure_time > params.timeout_s:
        return Breaker(BreakerPhase.HALF_OPEN, breaker.failures, breaker.last_failure_time, 0)
    return breaker


def on_success(breaker: Breaker, params: BreakerParams) -> Breaker:
    if breaker.state is BreakerPhase.HALF_OPEN:
        successes = breaker.success_count + 1
        if successes >= params.half_open_max_calls:
            return Breaker()
        return Breaker(breaker.state, breaker.failures, breaker.last_failure_time, successes)
    if breaker.state is BreakerPhase.CLOSED:
        # Self-healing: each success in CLOSED takes one failure back.
        if breaker.failures <= 0:
            return breaker
        return Breaker(
            breaker.state, breaker.failures - 1, breaker.last_failure_time, breaker.success_count
        )
    return breaker


def closed_again(before: Breaker, after: Breaker) -> bool:
    """The breaker probed its way back to CLOSED: the failures that opened it are spent."""
    return before.state is not BreakerPhase.CLOSED and after.state is BreakerPhase.CLOSED


def on_failure(breaker: Breaker, now: float, params: BreakerParams) -> Breaker:
    failures = breaker.failures + 1
    if breaker.state is BreakerPhase.HALF_OPEN or failures >= params.failure_threshold:
        return _opened(failures, now)
    return Breaker(breaker.state, failures, breaker.last_failure_time, breaker.success_count)


def on_ewma_failure(
    breaker: Breaker, ewma_failure: float, observations: int, now: float, params: BreakerParams
) -> Breaker:
    """EWMA mode: open when the EWMA failure rate (after this failure) crosses the threshold."""
    failures = breaker.failures + 1
    tripped = ewma_failure > params.ewma_threshold and observations >= params.ewma_min_observations
    if breaker.state is BreakerPhase.HALF_OPEN or tripped:
        return _opened(failures, now)
    return Breaker(breaker.state, failures, breaker.last_failure_time, breaker.success_count)


def _opened(failures: int, now: float) -> Breaker:
    return Breaker(
        state=BreakerPhase.OPEN, failures=failures, last_failure_time=now, success_count=0
    )
