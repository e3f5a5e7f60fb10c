"""Embeddings without a broker: the request event, the capability filter (an embeddings
request reaches only ``kind: embeddings`` models, a chat request never does, the reason
traced), the gateway's translation, the provider call and its classification against the
simulated providers, the simulated vectors, cost, budgets and the export's redaction."""

from __future__ import annotations

import base64
import json
import math
import struct
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from factories import fold, params

from app.audit.export import redact_record
from app.config.providers import ProviderConfig
from app.config.schema import ConfigError, RoutingConfig, parse_config
from app.contract import ChatRequest, DeadLetter, LogPosition, RequestAccepted, StatusClass
from app.embedded.simulated import EMBEDDING_MODELS, SEED_003_MODELS, SimulatedProviders
from app.embedded.simulated.embeddings import (
    NATIVE_DIMENSIONS,
    EmbeddingsAsked,
    embeddings_answer,
    vector_of,
)
from app.execution.call import call_provider, classify_embeddings
from app.execution.embeddings import (
    decode_base64,
    embeddings_body,
    encode_base64,
    read_embeddings,
)
from app.execution.outcome import cost_usd, retriable
from app.gateway.embeddings import embeddings_event
from app.gateway.errors import GatewayError
from app.gateway.shape import completion_of
from app.ingest import accept
from app.routing.budget_route import worst_case
from app.routing.policy import Policy

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
SOURCE = LogPosition(topic="llm.requests", partition=0, offset=0)
EMBED = {"name": "text-embedding-3-small", "kind": "embeddings"}


def _config(**extra: Any) -> RoutingConfig:
    data: dict[str, Any] = {
        "providers": [
            {"id": "chat-a", "base_url": "http://a.test/v1", "models": [{"name": "gpt"}],
             "cost_per_mtok_input": 3.0, "cost_per_mtok_output": 12.0},
            {"id": "emb-a", "base_url": "http://b.test/v1", "models": [EMBED],
             "cost_per_mtok_input": 0.02, "cost_per_mtok_output": 0.0},
            {"id": "emb-b", "base_url": "http://c.test/v1",
             "models": [{**EMBED, "context_window": 8}], "cost_per_mtok_input": 0.1},
        ],
        "routes": {"mixed": {"providers": ["chat-a", "emb-a", "emb-b"]}},
        "default_route": "mixed",
        **extra,
    }  # fmt: skip
    return parse_config(data, env={})


def _accepted(config: RoutingConfig, **body: Any) -> RequestAccepted:
    raw = json.dumps({"request_id": "r1", **body}).encode()
    event = accept(raw, SOURCE, WHEN, config, max_request_bytes=100_000, deadletter_max_bytes=64)
    assert isinstance(event, RequestAccepted), event
    return event


def _embeddings(config: RoutingConfig, *texts: str, **more: Any) -> RequestAccepted:
    return _accepted(config, operation="embeddings", input=list(texts), **more)


def _excluded(decision: Any) -> set[tuple[str, str]]:
    return {(e.deployment, e.reason) for e in decision.excluded}


# --------------------------------------------------------------------------- the contract


def test_a_chat_record_is_unchanged_and_an_old_one_reads_as_chat() -> None:
    old = {"request_id": "r", "messages": [{"role": "user", "content": "hi"}]}
    request = ChatRequest.model_validate(old)
    assert request.operation == "chat" and not request.is_embeddings
    record = json.loads(request.model_dump_json())
    assert not {"operation", "input", "dimensions", "encoding_format"} & set(record)


def test_an_embeddings_request_has_input_and_no_chat_fields() -> None:
    request = ChatRequest(request_id="e", operation="embeddings", input=["a", "b"], dimensions=8)
    record = json.loads(request.model_dump_json())
    assert record["operation"] == "embeddings" and record["input"] == ["a", "b"]
    assert "messages" not in record
    assert ChatRequest.model_validate(record) == request
    refused: list[dict[str, Any]] = [
        {"operation": "embeddings"},
        {"operation": "embeddings", "input": []},
        {"operation": "embeddings", "input": [""]},
        {"operation": "embeddings", "input": ["a"], "max_tokens": 5},
        {"operation": "embeddings", "input": ["a"], "messages": [{"role": "user"}]},
        {"operation": "embeddings", "input": ["a"], "stream": True},
        {"messages": [{"role": "user", "content": "hi"}], "input": ["a"]},
        {"messages": [{"role": "user", "content": "hi"}], "dimensions": 3},
        {},
        {"operation": "rerank", "input": ["a"]},
    ]
    for body in refused:
        with pytest.raises(ValueError):
            ChatRequest.model_validate({"request_id": "x", **body})


def test_ingest_accepts_an_embeddings_request_and_dead_letters_a_bad_one() -> None:
    config = _config()
    event = _embeddings(config, "hello", "world!")
    assert event.route == "mixed" and event.prompt_chars == len("hello\nworld!")
    assert event.features is not None and event.features.input_modalities == ["text"]
    raw = json.dumps({"request_id": "r2", "operation": "embeddings", "input": [1, 2]}).encode()
    letter = accept(raw, SOURCE, WHEN, config, max_request_bytes=10_000, deadletter_max_bytes=64)
    assert isinstance(letter, DeadLetter) and letter.reason == "schema_violation"


def test_a_preset_adds_no_system_prompt_to_an_embeddings_request() -> None:
    presets = {"house": {"system_prompt": "be brief", "max_tokens": 50}}
    config = _config(presets=presets)
    event = _embeddings(config, "hello", preset="house")
    assert event.request.messages == [] and event.request.max_tokens is None


def test_guardrails_read_and_redact_the_texts() -> None:
    from app.guardrails import redact_messages, rules_for, screen_messages

    rules = [
        {"name": "pii", "action": "redact", "keywords": ["card 4242"]},
        {"name": "secret", "action": "block", "keywords": ["project nightingale"]},
    ]
    config = _config(guardrails={"input": rules})
    event = _embeddings(config, "pay with card 4242", "nothing here")
    assert (event.input_rules, event.input_blocked) == (["pii:redact"], None)
    assert event.request.input == ["pay with card 4242", "nothing here"]  # the log keeps it
    applying = rules_for(config.guardrails.input, "mixed", None)
    sent = redact_messages(event.request, applying)
    assert sent.input is not None and "card 4242" not in sent.input[0]
    assert sent.input[1] == "nothing here"
    blocked = _embeddings(config, "about project nightingale")
    assert blocked.input_blocked == "secret"
    assert screen_messages(blocked.request, applying).blocked == "secret"


# --------------------------------------------------------------------------- candidates


def test_an_embeddings_request_reaches_only_embeddings_models() -> None:
    config = _config()
    pol = Policy(config, params())
    (decision,) = fold([_embeddings(config, "hello")], pol).decisions
    assert decision.deployment == "emb-a:text-embedding-3-small"
    assert ("chat-a:gpt", "lacks_embeddings") in _excluded(decision)
    assert all(c.deployment != "chat-a:gpt" for c in decision.candidates)


def test_a_chat_request_never_reaches_an_embeddings_model() -> None:
    config = _config()
    pol = Policy(config, params())
    chat = _accepted(config, messages=[{"role": "user", "content": "hello"}])
    (decision,) = fold([chat], pol).decisions
    assert decision.deployment == "chat-a:gpt"
    assert _excluded(decision) >= {
        ("emb-a:text-embedding-3-small", "lacks_chat"),
        ("emb-b:text-embedding-3-small", "lacks_chat"),
    }


def test_the_context_window_fits_the_longest_text_not_the_batch() -> None:
    config = _config()
    pol = Policy(config, params())
    short = ["abcdefgh"] * 20  # 2 tokens each, 40 in all: each fits a window of 8
    event = _embeddings(config, *short, provider={"only": ["emb-b"]})
    (decision,) = fold([event], pol).decisions
    assert decision.deployment == "emb-b:text-embedding-3-small"
    event = _embeddings(config, "x" * 40, provider={"only": ["emb-b"]})
    (response,) = fold([event], pol).responses
    assert response.error is not None and response.error.code == "no_capable_deployment"
    assert "embeddings" in response.error.message


def test_a_route_of_chat_models_refuses_embeddings_before_any_call() -> None:
    config = parse_config(
        {
            "providers": [{"id": "p", "base_url": "http://p.test/v1", "models": [{"name": "m"}]}],
            "routes": {"chat": {"providers": ["p"]}},
            "default_route": "chat",
        },
        env={},
    )
    run = fold([_embeddings(config, "hello")], Policy(config, params()))
    assert not run.dispatches
    (response,) = run.responses
    assert response.error is not None and response.error.http_status == 400
    assert "p:m: lacks_embeddings" in response.error.message


def test_a_provider_entry_is_all_chat_or_all_embeddings() -> None:
    entry = {"id": "p", "base_url": "http://p.test/v1", "models": [{"name": "m"}, EMBED]}
    with pytest.raises(ValueError, match="embeddings models an entry of their own"):
        ProviderConfig.model_validate(entry)
    with pytest.raises(ConfigError):
        parse_config({"providers": [entry], "routes": {"r": {"providers": ["p"]}}}, env={})


def test_a_config_without_embeddings_keeps_its_hash() -> None:
    plain = {"id": "p", "base_url": "http://p.test/v1", "models": [{"name": "m"}]}
    declared = {**plain, "models": [{"name": "m", "kind": "chat"}]}
    first, second = (
        parse_config({"providers": [p], "routes": {"chat": {"providers": ["p"]}}}, env={})
        for p in (plain, declared)
    )
    assert first.config_hash == second.config_hash
    assert "kind" not in json.dumps(first.routing_view())


def test_a_budget_holds_no_output_for_embeddings_at_the_embeddings_price() -> None:
    budgets = [{"scope": "tenant", "name": "acme", "usd_per_day": 10}]
    config = _config(budgets=budgets)
    pol = Policy(config, params())
    event = _embeddings(config, "x" * 1000, tenant="acme")
    amount = worst_case(event, 1, pol, ("tenant:acme",))
    assert amount.tokens == event.prompt_chars
    assert amount.usd == pytest.approx(event.prompt_chars * 0.1 / 1_000_000)


# --------------------------------------------------------------------------- the gateway


def test_the_gateway_takes_openai_embeddings_bodies() -> None:
    common, own = embeddings_event(
        {"model": "e", "input": "hi", "user": "u1", "dimensions": 8, "encoding_format": "base64"}
    )
    assert common == {"model": "e", "user": "u1"}
    assert own == {
        "operation": "embeddings",
        "input": ["hi"],
        "encoding_format": "base64",
        "dimensions": 8,
    }
    assert embeddings_event({"input": ["a", "b"]})[1]["input"] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"input": [1, 2, 3]}, "unsupported_input"),
        ({"input": [[1, 2], [3]]}, "unsupported_input"),
        ({"input": []}, "invalid_input"),
        ({"input": ""}, "invalid_input"),
        ({"input": ["a", None]}, "invalid_input"),
        ({"input": ["a"] * 2049}, "invalid_input"),
        ({"input": "a", "encoding_format": "int8"}, "invalid_encoding_format"),
        ({"input": "a", "dimensions": 0}, "invalid_dimensions"),
        ({"input": "a", "dimensions": True}, "invalid_dimensions"),
        ({"input": "a", "messages": []}, "unsupported_parameter"),
        ({"input": "a", "stream": True}, "unsupported_parameter"),
        (["a"], "invalid_body"),
    ],
)
def test_the_gateway_refuses_what_it_does_not_support(body: Any, code: str) -> None:
    with pytest.raises(GatewayError) as caught:
        embeddings_event(body)
    assert caught.value.status == 400 and caught.value.code == code
    assert caught.value.should_retry is False


def test_the_answer_names_the_deployments_model() -> None:
    from app.contract import Response

    answer = {"object": "list", "data": [], "model": "x", "usage": {"prompt_tokens": 1}}
    response = Response(
        id="i", occurred_at=WHEN, request_id="r", status="ok", attempts=1,
        deployment="emb-a:text-embedding-3-small", completion=answer,
    )  # fmt: skip
    shaped = completion_of(response)
    assert shaped == {**answer, "model": "text-embedding-3-small"}


# --------------------------------------------------------------------------- the call


def _request(*texts: str, **fields: Any) -> ChatRequest:
    return ChatRequest(request_id="r", operation="embeddings", input=list(texts), **fields)


def test_the_body_sent_to_the_provider() -> None:
    assert embeddings_body("m", _request("a", "b")) == {
        "model": "m",
        "input": ["a", "b"],
        "encoding_format": "float",
    }
    body = embeddings_body("m", _request("a", dimensions=4, encoding_format="base64"))
    assert body["dimensions"] == 4 and body["encoding_format"] == "base64"


def _data(*vectors: Any) -> dict[str, Any]:
    items = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": items, "model": "m-1", "usage": {"prompt_tokens": 3}}


def test_an_answer_is_kept_in_openai_shape_and_the_format_asked() -> None:
    answer, problem = read_embeddings(_data([0.5, -0.25], [1, 0]), _request("a", "b"), "m", 3)
    assert problem is None and answer is not None
    assert answer == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
            {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
        ],
        "model": "m-1",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    asked = _request("a", "b", encoding_format="base64")
    encoded, _ = read_embeddings(_data([0.5, -0.25], [1, 0]), asked, "m", 3)
    assert encoded is not None
    first = encoded["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(first)) == (0.5, -0.25)
    # base64 from a provider asked for numbers is decoded; the order is the indices'
    body = _data(encode_base64([0.5, 2.0]), [1.0, 3.0])
    body["data"].reverse()
    decoded, _ = read_embeddings(body, _request("a", "b"), "m", 3)
    assert decoded is not None
    assert [d["embedding"] for d in decoded["data"]] == [[0.5, 2.0], [1.0, 3.0]]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"object": "list"}, "missing data"),
        (_data([0.1]), "1 embeddings for 2 inputs"),
        (_data([0.1], [0.1, 0.2]), "embeddings of different lengths"),
        (_data([0.1], [float("nan")]), "invalid embedding at index 1"),
        (_data([0.1], "not base64!"), "invalid embedding at index 1"),
        (_data([0.1], []), "invalid embedding at index 1"),
        (_data([0.1], [True]), "invalid embedding at index 1"),
    ],
)
def test_an_unusable_answer_says_what_is_wrong(body: dict[str, Any], problem: str) -> None:
    assert read_embeddings(body, _request("a", "b"), "m", 0) == (None, problem)


def test_dimensions_asked_are_dimensions_answered() -> None:
    _, problem = read_embeddings(_data([0.1, 0.2]), _request("a", dimensions=3), "m", 0)
    assert problem == "embeddings of 2 dimensions, 3 asked"
    assert decode_base64(encode_base64([1.5, -2.0])) == [1.5, -2.0]
    assert decode_base64("AAA=") is None  # 2 bytes: no whole float32


def _http(status: int, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.Response(status, content=content, headers=headers)


def test_failures_are_classified_as_a_chat_calls_are() -> None:
    request = _request("a")
    limited = classify_embeddings(
        _http(429, {"error": {}}, **{"Retry-After": "3"}), 5, request, "m"
    )
    assert limited.status_class is StatusClass.RATE_LIMITED and limited.retry_after_s == 3
    down = classify_embeddings(_http(503, {"error": {"code": "overloaded"}}), 5, request, "m")
    assert down.status_class is StatusClass.SERVER_ERROR and retriable(down)
    assert down.error == "HTTP 503 (overloaded)"
    window = {"error": {"code": "context_length_exceeded", "message": "too long"}}
    refused = classify_embeddings(_http(400, window), 5, request, "m")
    assert refused.error is not None and refused.error.startswith("context_length_exceeded")
    assert retriable(refused)
    broken = classify_embeddings(_http(200, b'{"data": ['), 5, request, "m")
    assert broken.status_class is StatusClass.BAD_RESPONSE and retriable(broken)
    short = classify_embeddings(_http(200, _data()), 5, request, "m")
    assert short.status_class is StatusClass.BAD_RESPONSE
    assert short.error == "0 embeddings for 1 inputs"
    ok = classify_embeddings(_http(200, _data([0.1])), 5, request, "m")
    assert ok.status_class is StatusClass.SUCCESS and ok.tokens_in == 3
    assert ok.completion is not None and ok.completion["object"] == "list"


def test_the_cost_is_the_input_tokens_at_the_input_price() -> None:
    entry = {"id": "e", "base_url": "http://e.test/v1", "models": [EMBED]}
    priced = ProviderConfig.model_validate({**entry, "cost_per_mtok_input": 0.02})
    assert cost_usd(priced, 1_000_000, 0, 0) == pytest.approx(0.02)


# --------------------------------------------------------------------------- the simulator


def test_a_simulated_vector_is_the_texts_and_the_models() -> None:
    one = vector_of("m", "hello")
    assert one == vector_of("m", "hello") and len(one) == NATIVE_DIMENSIONS
    assert math.isclose(sum(x * x for x in one), 1.0, rel_tol=1e-6)
    assert vector_of("m", "hellO") != one and vector_of("other", "hello") != one
    assert len(vector_of("m", "hello", 64)) == 64
    answer = embeddings_answer("m", EmbeddingsAsked(["abcdefgh", "a"], 4, base64=True))
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert len(base64.b64decode(answer["data"][1]["embedding"])) == 16


async def test_calls_to_the_simulated_providers() -> None:
    models = (SEED_003_MODELS[0], *EMBEDDING_MODELS)
    async with SimulatedProviders(models, seed=3, time_scale=0.0) as sim:
        first, second = (
            ProviderConfig.model_validate(
                {"id": m.provider_id, "base_url": sim.base_url(m.provider_id),
                 "models": [{"name": m.model, "kind": "embeddings"}]}
            )
            for m in EMBEDDING_MODELS
        )  # fmt: skip
        chat = ProviderConfig.model_validate(
            {"id": "c", "base_url": sim.base_url(models[0].provider_id),
             "models": [{"name": models[0].model}]}
        )  # fmt: skip
        request = _request("hello", "world", encoding_format="base64", dimensions=32)
        model = EMBEDDING_MODELS[0].model
        async with httpx.AsyncClient() as client:
            a = await call_provider(client, first, model, request, 5.0)
            b = await call_provider(client, second, model, request, 5.0)
            assert a.status_class is StatusClass.SUCCESS and a.tokens_in == 2
            assert a.completion is not None and b.completion is not None
            assert a.completion["data"] == b.completion["data"]  # one model, one vector
            vector = decode_base64(a.completion["data"][0]["embedding"])
            assert vector is not None and len(vector) == 32
            sim.set_outage(first.id)
            down = await call_provider(client, first, model, request, 5.0)
            assert down.status_class is StatusClass.SERVER_ERROR and retriable(down)
            sim.clear_overrides()
            sim.set_rate_limited(second.id, retry_after_s=2.0)
            limited = await call_provider(client, second, model, request, 5.0)
            assert limited.status_class is StatusClass.RATE_LIMITED
            assert limited.retry_after_s == 2.0
            sim.clear_overrides()
            sim.set_malformed(first.id)
            broken = await call_provider(client, first, model, request, 5.0)
            assert broken.status_class is StatusClass.BAD_RESPONSE
            sim.clear_overrides()
            wrong = await call_provider(client, chat, models[0].model, request, 5.0)
            assert wrong.status_class is StatusClass.AUTH_ERROR and wrong.http_status == 404


# --------------------------------------------------------------------------- tracing


def test_the_provider_call_span_is_an_embeddings_one() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.execution.outcome import CallResult
    from app.telemetry import spans, state

    config = _config()
    (dispatch,) = fold([_embeddings(config, "secret text")], Policy(config, params())).dispatches
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    state.use(provider)
    try:
        with spans.provider_call(dispatch, "https://api.example.com/v1", False) as call:
            call.ended(CallResult(StatusClass.SUCCESS, 200, 5.0, tokens_in=2))
    finally:
        state.use(None)
    (span,) = memory.get_finished_spans()
    assert span.name == "embeddings text-embedding-3-small"
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "embeddings"
    assert attributes["gen_ai.usage.input_tokens"] == 2
    assert "secret text" not in span.to_json()


# --------------------------------------------------------------------------- the export


def test_a_redacted_export_keeps_no_text_and_no_vector() -> None:
    request = _request("secret one", "two").model_dump(mode="json", exclude_none=True)
    routing = json.dumps({"request": request, "completion": _data([0.5])})
    redacted = json.loads(redact_record("routing", routing))
    assert redacted["request"]["input"] == ["x" * 10, "xxx"]
    assert redacted["completion"]["data"][0]["embedding"] is None
    response = json.loads(redact_record("responses", json.dumps({"completion": _data([0.5])})))
    assert response["completion"]["data"][0]["embedding"] is None
    assert "secret" not in json.dumps(redacted)
