"""A route's state to and from its table row: JSON, with orjson.

The row is the JSON the pydantic state of earlier versions wrote
(``model_dump(mode="json")``): the same keys in the same order, the same values
(``tests/test_rows.py`` reads a row written by that code and writes it back
byte for byte), so rows already in a changelog load as they are and no
migration or version is needed. Floats round-trip exactly (orjson writes the
shortest representation that reads back to the same double).

Rows come from this module only (the router's own table), so loading trusts
their shape: no validation, only the float fields made floats again (JSON does
not tell ``1`` from ``1.0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.routing.rate_window import RateWindow, TenantWindow
from app.routing.state import (
    INITIAL_LATENCY_S,
    INITIAL_TOKENS_PER_S,
    Amount,
    ArmState,
    Breaker,
    BreakerPhase,
    Evidence,
    Hold,
    Ledger,
    Line,
    OpenAttempt,
    Pacer,
    Parked,
    Pin,
    Recent,
    RouteState,
    Spent,
    Sums,
    Waiting,
)

Row = dict[str, Any]


def dumps(state: RouteState) -> bytes:
    return orjson.dumps(to_row(state))


def loads(data: bytes | str) -> RouteState:
    return from_row(orjson.loads(data))


# --------------------------------------------------------------------------- to a row


def to_row(state: RouteState) -> Row:
    """The state as plain JSON values (what the table stores)."""
    row = _base_row(state)
    # Issue 13; each absent from rows that never had one (older rows read the same).
    if state.policy_version:
        row["policy_version"] = state.policy_version
    if state.holds:
        row["holds"] = {
            key: {"scopes": list(h.scopes), "amount": h.amount, "granted": h.granted}
            for key, h in state.holds.items()
        }
    if state.ledger is not None:
        row["ledger"] = _ledger_row(state.ledger)
    if state.node_counts.tenants:
        row["node_counts"] = {k: [w.index, w.count] for k, w in state.node_counts.tenants.items()}
    if state.node_spend:
        row["node_spend"] = {k: [p, usd] for k, (p, usd) in state.node_spend.items()}
    if state.affinity:  # issue 14
        row["affinity"] = {k: [p.deployment, p.until, p.started] for k, p in state.affinity.items()}
    if state.forwarded_through >= 0:
        row["forwarded_through"] = state.forwarded_through
    return row


def _open_row(a: OpenAttempt) -> Row:
    row: Row = {"deployment": a.deployment, "decided_at": a.decided_at, "deadline": a.deadline}
    if a.budget_nodes:
        row["budget_nodes"] = list(a.budget_nodes)
    if a.affinity:
        row["affinity"] = list(a.affinity)
    return row


def _ledger_row(ledger: Ledger) -> Row:
    return {
        "spent": {
            window: [spent.label, *_amount_row(spent.amount)]
            for window, spent in ledger.spent.items()
        },
        "holds": {key: _amount_row(amount) for key, amount in ledger.holds.items()},
        "waiting": [_waiting_row(w) for w in ledger.waiting],
        "settled": list(ledger.settled),
    }


def _waiting_row(w: Waiting) -> list[Any]:
    amount = _amount_row(w.amount)
    return [w.request_id, w.attempt, w.route, amount, list(w.scopes), w.index, w.deadline]


def _amount_row(amount: Amount) -> list[Any]:
    return [amount.usd, amount.tokens, amount.requests]


def _amount(value: Any) -> Amount:
    """``[usd, tokens, requests]``; a bare number is a row of the dollars-only ledger."""
    if isinstance(value, list):
        usd, tokens, requests = value
        return Amount(int(requests), int(tokens), float(usd))
    return Amount(usd=float(value))


def _ledger(row: Mapping[str, Any] | None) -> Ledger | None:
    if row is None:
        return None
    if "spent" in row:
        spent = {
            window: Spent(str(label), _amount(rest))
            for window, (label, *rest) in row["spent"].items()
        }
    else:  # a row of the dollars-only ledger: its day and month
        spent = {
            "day": Spent(str(row["day"]), Amount(usd=float(row["day_usd"]))),
            "month": Spent(str(row["month"]), Amount(usd=float(row["month_usd"]))),
        }
    return Ledger(
        spent=spent,
        holds={k: _amount(v) for k, v in row["holds"].items()},
        waiting=tuple(
            Waiting(str(r), int(a), str(route), _amount(m), tuple(s), int(i), float(d))
            for r, a, route, m, s, i, d in row["waiting"]
        ),
        settled=tuple(str(k) for k in row.get("settled", ())),
    )


def _base_row(state: RouteState) -> Row:
    return {
        "clock": state.clock,
        "position": state.position,
        "arms": {key: _arm_row(arm) for key, arm in state.arms.items()},
        "open_attempts": {key: _open_row(a) for key, a in state.open_attempts.items()},
        "accepted_through": dict(state.accepted_through),
        "expiry_check_at": state.expiry_check_at,
        "rate": {
            "tenants": {
                key: {"index": w.index, "count": w.count} for key, w in state.rate.tenants.items()
            }
        },
        "parked": {key: _parked_row(p) for key, p in state.parked.items()},
        "line": {
            "waiting": state.line.waiting,
            "after": state.line.after,
            "blocked_at": state.line.blocked_at,
        },
        "pacers": {
            key: {"multiplier": p.multiplier, "spent": p.spent, "requests": p.requests}
            for key, p in state.pacers.items()
        },
        "recent_grades": list(state.recent_grades),
    }


def _arm_row(arm: ArmState) -> Row:
    b = arm.breaker
    return {
        "pulls": arm.pulls,
        "total_reward": arm.total_reward,
        "alpha": arm.alpha,
        "beta": arm.beta,
        "avg_latency_s": arm.avg_latency_s,
        "latency_samples": arm.latency_samples,
        "in_flight": arm.in_flight,
        "rate_limited": arm.rate_limited,
        "retry_after_until": arm.retry_after_until,
        "breaker": {
            "state": b.state.value,
            "failures": b.failures,
            "last_failure_time": b.last_failure_time,
            "success_count": b.success_count,
        },
        "ewma_failure": arm.ewma_failure,
        "ewma_latency_ms": arm.ewma_latency_ms,
        **({"ewma_p95_ms": arm.ewma_p95_ms} if arm.ewma_p95_ms else {}),
        "observations": arm.observations,
        "tokens_per_s": arm.tokens_per_s,
        "throughput_samples": arm.throughput_samples,
        "recent": {
            "at": arm.recent.at,
            "slow": _sums_row(arm.recent.slow),
            "fast": _sums_row(arm.recent.fast),
        },
        "evidence": {key: _evidence_row(e) for key, e in arm.evidence.items()},
        **({"refused_tokens": arm.refused_tokens} if arm.refused_tokens else {}),
    }


def _sums_row(sums: Sums) -> Row:
    return {
        "calls": sums.calls,
        "failures": sums.failures,
        "answers": sums.answers,
        "reward": sums.reward,
        "latency_s": sums.latency_s,
    }


def _evidence_row(e: Evidence) -> Row:
    return {
        "answers": e.answers,
        "graded": e.graded,
        "weight": e.weight,
        "score": e.score,
        "square": e.square,
        "wins": e.wins,
        "costed": e.costed,
        "cost_usd": e.cost_usd,
        "tokens_in": e.tokens_in,
        "tokens_out": e.tokens_out,
    }


def _parked_row(p: Parked) -> Row:
    row: Row = {
        "request_id": p.request_id,
        "attempt": p.attempt,
        "carrier": p.carrier,
        "deadline": p.deadline,
        "tried": list(p.tried),
        "retry_at": p.retry_at,
        "waits": p.waits,
    }
    if p.again:  # absent from rows that never had one (older rows read the same)
        row["again"] = list(p.again)
    return row


# --------------------------------------------------------------------------- from a row


def from_row(row: Mapping[str, Any]) -> RouteState:
    """The state a row holds (missing keys: their defaults, as the pydantic state read them)."""
    line = row.get("line") or {}
    return RouteState(
        clock=float(row.get("clock", 0.0)),
        position=int(row.get("position", -1)),
        arms={key: _arm(value) for key, value in (row.get("arms") or {}).items()},
        open_attempts={
            key: OpenAttempt(
                deployment=a["deployment"],
                decided_at=float(a["decided_at"]),
                deadline=float(a["deadline"]),
                budget_nodes=tuple(a.get("budget_nodes", ())),
                affinity=tuple(a.get("affinity", ())),
            )
            for key, a in (row.get("open_attempts") or {}).items()
        },
        accepted_through={k: int(v) for k, v in (row.get("accepted_through") or {}).items()},
        expiry_check_at=float(row.get("expiry_check_at", 0.0)),
        rate=RateWindow(
            {
                key: TenantWindow(int(w["index"]), int(w["count"]))
                for key, w in ((row.get("rate") or {}).get("tenants") or {}).items()
            }
        ),
        parked={key: _parked(value) for key, value in (row.get("parked") or {}).items()},
        line=Line(
            waiting=int(line.get("waiting", 0)),
            after=int(line.get("after", -1)),
            blocked_at=int(line.get("blocked_at", -1)),
        ),
        pacers={
            key: Pacer(
                float(p["multiplier"]), float(p.get("spent", 0.0)), int(p.get("requests", 0))
            )
            for key, p in (row.get("pacers") or {}).items()
        },
        recent_grades=[str(g) for g in row.get("recent_grades") or []],
        policy_version=int(row.get("policy_version", 0)),
        holds={
            key: Hold(tuple(h["scopes"]), float(h["amount"]), bool(h["granted"]))
            for key, h in (row.get("holds") or {}).items()
        },
        ledger=_ledger(row.get("ledger")),
        node_counts=RateWindow(
            {
                k: TenantWindow(int(i), int(c))
                for k, (i, c) in (row.get("node_counts") or {}).items()
            }
        ),
        node_spend={k: (str(p), float(u)) for k, (p, u) in (row.get("node_spend") or {}).items()},
        affinity={
            k: Pin(str(d), float(u), float(s))
            for k, (d, u, s) in (row.get("affinity") or {}).items()
        },
        forwarded_through=int(row.get("forwarded_through", -1)),
    )


def _arm(row: Mapping[str, Any]) -> ArmState:
    b = row.get("breaker") or {}
    recent = row.get("recent") or {}
    return ArmState(
        pulls=int(row.get("pulls", 0)),
        total_reward=float(row.get("total_reward", 0.0)),
        alpha=float(row.get("alpha", 1.0)),
        beta=float(row.get("beta", 1.0)),
        avg_latency_s=float(row.get("avg_latency_s", INITIAL_LATENCY_S)),
        latency_samples=int(row.get("latency_samples", 0)),
        in_flight=int(row.get("in_flight", 0)),
        rate_limited=int(row.get("rate_limited", 0)),
        retry_after_until=float(row.get("retry_after_until", 0.0)),
        breaker=Breaker(
            state=BreakerPhase(b.get("state", BreakerPhase.CLOSED)),
            failures=int(b.get("failures", 0)),
            last_failure_time=float(b.get("last_failure_time", 0.0)),
            success_count=int(b.get("success_count", 0)),
        ),
        ewma_failure=float(row.get("ewma_failure", 0.0)),
        ewma_latency_ms=float(row.get("ewma_latency_ms", 0.0)),
        ewma_p95_ms=float(row.get("ewma_p95_ms", 0.0)),
        observations=int(row.get("observations", 0)),
        tokens_per_s=float(row.get("tokens_per_s", INITIAL_TOKENS_PER_S)),
        throughput_samples=int(row.get("throughput_samples", 0)),
        recent=Recent(
            at=float(recent.get("at", 0.0)),
            slow=_sums(recent.get("slow") or {}),
            fast=_sums(recent.get("fast") or {}),
        ),
        evidence={key: _evidence(e) for key, e in (row.get("evidence") or {}).items()},
        refused_tokens=int(row.get("refused_tokens", 0)),
    )


def _sums(row: Mapping[str, Any]) -> Sums:
    return Sums(
        calls=float(row.get("calls", 0.0)),
        failures=float(row.get("failures", 0.0)),
        answers=float(row.get("answers", 0.0)),
        reward=float(row.get("reward", 0.0)),
        latency_s=float(row.get("latency_s", 0.0)),
    )


def _evidence(row: Mapping[str, Any]) -> Evidence:
    return Evidence(
        answers=int(row.get("answers", 0)),
        graded=int(row.get("graded", 0)),
        weight=float(row.get("weight", 0.0)),
        score=float(row.get("score", 0.0)),
        square=float(row.get("square", 0.0)),
        wins=float(row.get("wins", 0.0)),
        costed=int(row.get("costed", 0)),
        cost_usd=float(row.get("cost_usd", 0.0)),
        tokens_in=float(row.get("tokens_in", 0.0)),
        tokens_out=float(row.get("tokens_out", 0.0)),
    )


def _parked(row: Mapping[str, Any]) -> Parked:
    return Parked(
        request_id=row["request_id"],
        attempt=int(row["attempt"]),
        carrier=int(row["carrier"]),
        deadline=float(row["deadline"]),
        tried=[str(t) for t in row.get("tried") or []],
        retry_at=float(row["retry_at"]),
        waits=int(row.get("waits", 0)),
        again=[str(t) for t in row.get("again") or []],
    )
