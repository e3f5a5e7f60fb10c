"""The Responses API's pure parts: response ids, a body read as chat messages and knobs,
a conversation's next messages, the Response object, and the stream's events written
by the relay (commit, failover, tool calls, errors) as OpenAI's Responses events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from gateway_factories import stream_delta

from app.contract import ErrorBody, LogPosition, Response, StreamDelta
from app.gateway.errors import GatewayError
from app.gateway.relay import Relay
from app.gateway.responses_api import history, ids, inputs, objects, tools
from app.gateway.responses_api.frames import ResponsesFrames

WHEN = datetime(2025, 1, 1, tzinfo=UTC)
RID = "acme.r1"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def _answer(content: str | None, finish: str = "stop", **message: Any) -> Response:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content, **message},
        "finish_reason": finish,
    }
    usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    return Response(
        id="x",
        occurred_at=WHEN,
        request_id=RID,
        status="ok",
        attempts=1,
        deployment="prov:model-x",
        completion={"choices": [choice], "usage": usage},
    )


def _record(**turn: Any) -> dict[str, Any]:
    return {
        "request_id": RID,
        "tenant": "acme",
        "model": "chat",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 50,
        "tools": tools.chat_tools([WEATHER]),
        "turn": {"store": True, "instructions": True, **turn},
    }


# --------------------------------------------------------------------------- ids


def test_a_response_id_names_its_request_and_its_records_place() -> None:
    rid = ids.response_id(RID, LogPosition(topic="llm.requests", partition=2, offset=345))
    assert rid == "resp_acme.r1_2_345"
    ref = ids.parse(rid)
    assert ref == ids.ResponseRef(RID, (2, 345))
    assert ref.position("llm.requests") == LogPosition(
        topic="llm.requests", partition=2, offset=345
    )
    assert ids.parse("resp_acme.r1") == ids.ResponseRef(RID)  # no place: looked up


@pytest.mark.parametrize(
    "value",
    [
        "",
        "resp_",
        "acme.r1_2_345",
        "resp_a_b_c",
        "resp_a_1",
        "resp__1_2",
        "resp_a_1_2_3",
        "resp_a_-1_2",
    ],
)
def test_what_is_no_response_id(value: str) -> None:
    assert ids.parse(value) is None


# --------------------------------------------------------------------------- inputs


def test_a_string_input_is_a_user_message_and_the_knobs_carry_over() -> None:
    asked = inputs.read(
        {
            "model": "chat",
            "input": "hello",
            "instructions": "be brief",
            "max_output_tokens": 20,
            "temperature": 0.3,
            "metadata": {"k": "v"},
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "routing": {"mode": "price"},
        }
    )
    assert asked.input == [{"role": "user", "content": "hello"}]
    assert asked.instructions == "be brief" and asked.store and not asked.stream
    assert asked.chat == {
        "model": "chat",
        "metadata": {"k": "v"},
        "routing": {"mode": "price"},
        "max_tokens": 20,
        "temperature": 0.3,
        "tools": [
            {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "w", "schema": {"type": "object"}},
        },
    }


def test_input_items_become_chat_messages() -> None:
    image = {"type": "input_image", "image_url": "https://x/y.png"}
    items = [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [_text_part("a"), _text_part("b")]},
        {"role": "user", "content": [_text_part("see"), image]},
        {"role": "assistant", "content": [_text_part("let me look", "output_text")]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [_text_part("rainy")]},
    ]
    assert inputs.messages(items) == [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "ab"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "auto"}},
            ],
        },
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [_chat_call("call_1"), _chat_call("call_2")],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rainy"},
    ]


def _text_part(text: str, kind: str = "input_text") -> dict[str, Any]:
    return {"type": kind, "text": text}


def _chat_call(call_id: str) -> dict[str, Any]:
    function = {"name": "get_weather", "arguments": "{}"}
    return {"id": call_id, "type": "function", "function": function}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"input": "x", "background": True}, "unsupported_parameter"),
        ({"input": "x", "conversation": "conv_1"}, "unsupported_parameter"),
        ({"input": "x", "truncation": "auto"}, "unsupported_parameter"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "unsupported_tool"),
        ({"input": "x", "tool_choice": {"type": "allowed_tools"}}, "unsupported_tool_choice"),
        ({"input": "x", "text": {"format": {"type": "yaml"}}}, "unsupported_format"),
        ({"input": "x", "store": "no"}, "invalid_body"),
        ({"input": ""}, "invalid_input"),
        ({"input": []}, "invalid_input"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "unsupported_input_item"),
        ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "unsupported_content"),
        ({"input": [{"role": "robot", "content": "x"}]}, "invalid_input"),
        ({"input": "x", "previous_response_id": 5}, "invalid_previous_response"),
        ([1, 2], "invalid_body"),
    ],
)
def test_what_is_not_supported_is_a_400(body: Any, code: str) -> None:
    with pytest.raises(GatewayError) as refused:
        inputs.read(body)
    assert refused.value.status == 400 and refused.value.code == code


def test_tools_tool_choice_and_format_go_both_ways() -> None:
    assert tools.responses_tools(tools.chat_tools([WEATHER])) == [WEATHER]
    named = {"type": "function", "name": "get_weather"}
    assert tools.responses_tool_choice(tools.chat_tool_choice(named)) == named
    assert tools.responses_tool_choice(tools.chat_tool_choice("required")) == "required"
    assert tools.responses_tool_choice(None) == "auto"
    form = {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}
    assert tools.text_format(tools.response_format({"format": form})) == {"format": form}
    assert tools.text_format(tools.response_format({"format": {"type": "text"}})) == {
        "format": {"type": "text"}
    }


# --------------------------------------------------------------------------- history


def test_the_next_turn_is_the_previous_request_its_answer_and_the_new_input() -> None:
    previous = (_record(), _answer("hello!"))
    new = [{"role": "user", "content": "and now?"}]
    messages, instructed = history.next_messages(new, None, previous)
    assert not instructed  # the previous turn's instructions are not carried over
    assert messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello!"},
        {"role": "user", "content": "and now?"},
    ]
    messages, instructed = history.next_messages(new, "be long", previous)
    assert instructed and messages[0] == {"role": "system", "content": "be long"}
    assert messages[1:] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello!"},
        {"role": "user", "content": "and now?"},
    ]
    kept = {**_record(), "turn": {"instructions": False}}  # a system message of the input
    assert history.earlier_messages(kept) == kept["messages"]


def test_an_answer_with_tool_calls_is_an_assistant_message_with_them() -> None:
    assert history.assistant_message(_answer(None, "tool_calls", tool_calls=[CALL])) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
    }
    assert history.assistant_message(_answer(None, refusal="no")) == {
        "role": "assistant",
        "content": "no",
    }


# --------------------------------------------------------------------------- objects


def test_the_response_object_of_an_answer() -> None:
    body = objects.response_object(_record(), _answer("hello!"), "resp_acme.r1_0_7")
    assert body["id"] == "resp_acme.r1_0_7" and body["object"] == "response"
    assert body["status"] == "completed" and body["model"] == "model-x"
    assert body["instructions"] == "be brief" and body["max_output_tokens"] == 50
    assert body["tools"] == [WEATHER] and body["store"] is True
    assert body["output"] == [
        {
            "type": "message",
            "id": "msg_acme.r1",
            "status": "completed",
            "role": "assistant",
            "content": [objects.text_part("hello!")],
        }
    ]
    assert objects.text_part("hello!") == {
        "type": "output_text",
        "text": "hello!",
        "annotations": [],
        "logprobs": [],
    }
    assert body["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    }
    previous = {"response_id": "resp_acme.r0_0_1", "request": _pos(1), "response": _pos(2)}
    chained = objects.response_object(_record(previous=previous), _answer("x"), "r")
    assert chained["previous_response_id"] == "resp_acme.r0_0_1"


def test_tool_calls_length_and_failures_in_the_response_object() -> None:
    calls = objects.response_object(_record(), _answer(None, "tool_calls", tool_calls=[CALL]), "r")
    assert calls["output"] == [
        {
            "type": "function_call",
            "id": "fc_acme.r1_0",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "status": "completed",
        }
    ]
    cut = objects.response_object(_record(), _answer("hel", "length"), "r")
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    failed = Response(
        id="x",
        occurred_at=WHEN,
        request_id=RID,
        status="error",
        attempts=2,
        error=ErrorBody(type="server_error", code="server_error", message="boom"),
    )
    body = objects.response_object(_record(), failed, "r")
    assert body["status"] == "failed" and body["output"] == []
    assert body["error"] == {"code": "server_error", "message": "boom"}


def _pos(offset: int) -> dict[str, Any]:
    return {"topic": "t", "partition": 0, "offset": offset}


# --------------------------------------------------------------------------- frames


def _frames() -> ResponsesFrames:
    frames = ResponsesFrames(RID, objects.skeleton(_record(), "", 1, ""))
    frames.name("resp_acme.r1_0_7")
    return frames


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        for event in frame.decode().split("\n\n"):
            if not event:
                continue
            head, data = event.split("\n")
            body = json.loads(data.removeprefix("data: "))
            assert head == f"event: {body['type']}"
            out.append(body)
    return out


def _run(items: list[StreamDelta | Response]) -> list[dict[str, Any]]:
    relay = Relay(RID, frames=_frames())
    out: list[dict[str, Any]] = []
    for item in items:
        out += _events(relay.take(item).frames)
    return out


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
]
END_EVENTS = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_a_stream_is_the_responses_events_in_order_numbered() -> None:
    events = _run(
        [
            stream_delta(0, "Hello"),
            stream_delta(1, " world", end="ok", finish_reason="stop", usage={"total_tokens": 9}),
        ]
    )
    kinds = [e["type"] for e in events]
    assert kinds == [*TEXT_EVENTS, "response.output_text.delta", *END_EVENTS]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert _text(events) == "Hello world"
    assert events[0]["response"]["id"] == "resp_acme.r1_0_7"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["model"] == "model-x"
    completed = events[-1]["response"]
    assert completed["status"] == "completed" and completed["usage"]["total_tokens"] == 9
    assert completed["output"][0]["content"][0]["text"] == "Hello world"
    assert events[-4]["text"] == "Hello world"


def test_a_mid_stream_failover_reads_as_one_answer() -> None:
    events = _run(
        [
            stream_delta(0, "Hello"),
            stream_delta(1, " wo"),
            stream_delta(2, end="failed", error="bad_response: broken"),
            stream_delta(0, "rld", attempt=2, call="c2", offset=8),
            stream_delta(1, "!", attempt=2, call="c2", end="ok", finish_reason="stop"),
        ]
    )
    assert _text(events) == "Hello world!"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello world!"


def test_a_stream_of_tool_calls_is_function_call_items() -> None:
    function = {"name": "get_weather", "arguments": '{"ci'}
    first = {"index": 0, "id": "call_1", "type": "function", "function": function}
    rest = {"index": 0, "function": {"arguments": 'ty": "Paris"}'}}
    events = _run(
        [
            stream_delta(0, tool_calls=[first]),
            stream_delta(1, tool_calls=[rest], end="ok", finish_reason="tool_calls"),
        ]
    )
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[-3]["arguments"] == '{"city": "Paris"}'
    whole = objects.response_object(_record(), _answer(None, "tool_calls", tool_calls=[CALL]), "r")
    assert events[-1]["response"]["output"] == whole["output"]


def test_a_whole_answer_streams_as_its_deltas_would() -> None:
    whole = _run([_answer("Hello world")])
    deltas = _run([stream_delta(0, "Hello world", end="ok", finish_reason="stop")])
    assert [e["type"] for e in whole] == [e["type"] for e in deltas]
    assert _text(whole) == "Hello world"
    body = objects.response_object(_record(), _answer("Hello world"), "resp_acme.r1_0_7")
    streamed = whole[-1]["response"]
    assert streamed["output"] == body["output"] and streamed["usage"] == body["usage"]
    assert {k: v for k, v in streamed.items() if k != "created_at"} == {
        k: v for k, v in body.items() if k != "created_at"
    }


def test_a_stream_that_breaks_for_good_ends_with_error_and_failed() -> None:
    events = _run(
        [
            stream_delta(0, tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}]),
            stream_delta(1, end="failed", error="bad_response: broken"),
        ]
    )
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == "stream_interrupted"
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"


def test_a_length_finish_is_an_incomplete_response() -> None:
    events = _run([stream_delta(0, "Hel", end="ok", finish_reason="length")])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-2]["item"]["status"] == "incomplete"
