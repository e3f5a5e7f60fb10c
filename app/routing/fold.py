"""The router as a pure fold over the routing log: ``(state, event, policy) -> Step``,
for a route's key (a budget's key is folded by :mod:`app.routing.budget_fold`).

:func:`handle` folds one routing-log event; :func:`wanted` and :func:`take`
finish the step by taking waiting requests off the line and parked attempts
whose wait is over, from events the driver recalls from the log
(:mod:`app.routing.driver`, the one loop every user drives the fold with: the
live router, replay, counterfactual, simulator, benches). Nothing else changes
routing state, and nothing else decides a request's answer: the fold derives every
response, so a request's life has one writer. The router publishes the errors; a
successful answer is published by the executor that received it, as the same record
the fold derives from its feedback (which says so: the router does not send it again).

Idempotency: an event at or below the row's position was already folded (a
redelivery after a crash) and changes nothing. An attempt's outcome is applied
only while that attempt is open, and applying it closes it in the same state
write, so an outcome delivered twice (an executor that ran a dispatch twice)
changes nothing and answers nothing. A request is routed once: a copy that
ingest re-published after a crash sits at or below the route's watermark for
its source partition, and is ignored.

The router agent writes the returned state only once the broker has
acknowledged the step's sends: the row is what makes a redelivered event a
no-op here, so a row written before its sends would lose them in a crash.
An attempt still open when its request's deadline (plus a grace) has passed is
closed with a ``lost`` error response all the same (a safety net: an outcome
that never came back), so no accepted request goes unanswered.
``RouteTick`` events move the clock on idle routes. ``PolicyChanged`` switches the
route to a new policy version at its position in the log; the driver
folds each event with the version the route's state names.

Waiting (:mod:`app.routing.parking`): a new request whose candidates are busy
waits in the log, with every later request of its route (the state counts them;
it never holds them); attempts whose candidates are open or cooling down are
parked as references and routed again once their backoff has passed; both are
answered ``deadline_exceeded`` at their deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.contract import (
    CONTEXT_LENGTH_EXCEEDED,
    AttemptFinished,
    BudgetVerdict,
    ErrorBody,
    GradeApplied,
    PolicyChanged,
    RequestAccepted,
    Response,
    RouteTick,
    RoutingLogEvent,
    refusal_code,
)
from app.routing import affinity, cache
from app.routing.admission import LOST_ATTEMPT_GRACE_S, route, take_request
from app.routing.answers import (
    at,
    backoff_s,
    deadline_error,
    deadline_of,
    epoch,
    error_response,
    final_response,
    provider_error,
)
from app.routing.attempts import attempts_allowed, first_attempt
from app.routing.budget_route import give_back_answered, on_verdict, settle_attempt
from app.routing.budget_state import Amount
from app.routing.cache_state import ResponseCache
from app.routing.capabilities import learn_window
from app.routing.dynamic import count_spend, fall_back
from app.routing.feedback import apply_outcome
from app.routing.grading import apply_grade
from app.routing.policy import Policy
from app.routing.reliability import mendable
from app.routing.state import (
    NEW_ARM,
    Line,
    Parking,
    RouteState,
    attempt_key,
    evolve_arm,
    evolve_route,
)
from app.routing.steps import Step

__all__ = [
    "LOST_ATTEMPT_GRACE_S",
    "Step",
    "Want",
    "at",
    "backoff_s",
    "deadline_of",
    "epoch",
    "handle",
    "take",
    "wanted",
]


def handle(state: RouteState, event: RoutingLogEvent, position: int, policy: Policy) -> Step:
    if position <= state.position:
        # Redelivered after a crash or rebalance: this row already includes it.
        return Step(state, applied=False)
    clock = max(state.clock, event_time(event))
    state, expired = _expire_lost_attempts(evolve_route(state, clock=clock, position=position))
    state, overdue = _answer_overdue(state, policy)
    if isinstance(event, RequestAccepted):  # the common events first: the types are disjoint
        step = _arrive(state, event, position, policy)
    elif isinstance(event, AttemptFinished):
        step = _finish(state, event, position, policy)
    elif isinstance(event, RouteTick):
        step = Step(state)
    elif isinstance(event, GradeApplied):
        graded = apply_grade(state, event, policy)
        step = Step(state, applied=False) if graded is None else Step(graded)
    elif isinstance(event, PolicyChanged):
        step = _switch_policy(state, event)
    elif isinstance(event, BudgetVerdict):
        step = on_verdict(state, event)
    else:
        raise ValueError(f"{event.type} is a budget's event (app/routing/budget_fold.py)")
    if expired or overdue:
        step = Step(
            step.state,
            step.dispatches,
            expired + overdue + step.responses,
            step.applied,
            step.records,
            step.decisions,
        )
    route_name = event.outcome.route if isinstance(event, AttemptFinished) else event.route
    return _give_back(step, route_name)


def _give_back(step: Step, route_name: str) -> Step:
    """Budget holds of requests this step answered without a call left to settle them."""
    state, records = give_back_answered(step.state, route_name, step.responses)
    if not records:
        return step
    return Step(
        state, step.dispatches, step.responses, step.applied, step.records + records, step.decisions
    )


def event_time(event: RoutingLogEvent) -> float:
    """The time an event brings to the route clock: a request forwarded late (a backlog)
    brings the time ingest forwarded it. A policy change brings none: it is stamped by
    whoever applied it, whose clock must not expire the route's requests."""
    if isinstance(event, PolicyChanged):
        return 0.0
    when = epoch(event.occurred_at)
    if isinstance(event, RequestAccepted) and event.ingested_at is not None:
        return max(when, epoch(event.ingested_at))
    return when


def _switch_policy(state: RouteState, change: PolicyChanged) -> Step:
    """From here on the route folds with ``change.version``. Deployments it
    adds start fresh, removed ones stop being candidates; every arm's history stays."""
    if change.version <= state.policy_version:
        return Step(state)  # a copy the relay re-sent: the route already switched
    # The response cache's answers were given under the version before: it starts empty.
    emptied = ResponseCache({}, state.cache.serving)
    return Step(evolve_route(state, policy_version=change.version, cache=emptied))


def _arrive(state: RouteState, accepted: RequestAccepted, position: int, policy: Policy) -> Step:
    """A new request: behind the line if one waits, else taken (or the line starts with it)."""
    parking = state.parking
    line = parking.line
    if line.waiting:
        joined = Line(line.waiting + 1, line.after, line.blocked_at)
        return Step(evolve_route(state, parking=Parking(parking.parked, joined)))
    taken = take_request(state, accepted, position, policy)
    if isinstance(taken, Step):
        return taken
    state = taken.on(state)
    start = Line(waiting=1, after=position - 1, blocked_at=position)
    return Step(evolve_route(state, parking=Parking(state.parking.parked, start)))


@dataclass(frozen=True, slots=True)
class Want:
    """An earlier routing-log event the fold needs again; the driver recalls it.

    ``parked``: the event at ``position`` (a parked attempt's carrier, ``key`` its
    attempt). ``line``: the head of the line, the route's first ``RequestAccepted``
    after ``position``. ``cached``: the event at ``position`` (the ``attempt.finished``
    whose answer the response cache gives request ``key``: app/routing/cache.py).
    """

    kind: Literal["parked", "line", "cached"]
    position: int
    key: str = ""


def wanted(state: RouteState) -> Want | None:
    """What to take next: the answer of a request served from the cache in this step,
    then a parked attempt whose wait is over (oldest first), then the head of the line
    unless it already found no deployment at this position."""
    serving = state.cache.serving
    if serving:
        request_id = min(serving)
        return Want("cached", serving[request_id].position, request_id)
    parked = state.parking.parked
    due = [(p.retry_at, key) for key, p in parked.items() if p.retry_at <= state.clock]
    if due:
        _, key = min(due)
        return Want("parked", parked[key].carrier, key)
    line = state.parking.line
    if line.waiting and line.blocked_at < state.position:
        return Want("line", line.after)
    return None


def take(
    state: RouteState, want: Want, position: int, event: RoutingLogEvent, policy: Policy
) -> Step:
    """Fold what :func:`wanted` asked for: ``event``, recalled from ``position`` of the log."""
    if want.kind == "parked":
        return _look_again(state, want.key, event, policy)
    if want.kind == "cached":
        return cache.answer(state, want.key, position, event)
    if not isinstance(event, RequestAccepted) or position <= want.position:
        raise ValueError(f"the line's head after {want.position} is not at {position}")
    line = state.parking.line
    taken = take_request(state, event, position, policy)
    if not isinstance(taken, Step):
        state = taken.on(state)
        blocked = Line(line.waiting, line.after, state.position)
        return Step(evolve_route(state, parking=Parking(state.parking.parked, blocked)))
    moved = Line(waiting=line.waiting - 1, after=position, blocked_at=line.blocked_at)
    after = taken.state
    return Step(
        evolve_route(after, parking=Parking(after.parking.parked, moved)),
        taken.dispatches,
        taken.responses,
        decisions=taken.decisions,
    )


def _look_again(state: RouteState, key: str, carrier: RoutingLogEvent, policy: Policy) -> Step:
    """Route a parked attempt whose wait is over (park it again if still nothing)."""
    parking = state.parking
    parked = parking.parked[key]
    accepted = carrier.retry if isinstance(carrier, AttemptFinished) else carrier
    if (
        not isinstance(accepted, RequestAccepted)
        or accepted.request.request_id != parked.request_id
    ):
        raise ValueError(f"the event at {parked.carrier} does not carry {key}")
    state = evolve_route(state, parking=parking.unpark(key))
    step = route(
        state,
        accepted,
        parked.attempt,
        parked.tried,
        policy,
        carrier=parked.carrier,
        waits=parked.waits + 1,
        again=parked.again,
    )
    assert isinstance(step, Step)  # only a request on the line is left waiting
    return step


def _answer_overdue(state: RouteState, policy: Policy) -> tuple[RouteState, list[Response]]:
    """Parked attempts whose deadline has come: answered, no recall needed."""
    parking = state.parking
    if not parking.parked:
        return state, []
    late = sorted(key for key, p in parking.parked.items() if p.deadline <= state.clock)
    if not late:
        return state, []
    responses = []
    for key in late:
        parked = parking.parked[key]
        error = deadline_error(
            f"no deployment became available within "
            f"{policy.params.request_deadline_s:g}s ({parked.waits} waits)"
        )
        responses.append(error_response(parked.request_id, parked.attempt - 1, state.clock, error))
    kept = {k: v for k, v in parking.parked.items() if k not in late}
    return evolve_route(state, parking=Parking(kept, parking.line)), responses


def _expire_lost_attempts(state: RouteState) -> tuple[RouteState, list[Response]]:
    if not state.open_attempts or state.clock <= state.expiry_check_at:
        return state, []
    lost = {
        key: attempt
        for key, attempt in state.open_attempts.items()
        if attempt.deadline + LOST_ATTEMPT_GRACE_S < state.clock
    }
    if not lost:
        next_check = min(a.deadline for a in state.open_attempts.values()) + LOST_ATTEMPT_GRACE_S
        return evolve_route(state, expiry_check_at=next_check), []
    arms = dict(state.arms)
    responses = []
    for key, attempt in sorted(lost.items()):
        # Never reported back: a worker died or an outcome was lost. Not the provider's
        # doing as far as anyone knows: only the slot is freed.
        arm = arms.get(attempt.deployment, NEW_ARM)
        arms[attempt.deployment] = evolve_arm(arm, in_flight=max(0, arm.in_flight - 1))
        request_id, _, number = key.rpartition("#")
        error = ErrorBody(
            type="lost",
            message=f"attempt {number} on {attempt.deployment} never reported back",
            code="deadline_exceeded",
            http_status=504,
        )
        responses.append(error_response(request_id, int(number), state.clock, error))
    still_open = {k: v for k, v in state.open_attempts.items() if k not in lost}
    return evolve_route(state, arms=arms, open_attempts=still_open, expiry_check_at=0.0), responses


def _finish(state: RouteState, event: AttemptFinished, position: int, policy: Policy) -> Step:
    outcome = event.outcome
    key = attempt_key(outcome.request_id, outcome.attempt)
    if key not in state.open_attempts:
        return Step(state, applied=False)
    open_attempts = dict(state.open_attempts)  # a C copy, then one out: the same order
    finished_attempt = open_attempts.pop(key)
    arm = apply_outcome(state.arm(outcome.deployment), outcome, state.clock, policy)
    if event.retry is not None and refusal_code(outcome.error) == CONTEXT_LENGTH_EXCEEDED:
        arm = learn_window(arm, event.retry)
    state = evolve_route(
        state, arms={**state.arms, outcome.deployment: arm}, open_attempts=open_attempts
    )
    if finished_attempt.cache is not None:
        state = cache.store(state, finished_attempt.cache, event, position, policy)
    state = count_spend(state, finished_attempt.budget_nodes, outcome.cost_usd, policy)
    state = affinity.observe(state, finished_attempt.affinity, outcome, policy)
    used = Amount(
        1 if outcome.attempt == 1 else 0, outcome.tokens_in + outcome.tokens_out, outcome.cost_usd
    )
    state, settled = settle_attempt(state, outcome.route, outcome.request_id, outcome.attempt, used)
    step = _answer_or_retry(state, event, position, policy)
    if event.retry is not None and step.responses and not step.dispatches:
        fallback = fall_back(step.state, event.retry, step.responses[0], position, policy)
        if fallback is not None:
            step = Step(fallback.state, records=step.records + fallback.records)
    if not settled:
        return step
    return Step(step.state, step.dispatches, step.responses, step.applied, settled + step.records)


def _answer_or_retry(
    state: RouteState, event: AttemptFinished, position: int, policy: Policy
) -> Step:
    outcome = event.outcome
    made = outcome.attempt - (first_attempt(event.retry) - 1 if event.retry else 0)
    allowed = (
        attempts_allowed(event.retry, event.tried, policy)
        if event.retry
        else policy.max_attempts(outcome.route)
    )
    last_try = made >= allowed
    if event.retry is None or outcome.final or last_try:
        return Step(state, responses=[final_response(event, state.clock)])
    if state.clock >= deadline_of(event.retry, policy):
        error = deadline_error(
            f"no answer within {policy.params.request_deadline_s:g}s; "
            f"last: {outcome.error or outcome.status_class.value}"
        )
        response = error_response(outcome.request_id, outcome.attempt, state.clock, error)
        return Step(state, responses=[response])
    again = (outcome.deployment,) if mendable(outcome.status_class, outcome.http_status) else ()
    step = route(
        state, event.retry, outcome.attempt + 1, event.tried, policy, carrier=position, again=again
    )
    assert isinstance(step, Step)  # only a request on the line is left waiting
    if step.responses:
        # Nothing left to try: the requester gets the last attempt's error.
        last = outcome.error or outcome.status_class.value
        error = provider_error(
            outcome.status_class,
            outcome.http_status,
            outcome.error,
            code="exhausted",
        ).model_copy(update={"message": f"all attempts failed; last: {last}"})
        return Step(
            step.state,
            responses=[
                error_response(outcome.request_id, outcome.attempt, step.state.clock, error)
            ],
            records=step.records,
        )
    return step
