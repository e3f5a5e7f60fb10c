"""The gateway's pure parts: error mapping, keys, the request event, the answer's shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from factories import provider, routing_config

from app.config.schema import GatewayKey
from app.contract import ErrorBody, ReplyTo, Response
from app.gateway import shape
from app.gateway.errors import GatewayError, from_dead_letter, from_error_body, no_answer_in_time
from app.gateway.keys import KeyRing, check_route, hash_key
from app.gateway.lookup import partition_of
from app.gateway.service import Gateway, Prepared, event_request_id
from app.gateway.translate import request_event, wants_stream
from app.settings import Settings

REPLY = ReplyTo(topic="switchyard.replies", partition=3)


def _error(
    type_: str, code: str | None, status: int | None = None, message: str = "m"
) -> ErrorBody:
    return ErrorBody(type=type_, message=message, code=code, http_status=status)


@pytest.mark.parametrize(
    ("error", "status", "retry"),
    [
        (_error("guardrail", "forbidden_keyword", 400), 400, "false"),
        (_error("rate_limited", "tenant_rate_limited", 429, "retry in 2.5s"), 429, "false"),
        (_error("deadline_exceeded", "deadline_exceeded", 504), 504, "true"),
        (_error("lost", "deadline_exceeded", 504), 504, "true"),
        (_error("no_deployment_available", "no_candidate", 503), 503, None),
        (_error("no_deployment_available", "exhausted", 503), 503, None),
        (_error("invalid_request", "no_candidate", 400), 400, "false"),
        (_error("invalid_request", "deployment_not_allowed", 403), 403, "false"),
        (_error("invalid_request", "unknown_deployment", 500), 400, "false"),
        (_error("response_too_large", "response_too_large", 502), 502, "false"),
        (_error("server_error", "exhausted", 500), 502, None),
        (_error("rate_limited", "exhausted", 429), 429, None),
        (_error("timeout", "provider_error", None), 504, None),
        (_error("client_error", "provider_error", 422), 400, "false"),
        (_error("bad_response", "provider_error", 200), 502, None),
        (_error("budget", "budget_exceeded", 429), 429, "false"),
        (_error("mystery", None, None), 500, None),
    ],
)
def test_router_errors_map_to_statuses(error: ErrorBody, status: int, retry: str | None) -> None:
    mapped = from_error_body(error)
    assert mapped.status == status
    assert mapped.headers().get("x-should-retry") == retry
    assert mapped.body()["error"]["message"] == error.message


def test_past_the_deadline_is_a_504_to_retry() -> None:
    mapped = from_error_body(_error("deadline_exceeded", "deadline_exceeded", 504, "no answer"))
    assert mapped.body()["error"] == {
        "message": "no answer",
        "type": "timeout_error",
        "param": None,
        "code": "deadline_exceeded",
    }
    assert mapped.headers() == {
        "Retry-After": "1",
        "retry-after-ms": "1000",
        "x-should-retry": "true",
    }


def _gateway(monkeypatch: pytest.MonkeyPatch, answer: Response) -> Gateway:
    """A gateway that publishes nothing, waits 50 ms, and whose fallback lookup on
    ``llm.responses`` finds nothing while the reply arrives meanwhile."""
    gateway = Gateway(Settings(), routing_config(provider("a")))
    monkeypatch.setattr(Gateway, "wait_s", property(lambda _self: 0.05))

    async def send(_prepared: Prepared) -> None:
        return None

    async def find(_request_id: str) -> Response | None:
        gateway.waiter.deliver(answer)  # the reply comes during the lookup
        return None

    monkeypatch.setattr(gateway, "_send", send)
    monkeypatch.setattr(gateway.lookup, "find", find)
    return gateway


async def test_a_reply_arriving_during_the_fallback_lookup_is_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = _response("late but here")
    prepared = Prepared(answer.request_id, "chat", b"{}")
    gateway = _gateway(monkeypatch, answer)
    assert await gateway.submit(prepared) == answer
    items = gateway.stream_items(prepared)
    assert [item async for item in items][-2:] == [answer, None]  # then what the lookup found
    assert gateway.waiter.waiting == 0


def test_no_answer_in_time_is_a_504_to_retry_naming_where_to_look() -> None:
    error = no_answer_in_time("acme.r1", 135.0)
    assert error.status == 504 and error.code == "gateway_timeout"
    assert error.body()["error"]["type"] == "timeout_error"
    assert "135s" in error.message and "GET /v1/switchyard/requests/acme.r1" in error.message
    assert error.headers()["x-should-retry"] == "true" and error.headers()["Retry-After"] == "1"


def test_tenant_rate_limit_says_when_to_retry() -> None:
    mapped = from_error_body(_error("rate_limited", "tenant_rate_limited", 429, "retry in 2.5s"))
    assert mapped.headers()["Retry-After"] == "3"
    assert mapped.headers()["retry-after-ms"] == "2500"


@pytest.mark.parametrize(
    ("reason", "status"),
    [("oversized", 413), ("unknown_route", 404), ("schema_violation", 400), ("too_deep", 400)],
)
def test_dead_letter_reasons_map_to_statuses(reason: str, status: int) -> None:
    mapped = from_dead_letter(reason, "detail")
    assert mapped.status == status and mapped.body()["error"]["type"]


def test_keys_are_matched_by_hash_and_never_echoed() -> None:
    secret = "sk-live-" + "z" * 30
    ring = KeyRing([GatewayKey(sha256=hash_key(secret), tenant="acme")])
    assert ring.authenticate(f"Bearer {secret}").tenant == "acme"
    for header in (None, "Basic abc", "Bearer ", f"Bearer {secret}x"):
        with pytest.raises(GatewayError) as refused:
            ring.authenticate(header)
        assert refused.value.status == 401
        assert secret not in json.dumps(refused.value.body())


def test_a_key_limited_to_routes_is_refused_others() -> None:
    key = GatewayKey(sha256="0" * 64, routes=["tools"])
    check_route(key, "tools")
    with pytest.raises(GatewayError) as forbidden:
        check_route(key, "chat")
    assert forbidden.value.status == 403


def test_request_event_carries_what_the_contract_knows() -> None:
    body = {
        "model": "chat:nitro",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 9,
        "temperature": 0.5,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "stop": ["END"],
        "user": "u-7",
        "metadata": {"app": "x"},
        "provider": {"only": ["a"]},
        "session_id": "s-1",
        "tenant": "someone-else",
        "stream": True,
    }
    event = request_event(body, "rid", "acme", REPLY)
    assert event["tenant"] == "acme"  # the key's, not the body's
    assert event["max_tokens"] == 9 and event["metadata"] == {"app": "x", "user": "u-7"}
    assert event["reply_to"] == {"topic": "switchyard.replies", "partition": 3}
    assert event["tools"] == body["tools"] and event["provider"] == {"only": ["a"]}
    assert event["stop"] == ["END"]
    assert event["stream"] is True  # the executor publishes the answer's deltas
    assert "stream" not in request_event({**body, "stream": False}, "rid", None, REPLY)
    # The key's name (never the key) goes with the request: its budget and route apply;
    # a body cannot name another key.
    named = request_event({**body, "key_name": "other"}, "rid", "acme", REPLY, "support-bot")
    assert named["key_name"] == "support-bot"
    assert "key_name" not in event
    assert wants_stream({"stream": True, "stream_options": {"include_usage": True}}) == (
        True,
        True,
    )


@pytest.mark.parametrize(
    "body", [[1], {"messages": [], "n": 2}, {"metadata": "x"}, {"metadata": {"k": 1}}]
)
def test_bad_bodies_are_400(body: object) -> None:
    with pytest.raises(GatewayError) as bad:
        request_event(body, "rid", None, REPLY)
    assert bad.value.status == 400


def test_request_ids_live_under_the_tenant() -> None:
    acme = GatewayKey(sha256="0" * 64, tenant="acme")
    assert event_request_id(acme, "abc") == "acme.abc"
    assert event_request_id(acme, "acme.abc") == "acme.abc"
    assert event_request_id(GatewayKey(sha256="0" * 64), "abc") == "abc"
    assert len(event_request_id(acme, None)) > 10
    with pytest.raises(GatewayError):
        event_request_id(acme, "bad id\n")


def _response(content: str) -> Response:
    completion = {
        "id": "c1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    return Response(
        id="r",
        occurred_at=datetime.now(UTC),
        request_id="rid",
        status="ok",
        attempts=2,
        deployment="openai-east:gpt-4.1",
        completion=completion,
    )


def test_the_answer_names_the_model_and_streams_in_order() -> None:
    text = "é✓" * 100  # non-ASCII split across chunks
    response = _response(text)
    assert shape.completion_of(response)["model"] == "gpt-4.1"
    assert shape.headers_of(response)["x-switchyard-attempts"] == "2"
    chunks = list(shape.stream_chunks(response, include_usage=True))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == text
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 3
    assert shape.sse("[DONE]") == b"data: [DONE]\n\n"


def test_partition_of_matches_the_producers_default_partitioner() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    for key in (b"a", b"acme.request-1", "é✓".encode()):
        assert partition_of(key, 4) == DefaultPartitioner()(key, [0, 1, 2, 3], [0, 1, 2, 3])
