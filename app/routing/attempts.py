"""How many attempts a request may make on its route, and whether a fallback model is
left: the route's ``max_attempts``, one more when local-first handed over, a request
that asked for its first deployment only, a dynamic route's fallback models.
"""

from __future__ import annotations

from collections.abc import Collection

from app.contract import RequestAccepted
from app.routing.candidates import local_arm
from app.routing.policy import Policy


def first_attempt(accepted: RequestAccepted) -> int:
    """The number of a request's first attempt on this route: a fallback model's
    attempts number on from those made before (dynamic routes)."""
    return 1 + (accepted.dynamic.attempt_base if accepted.dynamic is not None else 0)


def attempt_limit(
    accepted: RequestAccepted,
    attempt: int,
    local_now: bool,
    tried: Collection[str],
    policy: Policy,
) -> int:
    """The number of the route's last attempt at this request, as the executor counts
    (from the request's first attempt on the route: a fallback model's number on);
    ``local_now``: the local-first deployment is taking this attempt. With
    a fallback model left, a retriable failure is never the request's last answer
    (:func:`app.routing.dynamic.fall_back` takes it)."""
    limit = first_attempt(accepted) - 1 + attempts_allowed(accepted, tried, policy, local_now)
    return max(limit, attempt + 1) if has_fallback(accepted) else limit


def attempts_allowed(
    accepted: RequestAccepted, tried: Collection[str], policy: Policy, local_now: bool = False
) -> int:
    """The route's ``max_attempts``, plus one when the local-first deployment took (or
    is taking: ``local_now``) the request's first attempt: not confident, or failing, it
    hands over without using one of the cloud's attempts."""
    if not allows_fallbacks(accepted):
        return 1
    local = local_arm(accepted, policy)
    took = local is not None and (local_now or local.deployment in tried)
    return policy.max_attempts(accepted.route) + (1 if took else 0)


def allows_fallbacks(accepted: RequestAccepted) -> bool:
    """False when the request asked for its first deployment only (``provider:
    {allow_fallbacks: false}``): one attempt, no fallback model."""
    asked = accepted.request.provider
    return asked is None or asked.allow_fallbacks


def has_fallback(accepted: RequestAccepted) -> bool:
    """Whether a fallback model of the request's dynamic route is left to try."""
    dynamic = accepted.dynamic
    return dynamic is not None and bool(dynamic.fallbacks) and allows_fallbacks(accepted)
