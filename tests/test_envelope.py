"""Every record an attempt or a request produces fits the producer's limit.

A valid request just under ``max_request_bytes`` fits in all its envelopes
(``RequestAccepted``, the ``Dispatch`` that embeds it, the ``AttemptFinished``
that carries it as ``retry``); a completion too large for a record ends the
request as ``response_too_large`` instead of crashing the executor; a completion
that cannot be serialised is the provider's ``bad_response``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from factories import accepted_request, decision_for, dispatch_for

from app.config.providers import ModelSpec, ProviderConfig
from app.config.schema import parse_config
from app.contract import (
    AttemptFinished,
    Candidate,
    ChatMessage,
    ChatRequest,
    Decision,
    Dispatch,
    Exclusion,
    LogPosition,
    RequestAccepted,
    StatusClass,
)
from app.execution.call import CallResult
from app.execution.envelope import RESPONSE_TOO_LARGE, seal
from app.execution.outcome import build_outcome, feedback
from app.ingest import accept, encode_accepted
from app.routing.answers import final_response
from app.settings import Settings

SETTINGS = Settings()
NOW = datetime(2025, 1, 1, tzinfo=UTC)
PROVIDER = ProviderConfig(
    id="openai-x",
    base_url="http://x.test/v1",
    cost_per_mtok_output=1.0,
    models=[ModelSpec(name="m")],
)


def decision(request_id: str, candidates: int) -> Decision:
    return decision_for(
        request_id,
        "openai-x:m",
        NOW,
        strategy="adaptive",
        candidates=[
            Candidate(
                deployment=f"provider-number-{i}:some-long-model-name-{i}",
                score=0.123456789,
                factors={"success": 0.99, "quality": 0.8, "cost": -0.01, "latency": -0.05},
            )
            for i in range(candidates)
        ],
        excluded=[Exclusion(deployment=f"excluded-{i}:m", reason="open") for i in range(20)],
        config_hash="abc" * 20,
        state_version=123456,
        prompt_chars=999_000,
    )


def dispatch_of(accepted: RequestAccepted, candidates: int = 1) -> Dispatch:
    return dispatch_for(
        accepted,
        decision(accepted.request.request_id, candidates),
        NOW,
        timeout_s=30.0,
        deadline=NOW.timestamp() + 120,
        tried=[f"provider-number-{i}:some-long-model-name-{i}" for i in range(2)],
    )


def record_size(key: str, value: str | bytes) -> int:
    encoded = value.encode() if isinstance(value, str) else value
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key.encode(), encoded, []))


def largest_request() -> RequestAccepted:
    config = parse_config(
        {
            "providers": [
                {"id": "openai-x", "base_url": "http://x.test/v1", "models": [{"name": "m"}]}
            ]
        },
        env={},
    )
    padding = SETTINGS.max_request_bytes - 400
    body = {
        "request_id": "r" * 200,
        "messages": [{"role": "user", "content": "é" * (padding // 2)}],
        "metadata": {"team": "a"},
        "tenant": "t",
    }
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert SETTINGS.max_request_bytes - 1000 < len(raw) <= SETTINGS.max_request_bytes
    where = LogPosition(topic="llm.requests", partition=3, offset=10**12)
    result = accept(
        raw,
        where,
        NOW,
        config,
        max_request_bytes=SETTINGS.max_request_bytes,
        deadletter_max_bytes=SETTINGS.deadletter_max_bytes,
    )
    assert isinstance(result, RequestAccepted)
    encoded = encode_accepted(
        result, raw, max_accepted_bytes=SETTINGS.max_accepted_bytes, deadletter_max_bytes=64
    )
    assert isinstance(encoded, bytes)
    return result


def test_the_largest_request_fits_in_every_envelope_it_travels_in() -> None:
    limit = SETTINGS.producer_max_request_size
    accepted = largest_request()
    assert record_size("chat", accepted.model_dump_json()) <= limit
    # A decision listing 500 candidates still fits in the Dispatch.
    sent = dispatch_of(accepted, candidates=500)
    assert record_size(accepted.request.request_id, sent.model_dump_json()) <= limit
    failed = CallResult(StatusClass.SERVER_ERROR, 503, 10.0, error="HTTP 503")
    outcome = build_outcome(sent, failed, PROVIDER, occurred_at=NOW, final=False)
    retry = feedback(sent, outcome, failed)
    assert retry.retry is not None
    assert record_size("chat", retry.model_dump_json()) <= limit
    # Faust's default (1,000,000) refused the RequestAccepted of this valid request.
    assert record_size("chat", accepted.model_dump_json()) > 1_000_000


def small_dispatch(min_confidence: float | None = None) -> Dispatch:
    request = ChatRequest(request_id="e1", messages=[ChatMessage(role="user", content="hi")])
    accepted = accepted_request(request, NOW, prompt_chars=2, offset=1)
    return dispatch_of(accepted).model_copy(update={"min_confidence": min_confidence})


def answer(text: str) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    }


def success(text: str, confidence: float | None = None) -> CallResult:
    return CallResult(
        StatusClass.SUCCESS,
        200,
        50.0,
        tokens_in=3,
        tokens_out=400_000,
        completion=answer(text),
        confidence=confidence,
    )


def sealed(sent: Dispatch, result: CallResult) -> tuple[Any, AttemptFinished, int]:
    done = seal(sent, result, PROVIDER, occurred_at=NOW, max_record_bytes=SETTINGS.max_record_bytes)
    finished = AttemptFinished.model_validate_json(done.feedback)
    # The executor publishes the answer itself exactly when the feedback says so.
    assert finished.answered == (done.response is not None)
    return done.outcome, finished, len(done.feedback)


def test_a_normal_answer_is_sealed_unchanged() -> None:
    outcome, finished, _ = sealed(small_dispatch(), success("Paris."))
    assert outcome.status_class is StatusClass.SUCCESS and outcome.final
    assert finished.completion == answer("Paris.")
    assert finished.answered


def test_the_executors_answer_is_the_record_the_fold_derives() -> None:
    done = seal(
        small_dispatch(), success("Paris."), PROVIDER, occurred_at=NOW,
        max_record_bytes=SETTINGS.max_record_bytes,
    )  # fmt: skip
    finished = AttemptFinished.model_validate_json(done.feedback)
    assert done.response is not None
    assert done.response == final_response(finished, clock=NOW.timestamp() + 99.0)


def test_a_completion_too_large_to_publish_is_a_final_response_too_large() -> None:
    outcome, finished, size = sealed(small_dispatch(), success("x" * 1_500_000))
    assert size <= SETTINGS.max_record_bytes
    assert outcome.status_class is StatusClass.CLIENT_ERROR  # neutral for the provider
    assert outcome.final and not outcome.retriable
    assert outcome.error is not None and outcome.error.startswith(RESPONSE_TOO_LARGE)
    assert outcome.tokens_out == 400_000 and outcome.cost_usd > 0  # paid for all the same
    assert finished.completion is None and finished.retry is None
    assert "x" * 100 not in finished.model_dump_json()


def test_a_completion_that_cannot_be_serialised_is_the_provider_s_bad_response() -> None:
    outcome, finished, _ = sealed(small_dispatch(), success("bad \ud800 text"))
    assert outcome.status_class is StatusClass.BAD_RESPONSE
    assert not outcome.final and outcome.retriable  # retried elsewhere
    assert finished.completion is None and finished.retry is not None


def test_an_unconfident_local_answer_too_large_to_carry_is_retried_without_it() -> None:
    sent = small_dispatch(min_confidence=0.9)
    outcome, finished, _ = sealed(sent, success("y" * 1_500_000, confidence=0.2))
    assert outcome.status_class is StatusClass.SUCCESS and not outcome.final
    assert finished.completion is None and finished.retry is not None


def test_the_compose_broker_takes_the_largest_record() -> None:
    from pathlib import Path

    import yaml

    compose = yaml.safe_load((Path(__file__).parent.parent / "docker-compose.yml").read_text())
    kafka = compose["services"]["kafka"]["environment"]
    assert int(kafka["KAFKA_MESSAGE_MAX_BYTES"]) >= SETTINGS.producer_max_request_size
    assert int(kafka["KAFKA_REPLICA_FETCH_MAX_BYTES"]) >= int(kafka["KAFKA_MESSAGE_MAX_BYTES"])
