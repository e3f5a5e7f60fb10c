"""The reliability accounting: which outcomes count against a deployment's breaker."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import (
    T0,
    arm,
    dep,
    open_breaker,
    outcome,
    policy,
    provider,
)

from app.contract import StatusClass
from app.routing.feedback import apply_outcome
from app.routing.reliability import (
    ACCOUNTING,
    Availability,
    classify_http_status,
    is_retriable,
)
from app.routing.state import ArmState, Breaker, BreakerPhase

CLOSED, HALF_OPEN = BreakerPhase.CLOSED, BreakerPhase.HALF_OPEN


# --------------------------------------------------------------------------- reliability


def _apply(status: StatusClass, http_status: int | None, start: Breaker | None = None) -> ArmState:
    pol = policy(provider("a"))
    before = arm(10, 0.5, in_flight=1, latency=2.0, breaker=start or Breaker(failures=2))
    result = outcome("r", dep("a"), T0 + 5, status=status, http_status=http_status)
    return apply_outcome(before, result, T0 + 5, pol)


def test_429_does_not_move_breaker_but_counts_rate_limits() -> None:
    after = _apply(StatusClass.RATE_LIMITED, 429)
    assert after.breaker == Breaker(failures=2)
    assert after.rate_limited == 1
    assert after.in_flight == 0
    # A capacity signal, not a verdict on the deployment: no pull, no reward, no beta.
    assert (after.pulls, after.total_reward, after.beta) == (10, 5.0, 1.0)
    # Neither a failure nor a success: five in a row do not open it, from 4 failures either.
    pol = policy(provider("a"))
    state = arm(10, 0.5, breaker=Breaker(failures=4))
    for i in range(5):
        state = apply_outcome(
            state, outcome(f"r{i}", dep("a"), status=StatusClass.RATE_LIMITED), T0 + i, pol
        )
    assert state.breaker == Breaker(failures=4)
    assert state.rate_limited == 5


@pytest.mark.parametrize("http_status", [400, 403, 413, 422])
def test_client_errors_teach_the_bandit_nothing(http_status: int) -> None:
    """The request's fault: UCB1's mean, Thompson's posterior, the latency EMA, the
    breaker and the adaptive sums are as before; only the slot is free again."""
    pol = policy(provider("a"))
    before = arm(10, 0.5, in_flight=1, latency=2.0, breaker=Breaker(failures=2))
    result = outcome(
        "r", dep("a"), T0 + 5, status=StatusClass.CLIENT_ERROR, http_status=http_status
    )
    after = apply_outcome(before, result, T0 + 5, pol)
    assert after == replace(before, in_flight=0)


@pytest.mark.parametrize("http_status", [401, 402, 404])
def test_auth_payment_not_found_count_as_failures(http_status: int) -> None:
    assert classify_http_status(http_status) is StatusClass.AUTH_ERROR
    after = _apply(StatusClass.AUTH_ERROR, http_status)
    assert after.breaker.failures == 3
    assert after.rate_limited == 0


@pytest.mark.parametrize(
    ("status", "http_status"),
    [
        (StatusClass.SERVER_ERROR, 500),
        (StatusClass.SERVER_ERROR, 501),
        (StatusClass.SERVER_ERROR, 502),
        (StatusClass.SERVER_ERROR, 503),
        (StatusClass.SERVER_ERROR, 504),
        (StatusClass.SERVER_ERROR, 529),
        (StatusClass.TIMEOUT, None),
        (StatusClass.CONNECTION_ERROR, None),
        (StatusClass.BAD_RESPONSE, 200),
    ],
)
def test_server_errors_and_timeouts_count_as_failures(
    status: StatusClass, http_status: int | None
) -> None:
    if http_status is not None and http_status >= 500:
        assert classify_http_status(http_status) is StatusClass.SERVER_ERROR
    after = _apply(status, http_status)
    assert after.breaker.failures == 3
    assert after.breaker.state is CLOSED
    # From 4 failures, one more opens at the outcome's clock.
    opened = _apply(status, http_status, Breaker(failures=4))
    assert opened.breaker == open_breaker(T0 + 5)


def test_five_auth_errors_open_the_breaker() -> None:
    pol = policy(provider("a"))
    state = ArmState()
    for i in range(5):
        state = apply_outcome(
            state, outcome(f"r{i}", dep("a"), status=StatusClass.AUTH_ERROR), T0 + i, pol
        )
    assert state.breaker == open_breaker(T0 + 4)


@pytest.mark.parametrize("http_status", [400, 403, 413, 422])
def test_client_errors_are_neutral(http_status: int) -> None:
    assert classify_http_status(http_status) is StatusClass.CLIENT_ERROR
    after = _apply(StatusClass.CLIENT_ERROR, http_status)
    assert after.breaker == Breaker(failures=2)
    assert after.rate_limited == 0
    assert after.avg_latency_s == 2.0  # a neutral result is not a latency sample
    assert after.latency_samples == 10
    assert after.in_flight == 0


def test_success_counts_for_breaker() -> None:
    after = _apply(StatusClass.SUCCESS, 200)
    assert after.breaker == Breaker(failures=1)
    half = Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=2)
    assert _apply(StatusClass.SUCCESS, 200, half).breaker == Breaker()


def test_accounting_table() -> None:
    availability = {status: ACCOUNTING[status].availability for status in StatusClass}
    assert availability == {
        StatusClass.EXPIRED: Availability.NEUTRAL,
        StatusClass.SUCCESS: Availability.UP,
        StatusClass.CLIENT_ERROR: Availability.NEUTRAL,
        StatusClass.AUTH_ERROR: Availability.DOWN,
        StatusClass.RATE_LIMITED: Availability.NEUTRAL,
        StatusClass.SERVER_ERROR: Availability.DOWN,
        StatusClass.TIMEOUT: Availability.DOWN,
        StatusClass.CONNECTION_ERROR: Availability.DOWN,
        StatusClass.BAD_RESPONSE: Availability.DOWN,
    }


@pytest.mark.parametrize(
    ("status", "http_status", "retriable"),
    [
        (StatusClass.RATE_LIMITED, 429, True),
        (StatusClass.SERVER_ERROR, 500, True),
        (StatusClass.SERVER_ERROR, 502, True),
        (StatusClass.SERVER_ERROR, 503, True),
        (StatusClass.SERVER_ERROR, 504, True),
        (StatusClass.SERVER_ERROR, 501, False),
        (StatusClass.SERVER_ERROR, 505, False),
        (StatusClass.TIMEOUT, None, True),
        (StatusClass.CONNECTION_ERROR, None, True),
        (StatusClass.CLIENT_ERROR, 400, False),
        (StatusClass.CLIENT_ERROR, 413, False),
        (StatusClass.AUTH_ERROR, 401, False),
        (StatusClass.SUCCESS, 200, False),
    ],
)
def test_is_retriable(status: StatusClass, http_status: int | None, retriable: bool) -> None:
    assert is_retriable(status, http_status) is retriable


@pytest.mark.parametrize(
    ("http_status", "status"),
    [
        (429, StatusClass.RATE_LIMITED),
        (400, StatusClass.CLIENT_ERROR),
        (403, StatusClass.CLIENT_ERROR),
        (408, StatusClass.TIMEOUT),
        (413, StatusClass.CLIENT_ERROR),
        (401, StatusClass.AUTH_ERROR),
        (402, StatusClass.AUTH_ERROR),
        (404, StatusClass.AUTH_ERROR),
        (500, StatusClass.SERVER_ERROR),
        (599, StatusClass.SERVER_ERROR),
    ],
)
def test_classify_http_status(http_status: int, status: StatusClass) -> None:
    assert classify_http_status(http_status) is status
