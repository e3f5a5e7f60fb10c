"""Local first (routing step 4): answered locally only when confident enough."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from factories import T0, accepted, finished, fold, outcome

from app.config.schema import parse_config
from app.contract import ChatMessage, ChatRequest, ProviderPreferences, StatusClass
from app.execution.call import call_provider, confidence_of
from app.execution.http import make_client
from app.execution.outcome import is_final
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.reliability import ends_request
from app.routing.state import NEW_ARM, Breaker, BreakerPhase

LOCAL = "local-smol:smollm2"
CONFIG = {
    "providers": [
        {"id": "local-smol", "base_url": "http://127.0.0.1:1/v1", "models": [{"name": "smollm2"}]},
        {"id": "openai-x", "base_url": "https://o.test/v1", "models": [{"name": "gpt"}]},
    ],
    "routes": {
        "chat": {
            "providers": ["local-smol", "openai-x"],
            "local_first": {"provider": "local-smol", "threshold": 0.75},
        }
    },
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams())


def body_with(logprobs: list[float] | None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": "Paris"},
        "finish_reason": "stop",
    }
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": "t", "logprob": v} for v in logprobs]}
    return {"id": "x", "object": "chat.completion", "model": "smollm2", "choices": [choice]}


def test_confidence_is_the_geometric_mean_token_probability() -> None:
    assert confidence_of(body_with([math.log(0.9), math.log(0.8)])) == pytest.approx(
        math.sqrt(0.9 * 0.8)
    )
    assert confidence_of(body_with([0.0, 0.0])) == 1.0
    assert confidence_of(body_with(None)) is None
    assert confidence_of(body_with([])) is None


def test_the_first_attempt_goes_to_the_local_deployment_alone() -> None:
    run = fold([accepted("r1", T0)], POLICY)
    (dispatch,) = run.dispatches
    assert dispatch.decision.deployment == LOCAL
    assert dispatch.decision.candidate_filter == "local_first"
    assert dispatch.min_confidence == 0.75
    assert [(e.deployment, e.reason) for e in dispatch.decision.excluded] == [
        ("openai-x:gpt", "local_first")
    ]


def _local_outcome(confidence: float | None, final: bool) -> Any:
    result = outcome("r1", LOCAL, T0 + 1, final=final)
    return result.model_copy(update={"confidence": confidence})


def test_a_confident_local_answer_is_the_response() -> None:
    request = accepted("r1", T0)
    run = fold([request], POLICY)
    done = finished(_local_outcome(0.9, final=True), retry=request)
    done = done.model_copy(update={"completion": body_with([0.0])})
    answered = fold([done], POLICY, run.state)
    (response,) = answered.responses
    assert (response.status, response.deployment) == ("ok", LOCAL)
    assert answered.dispatches == []


def test_an_unsure_local_answer_falls_through_to_the_cloud() -> None:
    request = accepted("r1", T0)
    run = fold([request], POLICY)
    unsure = finished(_local_outcome(0.4, final=False), retry=request)
    cloud = fold([unsure], POLICY, run.state)
    assert cloud.responses == []
    (dispatch,) = cloud.dispatches
    assert dispatch.decision.attempt == 2
    assert dispatch.decision.deployment == "openai-x:gpt"
    assert (LOCAL, "already_tried") in {
        (e.deployment, e.reason) for e in dispatch.decision.excluded
    }
    assert cloud.state.arm(LOCAL).breaker.state.value == "CLOSED"  # not a failure


@pytest.fixture
async def fake_local() -> AsyncIterator[str]:
    """A local model server that reports log-probabilities when asked for them."""

    async def chat(request: web.Request) -> web.Response:
        asked = await request.json()
        confident = "capital" in asked["messages"][-1]["content"]
        values = [math.log(0.95)] * 3 if confident else [math.log(0.3)] * 3
        return web.json_response(body_with(values if asked.get("logprobs") else None))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


@pytest.mark.parametrize(
    ("question", "expected_final"), [("capital of France?", True), ("a poem", False)]
)
async def test_the_executor_asks_for_logprobs_and_judges_confidence(
    fake_local: str, question: str, expected_final: bool
) -> None:
    config = parse_config(
        {
            **CONFIG,
            "providers": [
                {**CONFIG["providers"][0], "base_url": fake_local},
                CONFIG["providers"][1],
            ],
        },
        env={},
    )  # type: ignore[dict-item]
    policy = Policy(config, RoutingParams())
    request = ChatRequest(request_id="r1", messages=[ChatMessage(role="user", content=question)])
    event = accepted("r1", T0).model_copy(update={"request": request})
    (dispatch,) = fold([event], policy).dispatches
    async with make_client() as client:
        result = await call_provider(
            client, config.provider_by_id["local-smol"], "smollm2", request, 2.0, logprobs=True
        )
    assert result.status_class is StatusClass.SUCCESS
    assert result.confidence is not None
    assert is_final(dispatch, result) is expected_final


@pytest.mark.parametrize(
    ("status", "http_status"),
    [(StatusClass.CLIENT_ERROR, 400), (StatusClass.SERVER_ERROR, 500), (StatusClass.TIMEOUT, None)],
)
def test_a_failed_local_attempt_hands_the_request_on(
    status: StatusClass, http_status: int | None
) -> None:
    """A prompt beyond the local model's context is a 400 from llama.cpp's server: the
    cloud takes it (a cloud attempt's 400 still ends the request)."""
    assert not ends_request(1, 3, status, http_status, confidence=None, min_confidence=0.75)
    assert ends_request(2, 3, StatusClass.CLIENT_ERROR, 400)
    assert ends_request(3, 3, status, http_status, min_confidence=0.75)  # no attempt left


# --------------------------------------------------------------------------- never stranded


def _local_arm(**changes: Any) -> Any:
    return replace(NEW_ARM, **changes)


def _with_local(run: Any, **changes: Any) -> Any:
    return replace(run.state, arms={**run.state.arms, LOCAL: _local_arm(**changes)})


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"breaker": "open"}, "local_breaker_open"),
        ({"in_flight": 10_000}, "local_busy"),
        ({"retry_after_until": T0 + 60}, "local_retry_after"),
    ],
)
def test_a_local_model_that_cannot_answer_now_is_skipped_at_once(
    changes: dict[str, Any], reason: str
) -> None:
    """Open breaker, full slots, a Retry-After: the cloud takes attempt 1 when the request
    arrives, with the route's every attempt; nothing waits for the local model."""
    if changes.get("breaker") == "open":
        changes = {"breaker": Breaker(state=BreakerPhase.OPEN, failures=5, last_failure_time=T0)}
    start = fold([], POLICY)
    state = _with_local(start, **changes)
    run = fold([accepted("s1", T0 + 1)], POLICY, state)
    (dispatch,) = run.dispatches
    assert dispatch.decision.deployment == "openai-x:gpt"
    assert dispatch.decision.attempt == 1 and dispatch.min_confidence is None
    assert (LOCAL, reason) in {(e.deployment, e.reason) for e in dispatch.decision.excluded}
    assert dispatch.max_attempts == POLICY.max_attempts("chat")
    assert run.state.parking.parked == {} and run.state.parking.line.waiting == 0


def test_the_request_s_provider_lists_can_leave_the_local_model_out() -> None:
    event = accepted("s2", T0)
    body = event.request.model_copy(update={"provider": ProviderPreferences(ignore=["local-smol"])})
    run = fold([event.model_copy(update={"request": body})], POLICY)
    (dispatch,) = run.dispatches
    assert dispatch.decision.deployment == "openai-x:gpt"
    assert (LOCAL, "provider_ignored") in {
        (e.deployment, e.reason) for e in dispatch.decision.excluded
    }


def test_an_unsure_local_answer_leaves_the_cloud_all_its_attempts() -> None:
    request = accepted("r1", T0)
    run = fold([request], POLICY)
    assert run.dispatches[0].max_attempts == POLICY.max_attempts("chat") + 1
    unsure = finished(_local_outcome(0.4, final=False), retry=request)
    cloud = fold([unsure], POLICY, run.state)
    (dispatch,) = cloud.dispatches
    # Attempt 2 is the cloud's first: the cloud has max_attempts of its own.
    assert dispatch.max_attempts == POLICY.max_attempts("chat") + 1


def test_a_recovered_local_model_gets_the_half_open_probe_and_local_first_resumes() -> None:
    """Its breaker open for longer than the breaker's timeout, the local model takes the
    next request's first attempt as the probe; while that probe is out, the cloud takes the
    others at once; a confident answer to it is kept, and the next probes close it."""
    opened = Breaker(state=BreakerPhase.OPEN, failures=5, last_failure_time=T0)
    later = T0 + POLICY.breaker.timeout_s + 1
    state = _with_local(fold([], POLICY), breaker=opened)
    run = fold([accepted("p1", later), accepted("p2", later + 0.1)], POLICY, state)
    first, second = run.dispatches
    assert first.decision.deployment == LOCAL and first.decision.attempt == 1
    assert first.min_confidence == 0.75
    assert second.decision.deployment != LOCAL
    kept_out = {(e.deployment, e.reason) for e in second.decision.excluded}
    assert (LOCAL, "local_half_open_probe_in_flight") in kept_out


def test_before_the_breaker_s_timeout_the_local_model_is_not_probed() -> None:
    opened = Breaker(state=BreakerPhase.OPEN, failures=5, last_failure_time=T0)
    state = _with_local(fold([], POLICY), breaker=opened)
    run = fold([accepted("p1", T0 + POLICY.breaker.timeout_s - 1)], POLICY, state)
    (dispatch,) = run.dispatches
    assert dispatch.decision.deployment != LOCAL
    assert (LOCAL, "local_breaker_open") in {
        (e.deployment, e.reason) for e in dispatch.decision.excluded
    }
