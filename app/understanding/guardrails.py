"""Seed 000 §9 step 3 (``check_input``): forbidden keywords and a per-tenant rate limit.

**Forbidden keywords.** A configured list; a keyword matches case- and
accent-insensitively (``Édit`` matches ``edit``), as a whole word or phrase:
``kill`` does not match ``skill`` or ``killer``, ``c++`` is found in ``I love C++.``
(word boundaries hold for keywords that start or end with a symbol), and the
words of a phrase may be separated by any whitespace. The first
keyword in *configuration order* that occurs decides (deterministic, whatever
the prompt's order), and the verdict names only that rule and keyword — never
any prompt text around it.

**Rate limit.** A fixed window per tenant on *event time*. Windows are aligned
to the epoch: window ``k`` is ``[k·w, (k+1)·w)``, so an event exactly at
``(k+1)·w`` opens a new window. Times are taken to the microsecond (the
resolution of the event timestamps) and windows computed in integers, so the
edge is exact: no float division puts ``60.0`` in window 0. Only admitted
requests count. An event older than the tenant's current window (event time
is not globally ordered) is counted in the current window: state never goes
back, and a replay of the same log gives the same answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.understanding.text import fold, prompt_text

#: Exclusion/refusal reasons, as they appear in traces and error codes.
RULE_FORBIDDEN_KEYWORD = "forbidden_keyword"
RULE_RATE_LIMITED = "tenant_rate_limited"

_MICROS = 1_000_000

if TYPE_CHECKING:
    from app.events import ChatRequest


@dataclass(frozen=True, slots=True)
class KeywordRule:
    #: The keyword as configured (this, and only this, may be shown).
    keyword: str
    #: Position in the configured list (1-based), to name the rule.
    index: int
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class GuardrailHit:
    """A refusal: which rule, which configured keyword. Never prompt text."""

    rule: str
    keyword: str
    index: int

    @property
    def message(self) -> str:
        return f"request refused by guardrail: forbidden keyword #{self.index} ({self.keyword!r})"


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    words = fold(keyword).split()
    if not words:
        raise ValueError("a forbidden keyword must not be empty")
    body = r"\s+".join(re.escape(word) for word in words)
    # Lookarounds, not \b: they also delimit keywords that start or end with a symbol.
    return re.compile(rf"(?<!\w){body}(?!\w)")


def compile_keywords(keywords: Sequence[str]) -> tuple[KeywordRule, ...]:
    """Compile the configured list once (ValueError on an empty keyword)."""
    return tuple(
        KeywordRule(keyword, index, _keyword_pattern(keyword))
        for index, keyword in enumerate(keywords, start=1)
    )


def check_forbidden(text: str, rules: Sequence[KeywordRule]) -> GuardrailHit | None:
    """The first rule (configuration order) whose keyword occurs in ``text``, else None."""
    folded = fold(text)
    for rule in rules:
        if rule.pattern.search(folded):
            return GuardrailHit(RULE_FORBIDDEN_KEYWORD, rule.keyword, rule.index)
    return None


def check_request(request: ChatRequest, rules: Sequence[KeywordRule]) -> GuardrailHit | None:
    """:func:`check_forbidden` on every message's text (system prompts included)."""
    return check_forbidden(prompt_text(request), rules)


# --------------------------------------------------------------------------- rate limit


@dataclass(frozen=True, slots=True)
class TenantWindow:
    #: Window index: the window is ``[index·w, (index+1)·w)`` in epoch seconds.
    index: int
    #: Requests admitted in it.
    count: int


@dataclass(frozen=True, slots=True)
class RateWindow:
    """Per-tenant fixed-window counters; part of a route's row (app/routing/rows.py)."""

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
