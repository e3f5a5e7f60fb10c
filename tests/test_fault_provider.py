"""The fault provider of ``switchyard bench faults``: each scenario as specified, over HTTP;
and the providers file the bench routes with.

No stack: the server runs in the test's loop on a free port, httpx calls it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from app.config.dynamic_routes import ModelNode
from app.config.schema import parse_config
from bench.fault_answer import BREAK_AT, TOKENS, canonical_text, canonical_tokens, request_key
from bench.fault_provider import SCENARIOS, FaultOptions, FaultProvider, start
from bench.faults import FALLBACK, KEY_NAME, fallback_of, providers_yaml

MESSAGES = [{"role": "user", "content": "fault bench: request one"}]
OTHER = [{"role": "user", "content": "fault bench: request two"}]
PREFILL = [*MESSAGES, {"role": "assistant", "content": "Sure, here"}]


@dataclass
class Served:
    fault: FaultProvider
    url: str


@pytest.fixture
async def provider() -> AsyncIterator[Served]:
    options = FaultOptions(rate_limited_calls=2, slow_first_token_s=30.0, flap_s=60.0, token_s=0)
    fault = FaultProvider(options)
    runner, port = await start(fault)
    try:
        yield Served(fault, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def url(provider: Served, scenario: str) -> str:
    return f"{provider.url}/{scenario}/v1/chat/completions"


async def post(
    provider: Served,
    scenario: str,
    messages: list[dict[str, Any]] = MESSAGES,
    timeout: float = 5.0,
) -> httpx.Response:
    async with httpx.AsyncClient(timeout=timeout) as http:
        body = {"model": scenario, "messages": messages}
        return await http.post(url(provider, scenario), json=body)


async def stream_lines(
    provider: Served,
    scenario: str,
    messages: list[dict[str, Any]] = MESSAGES,
    timeout: float = 5.0,
    into: list[str] | None = None,
) -> list[str]:
    """The ``data:`` payloads of a streamed call, appended to ``into`` as they come."""
    lines = into if into is not None else []
    body = {
        "model": scenario,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with (
        httpx.AsyncClient(timeout=timeout) as http,
        http.stream("POST", url(provider, scenario), json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                lines.append(line[5:].strip())
    return lines


def content_of(lines: list[str]) -> str:
    text = []
    for line in lines:
        if line == "[DONE]":
            continue
        chunk = json.loads(line)
        for choice in chunk["choices"]:
            text.append(choice["delta"].get("content") or "")
    return "".join(text)


def finish_reasons(lines: list[str]) -> list[str]:
    chunks = [json.loads(line) for line in lines if line != "[DONE]"]
    return [c["finish_reason"] for k in chunks for c in k["choices"] if c["finish_reason"]]


async def calls_of(provider: Served) -> dict[tuple[str, str], int]:
    async with httpx.AsyncClient() as http:
        report = (await http.get(f"{provider.url}/_faults/calls")).json()
    return {(c["name"], c["key"]): c["calls"] for c in report["calls"]}


# --------------------------------------------------------------------------- the answer


def test_the_canonical_answer_is_60_tokens_derived_from_the_messages() -> None:
    tokens = canonical_tokens(MESSAGES)
    assert len(tokens) == TOKENS == 60
    assert "".join(tokens) == canonical_text(MESSAGES)
    assert canonical_text(MESSAGES) == canonical_text([dict(m) for m in MESSAGES])
    assert canonical_text(MESSAGES) != canonical_text(OTHER)
    assert canonical_text(MESSAGES) != canonical_text(PREFILL)
    assert len(canonical_text(MESSAGES).split(" ")) == 60


async def test_ok_answers_json_with_the_canonical_text_and_usage(provider: Served) -> None:
    response = await post(provider, "ok")
    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["message"]["content"] == canonical_text(MESSAGES)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 60
    assert body["usage"]["prompt_tokens"] > 0


async def test_ok_streams_tokens_a_finish_reason_usage_and_done(provider: Served) -> None:
    lines = await stream_lines(provider, "ok")
    assert lines[-1] == "[DONE]"
    assert content_of(lines) == canonical_text(MESSAGES)
    assert finish_reasons(lines) == ["stop"]
    usage = json.loads(lines[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 60
    assert json.loads(lines[0])["choices"][0]["delta"]["role"] == "assistant"
    assert len(lines) == 1 + 60 + 1 + 1 + 1  # role, tokens, finish, usage, [DONE]


async def test_the_scenario_may_be_the_model_without_a_path_prefix(
    provider: Served,
) -> None:
    async with httpx.AsyncClient() as http:
        base = provider.url
        body = {"model": "503_persistent", "messages": MESSAGES}
        assert (await http.post(f"{base}/v1/chat/completions", json=body)).status_code == 503
        body["model"] = "ok"
        assert (await http.post(f"{base}/v1/chat/completions", json=body)).status_code == 200
        body["model"] = "no-such-scenario"
        assert (await http.post(f"{base}/v1/chat/completions", json=body)).status_code == 404


async def test_429_retry_after_for_the_first_calls_of_each_request(
    provider: Served,
) -> None:
    for _ in range(2):
        refused = await post(provider, "429_retry_after")
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "2"
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert (await post(provider, "429_retry_after", OTHER)).status_code == 429  # its own count
    answered = await post(provider, "429_retry_after")
    assert answered.status_code == 200
    assert answered.json()["choices"][0]["message"]["content"] == canonical_text(MESSAGES)


async def test_429_no_retry_after_sends_no_retry_after(provider: Served) -> None:
    for _ in range(2):
        refused = await post(provider, "429_no_retry_after")
        assert refused.status_code == 429
        assert "Retry-After" not in refused.headers
    assert (await post(provider, "429_no_retry_after")).status_code == 200


async def test_500_once_per_request_then_ok(provider: Served) -> None:
    first = await post(provider, "500_once")
    assert first.status_code == 500 and first.json()["error"]["type"] == "server_error"
    assert (await post(provider, "500_once")).status_code == 200
    assert (await post(provider, "500_once", OTHER)).status_code == 500


async def test_503_persistent_is_always_503(provider: Served) -> None:
    for _ in range(4):
        assert (await post(provider, "503_persistent")).status_code == 503


async def test_reset_before_headers_closes_before_any_response(provider: Served) -> None:
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)):
        await post(provider, "reset_before_headers")
    assert (await calls_of(provider))[("reset_before_headers", request_key(MESSAGES))] == 1


async def test_no_response_accepts_and_never_answers(provider: Served) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await post(provider, "no_response", timeout=0.5)
    assert (await calls_of(provider))[("no_response", request_key(MESSAGES))] == 1


async def test_slow_first_token_sends_the_role_then_waits(provider: Served) -> None:
    seen: list[str] = []
    with pytest.raises(httpx.ReadTimeout):
        await stream_lines(provider, "slow_first_token", timeout=0.5, into=seen)
    assert len(seen) == 1 and content_of(seen) == ""  # the role chunk only
    with pytest.raises(httpx.ReadTimeout):
        await post(provider, "slow_first_token", timeout=0.5)
    provider.fault.options.slow_first_token_s = 0.0
    assert content_of(await stream_lines(provider, "slow_first_token")) == canonical_text(MESSAGES)


async def test_stream_cut_closes_after_40_tokens_without_a_finish(
    provider: Served,
) -> None:
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        await stream_lines(provider, "stream_cut", into=seen)
    assert content_of(seen) == "".join(canonical_tokens(MESSAGES)[:BREAK_AT])
    assert finish_reasons(seen) == [] and "[DONE]" not in seen
    with pytest.raises(httpx.RemoteProtocolError):  # the JSON body is cut short too
        await post(provider, "stream_cut")


async def test_stream_stall_stops_after_40_tokens_and_keeps_the_socket(
    provider: Served,
) -> None:
    seen: list[str] = []
    with pytest.raises(httpx.ReadTimeout):
        await stream_lines(provider, "stream_stall", timeout=0.5, into=seen)
    assert content_of(seen) == "".join(canonical_tokens(MESSAGES)[:BREAK_AT])
    with pytest.raises(httpx.ReadTimeout):
        await post(provider, "stream_stall", timeout=0.5)


async def test_malformed_chunk_at_token_40(provider: Served) -> None:
    lines = await stream_lines(provider, "malformed_chunk")
    assert lines[-1] == "[DONE]"
    lines = lines[:-1]
    bad = []
    for index, line in enumerate(lines):
        try:
            json.loads(line)
        except ValueError:
            bad.append(index)
    assert bad == [1 + BREAK_AT]  # after the role chunk and tokens 0-39
    response = await post(provider, "malformed_chunk")
    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)


async def test_no_done_completes_with_finish_and_usage_but_no_done(
    provider: Served,
) -> None:
    lines = await stream_lines(provider, "no_done")
    assert "[DONE]" not in lines
    assert content_of(lines) == canonical_text(MESSAGES)
    assert finish_reasons(lines) == ["stop"]
    assert json.loads(lines[-1])["usage"]["completion_tokens"] == 60


async def test_context_length_and_content_filter_are_400_with_their_codes(
    provider: Served,
) -> None:
    for scenario, code in (
        ("context_length", "context_length_exceeded"),
        ("content_filter", "content_policy_violation"),
    ):
        response = await post(provider, scenario)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == code and error["type"] == "invalid_request_error"


async def test_rejects_prefill_refuses_an_assistant_last_message_only(
    provider: Served,
) -> None:
    refused = await post(provider, "rejects_prefill", PREFILL)
    assert refused.status_code == 400
    assert "prefill" in refused.json()["error"]["message"]
    answered = await post(provider, "rejects_prefill")
    assert answered.json()["choices"][0]["message"]["content"] == canonical_text(MESSAGES)
    assert (await post(provider, "ok", PREFILL)).status_code == 200  # others accept prefill


async def test_a_continuation_prefill_is_answered_with_the_rest_of_the_answer(
    provider: Served,
) -> None:
    """A prefill that begins the canonical answer (a router continuing a broken stream)
    gets what follows it, streamed and not; any other prefill is the request's own."""
    text = canonical_text(MESSAGES)
    begun = "".join(canonical_tokens(MESSAGES)[:BREAK_AT])
    continued = [*MESSAGES, {"role": "assistant", "content": begun}]
    json_body = (await post(provider, "fb-ok", continued)).json()
    assert json_body["choices"][0]["message"]["content"] == text[len(begun) :]
    assert content_of(await stream_lines(provider, "fb-ok", continued)) == text[len(begun) :]
    own = (await post(provider, "ok", PREFILL)).json()
    assert own["choices"][0]["message"]["content"] == canonical_text(PREFILL)
    assert content_of(await stream_lines(provider, "ok", PREFILL)) == canonical_text(PREFILL)


async def test_flapping_is_503_for_the_flap_time_after_the_start(provider: Served) -> None:
    assert (await post(provider, "flapping")).status_code == 503
    provider.fault.started = time.monotonic() - 61.0  # the flap time has passed
    assert (await post(provider, "flapping")).status_code == 200
    async with httpx.AsyncClient() as http:
        await http.post(f"{provider.url}/_faults/reset")
    assert (await post(provider, "flapping")).status_code == 503  # the clock restarted


async def test_calls_are_counted_per_scenario_and_request(provider: Served) -> None:
    await post(provider, "500_once")
    await post(provider, "500_once")
    await post(provider, "500_once", OTHER)
    await post(provider, "fb-ok")
    await stream_lines(provider, "ok")
    counted = await calls_of(provider)
    assert counted == {
        ("500_once", request_key(MESSAGES)): 2,
        ("500_once", request_key(OTHER)): 1,
        ("fb-ok", request_key(MESSAGES)): 1,  # a fallback is counted apart from the primary
        ("ok", request_key(MESSAGES)): 1,
    }
    assert [c.stream for c in provider.fault.log] == [False, False, False, False, True]
    async with httpx.AsyncClient() as http:
        await http.post(f"{provider.url}/_faults/reset")
    assert await calls_of(provider) == {}


def test_every_scenario_is_known() -> None:
    assert len(SCENARIOS) == len(set(SCENARIOS)) == 16


def test_the_bench_config_routes_each_scenario_with_its_fallback_model() -> None:
    config = parse_config(
        yaml.safe_load(providers_yaml("http://127.0.0.1:9", list(SCENARIOS), 30_000))
    )
    assert set(config.route_names()) == {*SCENARIOS, FALLBACK, "fb-rejects_prefill"}
    graph = config.dynamic_routes.graph_for(tenant=None, api_key=KEY_NAME)
    assert graph is not None
    for scenario in SCENARIOS:
        node = graph.nodes[f"to-{scenario}"]
        assert isinstance(node, ModelNode)
        assert node.target == scenario
        assert node.fallback_models == [fallback_of(scenario)]
        provider = config.provider_by_id[scenario]
        plays = "stream_cut" if scenario == "rejects_prefill" else scenario
        assert provider.base_url == f"http://127.0.0.1:9/{plays}/v1"
        assert not provider.prefill
    assert fallback_of("rejects_prefill") == "fb-rejects_prefill"
    assert fallback_of("stream_cut") == FALLBACK
    fallback = config.provider_by_id[FALLBACK]
    assert (fallback.base_url, fallback.prefill) == ("http://127.0.0.1:9/fb-ok/v1", False)
    refusing = config.provider_by_id["fb-rejects_prefill"]
    # declared to take prefills, it refuses them: the continuation must learn it
    assert refusing.base_url == "http://127.0.0.1:9/fb-rejects_prefill/v1"
    assert refusing.prefill


def test_fallback_prefill_declares_the_fallback_a_prefill_taker() -> None:
    text = providers_yaml("http://127.0.0.1:9", ["stream_cut"], 30_000, fallback_prefill=True)
    assert parse_config(yaml.safe_load(text)).provider_by_id[FALLBACK].prefill
