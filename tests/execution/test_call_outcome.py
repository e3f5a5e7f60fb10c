"""From a call's result to the outcome: fields, finality, reward."""

from __future__ import annotations

import pytest
from call_helpers import MODEL, NOW, dispatch, provider

from app.contract import (
    StatusClass,
    derived_id,
)
from app.execution.call import CallResult
from app.execution.http import make_client
from app.execution.outcome import build_outcome, is_final, reward

# --------------------------------------------------------------------------- outcome


def test_build_outcome_fields() -> None:
    config = provider("http://x", input=1.0, output=2.0, cached=0.0)
    result = CallResult(
        StatusClass.SERVER_ERROR, 502, 123.4, tokens_in=10, tokens_out=5, error="HTTP 502"
    )
    sent = dispatch(attempt=2, max_attempts=3)

    outcome = build_outcome(sent, result, config, occurred_at=NOW, final=is_final(sent, result))

    assert outcome.id == derived_id("outcome", "req-1", 2)
    assert outcome.decision_id == sent.decision.id
    assert (outcome.request_id, outcome.attempt, outcome.route) == ("req-1", 2, "chat")
    assert (outcome.deployment, outcome.provider, outcome.model) == (
        f"openai-test:{MODEL}",
        "openai-test",
        MODEL,
    )
    assert (outcome.status_class, outcome.http_status, outcome.latency_ms) == (
        StatusClass.SERVER_ERROR,
        502,
        123.4,
    )
    assert outcome.cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert outcome.reward == 0.0
    assert outcome.retriable is True
    assert outcome.final is False
    assert outcome.error == "HTTP 502"
    assert outcome.occurred_at == NOW


def test_build_outcome_rejects_another_provider() -> None:
    other = provider("http://x").model_copy(update={"id": "groq-test"})
    with pytest.raises(ValueError, match="not the decision's"):
        build_outcome(
            dispatch(),
            CallResult(StatusClass.SUCCESS, 200, 1.0),
            other,
            occurred_at=NOW,
            final=True,
        )


@pytest.mark.parametrize(
    ("status_class", "http_status", "attempt", "final"),
    [
        (StatusClass.SUCCESS, 200, 1, True),
        (StatusClass.TIMEOUT, None, 1, False),
        (StatusClass.TIMEOUT, None, 3, True),
        (StatusClass.SERVER_ERROR, 501, 1, True),  # not in the retriable set
        (StatusClass.AUTH_ERROR, 401, 1, True),
        (StatusClass.RATE_LIMITED, 429, 2, False),
    ],
)
def test_is_final(
    status_class: StatusClass, http_status: int | None, attempt: int, final: bool
) -> None:
    result = CallResult(status_class, http_status, 1.0)
    assert is_final(dispatch(attempt=attempt, max_attempts=3), result) is final


def test_reward() -> None:
    assert [reward(s) for s in StatusClass] == [
        1.0 if s is StatusClass.SUCCESS else 0.0 for s in StatusClass
    ]
    assert reward(StatusClass.SUCCESS) == 1.0


def test_unknown_transport() -> None:
    with pytest.raises(ValueError, match="unknown transport"):
        make_client(transport="curl")  # type: ignore[arg-type]
