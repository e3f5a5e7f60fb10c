"""Exclude what cannot be used, then rank what can (docs/design.md#routing).

``select`` is pure: route state, the request's identity and the policy in; the
ranked candidates, the exclusions with their reasons, the chosen arm and its
propensity out. Nothing here reads a clock or an unseeded generator.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from app.contract import Candidate, Exclusion
from app.routing import breaker, status, strategies
from app.routing.affinity import Stick
from app.routing.candidates import CandidatePlan
from app.routing.context import EVERYTHING
from app.routing.learning import NO_LEARNING, Learning
from app.routing.policy import Arm, Policy
from app.routing.records import record
from app.routing.state import NEW_ARM, ArmState, BreakerPhase, RouteState
from app.understanding.modes import DEFAULT_MODE


@record
class Selection:
    chosen: Arm | None
    candidates: list[Candidate]
    excluded: list[Exclusion]
    propensity: float
    #: Arms whose breaker moved OPEN -> HALF_OPEN at this clock (to persist).
    arms: dict[str, ArmState]
    #: Why the chosen arm won: "score", "untried_first" or "half_open_probe".
    rule: str = "score"
    #: The context bucket the chosen arm's estimate came from.
    level: str = EVERYTHING
    #: The pin followed (``session`` or ``context``) when ``rule`` is ``affinity``.
    affinity: str | None = None


def _exclusion_reason(arm: Arm, state: ArmState, tried: Collection[str], now: float) -> str | None:
    if arm.deployment in tried:
        return "already_tried"
    phase = state.breaker.state
    if phase is not BreakerPhase.CLOSED:
        if phase is BreakerPhase.OPEN:
            return "breaker_open"
        if state.in_flight > 0:  # HALF_OPEN
            # One probe at a time: the next one goes out when this one has answered.
            return "breaker_half_open_probe_in_flight"
    if state.in_flight >= arm.provider.max_concurrency:
        return "concurrency_full"
    if state.retry_after_until > now:
        return "retry_after"
    return None


def _exclusion(policy: Policy, deployment: str, reason: str) -> Exclusion:
    """One shared (frozen) exclusion per deployment and reason, built once per policy."""
    key = ("exclusion", deployment, reason)
    found = policy.memo.get(key)
    if found is None:
        found = policy.memo[key] = Exclusion(deployment=deployment, reason=reason)
    exclusion: Exclusion = found
    return exclusion


def select(
    state: RouteState,
    route: str | CandidatePlan,
    request_id: str,
    attempt: int,
    tried: Collection[str],
    policy: Policy,
    learning: Learning = NO_LEARNING,
    sticks: Sequence[Stick] = (),
) -> Selection:
    """Rank the plan's arms (or, given a route name, all of the route's default deployments).

    An ordered plan (the auto router's) takes its first eligible arm
    (``auto``); otherwise the strategy ranks, a due half-open probe goes first, and then
    the first of ``sticks`` (live affinity pins) whose deployment is eligible with a
    closed breaker wins (``affinity``) over the scores.
    """
    plan = route if isinstance(route, CandidatePlan) else None
    arms = plan.arms if plan is not None else policy.arms(str(route))
    mode = plan.mode.mode if plan is not None else DEFAULT_MODE
    updated: dict[str, ArmState] = {}
    eligible: list[tuple[Arm, ArmState]] = []
    excluded: list[Exclusion] = list(plan.excluded) if plan is not None else []
    total_started = 0
    half_open = False
    clock = state.clock
    known = state.arms
    for arm in arms:
        arm_state = known.get(arm.deployment, NEW_ARM)
        if arm_state.breaker.state is BreakerPhase.OPEN:  # only an open breaker moves on time
            moved = breaker.on_clock(arm_state.breaker, clock, policy.breaker)
            if moved is not arm_state.breaker:
                arm_state = replace(arm_state, breaker=moved)
                updated[arm.deployment] = arm_state
        total_started += arm_state.pulls + arm_state.in_flight
        if (  # the common case, which _exclusion_reason would also find eligible
            arm_state.breaker.state is BreakerPhase.CLOSED
            and arm_state.in_flight < arm.provider.max_concurrency
            and arm_state.retry_after_until <= clock
            and (not tried or arm.deployment not in tried)
        ):
            eligible.append((arm, arm_state))
            continue
        reason = _exclusion_reason(arm, arm_state, tried, clock)
        if reason is None:
            eligible.append((arm, arm_state))
            half_open = half_open or arm_state.breaker.state is BreakerPhase.HALF_OPEN
        else:
            excluded.append(_exclusion(policy, arm.deployment, reason))
    if not eligible:
        return Selection(None, [], excluded, 0.0, updated)
    eligible, demoted = status.split_demoted(eligible, policy)
    if demoted:  # used only when no active deployment can take the attempt now
        excluded.extend(demoted)
        half_open = any(s.breaker.state is BreakerPhase.HALF_OPEN for _, s in eligible)
    if plan is not None and plan.ordered:  # the auto router's ranking
        scores = plan.scores or []
        stuck = _stuck(eligible, sticks)
        if stuck is not None:
            return Selection(
                stuck[0], scores, excluded, 1.0, updated, "affinity", affinity=stuck[1]
            )
        return Selection(eligible[0][0], scores, excluded, 1.0, updated, plan.order_rule)
    ranking = strategies.rank(
        eligible, total_started, request_id, attempt, policy, mode, state.clock, learning
    )
    probe = _due_probe(eligible) if half_open and ranking.rule != "untried_first" else None
    if probe is not None:
        # A half-open breaker gets one live probe at a time, whatever the scores (or a
        # pin) say: otherwise a strategy that learnt to avoid the arm would never see it
        # recover.
        return Selection(
            eligible[probe][0], ranking.candidates, excluded, 1.0, updated, "half_open_probe"
        )
    stuck = _stuck(eligible, sticks) if sticks else None
    if stuck is not None:  # affinity: a live pin wins over the scores, never over a filter
        return Selection(
            stuck[0],
            ranking.candidates,
            excluded,
            1.0,
            updated,
            "affinity",
            ranking.level,
            affinity=stuck[1],
        )
    return Selection(
        eligible[ranking.chosen][0],
        ranking.candidates,
        excluded,
        ranking.propensity,
        updated,
        ranking.rule,
        ranking.level,
    )


def _stuck(eligible: list[tuple[Arm, ArmState]], sticks: Sequence[Stick]) -> tuple[Arm, str] | None:
    """The first live pin whose deployment is eligible with a closed breaker (a half-open
    one is probed by the breaker's rule, not sent a pinned session), and its kind."""
    for stick in sticks:
        for arm, arm_state in eligible:
            closed = arm_state.breaker.state is BreakerPhase.CLOSED
            if arm.deployment == stick.deployment and closed:
                return arm, stick.kind
    return None


def _due_probe(eligible: list[tuple[Arm, ArmState]]) -> int | None:
    for index, (_, state) in enumerate(eligible):
        if state.breaker.state is BreakerPhase.HALF_OPEN and state.in_flight == 0:
            return index
    return None
