"""The router as a pure fold, one request: decisions, idempotency, determinism, JSON.

Outcomes and retries: test_fold_outcomes.py; random sequences: test_fold_random.py.
"""

from __future__ import annotations

from factories import (
    T0,
    A,
    B,
    C,
    abc,
    accepted,
    finish,
    fold,
    provider,
    routing_config,
)

from app.config.schema import RouteConfig
from app.contract import (
    derived_id,
)
from app.routing.fold import at, handle
from app.routing.policy import Policy
from app.routing.rows import to_row
from app.routing.state import OpenAttempt, RouteState, attempt_key

# --------------------------------------------------------------------------- one request


def test_request_accepted_produces_one_dispatch() -> None:
    pol = abc()
    event = accepted("req-1", T0 + 5, content="bonjour")
    step = handle(RouteState(), event, 7, pol)
    assert step.applied is True
    assert step.responses == []
    (dispatch,) = step.dispatches
    decision = dispatch.decision

    assert decision.id == derived_id("decision", "req-1", 1)
    assert decision.occurred_at == at(T0 + 5)
    assert decision.request_id == "req-1"
    assert decision.attempt == 1
    assert decision.route == "chat"
    assert decision.deployment == A  # never pulled, first in config order
    assert decision.provider == "a"
    assert decision.model == "m1"
    assert decision.strategy == "ucb1"
    assert decision.algorithm_version == "seed000-ucb1/2"
    assert [c.deployment for c in decision.candidates] == [A, B, C]
    assert decision.excluded == []
    assert decision.config_hash == pol.config_hash
    assert len(decision.config_hash) == 16
    assert decision.state_version == 7
    assert decision.propensity == 1.0
    assert decision.prompt_sha256 == event.prompt_sha256
    assert decision.prompt_chars == 7

    assert dispatch.id == derived_id("dispatch", "req-1", 1)
    assert dispatch.occurred_at == at(T0 + 5)
    assert dispatch.accepted == event
    assert dispatch.timeout_s == 12.0
    assert dispatch.max_attempts == 3
    assert dispatch.tried == []

    state = step.state
    assert state.clock == T0 + 5
    assert state.position == 7
    assert state.arm(A).in_flight == 1
    assert state.arm(B).in_flight == 0
    assert state.arm(A).pulls == 0
    assert state.open_attempts == {
        "req-1#1": OpenAttempt(deployment=A, decided_at=T0 + 5, deadline=T0 + 5 + 120.0)
    }
    assert attempt_key("req-1", 1) == "req-1#1"


def test_decision_never_carries_prompt_text() -> None:
    secret_prompt = "my very private prompt about ACME-77"
    step = handle(RouteState(), accepted("r", T0, content=secret_prompt), 0, abc())
    assert secret_prompt not in step.dispatches[0].decision.model_dump_json()
    assert "ACME-77" not in step.dispatches[0].decision.model_dump_json()


def test_route_max_attempts_reaches_dispatch() -> None:
    config = routing_config(provider("a"), provider("b"), routes={"chat": ["a", "b"]})
    config = config.model_copy(
        update={"routes": {"chat": RouteConfig(providers=["a", "b"], max_attempts=5)}}
    )
    pol = Policy(config, abc().params)
    assert handle(RouteState(), accepted("r", T0), 0, pol).dispatches[0].max_attempts == 5


def test_duplicate_request_while_attempt_open_changes_nothing() -> None:
    pol = abc()
    event = accepted("req-1", T0)
    first = handle(RouteState(), event, 0, pol)
    again = handle(first.state, event, 1, pol)
    assert again.applied is False
    assert again.dispatches == []
    assert again.responses == []
    assert again.state.arms == first.state.arms
    assert again.state.open_attempts == first.state.open_attempts
    assert again.state.clock == first.state.clock
    # Redelivered at the same log position: byte-identical state.
    same = handle(first.state, event, 0, pol)
    assert same.applied is False
    assert to_row(same.state) == to_row(first.state)


def test_duplicate_request_after_attempt_finished_is_ignored() -> None:
    pol = abc()
    event = accepted("req-1", T0)
    run = fold([event, finish("req-1", A, T0 + 1)], pol)
    # The same log record re-read (e.g. after a rebalance) at its original position.
    again = handle(run.state, event, 0, pol)
    assert again.dispatches == []
    assert again.state.open_attempts == {}
    assert again.state.arm(A).in_flight == 0


def test_request_for_route_missing_from_config_gives_error_response() -> None:
    pol = abc()
    step = handle(RouteState(), accepted("req-1", T0, route="removed"), 0, pol)
    assert step.dispatches == []
    (response,) = step.responses
    assert response.status == "error"
    assert response.error is not None
    assert response.error.code == "no_candidate"
