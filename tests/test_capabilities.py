"""Capability-aware candidates: a request reaches only the models that can serve it
(image or audio input, tools, JSON-schema output, its prompt and answer in the
context window), with the reason traced; one nothing can serve is a 400 before any call."""

from __future__ import annotations

from typing import Any

from factories import T0, accepted, failed_first, fold, outcome, policy, provider

from app.config.schema import parse_config
from app.contract import ChatMessage, ChatRequest, RequestAccepted, StatusClass
from app.routing.feedback import apply_outcome
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.understanding.features import extract_features

IMAGE = [
    {"type": "text", "text": "what is in this picture?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
]


def _request(request_id: str, content: Any = "hello", **fields: Any) -> RequestAccepted:
    body = ChatRequest(
        request_id=request_id, messages=[ChatMessage(role="user", content=content)], **fields
    )
    event = accepted(request_id, T0)
    chars = len(content) if isinstance(content, str) else 24
    return event.model_copy(
        update={"request": body, "features": extract_features(body), "prompt_chars": chars}
    )


def _policy() -> Policy:
    text = provider(
        "text", models=[{"name": "m1", "modalities": ["text"], "context_window": 32_000}]
    )
    vision = provider(
        "vision",
        models=[
            {
                "name": "m1",
                "modalities": ["text", "image", "tools", "json_schema"],
                "context_window": 200_000,
                "max_output_tokens": 4_096,
            }
        ],
    )
    return policy(text, vision)


def _routed(event: RequestAccepted, pol: Policy) -> Any:
    run = fold([event], pol)
    (dispatch,) = run.dispatches
    return dispatch.decision


def test_an_image_request_never_reaches_a_text_only_model() -> None:
    decision = _routed(_request("i1", IMAGE), _policy())
    assert decision.deployment == "vision:m1"
    assert ("text:m1", "lacks_image") in {(e.deployment, e.reason) for e in decision.excluded}


def test_a_prompt_beyond_a_context_window_goes_to_a_larger_one() -> None:
    event = _request("c1", "x" * 150_000 * 4)  # ~150k tokens
    decision = _routed(event, _policy())
    assert decision.deployment == "vision:m1"
    assert ("text:m1", "context_window_too_small") in {
        (e.deployment, e.reason) for e in decision.excluded
    }


def test_tools_and_json_schema_need_models_that_declare_them() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert _routed(_request("t1", tools=tools), _policy()).deployment == "vision:m1"
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    decision = _routed(_request("j1", response_format=schema), _policy())
    assert ("text:m1", "lacks_json_schema") in {(e.deployment, e.reason) for e in decision.excluded}


def test_a_request_nothing_can_serve_is_a_400_before_any_call() -> None:
    event = _request("n1", "x" * 250_000 * 4, max_tokens=8_000)
    run = fold([event], _policy())
    error = run.refusal()
    assert (error.code, error.http_status) == ("no_capable_deployment", 400)
    assert "context_window_too_small" in error.message
    assert "max_output_too_small" in error.message


def test_models_that_declare_nothing_serve_anything() -> None:
    plain = policy(provider("a"), provider("b"))
    assert _routed(_request("p1", IMAGE), plain).deployment in {"a:m1", "b:m1"}


def test_a_local_model_too_small_for_the_prompt_hands_it_to_the_cloud_at_once() -> None:
    config = {
        "providers": [
            {
                "id": "local",
                "base_url": "http://127.0.0.1:1/v1",
                "models": [{"name": "smol", "context_window": 2_048}],
            },
            {"id": "cloud", "base_url": "https://c.test/v1", "models": [{"name": "big"}]},
        ],
        "routes": {"chat": {"providers": ["local", "cloud"], "local_first": {"provider": "local"}}},
    }
    pol = Policy(parse_config(config, env={}), RoutingParams())
    decision = _routed(_request("l1", "x" * 40_000), pol)
    assert decision.deployment == "cloud:big" and decision.attempt == 1
    assert ("local:smol", "local_context_window_too_small") in {
        (e.deployment, e.reason) for e in decision.excluded
    }
    assert _routed(_request("l2", "a short question"), pol).deployment == "local:smol"


def test_a_context_length_refusal_teaches_the_deployment_its_window() -> None:
    """A 400 ``context_length_exceeded``: that deployment gets no request as large again
    (others still do), and smaller ones still go to it."""
    pol = policy(provider("a"), provider("b"))
    big = _request("w1", "x" * 40_000)
    error = "context_length_exceeded: HTTP 400 (context_length_exceeded)"
    _, refused, moved = failed_first(pol, big, T0 + 1, StatusClass.CLIENT_ERROR, error=error)
    one = refused.deployment
    assert moved.state.arm(one).refused_tokens == 10_000
    answered = apply_outcome(moved.state.arm(one), outcome("w0", one, T0 + 2), T0 + 2, pol)
    assert answered.refused_tokens == 10_000  # kept by every later outcome
    other = moved.decisions[0].deployment
    assert other != one
    again = fold([_request("w2", "y" * 40_000)], pol, moved)
    decision = again.decisions[0]
    assert decision.deployment == other
    assert (one, "context_window_learnt") in {(e.deployment, e.reason) for e in decision.excluded}
    small = fold([_request("w3", "short")], pol, again)
    assert small.dispatches  # a short prompt may still go anywhere
