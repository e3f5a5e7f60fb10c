"""A budget's ledger: holds, waits, settlements. Pure, on event time.

A budget limits requests, tokens and dollars per UTC minute, hour, day and month
(app/config/access.py). An ask is held when, for every limit, the window's spend,
plus what the ledger already holds for attempts in flight, plus the ask's worst
case, stays within it. It is refused at once when the spend alone plus the ask
passes a limit (it cannot fit before the window ends): with the seconds until the
next window when that one could hold it (a 429's Retry-After). Otherwise it waits,
first come first served, until settlements free enough; a waiting ask is given up
at its request's deadline (its route answers it then).

The guarantee: spend never passes a limit as long as an attempt uses no more than
its hold. A hold is the attempt's worst case: the prompt's characters as input
tokens (a token is at least one character for the tokenizers in use) and the
request's ``max_tokens`` (else the budget's ``default_max_tokens``) as output
tokens, priced at the highest prices among the route's deployments, and one
request for a first attempt. An attempt that reports more usage than that is still
counted in full: the spend is exact, and the overshoot is what such attempts used
beyond their hold (at most one request's worst case per attempt in flight).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from app.config.access import UNITS, WINDOWS
from app.config.schema import Budget
from app.contract import BudgetAsk, BudgetSettle, BudgetVerdict, RoutingLogEvent, derived_id
from app.routing.answers import at
from app.routing.budget_state import Amount, Ledger, Spent, Waiting
from app.routing.state import attempt_key

#: Asks a ledger keeps waiting at most; past it, an ask is refused (``budget_busy``).
MAX_WAITING = 10_000
#: Settled attempts a ledger remembers, so that copies re-sent after a crash (the route
#: re-folds from its last row and sends its asks and settlements again) change nothing.
RECENT_SETTLED = 4096
_FORMATS = {"minute": "%Y-%m-%dT%H:%M", "hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "month": "%Y-%m"}


@dataclass(frozen=True, slots=True)
class Window:
    """A limit's state, as shown: spent, limit and what remains (None: no limit)."""

    unit: str
    window: str
    label: str
    spent: float
    limit: float | None
    remaining: float | None


def windows(ledger: Ledger, budget: Budget | None) -> list[Window]:
    """Per unit and window limited (and ``usd`` per day and month always): what was spent,
    the limit and what remains (limit − spent − held), as ``/admin/budgets`` and the
    metrics show them (None: no limit)."""
    shown = {("usd", "day"), ("usd", "month")}
    if budget is not None:
        shown |= {(unit, window) for unit, window, _ in budget.limits()}
    held = ledger.held
    out = []
    for unit in UNITS:
        for window in WINDOWS:
            if (unit, window) not in shown:
                continue
            spent = float(getattr(ledger.in_window(window).amount, unit))
            limit = None if budget is None else budget.limit(unit, window)
            remaining = None if limit is None else limit - spent - getattr(held, unit)
            out.append(
                Window(unit, window, ledger.in_window(window).label, spent, limit, remaining)
            )
    return out


def label_of(window: str, clock: float) -> str:
    """The UTC window ``clock`` falls in (``2026-12-05T03:41``, ``2026-12-05T03``, …)."""
    return datetime.fromtimestamp(clock, UTC).strftime(_FORMATS[window])


def seconds_left(window: str, clock: float) -> float:
    """Seconds from ``clock`` to the start of the next window."""
    moment = datetime.fromtimestamp(clock, UTC)
    if window == "minute":
        start = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
    elif window == "hour":
        start = moment.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    elif window == "day":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    else:
        first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        start = (first + timedelta(days=32)).replace(day=1)
    return start.timestamp() - clock


def on_clock(ledger: Ledger, clock: float) -> Ledger:
    """The ledger in the UTC minute, hour, day and month of ``clock`` (a new window starts
    at zero)."""
    spent = dict(ledger.spent)
    changed = False
    for window in WINDOWS:
        label = label_of(window, clock)
        if ledger.in_window(window).label != label:
            spent[window] = Spent(label)
            changed = True
    return replace(ledger, spent=spent) if changed else ledger


def ask(
    ledger: Ledger, event: BudgetAsk, budget: Budget | None, clock: float
) -> tuple[Ledger, list[RoutingLogEvent]]:
    """Hold, queue or refuse an ask; the records that answer it."""
    ledger = on_clock(ledger, clock)
    key = attempt_key(event.request_id, event.attempt)
    if key in ledger.holds:  # the route asked again (a copy after a crash): same answer
        return ledger, [_granted(event, clock)]
    if key in ledger.settled:  # asked again after it ended: its verdict is in the log
        return ledger, []
    if any(attempt_key(w.request_id, w.attempt) == key for w in ledger.waiting):
        return ledger, []
    waiting = _waiting(event)
    if ledger.waiting and budget is not None:
        if len(ledger.waiting) >= MAX_WAITING:
            return ledger, [_denied(waiting, clock, "budget_busy")]
        refusal = _refusal(ledger, waiting.amount, budget, clock)
        if refusal is not None:
            return ledger, [_denied(waiting, clock, *refusal)]
        return replace(ledger, waiting=(*ledger.waiting, waiting)), []
    return _consider(ledger, waiting, budget, clock)


def settle(
    ledger: Ledger, event: BudgetSettle, budget: Budget | None, clock: float
) -> tuple[Ledger, list[RoutingLogEvent]]:
    """Count what an attempt used (once), free its hold, then serve the asks that now fit."""
    ledger = on_clock(ledger, clock)
    key = attempt_key(event.request_id, event.attempt)
    if key not in ledger.holds:
        return ledger, []  # a copy: already settled (or never held: nothing to count)
    holds = {k: v for k, v in ledger.holds.items() if k != key}
    used = Amount(event.requests, event.tokens, event.cost_usd)
    spent = {
        window: Spent(ledger.in_window(window).label, ledger.in_window(window).amount.plus(used))
        for window in WINDOWS
    }
    ledger = replace(
        ledger,
        holds=holds,
        spent=spent,
        settled=(*ledger.settled, key)[-RECENT_SETTLED:],
    )
    return serve_waiting(ledger, budget, clock)


def serve_waiting(
    ledger: Ledger, budget: Budget | None, clock: float
) -> tuple[Ledger, list[RoutingLogEvent]]:
    """Asks that waited, in order, while the first one fits (or can be answered)."""
    out: list[RoutingLogEvent] = []
    queue = list(ledger.waiting)
    ledger = replace(ledger, waiting=())
    while queue:
        head = queue[0]
        if head.deadline <= clock:
            queue.pop(0)  # its route has answered it: nothing to send
            continue
        ledger, sent = _consider(ledger, head, budget, clock)
        if ledger.waiting:  # still cannot hold it: it and those after it wait on
            return replace(ledger, waiting=(*ledger.waiting, *queue[1:])), out
        queue.pop(0)
        out += sent
    return ledger, out


def _consider(
    ledger: Ledger, waiting: Waiting, budget: Budget | None, clock: float
) -> tuple[Ledger, list[RoutingLogEvent]]:
    if budget is None:  # the budget was removed by a policy change: nothing to hold
        return ledger, [_passed(waiting, clock)]
    refusal = _refusal(ledger, waiting.amount, budget, clock)
    if refusal is not None:
        return ledger, [_denied(waiting, clock, *refusal)]
    if _over(ledger, ledger.held.plus(waiting.amount), budget) is not None:
        return replace(ledger, waiting=(*ledger.waiting, waiting)), []
    key = attempt_key(waiting.request_id, waiting.attempt)
    ledger = replace(ledger, holds={**ledger.holds, key: waiting.amount})
    return ledger, [_passed(waiting, clock)]


def _over(ledger: Ledger, extra: Amount, budget: Budget) -> tuple[str, str, float] | None:
    """The first (unit, window, limit) that the window's spend plus ``extra`` passes."""
    for unit, window, limit in budget.limits():
        if getattr(ledger.in_window(window).amount, unit) + getattr(extra, unit) > limit:
            return unit, window, limit
    return None


def _refusal(
    ledger: Ledger, amount: Amount, budget: Budget, clock: float
) -> tuple[str, float | None] | None:
    """Why the ask can never be held in the current windows (the spend alone and it pass a
    limit), and when a later window could hold it (None: larger than the limit itself);
    None when it may still be held once attempts in flight settle."""
    over = _over(ledger, amount, budget)
    if over is None:
        return None
    unit, window, limit = over
    spent = getattr(ledger.in_window(window).amount, unit)
    label = ledger.in_window(window).label
    shown = f"${spent:.6f} of ${limit:g}" if unit == "usd" else f"{spent:,} of {limit:,} {unit}"
    reason = f"{window} {label}: {shown} used"
    if getattr(amount, unit) > limit:
        return f"{reason}; this request alone needs {getattr(amount, unit):,}", None
    return reason, round(seconds_left(window, clock), 3)


def _passed(waiting: Waiting, clock: float) -> RoutingLogEvent:
    """Held here: on to the next ledger, or back to the route when this was the last."""
    following = waiting.index + 1
    if following < len(waiting.scopes):
        return BudgetAsk(
            id=derived_id("budget.ask", waiting.request_id, waiting.attempt, following),
            occurred_at=at(clock),
            route=waiting.route,
            request_id=waiting.request_id,
            attempt=waiting.attempt,
            amount_usd=waiting.amount.usd,
            tokens=waiting.amount.tokens,
            requests=waiting.amount.requests,
            scopes=list(waiting.scopes),
            index=following,
            deadline=waiting.deadline,
        )
    return _verdict(waiting, clock, granted=True)


def _granted(event: BudgetAsk, clock: float) -> RoutingLogEvent:
    return _passed(_waiting(event), clock)


def _waiting(event: BudgetAsk) -> Waiting:
    return Waiting(
        event.request_id,
        event.attempt,
        event.route,
        Amount(event.requests, event.tokens, event.amount_usd),
        tuple(event.scopes),
        event.index,
        event.deadline,
    )


def _denied(
    waiting: Waiting, clock: float, reason: str, retry_after_s: float | None = None
) -> RoutingLogEvent:
    return _verdict(waiting, clock, granted=False, reason=reason, retry_after_s=retry_after_s)


def _verdict(
    waiting: Waiting,
    clock: float,
    *,
    granted: bool,
    reason: str = "",
    retry_after_s: float | None = None,
) -> BudgetVerdict:
    return BudgetVerdict(
        id=derived_id("budget.verdict", waiting.request_id, waiting.attempt),
        occurred_at=at(clock),
        route=waiting.route,
        request_id=waiting.request_id,
        attempt=waiting.attempt,
        granted=granted,
        scopes=list(waiting.scopes[: waiting.index + (1 if granted else 0)]),
        denied_by=None if granted else waiting.scopes[waiting.index],
        reason=reason,
        retry_after_s=retry_after_s,
    )
