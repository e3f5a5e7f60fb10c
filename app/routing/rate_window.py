"""A per-tenant request rate limit: fixed windows on event time, part of a route's row.

A fixed window per tenant on *event time*. Windows are aligned
to the epoch: window ``k`` is ``[k·w, (k+1)·w)``, so an event exactly at
``(k+1)·w`` opens a new window. Times are taken to the microsecond (the
resolution of the event timestamps) and windows computed in integers, so the
edge is exact: no float division puts ``60.0`` in window 0. Only admitted
requests count. An event older than the tenant's current window (event time
is not globally ordered) is counted in the current window: state never goes
back, and a replay of the same log gives the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class TenantWindow:
    #: Window index: the window is ``[index·w, (index+1)·w)`` in epoch seconds.
    index: int
    #: Requests admitted in it.
    count: int


@dataclass(frozen=True, slots=True)
class RateWindow:
    """Per-tenant fixed-window counters; part of a route's row."""

    tenants: dict[str, TenantWindow] = field(default_factory=dict)


def _micros(seconds: float) -> int:
    return round(seconds * _MICROS)


def window_index(now: float, window_s: float) -> int:
    """The epoch-aligned window holding event time ``now``; exact at the edge."""
    width = _micros(window_s)
    if width <= 0:
        raise ValueError(f"window_s must be positive (got {window_s!r})")
    return _micros(now) // width


def window_end(index: int, window_s: float) -> float:
    """Event time at which window ``index`` closes (for a Retry-After)."""
    return (index + 1) * _micros(window_s) / _MICROS


def admit(
    state: RateWindow, tenant: str, now: float, limit: int, window_s: float
) -> tuple[RateWindow, bool]:
    """Admit one request of ``tenant`` at event time ``now`` if its window has room.

    Returns the new state and the verdict; a refusal returns ``state`` itself
    (refusals are not counted). ``limit <= 0`` refuses everything.
    """
    index = window_index(now, window_s)
    current = state.tenants.get(tenant)
    if current is not None and current.index >= index:
        index, count = current.index, current.count
    else:
        count = 0
    if count >= limit:
        return state, False
    tenants = {**state.tenants, tenant: TenantWindow(index=index, count=count + 1)}
    return RateWindow(tenants=tenants), True


def retry_after_s(state: RateWindow, tenant: str, now: float, window_s: float) -> float:
    """Seconds from ``now`` until the tenant's current window closes (0 if none is open)."""
    current = state.tenants.get(tenant)
    if current is None:
        return 0.0
    return max(0.0, window_end(current.index, window_s) - now)


def prune(state: RateWindow, now: float, window_s: float) -> RateWindow:
    """Drop tenants whose window closed before ``now`` (they would restart at 0 anyway)."""
    index = window_index(now, window_s)
    kept = {t: w for t, w in state.tenants.items() if w.index >= index}
    return state if len(kept) == len(state.tenants) else RateWindow(tenants=kept)
