"""Resuming a stream end to end: a client reads part of a streamed answer from one gateway,
drops the connection, and resumes with ``Last-Event-ID`` on a second gateway (its own
replies partition: nothing of the stream in its memory), which reads the rest from the
log. The text before the cut and the text resumed, joined, are the answer byte for byte:
from a live stream, from a complete one, and across a mid-stream failover (a provider
whose stream breaks after 40 of its 60 tokens, continued by a fallback).
``GET /v1/chat/completions/{id}`` answers the whole completion once it is complete, and
only the tenant that asked may read or resume its request."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import yaml
from stack_helpers import fault_provider, fault_scenario, gateway_in_front, stack_and_gateway

from app.embedded.broker import EmbeddedBroker
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway
from bench.fault_answer import BREAK_AT, canonical_text, canonical_tokens
from bench.fault_provider import FaultOptions

pytestmark = pytest.mark.broker

ACME = "sk-test-resume-acme-" + "a" * 20
GLOBEX = "sk-test-resume-globex-" + "g" * 20


def _config(base_url: str) -> str:
    nodes = {
        "is-cut": {"kind": "condition", "when": {"model": "cut"}, "true": "to-cut", "false": "ok"},
        "to-cut": {"kind": "model", "target": "stream-cut", "fallback_models": ["ok"]},
        "ok": {"kind": "model", "target": "ok"},
    }
    document = {
        "providers": [
            fault_scenario(base_url, "stream_cut"),
            fault_scenario(base_url, "ok", prefill=True),
        ],
        "routes": {
            "ok": {"providers": ["ok"]},
            "cut": {"providers": ["ok"]},  # the dynamic route sends it to stream-cut
            "stream-cut": {"providers": ["stream-cut"]},
        },
        "default_route": "ok",
        "dynamic_routes": {
            "resume": {
                "bind": [{"api_key": "acme"}, {"api_key": "globex"}],
                "start": "is-cut",
                "nodes": nodes,
            }
        },
        "gateway_keys": [
            {"sha256": hash_key(ACME), "name": "acme", "tenant": "acme"},
            {"sha256": hash_key(GLOBEX), "name": "globex", "tenant": "globex"},
        ],
    }
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, first: RunningGateway, second: RunningGateway) -> None:
        self.first, self.second = first, second


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    # 60 tokens 30 ms apart: a stream of about two seconds, time to drop it mid-way.
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "40"}
    async with (
        fault_provider(FaultOptions(token_s=0.03)) as base_url,
        stack_and_gateway(broker, "r", providers_yaml=_config(base_url), env=env) as pair,
        gateway_in_front(pair[0], {"gateway_reply_partitions": [1]}) as second,
    ):
        yield Env(pair[1], second)


def _messages(what: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"resume {what} {uuid.uuid4().hex}"}]


def _body(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _headers(key: str, rid: str, last: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}", "x-switchyard-request-id": rid}
    if last is not None:
        headers["Last-Event-ID"] = last
    return headers


async def _read(response: httpx.Response, until: int | None) -> tuple[str, str, list[Any]]:
    """(text, last event id, data) of the events read, up to ``until`` characters of text
    (None: to the end)."""
    text, last, data = "", "", []
    event_id = ""
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            last = event_id
            item = line[6:]
            data.append(item if item == "[DONE]" else json.loads(item))
            if isinstance(data[-1], dict) and data[-1].get("choices"):
                text += data[-1]["choices"][0]["delta"].get("content") or ""
            if until is not None and len(text) >= until:
                break
    return text, last, data


async def _cut_and_resume(env: Env, model: str, tokens: int) -> tuple[str, str, Any]:
    """Read a stream from the first gateway until it has its first ``tokens`` tokens, drop
    it, resume on the second: (the text read, the text resumed, the final answer's reply)."""
    messages = _messages(model)
    whole = canonical_text(messages)
    until = len("".join(canonical_tokens(messages)[:tokens]))
    rid = f"cut-{uuid.uuid4().hex[:10]}"
    async with httpx.AsyncClient(timeout=40) as http:
        url = f"{env.first.url}/v1/chat/completions"
        body = _body(model, messages)
        async with http.stream("POST", url, json=body, headers=_headers(ACME, rid)) as streamed:
            assert streamed.status_code == 200
            seen, last, _ = await _read(streamed, until=until)
        assert int(last) == len(seen) and 0 < len(seen) < len(whole)
        # Still in progress: no partial answer is presented as complete.
        early = await http.get(
            f"{env.second.url}/v1/chat/completions/{rid}", headers=_headers(ACME, rid)
        )
        assert early.status_code in (409, 200)
        if early.status_code == 409:
            assert early.json()["error"]["code"] == "request_in_progress"
        url = f"{env.second.url}/v1/chat/completions"
        headers = _headers(ACME, rid, last)
        async with http.stream("POST", url, json=body, headers=headers) as resumed:
            assert resumed.status_code == 200
            assert resumed.headers["x-switchyard-request-id"] == f"acme.{rid}"
            rest, end, events = await _read(resumed, until=None)
        assert seen + rest == whole  # byte for byte: no repeat, no gap
        assert int(end) == len(whole) and events[-1] == "[DONE]"
        assert events[-3]["choices"][0]["finish_reason"] == "stop"
        assert events[-2]["usage"]["completion_tokens"] > 0
        assert all("role" not in e["choices"][0]["delta"] for e in events[:-2])
        answer = await http.get(
            f"{env.second.url}/v1/chat/completions/chatcmpl-acme.{rid}",
            headers={"Authorization": f"Bearer {ACME}"},
        )
        assert answer.status_code == 200
        completion = answer.json()
        assert completion["object"] == "chat.completion"
        assert completion["choices"][0]["message"]["content"] == whole
    return seen, rest, answer


@pytest.mark.parametrize("tokens", [1, 12, 35])
async def test_a_dropped_stream_resumes_on_another_gateway_byte_for_byte(
    env: Env, tokens: int
) -> None:
    seen, rest, answer = await _cut_and_resume(env, "ok", tokens)
    assert seen and rest and answer.headers["x-switchyard-attempts"] == "1"


#: Cut before the provider's stream breaks, and right at the break (the client has all the
#: broken call sent: the rest is the fallback's).
@pytest.mark.parametrize("tokens", [12, BREAK_AT])
async def test_a_stream_resumes_across_a_mid_stream_failover(env: Env, tokens: int) -> None:
    _, _, answer = await _cut_and_resume(env, "cut", tokens)
    assert answer.headers["x-switchyard-attempts"] == "2"  # the fallback finished it
    assert answer.json()["model"] == "ok"


async def test_a_complete_stream_resumes_with_the_sdk_from_the_log(env: Env) -> None:
    messages = _messages("complete")
    whole = canonical_text(messages)
    rid = f"done-{uuid.uuid4().hex[:10]}"
    first = openai.AsyncOpenAI(base_url=f"{env.first.url}/v1", api_key=ACME, max_retries=0)
    second = openai.AsyncOpenAI(base_url=f"{env.second.url}/v1", api_key=ACME, max_retries=0)
    asked = {"x-switchyard-request-id": rid}
    stream = await first.chat.completions.create(
        model="ok",
        messages=messages,
        stream=True,
        extra_headers=asked,  # type: ignore[arg-type]
    )
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == whole
    for cut in (0, 7, len(whole) - 1, len(whole)):
        resumed = await second.chat.completions.create(
            model="ok",
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            extra_headers={**asked, "Last-Event-ID": str(cut)},
        )
        chunks = [c async for c in resumed]
        assert whole[:cut] + "".join(c.choices[0].delta.content or "" for c in chunks) == whole
        assert chunks[-1].choices[0].finish_reason == "stop"
    # The GET form (for a client that cannot re-send the body), with the usage asked for.
    async with httpx.AsyncClient(timeout=20) as http:
        url = f"{env.second.url}/v1/chat/completions/{rid}/stream?include_usage=true"
        headers = {"Authorization": f"Bearer {ACME}", "Last-Event-ID": "3"}
        async with http.stream("GET", url, headers=headers) as resumed_:
            rest, _, events = await _read(resumed_, until=None)
    assert whole[:3] + rest == whole and events[-2]["usage"] is not None
    completion = await second.chat.completions.with_raw_response.create(
        model="ok",
        messages=messages,
        extra_headers=asked,  # type: ignore[arg-type]
    )
    assert completion.headers["x-switchyard-request-id"] == f"acme.{rid}"


async def test_another_tenant_and_bad_ids_are_refused(env: Env) -> None:
    messages = _messages("tenant")
    rid = f"own-{uuid.uuid4().hex[:10]}"
    async with httpx.AsyncClient(timeout=40) as http:
        url = f"{env.first.url}/v1/chat/completions"
        body = {"model": "ok", "messages": messages}
        done = await http.post(url, json=body, headers=_headers(ACME, rid))
        assert done.status_code == 200
        whole = canonical_text(messages)
        second = f"{env.second.url}/v1/chat/completions"
        for key, asked in ((GLOBEX, rid), (GLOBEX, f"acme.{rid}"), (ACME, "no-such-request")):
            resumed = await http.post(second, json=body, headers=_headers(key, asked, "3"))
            assert resumed.status_code == 404, resumed.text
            assert resumed.json()["error"]["code"] == "request_not_found"
            got = await http.get(f"{second}/{asked}", headers=_headers(key, asked))
            assert got.status_code == 404 and "content" not in got.text
        for bad in ("abc", "-1", "1.5", ""):
            refused = await http.post(second, json=body, headers=_headers(ACME, rid, bad))
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "invalid_last_event_id"
            assert "Last-Event-ID" in refused.json()["error"]["message"]
        beyond = await http.post(
            second, json=body, headers=_headers(ACME, rid, str(len(whole) + 1))
        )
        assert beyond.status_code == 400 and "beyond" in beyond.json()["error"]["message"]
        headers = {"Authorization": f"Bearer {ACME}", "Last-Event-ID": "3"}
        nameless = await http.post(second, json=body, headers=headers)
        assert nameless.status_code == 400
        assert nameless.json()["error"]["code"] == "missing_request_id"
