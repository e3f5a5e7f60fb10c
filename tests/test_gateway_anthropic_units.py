"""Anthropic's Messages API on the gateway, the pure parts: a Messages body as an OpenAI
chat body (and so as a request event), an answer as a Message, a stream as Anthropic's
events through the relay (failover included), errors in Anthropic's shape, the key."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from gateway_factories import stream_delta
from multidict import CIMultiDict, CIMultiDictProxy

from app.config.schema import GatewayKey
from app.contract import ChatRequest, ErrorBody, ReplyTo, Response, StreamDelta
from app.gateway.errors import GatewayError
from app.gateway.keys import KeyRing, hash_key
from app.gateway.messages_api.api import authenticate, check_version
from app.gateway.messages_api.errors import ERROR_CODE_HEADER, error_response
from app.gateway.messages_api.frames import MessageEvents
from app.gateway.messages_api.inputs import chat_body
from app.gateway.messages_api.message import message_of, usage_of
from app.gateway.relay import Relay
from app.gateway.translate import request_event

WHEN = datetime(2025, 1, 1, tzinfo=UTC)
MARK = {"type": "ephemeral"}
REPLY = ReplyTo(topic="switchyard.replies", partition=0)
WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "chat",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def _refused(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as refused:
        chat_body(body)
    assert refused.value.status == 400 and refused.value.should_retry is False
    return refused.value


# --------------------------------------------------------------------------- translation in


def test_a_whole_conversation_becomes_openai_messages() -> None:
    image = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    body = _body(
        system=[
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Long instructions.", "cache_control": MARK},
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image", "source": image},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Let me look "},
                    {"type": "text", "text": "it up."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [
                            {"type": "text", "text": "sunny"},
                            {"type": "image", "source": image},
                        ],
                        "cache_control": MARK,
                    },
                    {"type": "text", "text": "And so?"},
                ],
            },
            {"role": "assistant", "content": "It is sunny."},
        ],
    )
    messages = chat_body(body)["messages"]
    assert messages[0] == {
        "role": "system",
        "content": [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Long instructions.", "cache_control": MARK},
        ],
    }
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ],
    }
    function = {"name": "get_weather", "arguments": "{}"}
    call = {"id": "toolu_1", "type": "function", "function": function}
    assert messages[2] == {
        "role": "assistant",
        "content": "Let me look it up.",  # the thinking block dropped
        "tool_calls": [call],
    }
    # The tool result first (its mark on its last text part), then the rest of the turn
    # with the tool result's image.
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": [{"type": "text", "text": "sunny", "cache_control": MARK}],
    }
    assert messages[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "And so?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }
    assert messages[5] == {"role": "assistant", "content": "It is sunny."}
    assert len(messages) == 6


def test_plain_text_stays_plain() -> None:
    body = _body(
        system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
        ],
    )
    messages = chat_body(body)["messages"]
    assert messages[0] == {"role": "system", "content": "a\n\nb"}
    assert messages[1] == {"role": "user", "content": "hello"}
    assert messages[2]["content"] is None and messages[2]["tool_calls"][0]["id"] == "t"
    assert messages[3] == {"role": "tool", "tool_call_id": "t", "content": ""}
    assert len(messages) == 4  # a turn of tool results only: no empty user message


def test_knobs_tools_and_choice() -> None:
    body = _body(
        temperature=0.3,
        stop_sequences=["END", "###"],
        tools=[{**WEATHER, "cache_control": MARK}, {**WEATHER, "name": "b", "type": "custom"}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        metadata={"user_id": "u-42"},
        stream=True,
        top_k=5,
        thinking={"type": "enabled", "budget_tokens": 1024},
        routing={"mode": "price"},
        session_id="s-1",
    )
    chat = chat_body(body)
    assert chat["model"] == "chat" and chat["max_tokens"] == 64 and chat["temperature"] == 0.3
    assert chat["stop"] == ["END", "###"] and chat["stream"] is True
    assert chat["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": WEATHER["input_schema"],
            "description": "the weather in a city",
        },
        "cache_control": MARK,
    }
    assert chat["tools"][1]["function"]["name"] == "b"
    assert chat["tool_choice"] == "required" and chat["user"] == "u-42"
    assert chat["routing"] == {"mode": "price"} and chat["session_id"] == "s-1"
    assert "top_k" not in chat and "thinking" not in chat
    choices = {
        "auto": "auto",
        "none": "none",
        "tool": {"type": "function", "function": {"name": "get_weather"}},
    }
    for kind, expected in choices.items():
        choice = {"type": kind, "name": "get_weather"} if kind == "tool" else {"type": kind}
        assert chat_body(_body(tool_choice=choice))["tool_choice"] == expected


def test_system_messages_the_top_level_cache_mark_and_the_output_format() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    body = _body(
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "be kind"}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
        ],
        cache_control=MARK,
        output_config={"effort": "low", "format": {"type": "json_schema", "schema": schema}},
    )
    chat = chat_body(body)
    assert chat["messages"][0] == {"role": "system", "content": "be kind"}
    # The mark goes on the last block that has content (the tool call has none).
    assert chat["messages"][1] == {
        "role": "user",
        "content": [{"type": "text", "text": "hi", "cache_control": MARK}],
    }
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    refused = _refused(_body(max_tokens=0))
    assert "warming the prompt cache" in refused.message and refused.code == "unsupported_parameter"


def test_the_request_event_carries_the_translation_and_the_cache_marks() -> None:
    body = _body(
        system=[{"type": "text", "text": "sys", "cache_control": MARK}],
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
        stream=True,
    )
    event = request_event(chat_body(body), "acme.r1", "acme", REPLY, "web")
    request = ChatRequest.model_validate(event)
    assert request.stop == ["END"] and request.max_tokens == 64 and request.stream is True
    assert request.metadata == {"user": "u-1"} and request.key_name == "web"
    assert request.messages[0].content == [{"type": "text", "text": "sys", "cache_control": MARK}]


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ([], "JSON object"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        (_body(max_tokens=None), "max_tokens"),
        (_body(max_tokens=True), "max_tokens"),
        (_body(messages=[]), "messages"),
        (_body(messages=[{"role": "tool", "content": "x"}]), "messages.0.role"),
        (_body(messages=[{"role": "user", "content": []}]), "messages.0.content"),
        (_body(messages=[{"role": "user", "content": [{"text": "x"}]}]), "messages.0.content.0"),
        (_body(temperature=1.5), "temperature"),
        (_body(stop_sequences=["", "x"]), "stop_sequences"),
        (_body(tools=[{"name": "f"}]), "tools.0.input_schema"),
        (_body(tool_choice={"type": "tool"}), "tool_choice.name"),
        (_body(tool_choice={"type": "maybe"}), "tool_choice.type"),
        (_body(metadata={"user_id": "u", "team": "x"}), "metadata.team"),
        (_body(system=[{"type": "image"}]), "system.0"),
        (_body(stream="yes"), "stream"),
        (_body(output_config={"format": {"type": "regex"}}), "output_config.format.type"),
        (
            _body(messages=[{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]),
            "messages.0.content.0.id",
        ),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(body: Any, names: str) -> None:
    refused = _refused(body)
    assert names in refused.message and refused.code in ("invalid_request", "invalid_body")


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (
            _body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "text", "data": "x"}}],
                    }
                ]
            ),
            "'document'",
        ),
        (_body(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "server tools"),
        (_body(mcp_servers=[{"type": "url", "url": "https://x", "name": "m"}]), "MCP"),
        (
            _body(
                messages=[
                    {"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}
                ]
            ),
            "base64 data or a URL",
        ),
    ],
)
def test_what_cannot_be_served_is_refused_not_ignored(body: Any, names: str) -> None:
    refused = _refused(body)
    assert names in refused.message and refused.code == "unsupported_parameter"


# --------------------------------------------------------------------------- translation out


def _response(message: dict[str, Any], finish: str = "stop", **choice: Any) -> Response:
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    return Response(
        id="x",
        occurred_at=WHEN,
        request_id="acme.r1",
        status="ok",
        attempts=1,
        deployment="prov:model-x",
        completion={
            "id": "cmpl-1",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
            "usage": usage,
        },
    )


def _call(arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    function = {"name": "get_weather", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


def test_an_answer_is_a_message() -> None:
    answer = _response({"role": "assistant", "content": "Hello there."})
    assert message_of(answer, []) == {
        "id": "msg_acme.r1",
        "type": "message",
        "role": "assistant",
        "model": "model-x",
        "content": [{"type": "text", "text": "Hello there."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }
    calls = _response(
        {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Paris"}')]},
        "tool_calls",
    )
    message = message_of(calls, [])
    assert message["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}
    ]
    assert message["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("finish", "choice", "expected"),
    [
        ("length", {}, ("max_tokens", None)),
        ("content_filter", {}, ("refusal", None)),
        ("stop", {"stop_reason": "END"}, ("stop_sequence", "END")),  # vLLM names it
        ("stop", {"stop_reason": "other"}, ("end_turn", None)),
        ("something_else", {}, ("end_turn", None)),
    ],
)
def test_stop_reasons(finish: str, choice: dict[str, Any], expected: tuple[str, Any]) -> None:
    message = message_of(
        _response({"role": "assistant", "content": "x"}, finish, **choice), ["END"]
    )
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_usage_counts_cache_reads_apart_when_known() -> None:
    details = {"prompt_tokens": 100, "completion_tokens": 7}
    assert usage_of(details) == {"input_tokens": 100, "output_tokens": 7}
    cached = {**details, "prompt_tokens_details": {"cached_tokens": 64}}
    assert usage_of(cached) == {
        "input_tokens": 36,
        "output_tokens": 7,
        "cache_read_input_tokens": 64,
    }
    assert usage_of(None) == {"input_tokens": 0, "output_tokens": 0}


def test_tool_arguments_that_are_not_an_object_are_a_502() -> None:
    answer = _response({"role": "assistant", "content": None, "tool_calls": [_call("[1")]})
    with pytest.raises(GatewayError) as bad:
        message_of(answer, [])
    assert bad.value.status == 502 and "prov:model-x" in bad.value.message


# --------------------------------------------------------------------------- streams


def _relay() -> Relay:
    return Relay("acme.r1", frames=MessageEvents("acme.r1", ["END"]))


def _run(relay: Relay, items: list[StreamDelta | Response]) -> list[tuple[str, Any]]:
    """(event, data) of everything the relay sends for ``items``."""
    out = []
    for item in items:
        step = relay.take(item)
        assert step.error is None
        for frame in step.frames:
            head, _, data = frame.decode().partition("\ndata: ")
            assert head.startswith("event: ") and frame.endswith(b"\n\n")
            out.append((head.removeprefix("event: "), json.loads(data)))
    return out


def _message(events: list[tuple[str, Any]]) -> dict[str, Any]:
    """The message the events build, as a client assembles it (checking their order)."""
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    message = dict(events[0][1]["message"])
    blocks: list[dict[str, Any]] = []
    buffers: dict[int, str] = {}
    open_block: int | None = None
    for name, data in events[1:]:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_block is None and data["index"] == len(blocks)
            blocks.append(dict(data["content_block"]))
            open_block = data["index"]
        elif name == "content_block_delta":
            assert open_block is not None and data["index"] == open_block
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[open_block]["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                buffers[open_block] = buffers.get(open_block, "") + delta["partial_json"]
        elif name == "content_block_stop":
            assert data["index"] == open_block
            if open_block in buffers:
                blocks[open_block]["input"] = json.loads(buffers[open_block])
            open_block = None
        elif name == "message_delta":
            assert open_block is None
            message.update(data["delta"], usage=data["usage"])
    message["content"] = blocks
    return message


def test_a_stream_of_text_and_a_tool_call_in_anthropic_order() -> None:
    fragments = [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_weather"}},
        {"index": 0, "function": {"arguments": '{"city": '}},
    ]
    usage = {"prompt_tokens": 10, "completion_tokens": 4}
    events = _run(
        _relay(),
        [
            stream_delta(0, "Let me "),
            stream_delta(1, "check.", tool_calls=fragments),
            stream_delta(2, tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
            stream_delta(3, end="ok", finish_reason="tool_calls", usage=usage),
        ],
    )
    names = [name for name, _ in events]
    assert names[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
    assert names.count("ping") == 1
    message = _message(events)
    assert message["id"] == "msg_acme.r1" and message["model"] == "model-x"
    assert message["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert message["stop_reason"] == "tool_use" and message["stop_sequence"] is None
    assert message["usage"] == {"input_tokens": 10, "output_tokens": 4}


def test_a_failed_over_stream_goes_on_in_the_same_text_block() -> None:
    events = _run(
        _relay(),
        [
            stream_delta(0, "Hello"),
            stream_delta(1, " wo"),
            stream_delta(2, end="failed", error="bad_response: broken"),
            stream_delta(0, "Hel", attempt=2, call="c2"),  # a restart from 0: not followed
            stream_delta(0, "rld!", attempt=2, call="c3", offset=8),
            stream_delta(1, end="ok", finish_reason="length", attempt=2, call="c3"),
        ],
    )
    message = _message(events)
    assert message["content"] == [{"type": "text", "text": "Hello world!"}]
    assert message["stop_reason"] == "max_tokens"


def test_an_answer_that_overtakes_its_end_marker_completes_a_tool_call_stream() -> None:
    """The answer's copy on the replies topic can reach the gateway before the call's end
    marker on the deltas topic: the rest of the tool call's arguments, then its end."""
    begun = [
        {"index": 0, "id": "call_1", "type": "function"},
        {"index": 0, "function": {"name": "get_weather", "arguments": '{"city": '}},
    ]
    second = {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    answer = _response(
        {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo"}'), second]},
        "tool_calls",
    )
    message = _message(_run(_relay(), [stream_delta(0, tool_calls=begun), answer]))
    assert message["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_2", "name": "f", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"
    # OpenAI's chunks: the same rest, as tool-call deltas.
    chunks = Relay("acme.r1")
    chunks.take(stream_delta(0, tool_calls=begun))
    frames = chunks.take(answer).frames
    deltas = [json.loads(f.decode().partition("data: ")[2]) for f in frames[:-1]]
    calls = [
        c for d in deltas if d["choices"] for c in d["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert calls[0] == {"index": 0, "function": {"arguments": '"Oslo"}'}}
    assert calls[1] == {"index": 1, **second}
    assert deltas[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # An answer that does not go on from what was sent: an error event, as before.
    other = _response({"role": "assistant", "content": None, "tool_calls": [_call("{}", "x")]})
    relay = _relay()
    relay.take(stream_delta(0, tool_calls=begun))
    assert _run(relay, [other])[-1][0] == "error"


def test_a_stream_that_cannot_end_as_an_answer_ends_with_an_error_event() -> None:
    call = [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]
    events = _run(
        _relay(),
        [
            stream_delta(0, "Hi", tool_calls=call),
            stream_delta(1, end="failed", error="bad_response: cut"),
        ],
    )
    name, data = events[-1]
    assert name == "error" and data["type"] == "error"
    assert data["error"]["type"] == "api_error"
    assert "GET /v1/switchyard/requests/acme.r1" in data["error"]["message"]


def test_a_whole_answer_is_streamed_as_events() -> None:
    answer = _response(
        {"role": "assistant", "content": "Sure.", "tool_calls": [_call('{"city": "Oslo"}')]},
        "tool_calls",
    )
    relay = _relay()
    step = relay.take(answer)
    assert step.headers is not None and step.headers["x-switchyard-deployment"] == "prov:model-x"
    message = _message(_run(_relay(), [answer]))
    assert message["content"] == [
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert message["stop_reason"] == "tool_use" and relay.done


def test_an_error_before_the_stream_is_an_http_error() -> None:
    failed = Response(
        id="x",
        occurred_at=WHEN,
        request_id="acme.r1",
        status="error",
        attempts=1,
        error=ErrorBody(type="rate_limited", message="slow down", code="rate_limited"),
    )
    step = _relay().take(failed)
    assert step.error is not None and step.error.status == 429


# --------------------------------------------------------------------------- errors, keys


def test_errors_are_in_anthropic_shape_with_their_retry_headers() -> None:
    statuses = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        502: "api_error",
        503: "overloaded_error",
        504: "timeout_error",
    }
    for status, kind in statuses.items():
        answer = error_response(GatewayError(status, "why", "some_code"))
        assert answer.status == status
        assert json.loads(answer.text or "") == {
            "type": "error",
            "error": {"type": kind, "message": "why"},
        }
        assert answer.headers[ERROR_CODE_HEADER] == "some_code"
    limited = error_response(GatewayError(429, "later", "x", 2.5, should_retry=False))
    assert limited.headers["Retry-After"] == "3" and limited.headers["retry-after-ms"] == "2500"
    assert limited.headers["x-should-retry"] == "false"


def _headers(**values: str) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in values.items()}))


def test_the_key_comes_in_x_api_key_or_as_a_bearer() -> None:
    keys = KeyRing([GatewayKey(sha256=hash_key("sk-a"), tenant="acme")])
    assert authenticate(keys, _headers(x_api_key="sk-a")).tenant == "acme"
    assert authenticate(keys, _headers(Authorization="Bearer sk-a")).tenant == "acme"
    for headers in (_headers(), _headers(x_api_key="sk-b"), _headers(Authorization="Bearer x")):
        with pytest.raises(GatewayError) as refused:
            authenticate(keys, headers)
        assert refused.value.status == 401
    with pytest.raises(GatewayError) as missing:
        authenticate(keys, _headers())
    assert "x-api-key" in missing.value.message
    check_version(_headers(anthropic_version="2023-06-01"))
    with pytest.raises(GatewayError) as no_version:
        check_version(_headers())
    assert no_version.value.status == 400 and "anthropic-version" in no_version.value.message
