"""Cache and session affinity, as route state on event time.

When an answer reports a real prompt-cache read (``tokens_cached`` > 0), the
request's context — its prompt prefix hash (:mod:`app.understanding.prefix`) —
is pinned to the deployment that answered for ``context_ttl_s`` (15 min); with a
``session_id`` the session is pinned too, renewed by each new cache read for
``session_ttl_s``, for at most ``session_max_s`` (24 h) from its first pin. A
later request of the session (else of the context) goes to the pinned deployment
when that deployment is among its eligible candidates: breakers, Retry-After,
concurrency, provider lists, pins, domains and the auto router's rules all come
first, so a breaker opening on the pinned deployment moves the session at once.

A request opts out with ``routing.affinity: false``, or keeps its context's
affinity while ignoring its session id with ``routing.session_affinity: false``.

The keys a request may pin ride on its open attempt (the outcome does not carry
the request); pins are written only when that attempt's outcome is folded, so a
redelivered outcome pins nothing twice. At most ``max_entries`` pins per route:
expired ones go first, then the soonest to expire (ties: the smallest key).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.config.auto import DEFAULT_AFFINITY, AffinityConfig
from app.contract import Outcome, RequestAccepted, StatusClass
from app.routing.policy import Policy
from app.routing.state import Pin, RouteState, evolve_route

SESSION = "s:"
CONTEXT = "c:"
#: Hex characters of a key's hash (64 bits: collisions are harmless, a pin is a hint).
KEY_HEX = 16


@dataclass(frozen=True, slots=True)
class Stick:
    """A live pin a request may follow: the deployment, and ``session`` or ``context``."""

    deployment: str
    kind: str


def settings(policy: Policy, route: str) -> AffinityConfig:
    configured = policy.config.routes.get(route)
    if configured is None or configured.affinity is None:
        return DEFAULT_AFFINITY
    return configured.affinity


def keys_of(accepted: RequestAccepted, policy: Policy) -> tuple[str, ...]:
    """The pins this request follows and may create, session first (none: opted out)."""
    request = accepted.request
    options = request.routing
    if options is not None and options.affinity is False:
        return ()
    if not settings(policy, accepted.route).enabled:
        return ()
    keys: list[str] = []
    use_session = options is None or options.session_affinity is not False
    if request.session_id and use_session:
        keys.append(session_key(request.tenant, request.session_id))
    if accepted.prefix_sha256:
        keys.append(CONTEXT + accepted.prefix_sha256[:KEY_HEX])
    return tuple(keys)


def session_key(tenant: str | None, session_id: str) -> str:
    """A session's pin key: a hash of the tenant and the session id (any length)."""
    subject = f"{tenant or ''}\x1f{session_id}"
    return SESSION + hashlib.sha256(subject.encode()).hexdigest()[:KEY_HEX]


def sticks(state: RouteState, keys: tuple[str, ...]) -> tuple[Stick, ...]:
    """The live pins of ``keys``, in order (the first eligible one is followed)."""
    if not keys or not state.affinity:
        return ()
    found = []
    for key in keys:
        pin = state.affinity.get(key)
        if pin is not None and pin.until > state.clock:
            kind = "session" if key.startswith(SESSION) else "context"
            found.append(Stick(pin.deployment, kind))
    return tuple(found)


def observe(
    state: RouteState, keys: tuple[str, ...], outcome: Outcome, policy: Policy
) -> RouteState:
    """Pin ``keys`` to the deployment whose answer read the prompt cache."""
    if not keys or outcome.tokens_cached <= 0 or outcome.status_class is not StatusClass.SUCCESS:
        return state
    config = settings(policy, outcome.route)
    if not config.enabled:
        return state
    clock = state.clock
    pins = dict(state.affinity)
    for key in keys:
        if key.startswith(SESSION):
            old = pins.get(key)
            started = old.started if old is not None and old.until > clock else clock
            until = min(started + config.session_max_s, clock + config.session_ttl_s)
        else:
            started, until = clock, clock + config.context_ttl_s
        pins[key] = Pin(outcome.deployment, until, started)
    return evolve_route(state, affinity=bounded(pins, clock, config.max_entries))


def bounded(pins: dict[str, Pin], clock: float, max_entries: int) -> dict[str, Pin]:
    """Live pins only, at most ``max_entries`` (the soonest to expire go first)."""
    live = {key: pin for key, pin in pins.items() if pin.until > clock}
    if len(live) <= max_entries:
        return live
    doomed = sorted(live, key=lambda key: (live[key].until, key))[: len(live) - max_entries]
    for key in doomed:
        del live[key]
    return live
