"""A key's state to and from its table row: JSON, with orjson.

A route's row holds its :class:`~app.routing.state.RouteState`; a budget's key
(``budget:SCOPE``) its :class:`~app.routing.budget_state.BudgetState`: the key tells
which (:func:`state_of`).

A route's row is the JSON the pydantic state of earlier versions wrote
(``model_dump(mode="json")``): the same keys in the same order, the same values
(``tests/test_rows.py`` reads a row written by that code and writes it back
byte for byte), so rows already in a changelog load as they are and no
migration or version is needed. A budget's row is its clock, position, policy
version and ledger; one written while a budget's key held a route state (those keys
among a route's, at their defaults) reads as the same budget state. Floats
round-trip exactly (orjson writes the shortest representation that reads back to
the same double).

The codec is derived from the state classes' fields (:mod:`app.routing.codec`): a
record is an object of its fields in field order, and ``ROW_FORMAT`` says where the
row departs from that (a feature's sub-state of the route state is written inline: its
fields are keys of the route's object, as they were before it had a record of its own).
A new field is written and read without a change here; one that rows written before it
lack reads as its default.

Rows come from this module only (the router's own table), so loading trusts
their shape: no validation, only the values made their fields' types again (JSON
does not tell ``1`` from ``1.0``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from app.routing.budget_state import Amount, BudgetState, Ledger, Spent, Waiting
from app.routing.cache_state import CacheEntry, CacheRef, ResponseCache, Serving
from app.routing.codec import Codec, Format
from app.routing.keys import KeyState, is_ledger_key
from app.routing.rate_window import RateWindow, TenantWindow
from app.routing.state import (
    ArmState,
    OpenAttempt,
    Parked,
    Pin,
    RouteBudgets,
    RouteState,
)

Row = dict[str, Any]


def _node_counts_row(counts: RateWindow) -> Row:
    return {key: [w.index, w.count] for key, w in counts.tenants.items()}


def _node_counts(row: Mapping[str, Any]) -> RateWindow:
    return RateWindow({key: TenantWindow(int(i), int(c)) for key, (i, c) in row.items()})


def _dollars_only_ledger(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """A row of the dollars-only ledger (its day and month) as a row of today's."""
    if "spent" in row:
        return row
    windows = {w: [row[w], row[f"{w}_usd"], 0, 0] for w in ("day", "month")}
    return {**row, "spent": windows}


def _dollars_only_amount(value: Any) -> Any:
    """An amount of the dollars-only ledger (a bare number) as today's."""
    return value if isinstance(value, list) else [value, 0, 0]


ROW_FORMAT = Format(
    # Absent from rows that never had one (older rows read the same).
    sparse={
        RouteState: (
            "policy_version",
            "node_counts",
            "node_spend",
            "affinity",
            "forwarded_through",
        ),
        ResponseCache: ("entries", "serving"),
        RouteBudgets: ("holds",),
        # A budget's row written before it had a state of its own is a route's with a
        # ledger: read as this one (the route's fields are not read), written without them.
        BudgetState: ("policy_version", "ledger"),
        ArmState: ("ewma_p95_ms", "refused_tokens"),
        OpenAttempt: ("budget_nodes", "affinity", "cache"),
        Parked: ("again",),
    },
    arrays={
        Amount: ("usd", "tokens", "requests"),
        Spent: ("label", "*amount"),
        Waiting: None,
        Pin: None,
        CacheEntry: None,
        CacheRef: None,
        Serving: None,
    },
    custom={(RouteState, "node_counts"): (_node_counts_row, _node_counts)},
    upgrades={Ledger: _dollars_only_ledger, Amount: _dollars_only_amount},
    # A feature's sub-state: its fields are the route row's keys they were before it.
    inline={
        (RouteState, "parking"): {},
        (RouteState, "cache"): {"entries": "cache", "serving": "cache_serving"},
        (RouteState, "budgets"): {},
    },
    # Where the route's holds were before they were its budgets' (its pacers are in place).
    after={RouteState: {"holds": "policy_version"}},
)
_ROWS = Codec(ROW_FORMAT)

#: A route's state as plain JSON values (what the table stores).
to_row: Callable[[RouteState], Row] = _ROWS.encoder(RouteState)
#: The route state a row holds (missing keys: their defaults, as the pydantic state read them).
from_row: Callable[[Mapping[str, Any]], RouteState] = _ROWS.decoder(RouteState)
#: A budget's state as plain JSON values, and the budget state a row holds.
budget_to_row: Callable[[BudgetState], Row] = _ROWS.encoder(BudgetState)
budget_from_row: Callable[[Mapping[str, Any]], BudgetState] = _ROWS.decoder(BudgetState)
_ledger: Callable[[Mapping[str, Any]], Ledger] = _ROWS.decoder(Ledger)


def row_of(state: KeyState) -> Row:
    """Any key's state as its row."""
    return budget_to_row(state) if isinstance(state, BudgetState) else to_row(state)


def state_of(key: str, row: Mapping[str, Any]) -> KeyState:
    """The state the row of ``key`` holds: a budget's for a budget's key, else a route's."""
    return budget_from_row(row) if is_ledger_key(key) else from_row(row)


def dumps(state: KeyState) -> bytes:
    return orjson.dumps(row_of(state))


def loads(data: bytes | str) -> RouteState:
    return from_row(orjson.loads(data))


def loads_budget(data: bytes | str) -> BudgetState:
    return budget_from_row(orjson.loads(data))
