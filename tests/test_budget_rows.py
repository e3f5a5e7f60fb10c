"""A budget's row (app/routing/rows.py): its own state, and rows written while a budget's
key held a route state read as it."""

from __future__ import annotations

from dataclasses import replace

import orjson
from factories import T0, params, provider

from app.config.schema import Budget, RouteConfig, RoutingConfig
from app.contract import BudgetAsk, BudgetSettle, PolicyChanged, derived_id
from app.contract.policy import PolicyDocument
from app.routing.answers import at
from app.routing.book import document_hash, params_document
from app.routing.budget_state import Amount, BudgetState, Ledger, Spent, Waiting
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.rows import budget_to_row, dumps, row_of, state_of
from app.routing.state import RouteState

KEY = "budget:tenant:acme"
#: The row of a tenant's ledger as the code wrote it when a budget's key held a route
#: state (the route's fields at their defaults, then its policy version and ledger): an
#: attempt held, an ask waiting for it, two attempts settled.
ROUTE_SHAPED_ROW = (
    '{"clock":1700000001.0,"position":41,"arms":{},"open_attempts":{},"accepted_through":{},"'
    'expiry_check_at":0.0,"rate":{"tenants":{}},"parked":{},"line":{"waiting":0,"after":-1,"b'
    'locked_at":-1},"pacers":{},"recent_grades":[],"policy_version":2,"ledger":{"spent":{"min'
    'ute":["2023-11-14T22:13",0.0,900,6],"hour":["2023-11-14T22",0.0,900,6],"day":["2023-11-1'
    '4",0.0,900,6],"month":["2023-11",0.0,900,6]},"holds":{"r8#1":[0.125,240,1]},"waiting":[['
    '"r9",1,"chat",[0.25,240,1],["tenant:acme","key:k1"],0,1700000060.0]],"settled":["r0#1","'
    'r1#1"]}}'
)
#: The same code's row of a budget's key that had folded a policy change only (no ledger).
ROUTE_SHAPED_ROW_WITHOUT_LEDGER = (
    '{"clock":1700000001.0,"position":3,"arms":{},"open_attempts":{},"accepted_through":{},'
    '"expiry_check_at":0.0,"rate":{"tenants":{}},"parked":{},'
    '"line":{"waiting":0,"after":-1,"blocked_at":-1},"pacers":{},"recent_grades":[],'
    '"policy_version":1}'
)


def budget_policy() -> Policy:
    config = RoutingConfig(
        providers=[provider("a")],
        routes={"chat": RouteConfig(providers=["a"])},
        budgets=[
            Budget(scope="tenant", name="acme", tokens_per_hour=2000, usd_per_day=1.0),
            Budget(scope="key", name="k1", usd_per_day=1.0),
        ],
    )
    return Policy(config, params())


def windows(usd: float, tokens: int, requests: int) -> dict[str, Spent]:
    labels = {"minute": "2023-11-14T22:13", "hour": "2023-11-14T22"}
    labels |= {"day": "2023-11-14", "month": "2023-11"}
    return {w: Spent(label, Amount(requests, tokens, usd)) for w, label in labels.items()}


def test_a_row_written_when_a_budget_held_a_route_state_reads_as_its_budget_state() -> None:
    state = state_of(KEY, orjson.loads(ROUTE_SHAPED_ROW))
    waiting = Waiting("r9", 1, "chat", Amount(1, 240, 0.25), ("tenant:acme", "key:k1"), 0, T0 + 60)
    ledger = Ledger(
        windows(0.0, 900, 6), {"r8#1": Amount(1, 240, 0.125)}, (waiting,), ("r0#1", "r1#1")
    )
    assert state == BudgetState(T0 + 1, 41, 2, ledger)
    # Written back without the route's fields; the ledger's bytes as they were.
    row = row_of(state)
    assert list(row) == ["clock", "position", "policy_version", "ledger"]
    old_ledger = orjson.loads(ROUTE_SHAPED_ROW)["ledger"]
    assert orjson.dumps(row["ledger"]) == orjson.dumps(old_ledger)
    assert state_of(KEY, orjson.loads(dumps(state))) == state


def test_a_row_without_a_ledger_reads_as_a_budget_that_counted_nothing() -> None:
    state = state_of(KEY, orjson.loads(ROUTE_SHAPED_ROW_WITHOUT_LEDGER))
    assert state == BudgetState(T0 + 1, 3, 1, None)
    assert budget_to_row(state) == {"clock": T0 + 1, "position": 3, "policy_version": 1}


def test_the_key_tells_a_route_s_row_from_a_budget_s() -> None:
    row = orjson.loads(ROUTE_SHAPED_ROW_WITHOUT_LEDGER)
    assert isinstance(state_of("chat", row), RouteState)
    assert isinstance(state_of(KEY, row), BudgetState)
    assert "ledger" not in row_of(RouteState())


def test_a_ledger_folds_on_from_a_row_written_when_it_held_a_route_state() -> None:
    """The settlement of the attempt held frees enough for the ask waiting: it is held
    and passed on to the next ledger; the same settlement again changes nothing (what the
    code that wrote the row folded from it, record for record)."""
    driver = Driver(budget_policy)
    driver.states[KEY] = state_of(KEY, orjson.loads(ROUTE_SHAPED_ROW))
    settle = BudgetSettle(
        id=derived_id("budget.settle", "r8", 1, "tenant:acme"),
        occurred_at=at(T0 + 30),
        scope="tenant:acme",
        route="chat",
        request_id="r8",
        attempt=1,
        cost_usd=0.1,
        tokens=200,
        requests=1,
    )
    step = driver.fold(settle, 42)
    (passed,) = step.records
    assert orjson.loads(passed.model_dump_json()) == {
        "id": "2cfc5352-d506-5d12-97fd-f879e8a94f8a",
        "schema_version": 1,
        "occurred_at": "2023-11-14T22:13:50Z",
        "type": "budget.ask",
        "route": "chat",
        "request_id": "r9",
        "attempt": 1,
        "amount_usd": 0.25,
        "tokens": 240,
        "requests": 1,
        "scopes": ["tenant:acme", "key:k1"],
        "index": 1,
        "deadline": 1700000060.0,
    }
    state = driver.state(KEY)
    assert isinstance(state, BudgetState) and state.ledger is not None
    assert state.ledger.spent == windows(0.1, 1100, 7)
    assert state.ledger.holds == {"r9#1": Amount(1, 240, 0.25)}
    assert (state.ledger.waiting, state.ledger.settled) == ((), ("r0#1", "r1#1", "r8#1"))
    assert (state.clock, state.position) == (T0 + 30, 42)
    again = driver.fold(settle, 42)
    assert not again.applied and not again.records and driver.state(KEY) == state


def test_a_new_policy_s_limits_serve_the_asks_waiting() -> None:
    """Version 3 raises the tenant's tokens per hour: the ask that waited is held and
    passed on; a copy of the change changes nothing more."""
    config = budget_policy().config
    view = config.model_dump(mode="json", exclude={"gateway_keys": True})
    document = PolicyDocument(config=view, params=params_document(params()))
    driver = Driver(budget_policy)
    driver.states[KEY] = state_of(KEY, orjson.loads(ROUTE_SHAPED_ROW))
    change = PolicyChanged(
        id=derived_id("policy.changed", 3, KEY),
        occurred_at=at(T0 + 5),
        route=KEY,
        version=3,
        hash=document_hash(document),
        document=document,
        source="apply",
    )
    step = driver.fold(change, 42)
    (passed,) = step.records
    assert isinstance(passed, BudgetAsk) and (passed.request_id, passed.index) == ("r9", 1)
    state = driver.state(KEY)
    assert isinstance(state, BudgetState) and state.ledger is not None
    assert (state.clock, state.position, state.policy_version) == (T0 + 1, 42, 3)
    assert state.ledger.holds == {"r8#1": Amount(1, 240, 0.125), "r9#1": Amount(1, 240, 0.25)}
    assert state.ledger.waiting == ()
    copy = driver.fold(change, 43)
    assert copy.applied and not copy.records and driver.state(KEY) == replace(state, position=43)
