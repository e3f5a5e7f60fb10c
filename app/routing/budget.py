"""A budget's ledger (issue 13 §3): holds, waits, settlements. Pure, on event time.

An ask is held when the budget's spend in the current UTC day and month, plus
what it already holds for attempts in flight, plus the ask's worst case, stays
within each limit. It is refused at once when the spend alone plus the ask
would pass a limit (it could never fit before the window ends), and otherwise
waits, first come first served, until settlements free enough; a waiting ask is
given up at its request's deadline (its route answers it then).

The guarantee: spend never passes a limit as long as an attempt costs no more
than its hold. A hold is the attempt's worst case: the prompt's characters as
input tokens (a token is at least one character for the tokenizers in use) and
the request's ``max_tokens`` (else the budget's ``default_max_tokens``) as output
tokens, at the highest prices among the route's deployments. An attempt that
reports more usage than that is still counted in full: the spend is exact, and
the overshoot is what such attempts cost beyond their hold.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from app.config import Budget
from app.events import BudgetAsk, BudgetSettle, BudgetVerdict, RoutingLogEvent, derived_id
from app.routing.answers import at
from app.routing.state import Ledger, Waiting, attempt_key

#: Asks a ledger keeps waiting at most; past it, an ask is refused (``budget_busy``).
MAX_WAITING = 10_000
#: Settled attempts a ledger remembers, so that copies re-sent after a crash (the route
#: re-folds from its last row and sends its asks and settlements again) change nothing.
RECENT_SETTLED = 4096


def windows(
    ledger: Ledger, budget: Budget | None
) -> list[tuple[str, float, float | None, float | None]]:
    """Per window (``day``, ``month``): spend, limit and what remains (limit − spend −
    holds), as ``/admin/budgets`` and the metrics show them (None: no limit)."""
    out = []
    for window, spent in (("day", ledger.day_usd), ("month", ledger.month_usd)):
        limit = None if budget is None else getattr(budget, f"usd_per_{window}")
        out.append((window, spent, limit, None if limit is None else limit - spent - ledger.held))
    return out


def on_clock(ledger: Ledger, clock: float) -> Ledger:
    """The ledger in the UTC day and month of ``clock`` (a new one starts at zero)."""
    moment = datetime.fromtimestamp(clock, UTC)
    day, month = moment.strftime("%Y-%m-%d"), moment.strftime("%Y-%m")
    if ledger.day == day and ledger.month == month:
        return ledger
    day_usd = ledger.day_usd if ledger.day == day else 0.0
    month_usd = ledger.month_usd if ledger.month == month else 0.0
    return replace(ledger, day=day, day_usd=day_usd, month=month, month_usd=month_usd)


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
        if _never_fits(ledger, waiting.amount, budget):
            return ledger, [_denied(waiting, clock, _exceeded(ledger, waiting.amount, budget))]
        return replace(ledger, waiting=(*ledger.waiting, waiting)), []
    return _consider(ledger, waiting, budget, clock)


def settle(
    ledger: Ledger, event: BudgetSettle, budget: Budget | None, clock: float
) -> tuple[Ledger, list[RoutingLogEvent]]:
    """Count an attempt's cost (once), free its hold, then serve the asks that now fit."""
    ledger = on_clock(ledger, clock)
    key = attempt_key(event.request_id, event.attempt)
    if key not in ledger.holds:
        return ledger, []  # a copy: already settled (or never held: nothing to count)
    holds = {k: v for k, v in ledger.holds.items() if k != key}
    ledger = replace(
        ledger,
        holds=holds,
        day_usd=ledger.day_usd + event.cost_usd,
        month_usd=ledger.month_usd + event.cost_usd,
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
    if _never_fits(ledger, waiting.amount, budget):
        return ledger, [_denied(waiting, clock, _exceeded(ledger, waiting.amount, budget))]
    if not _fits(ledger, ledger.held + waiting.amount, budget):
        return replace(ledger, waiting=(*ledger.waiting, waiting)), []
    key = attempt_key(waiting.request_id, waiting.attempt)
    ledger = replace(ledger, holds={**ledger.holds, key: waiting.amount})
    return ledger, [_passed(waiting, clock)]


def _fits(ledger: Ledger, extra: float, budget: Budget) -> bool:
    day_ok = budget.usd_per_day is None or ledger.day_usd + extra <= budget.usd_per_day
    month_ok = budget.usd_per_month is None or ledger.month_usd + extra <= budget.usd_per_month
    return day_ok and month_ok


def _never_fits(ledger: Ledger, amount: float, budget: Budget) -> bool:
    return not _fits(ledger, amount, budget)


def _exceeded(ledger: Ledger, amount: float, budget: Budget) -> str:
    if budget.usd_per_day is not None and ledger.day_usd + amount > budget.usd_per_day:
        return f"day {ledger.day}: ${ledger.day_usd:.6f} of ${budget.usd_per_day:g} spent"
    return f"month {ledger.month}: ${ledger.month_usd:.6f} of ${budget.usd_per_month:g} spent"


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
            amount_usd=waiting.amount,
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
        event.amount_usd,
        tuple(event.scopes),
        event.index,
        event.deadline,
    )


def _denied(waiting: Waiting, clock: float, reason: str) -> RoutingLogEvent:
    return _verdict(waiting, clock, granted=False, reason=reason)


def _verdict(waiting: Waiting, clock: float, *, granted: bool, reason: str = "") -> BudgetVerdict:
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
    )
