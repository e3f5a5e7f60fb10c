"""Budgets (issue 13 §3): ledgers on the routing log, folded by the one driver.

The harness plays the routing log as the broker would: every record a step sends
(budget asks, verdicts, settlements) is appended to the log and folded in turn;
a dispatch's outcome comes back ``lag`` events later, so attempts overlap.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from factories import T0, accepted, outcome, params, provider

from app.config import Budget, RouteConfig, RoutingConfig
from app.events import (
    AttemptFinished,
    Response,
    RouteTick,
    RoutingLogEvent,
    StatusClass,
    derived_id,
)
from app.routing.answers import at
from app.routing.budget import on_clock
from app.routing.budget_route import worst_case_usd
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.rows import dumps, loads
from app.routing.state import Ledger, RouteState

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


@dataclass
class Log:
    """The routing log as the broker holds it, and what the fold answered."""

    policy: Policy
    lag: int = 8
    status: StatusClass = StatusClass.SUCCESS
    events: dict[int, RoutingLogEvent] = field(default_factory=dict)
    responses: list[Response] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)

    def run(self, first: list[RoutingLogEvent]) -> Driver:
        driver = Driver(lambda: self.policy)
        queue: deque[RoutingLogEvent] = deque(first)
        calls: deque[tuple[int, AttemptFinished]] = deque()
        position, ticks = 0, 0
        while queue or calls or (driver.state("chat").parked and ticks < 100):
            if calls and (not queue or calls[0][0] <= position):
                queue.append(calls.popleft()[1])
            if not queue:  # only backoffs left: time passes (the live worker ticks)
                ticks += 1
                queue.append(tick(T0 + ticks))
            event = queue.popleft()
            self.events[position] = event
            step = driver.fold(event, position, self.events)
            queue.extend(step.records)
            self.responses += step.responses
            for dispatch in step.dispatches:
                calls.append((position + self.lag, self._finished(dispatch.decision)))
            position += 1
        return driver

    def _finished(self, decision: object) -> AttemptFinished:
        request_id, attempt = decision.request_id, decision.attempt  # type: ignore[attr-defined]
        result = outcome(
            request_id,
            decision.deployment,  # type: ignore[attr-defined]
            T0 + 1,
            attempt=attempt,
            status=self.status,
            final=self.status is StatusClass.SUCCESS,
            retriable=self.status is not StatusClass.SUCCESS,
        ).model_copy(update={"cost_usd": COST})
        self.costs.append(COST)
        request = accepted(request_id, T0, content="x" * 40)
        return AttemptFinished(
            id=derived_id("finished", request_id, attempt),
            occurred_at=result.occurred_at,
            outcome=result,
            tried=[result.deployment],
            retry=request,
            completion={"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
            if self.status is StatusClass.SUCCESS
            else None,
        )


def tick(t: float) -> RouteTick:
    return RouteTick(id=derived_id("tick", t), occurred_at=at(t), route="chat")


def asks(count: int, tenant: str | None = None) -> list[RoutingLogEvent]:
    out: list[RoutingLogEvent] = []
    for n in range(count):
        event = accepted(f"r{n}", T0, content="x" * 40, offset=n)
        request = event.request.model_copy(update={"max_tokens": 200, "tenant": tenant})
        out.append(event.model_copy(update={"request": request}))
    return out


def ledger(driver: Driver, scope: str) -> Ledger:
    found = driver.state(f"budget:{scope}").ledger
    assert found is not None
    return found


def test_worst_case_is_the_prompt_in_characters_and_max_tokens_at_the_dearest_prices() -> None:
    policy = budget_policy(Budget(scope="route", name="chat", usd_per_day=1.0))
    (request,) = asks(1)
    assert isinstance(request, type(accepted("x")))
    assert worst_case_usd(request, policy, ("route:chat",)) == pytest.approx(WORST)


def test_a_burst_spends_exactly_what_the_outcomes_cost_and_never_more_than_the_budget() -> None:
    limit = 100 * COST  # worth 100 requests, 59 worst cases
    log = Log(budget_policy(Budget(scope="route", name="chat", usd_per_day=limit)))
    driver = log.run(asks(1000))
    ok = [r for r in log.responses if r.status == "ok"]
    refused = [r for r in log.responses if r.status == "error"]
    assert len(ok) + len(refused) == 1000 == len({r.request_id for r in log.responses})
    assert {r.error.code for r in refused if r.error} == {"budget_exceeded"}
    book = ledger(driver, "route:chat")
    assert book.day_usd == pytest.approx(sum(log.costs)) == pytest.approx(len(ok) * COST)
    assert book.day_usd <= limit
    # Holds are the worst case: the budget is used up to less than one of them.
    assert limit - book.day_usd < WORST
    assert book.holds == {} and book.waiting == ()
    assert driver.state("chat").holds == {}


def test_a_tenant_and_its_route_are_two_ledgers_both_asked() -> None:
    policy = budget_policy(
        Budget(scope="route", name="chat", usd_per_day=1.0),
        Budget(scope="tenant", name="acme", usd_per_month=20 * COST),
    )
    log = Log(policy)
    driver = log.run(asks(50, tenant="acme"))
    ok = sum(r.status == "ok" for r in log.responses)
    # Worth 20 attempts; the 20th's worst case no longer fits after 19 were spent.
    assert ok == 19
    assert ledger(driver, "tenant:acme").month_usd == pytest.approx(19 * COST)
    assert ledger(driver, "route:chat").day_usd == pytest.approx(19 * COST)  # no more
    denied = [r for r in log.responses if r.error]
    assert all("tenant:acme" in r.error.message for r in denied if r.error)


def test_failed_attempts_settle_their_cost_and_retries_ask_again() -> None:
    policy = budget_policy(Budget(scope="route", name="chat", usd_per_day=1.0), fail=True)
    log = Log(policy, status=StatusClass.SERVER_ERROR)
    driver = log.run(asks(10))
    assert all(r.status == "error" for r in log.responses)
    book = ledger(driver, "route:chat")
    assert book.day_usd == pytest.approx(sum(log.costs)) == pytest.approx(20 * COST)
    assert book.holds == {}


def test_a_day_rolls_over_on_event_time() -> None:
    book = on_clock(Ledger(day="2023-11-14", day_usd=5.0, month="2023-11", month_usd=9.0), T0)
    assert (book.day_usd, book.month_usd) == (5.0, 9.0)
    later = on_clock(book, T0 + 86_400)
    assert (later.day, later.day_usd, later.month_usd) == ("2023-11-15", 0.0, 9.0)


def test_ledgers_and_holds_round_trip_in_rows() -> None:
    log = Log(budget_policy(Budget(scope="route", name="chat", usd_per_day=5 * COST)), lag=50)
    driver = log.run(asks(30))
    for key in ("chat", "budget:route:chat"):
        state = driver.state(key)
        assert loads(dumps(state)) == state
    assert loads(dumps(RouteState())).ledger is None
