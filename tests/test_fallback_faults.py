"""Faults the fold must route around: fallback models after failures without an HTTP
status, no wait for an open breaker while a fallback model can serve, a retry of the
same deployment when it is the best candidate left, and forwards kept in order."""

from __future__ import annotations

from dataclasses import replace

from factories import ROUTE, T0, accepted, failed_first, finished, fold, outcome, policy, provider
from log_harness import Log, tick
from test_dynamic_fold import dynamic_policy, request

from app.contract import Decision, ErrorBody, StatusClass
from app.routing.dynamic import fall_back
from app.routing.state import RouteState

A = "a:m1"


def on_chat(failure: StatusClass) -> object:
    def status(decision: Decision) -> StatusClass:
        return failure if decision.route == "chat" else StatusClass.SUCCESS

    return status


def test_fallback_models_follow_timeouts_resets_and_broken_streams() -> None:
    """No HTTP status on these failures: the fallback model answers all the same."""
    for failure in (StatusClass.TIMEOUT, StatusClass.CONNECTION_ERROR, StatusClass.BAD_RESPONSE):
        log = Log(dynamic_policy(), status=on_chat(failure))  # type: ignore[arg-type]
        log.run([request(0, session="s-main")])
        assert [d.route for d in log.decisions] == ["chat", "chat", "cheap"], failure
        (answer,) = log.responses
        assert answer.status == "ok" and answer.attempts == 3, failure


def test_an_open_breaker_sends_the_request_to_its_fallback_model_at_once() -> None:
    """Both of chat's breakers open after one failure each: the next request goes to the
    fallback model when it arrives, instead of waiting for a half-open probe."""
    pol = dynamic_policy(cb_failure_threshold=1)
    log = Log(pol, status=on_chat(StatusClass.SERVER_ERROR))  # type: ignore[arg-type]
    driver = log.run([request(0, session="s-main")])
    assert {d.deployment for d in log.decisions if d.route == "chat"} == {"a:m1", "b:m1"}
    log.decisions.clear()
    log.run([request(1, session="s-main")], driver)
    first = next(d for d in log.decisions if d.request_id == "r1")
    assert first.route == "cheap"
    assert first.occurred_at.timestamp() == T0 + 1  # decided on arrival: no wait
    chat_state = driver.state("chat")
    assert chat_state.parking.parked == {} and chat_state.parking.line.waiting == 0
    assert [r.status for r in log.responses if r.request_id == "r1"] == ["ok"]


def test_a_429_with_retry_after_retries_the_only_deployment_after_it() -> None:
    pol = policy(provider("a"))
    request = accepted("q-1", T0)
    *_, waiting = failed_first(pol, request, T0 + 1, StatusClass.RATE_LIMITED, retry_after_s=2.0)
    assert waiting.dispatches == [] and waiting.responses == []
    (parked,) = waiting.state.parking.parked.values()
    assert parked.retry_at >= T0 + 3.0 and parked.again == [A]
    early = fold([tick(T0 + 2.5, ROUTE)], pol, waiting)
    assert early.dispatches == [] and early.responses == []
    due = fold([tick(T0 + 3.01, ROUTE)], pol, early)
    (retry,) = due.decisions
    assert (retry.deployment, retry.attempt, retry.selection_rule) == (
        A,
        2,
        "retry_same_deployment",
    )


def test_a_single_500_retries_the_only_deployment_after_the_backoff() -> None:
    pol = policy(provider("a"))
    *_, again = failed_first(pol, accepted("q-2", T0), T0 + 1, StatusClass.SERVER_ERROR)
    (dispatch,) = again.dispatches
    assert dispatch.decision.deployment == A
    assert dispatch.decision.selection_rule == "retry_same_deployment"
    assert dispatch.not_before > T0 + 1  # the seeded backoff, 0.15 x 2^0 x [0.5, 1)
    assert dispatch.tried == [A]


def test_a_silent_deployment_is_not_asked_again_at_once() -> None:
    pol = policy(provider("a"))
    *_, answered = failed_first(pol, accepted("q-3", T0), T0 + 30, StatusClass.TIMEOUT)
    assert answered.dispatches == []
    (response,) = answered.responses
    assert response.status == "error" and response.error is not None
    assert response.error.type == "timeout"


def test_forwards_take_increasing_source_offsets_whatever_the_position() -> None:
    """A request taken off the line (or recalled) falls back at its own, older position:
    its forward must still sort after the route's earlier forwards, or the target's copy
    watermark would drop it."""
    pol = dynamic_policy()
    event = request(0, session="s-main")
    log = Log(pol)
    driver = log.run([event])
    forwarded = driver.state("chat").forwarded_through
    assert forwarded >= 0
    [carried] = [d for d in log.decisions if d.route == "chat"][:1]
    accepted_on_chat = event.model_copy(update={"dynamic": carried.dynamic, "route": "chat"})
    state = replace(driver.state("chat"), forwarded_through=40)
    failure = ErrorBody(type="timeout", message="t", code="provider_error")
    error = log.responses[0].model_copy(update={"status": "error", "error": failure})
    step = fall_back(state, accepted_on_chat, error, 10, pol)
    assert step is not None
    (record,) = step.records
    assert record.source.offset == 41  # type: ignore[union-attr]
    assert step.state.forwarded_through == 41
    assert isinstance(step.state, RouteState)


def test_a_content_policy_refusal_reaches_the_client_as_a_400_with_its_code() -> None:
    pol = policy(provider("a"), provider("b"))
    request = accepted("c-1", T0)
    first = fold([request], pol)
    chosen = first.decisions[0].deployment
    refused = outcome(
        "c-1", chosen, T0 + 1, status=StatusClass.CLIENT_ERROR, http_status=200, final=True
    ).model_copy(update={"error": "content_policy_violation: finish_reason content_filter"})
    answered = fold([finished(refused, retry=request)], pol, first)
    error = answered.refusal()
    assert (error.code, error.http_status) == ("content_policy_violation", 400)
    assert "content_filter" in error.message


def test_a_prompt_too_long_goes_to_another_deployment_never_the_same() -> None:
    pol = policy(provider("a"), provider("b"))
    request = accepted("c-2", T0)
    error = "context_length_exceeded: HTTP 400 (context_length_exceeded)"
    _, too_long, moved = failed_first(pol, request, T0 + 1, StatusClass.CLIENT_ERROR, error=error)
    one = too_long.deployment
    (dispatch,) = moved.dispatches
    other = dispatch.decision.deployment
    assert other != one and dispatch.decision.selection_rule != "retry_same_deployment"
    again = too_long.model_copy(update={"deployment": other, "provider": other[0], "attempt": 2})
    answered = fold([finished(again, tried=[one, other], retry=request)], pol, moved)
    error = answered.refusal()
    assert (error.code, error.http_status) == ("context_length_exceeded", 400)


def test_a_prompt_too_long_for_every_deployment_goes_to_the_fallback_model() -> None:
    """The next model may have a larger context window: it is asked, not the client."""
    log = Log(dynamic_policy())
    event = request(0, session="s-main")
    driver = log.run([event])
    [carried] = [d for d in log.decisions if d.route == "chat"][:1]
    on_chat = event.model_copy(update={"dynamic": carried.dynamic, "route": "chat"})
    refused = ErrorBody(
        type="client_error",
        message="all attempts failed; last: context_length_exceeded: HTTP 400",
        code="context_length_exceeded",
        http_status=400,
    )
    answer = log.responses[0].model_copy(update={"status": "error", "error": refused})
    step = fall_back(driver.state("chat"), on_chat, answer, 99, dynamic_policy())
    assert step is not None
    (forwarded,) = step.records
    assert forwarded.route == "cheap"  # type: ignore[union-attr]
    other = refused.model_copy(update={"code": "content_policy_violation"})
    refusal = answer.model_copy(update={"error": other})
    assert fall_back(driver.state("chat"), on_chat, refusal, 99, dynamic_policy()) is None
