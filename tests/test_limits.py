"""Limits in requests, tokens and dollars per minute, hour, day and month, per tenant,
API key and route: ledgers folded in the routing log (app/routing/budget.py), played by
the one driver (tests/log_harness.py plays the log as the broker would)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from factories import T0, accepted, params, provider
from log_harness import Log

from app.config.schema import Budget, RouteConfig, RoutingConfig
from app.contract import Decision, ErrorBody, Response, RoutingLogEvent, StatusClass
from app.gateway.errors import from_error_body
from app.routing.budget import label_of, seconds_left
from app.routing.budget_state import Amount, Ledger, Waiting
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.rows import _ledger, dumps, loads_budget

ROUTES = ("chat", "code", "docs")
PROMPT, MAX_TOKENS = 40, 200
WORST_TOKENS = PROMPT + MAX_TOKENS  # what an attempt holds
USED_TOKENS = 150  # what it reports (output only, in these logs)


def limits_policy(*budgets: Budget, attempts: int = 1) -> Policy:
    config = RoutingConfig(
        providers=[provider("a"), provider("b")],
        routes={route: RouteConfig(providers=["a", "b"]) for route in ROUTES},
        budgets=list(budgets),
    )
    return Policy(config, params(max_attempts=attempts, cb_failure_threshold=10_000))


def requests(
    count: int, *, tenant: str | None = None, key: str | None = None, t: float = T0, first: int = 0
) -> list[RoutingLogEvent]:
    """``count`` requests over the three routes in turn."""
    out: list[RoutingLogEvent] = []
    for n in range(first, first + count):
        event = accepted(f"r{n}", t, route=ROUTES[n % 3], content="x" * PROMPT, offset=n)
        update = {"max_tokens": MAX_TOKENS, "tenant": tenant, "key_name": key}
        out.append(event.model_copy(update={"request": event.request.model_copy(update=update)}))
    return out


def ledger(driver: Driver, scope: str) -> Ledger:
    found = driver.state(f"budget:{scope}").ledger
    assert found is not None
    return found


def refused(responses: list[Response]) -> list[Response]:
    return [r for r in responses if r.status == "error"]


def test_tokens_per_minute_hold_across_routes_within_the_limit() -> None:
    limit = 1000
    budget = Budget(scope="tenant", name="acme", tokens_per_minute=limit)
    log = Log(limits_policy(budget), lag=8, tokens=USED_TOKENS)
    driver = log.run(requests(30, tenant="acme"))
    spent = ledger(driver, "tenant:acme").in_window("minute")
    assert spent.label == label_of("minute", T0 + 1)
    assert spent.amount.tokens <= limit  # never past it: an attempt uses less than it holds
    assert limit - spent.amount.tokens < WORST_TOKENS  # and no room was left for one more
    served = [r for r in log.responses if r.status == "ok"]
    assert len(served) == spent.amount.tokens // USED_TOKENS == spent.amount.requests
    assert {d.route for d in log.decisions} == set(ROUTES)
    no = refused(log.responses)
    assert len(no) == 30 - len(served) > 0
    for answer in no:
        assert answer.error is not None
        assert (answer.error.code, answer.error.http_status) == ("budget_exceeded", 429)
        assert "tokens" in answer.error.message
        # The next minute could take it: the seconds until it starts.
        assert answer.error.retry_after_s == pytest.approx(seconds_left("minute", T0 + 1), abs=1)

    # A minute later the tenant is served again.
    later = Log(log.policy, lag=8, tokens=USED_TOKENS, events=log.events)
    later.run(requests(3, tenant="acme", t=T0 + 60, first=100), driver)
    assert [r.status for r in later.responses] == ["ok", "ok", "ok"]


def test_requests_without_a_tenant_fall_under_the_default_limit() -> None:
    anonymous = Budget(scope="tenant", name="*", requests_per_minute=5)
    log = Log(limits_policy(anonymous), lag=4)
    log.run(requests(8) + requests(2, tenant="other", first=8))
    by_request = {r.request_id: r.status for r in log.responses}
    assert sorted(by_request[f"r{n}"] for n in range(8)) == ["error"] * 3 + ["ok"] * 5
    assert by_request["r8"] == by_request["r9"] == "ok"  # a named tenant: not this limit


def test_a_key_limit_applies_to_every_tenant_of_the_key() -> None:
    per_key = Budget(scope="key", name="team-a", requests_per_minute=2)
    log = Log(limits_policy(per_key), lag=4)
    log.run(
        requests(2, key="team-a", tenant="t1") + requests(2, key="team-a", tenant="t2", first=2)
    )
    assert sorted(r.status for r in log.responses) == ["error", "error", "ok", "ok"]


def first_attempt_fails(decision: Decision) -> StatusClass:
    return StatusClass.SERVER_ERROR if decision.attempt == 1 else StatusClass.SUCCESS


def test_a_request_counts_once_whatever_its_attempts() -> None:
    budget = Budget(scope="route", name="chat", requests_per_minute=3)
    status: Callable[[Decision], StatusClass] = first_attempt_fails
    log = Log(limits_policy(budget, attempts=2), lag=2, status=status)
    chat_only = [r for r in requests(9) if r.route == "chat"]  # type: ignore[attr-defined]
    driver = log.run(chat_only)
    assert [r.status for r in log.responses] == ["ok"] * 3
    assert max(d.attempt for d in log.decisions) == 2
    assert ledger(driver, "route:chat").in_window("minute").amount.requests == 3


def test_a_request_larger_than_the_limit_is_refused_without_a_retry_time() -> None:
    budget = Budget(scope="tenant", name="acme", tokens_per_hour=WORST_TOKENS - 1)
    log = Log(limits_policy(budget))
    log.run(requests(1, tenant="acme"))
    (answer,) = log.responses
    assert answer.error is not None and answer.error.retry_after_s is None
    assert "alone needs" in answer.error.message


def test_windows_and_holds_round_trip_in_rows_and_old_rows_read() -> None:
    budget = Budget(scope="tenant", name="acme", tokens_per_minute=1000, usd_per_day=1.0)
    log = Log(limits_policy(budget), lag=50, tokens=USED_TOKENS)
    driver = log.run(requests(12, tenant="acme"))
    state = driver.state("budget:tenant:acme")
    assert state.ledger is not None and state.ledger.spent["minute"].amount.tokens > 0
    assert loads_budget(dumps(state)) == state
    waiting = Waiting("r9", 1, "chat", Amount(1, 240, 0.25), ("tenant:acme",), 0, T0 + 60)
    busy = replace(state.ledger, holds={"r8#1": Amount(1, 240, 0.125)}, waiting=(waiting,))
    assert loads_budget(dumps(replace(state, ledger=busy))).ledger == busy
    old = {"day": "2023-11-14", "day_usd": 0.5, "month": "2023-11", "month_usd": 2.0,
           "holds": {"r1#1": 0.01}, "waiting": [["r2", 1, "chat", 0.02, ["route:chat"], 0, T0]],
           "settled": []}  # fmt: skip
    book = _ledger(old)
    assert book is not None
    assert book.in_window("month").amount == Amount(usd=2.0)
    assert book.holds == {"r1#1": Amount(usd=0.01)}
    assert book.waiting[0].amount == Amount(usd=0.02)


def test_the_gateway_answers_a_limit_with_retry_after() -> None:
    body = ErrorBody(
        type="budget_exceeded", message="m", code="budget_exceeded", http_status=429,
        retry_after_s=12.2,
    )  # fmt: skip
    error = from_error_body(body)
    assert error.status == 429
    assert error.headers()["Retry-After"] == "13"
    assert "x-should-retry" not in {k.lower() for k in error.headers()}
    spent = from_error_body(body.model_copy(update={"retry_after_s": None}))
    assert spent.headers().get("x-should-retry") == "false"


def test_a_budget_needs_a_limit_and_star_is_for_tenants() -> None:
    with pytest.raises(ValueError, match="set a limit"):
        Budget(scope="tenant", name="acme")
    with pytest.raises(ValueError, match="without a tenant"):
        Budget(scope="key", name="*", requests_per_day=1)
