"""Budgets: ledgers on the routing log, folded by the one driver
(tests/log_harness.py plays the log as the broker would)."""

from __future__ import annotations

import orjson
import pytest
from factories import T0, accepted, params, provider
from log_harness import Log, always

from app.config.schema import Budget, RouteConfig, RoutingConfig
from app.contract import (
    RoutingLogEvent,
    StatusClass,
)
from app.routing.answers import at
from app.routing.budget import on_clock
from app.routing.budget_route import worst_case
from app.routing.budget_state import Amount, BudgetState, Ledger, Spent
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.rows import dumps, row_of, state_of
from app.routing.state import RouteState

PRICE_IN, PRICE_OUT = 1.0, 4.0  # USD per million tokens
COST = 0.0005  # what every attempt really costs (its worst case: 0.00084)
WORST = (40 * PRICE_IN + 200 * PRICE_OUT) / 1_000_000


def budget_policy(*budgets: Budget, fail: bool = False) -> Policy:
    config = RoutingConfig(
        providers=[
            provider("a", cost_per_mtok_input=PRICE_IN, cost_per_mtok_output=PRICE_OUT),
            provider("b", cost_per_mtok_input=PRICE_IN / 2, cost_per_mtok_output=PRICE_OUT / 2),
        ],
        routes={"chat": RouteConfig(providers=["a", "b"])},
        budgets=list(budgets),
    )
    return Policy(config, params(max_attempts=2 if fail else 1, cb_failure_threshold=10_000))


def asks(count: int, tenant: str | None = None) -> list[RoutingLogEvent]:
    out: list[RoutingLogEvent] = []
    for n in range(count):
        event = accepted(f"r{n}", T0, content="x" * 40, offset=n)
        request = event.request.model_copy(update={"max_tokens": 200, "tenant": tenant})
        out.append(event.model_copy(update={"request": request}))
    return out


def usd(book: Ledger, window: str = "day") -> float:
    return book.in_window(window).amount.usd


def ledger(driver: Driver, scope: str) -> Ledger:
    found = driver.state(f"budget:{scope}").ledger
    assert found is not None
    return found


def test_worst_case_is_the_prompt_in_characters_and_max_tokens_at_the_dearest_prices() -> None:
    policy = budget_policy(Budget(scope="route", name="chat", usd_per_day=1.0))
    (request,) = asks(1)
    assert isinstance(request, type(accepted("x")))
    worst = worst_case(request, 1, policy, ("route:chat",))
    assert worst.usd == pytest.approx(WORST)
    assert (worst.tokens, worst.requests) == (40 + 200, 1)
    assert worst_case(request, 2, policy, ("route:chat",)).requests == 0  # counted once


def test_a_burst_spends_exactly_what_the_outcomes_cost_and_never_more_than_the_budget() -> None:
    limit = 100 * COST  # worth 100 requests, 59 worst cases
    log = Log(budget_policy(Budget(scope="route", name="chat", usd_per_day=limit)), cost=COST)
    driver = log.run(asks(1000))
    ok = [r for r in log.responses if r.status == "ok"]
    refused = [r for r in log.responses if r.status == "error"]
    assert len(ok) + len(refused) == 1000 == len({r.request_id for r in log.responses})
    assert {r.error.code for r in refused if r.error} == {"budget_exceeded"}
    book = ledger(driver, "route:chat")
    assert usd(book) == pytest.approx(sum(log.costs)) == pytest.approx(len(ok) * COST)
    assert usd(book) <= limit
    # Holds are the worst case: the budget is used up to less than one of them.
    assert limit - usd(book) < WORST
    assert book.holds == {} and book.waiting == ()
    assert driver.state("chat").budgets.holds == {}


def test_a_tenant_and_its_route_are_two_ledgers_both_asked() -> None:
    policy = budget_policy(
        Budget(scope="route", name="chat", usd_per_day=1.0),
        Budget(scope="tenant", name="acme", usd_per_month=20 * COST),
    )
    log = Log(policy, cost=COST)
    driver = log.run(asks(50, tenant="acme"))
    ok = sum(r.status == "ok" for r in log.responses)
    # Worth 20 attempts; the 20th's worst case no longer fits after 19 were spent.
    assert ok == 19
    assert usd(ledger(driver, "tenant:acme"), "month") == pytest.approx(19 * COST)
    assert usd(ledger(driver, "route:chat")) == pytest.approx(19 * COST)  # no more
    denied = [r for r in log.responses if r.error]
    assert all("tenant:acme" in r.error.message for r in denied if r.error)


def test_failed_attempts_settle_their_cost_and_retries_ask_again() -> None:
    policy = budget_policy(Budget(scope="route", name="chat", usd_per_day=1.0), fail=True)
    log = Log(policy, status=always(StatusClass.SERVER_ERROR), cost=COST)
    driver = log.run(asks(10))
    assert all(r.status == "error" for r in log.responses)
    book = ledger(driver, "route:chat")
    assert usd(book) == pytest.approx(sum(log.costs)) == pytest.approx(20 * COST)
    assert book.holds == {}


def test_a_day_rolls_over_on_event_time() -> None:
    spent = {
        "day": Spent("2023-11-14", Amount(usd=5.0)),
        "month": Spent("2023-11", Amount(usd=9.0)),
    }
    book = on_clock(Ledger(spent=spent), T0)
    assert (usd(book), usd(book, "month")) == (5.0, 9.0)
    later = on_clock(book, T0 + 86_400)
    assert (later.in_window("day").label, usd(later), usd(later, "month")) == (
        "2023-11-15",
        0.0,
        9.0,
    )


def test_ledgers_and_holds_round_trip_in_rows() -> None:
    limits = Budget(scope="route", name="chat", usd_per_day=5 * COST)
    log = Log(budget_policy(limits), lag=50, cost=COST)
    driver = log.run(asks(30))
    for key in ("chat", "budget:route:chat"):
        state = driver.state(key)
        assert state_of(key, orjson.loads(dumps(state))) == state
    assert isinstance(driver.state("budget:route:chat"), BudgetState)
    assert "ledger" not in row_of(RouteState())  # a route's row holds no ledger


def test_copies_re_sent_after_a_crash_count_once() -> None:
    """A route that crashed re-folds from its last row and sends its asks and settlements
    again: the ledger counts each attempt once and holds nothing for a copy."""
    from app.contract import BudgetAsk, BudgetSettle
    from app.routing.budget import ask, settle
    from app.routing.budget_route import on_verdict
    from app.routing.state import Hold, RouteBudgets

    limits = Budget(scope="route", name="chat", usd_per_day=1.0)
    question = BudgetAsk(
        id="a", occurred_at=at(T0), route="chat", request_id="r0", attempt=1,
        amount_usd=0.01, scopes=["route:chat"], index=0, deadline=T0 + 120,
    )  # fmt: skip
    done = BudgetSettle(
        id="s", occurred_at=at(T0), scope="route:chat", route="chat", request_id="r0",
        attempt=1, cost_usd=0.004,
    )  # fmt: skip
    book = Ledger()
    book, first = ask(book, question, limits, T0)
    book, again = ask(book, question, limits, T0)  # the same ask while held: same verdict
    assert [type(r).__name__ for r in first + again] == ["BudgetVerdict", "BudgetVerdict"]
    book, _ = settle(book, done, limits, T0 + 1)
    book, _ = ask(book, question, limits, T0 + 2)  # re-sent after it ended
    book, _ = settle(book, done, limits, T0 + 3)
    assert usd(book) == pytest.approx(0.004) and book.holds == {}
    # On the route: a copy of a verdict for an attempt already held and in flight gives
    # nothing back (its settlement will count its cost).
    held = {"r0#1": Hold(("route:chat",), 0.01, granted=True)}
    route = RouteState(budgets=RouteBudgets(holds=held))
    (verdict,) = first
    assert on_verdict(route, verdict).records == []
