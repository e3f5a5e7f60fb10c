"""Streaming through the log, the pure parts: the executor's delta publisher, the
gateway's relay of deltas to chunks, the reassembly of streams, the simulated stream
faults (a UTF-8 character split across network chunks, a surrogate pair across deltas, a
stream cut before and after its first delta). The gateway's header timeout:
tests/test_gateway_head_timeout.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from factories import accepted, fold, policy
from factories import provider as make_provider
from gateway_factories import stream_delta

from app.audit.streams import answer_of, reassemble
from app.config.providers import ProviderConfig
from app.contract import ChatMessage, ChatRequest, ErrorBody, Response, StatusClass, StreamDelta
from app.embedded.simulated import SimulatedProviders
from app.execution.deltas import DeltaPublisher
from app.execution.http import make_client
from app.execution.stream import stream_provider
from app.gateway.relay import STREAM_INTERRUPTED, Relay

#: 11 characters, then a character outside the BMP: its UTF-16 halves fall in two pieces
#: of 12 code units; é and ✓ are multi-byte in UTF-8.
TEXT = "héllo wörld😀 and then ✓ the rest of a longer answer, ending here."
REQUEST = ChatRequest(request_id="s1", messages=[ChatMessage(role="user", content="hi")])


def _dispatch() -> Any:
    (dispatch,) = fold([accepted("r1")], policy(make_provider("a"))).dispatches
    return dispatch


class Sent:
    """A ``send`` for the publisher that keeps the deltas (and can be slow)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.deltas: list[StreamDelta] = []
        self.delay_s = delay_s

    async def __call__(self, delta: StreamDelta) -> asyncio.Future[None]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.deltas.append(delta)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


# --------------------------------------------------------------------------- publisher


async def test_the_first_piece_goes_at_once_then_pieces_are_batched() -> None:
    sent = Sent()
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.05)
    publisher.piece("Hel", None, None)
    await asyncio.sleep(0.01)
    assert [d.content for d in sent.deltas] == ["Hel"]  # no wait for the interval
    for piece in ("lo", " wo", "rld"):
        publisher.piece(piece, None, None)
    await asyncio.sleep(0.08)
    assert [d.content for d in sent.deltas] == ["Hel", "lo world"]  # one delta per interval
    await publisher.finish("ok", finish_reason="stop", usage={"completion_tokens": 3})
    last = sent.deltas[-1]
    assert (last.end, last.finish_reason, last.usage) == ("ok", "stop", {"completion_tokens": 3})
    assert [d.seq for d in sent.deltas] == [0, 1, 2]
    assert len({d.call_id for d in sent.deltas}) == 1 and len({d.id for d in sent.deltas}) == 3


async def test_a_call_without_any_piece_publishes_nothing() -> None:
    sent = Sent()
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.01)
    await publisher.finish("failed", error="connection_error: stream broken")
    assert sent.deltas == []  # its retry is invisible
    answered_whole = DeltaPublisher(_dispatch(), sent, interval_s=0.01)
    await answered_whole.finish("ok", finish_reason="stop")  # a server that answered JSON
    assert sent.deltas == []  # the gateway streams the whole answer from its reply


async def test_a_stream_failing_after_a_piece_ends_failed() -> None:
    sent = Sent(delay_s=0.02)  # a slow broker: the end still comes last
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.001)
    publisher.piece("partial", None, None)
    publisher.piece(" more", None, None)
    await publisher.finish("failed", error="bad_response: stream broken: ReadError")
    assert "".join(d.content for d in sent.deltas) == "partial more"
    assert sent.deltas[-1].end == "failed" and "ReadError" in (sent.deltas[-1].error or "")
    assert [d.seq for d in sent.deltas] == list(range(len(sent.deltas)))


async def test_a_surrogate_half_waits_for_its_other_half() -> None:
    sent = Sent()
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.05)
    publisher.piece("smile \ud83d", None, None)
    await asyncio.sleep(0.01)
    publisher.piece("\ude00!", None, None)
    await publisher.finish("ok", finish_reason="stop")
    assert [d.content for d in sent.deltas][:2] == ["smile ", "😀!"]
    for delta in sent.deltas:
        delta.model_dump_json()  # every delta serialises (no lone surrogate)


# --------------------------------------------------------------------------- relay


def _response(content: str, attempts: int = 1, status: str = "ok") -> Response:
    completion = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"total_tokens": 9},
    }
    error = ErrorBody(type="server_error", message="all failed", code="exhausted")
    return Response(
        id="x",
        occurred_at=datetime(2025, 1, 1, tzinfo=UTC),
        request_id="acme.r1",
        status=status,  # type: ignore[arg-type]
        attempts=attempts,
        deployment="prov:model-x",
        completion=completion if status == "ok" else None,
        error=None if status == "ok" else error,
    )


def _events(frames: list[bytes]) -> list[Any]:
    out = []
    for frame in frames:
        head, _, data = frame.decode().rpartition("data: ")
        assert head.startswith("id: ")  # every event names where a resume goes on from
        text = data.strip()
        out.append(text if text == "[DONE]" else json.loads(text))
    return out


def test_the_relay_commits_to_the_first_call_and_forwards_its_deltas_only() -> None:
    relay = Relay("acme.r1", include_usage=True, created=1)
    assert relay.take(stream_delta(1, "late", call="c0")).frames == []  # not a call's start
    start = relay.take(stream_delta(0, "Hel"))
    assert start.headers is not None and start.headers["x-switchyard-attempts"] == "1"
    chunks = _events(start.frames)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (
        chunks[1]["choices"][0]["delta"] == {"content": "Hel"} and chunks[1]["model"] == "model-x"
    )
    assert relay.take(stream_delta(0, "other", call="c2")).frames == []  # the same attempt re-made
    assert relay.take(stream_delta(0, "Hel")).frames == []  # a copy
    end = relay.take(
        stream_delta(1, "lo", end="ok", finish_reason="stop", usage={"total_tokens": 4})
    )
    events = _events(end.frames)
    assert events[0]["choices"][0]["delta"] == {"content": "lo"}
    assert events[1]["choices"][0]["finish_reason"] == "stop"
    assert events[2]["usage"] == {"total_tokens": 4} and events[2]["choices"] == []
    assert events[3] == "[DONE]" and relay.done


def test_a_broken_stream_goes_on_with_the_call_that_continues_it() -> None:
    """Mid-stream failover: after the committed call's ``failed`` end, a later attempt's
    call whose first delta starts where the text sent ends is followed; others are not."""
    relay = Relay("acme.r1", include_usage=False, created=1)
    relay.take(stream_delta(0, "Hello"))
    assert (
        relay.take(stream_delta(1, end="failed", error="bad_response: stream broken")).frames == []
    )
    assert not relay.done
    assert relay.take(stream_delta(0, "Hello world", attempt=2, call="c8")).frames == []  # offset 0
    assert (
        relay.take(stream_delta(0, "x", attempt=2, call="c7", offset=3)).frames == []
    )  # wrong offset
    going_on = relay.take(stream_delta(0, " wor", attempt=2, call="c9", offset=5))
    assert going_on.headers is None  # the same stream, headers long sent
    (chunk,) = _events(going_on.frames)
    assert chunk["choices"][0]["delta"] == {"content": " wor"}
    assert relay.take(stream_delta(0, "copy", attempt=3, call="cA", offset=9)).frames == []
    end = _events(relay.take(stream_delta(1, "ld", attempt=2, call="c9", end="ok")).frames)
    assert end[0]["choices"][0]["delta"] == {"content": "ld"} and end[-1] == "[DONE]"


def test_a_broken_stream_that_nothing_continues_ends_with_an_error_event() -> None:
    relay = Relay("acme.r1", include_usage=False, created=1)
    relay.take(stream_delta(0, "partial"))
    relay.take(stream_delta(1, end="failed", error="bad_response: stream broken"))
    (event,) = _events(relay.take(_response("another answer", attempts=2)).frames)
    assert event["error"]["code"] == STREAM_INTERRUPTED
    assert "/v1/switchyard/requests/acme.r1" in event["error"]["message"]
    assert "does not go on" in event["error"]["message"]
    assert relay.done
    rescued = Relay("acme.r1", include_usage=False, created=1)
    rescued.take(stream_delta(0, "Hello"))
    rescued.take(stream_delta(1, end="failed", error="bad_response: stream broken"))
    events = _events(rescued.take(_response("Hello world", attempts=2)).frames)
    assert events[0]["choices"][0]["delta"] == {"content": " world"}  # it does go on
    tools = Relay("acme.r1", include_usage=False, created=1)
    tools.take(stream_delta(0, tool_calls=[{"index": 0, "id": "t", "function": {"name": "f"}}]))
    (event,) = _events(tools.take(stream_delta(1, end="failed", error="broken")).frames)
    assert event["error"]["code"] == STREAM_INTERRUPTED  # a tool call is not text to go on from


def test_an_answer_before_any_delta_is_the_whole_answer_or_an_http_error() -> None:
    relay = Relay("acme.r1", include_usage=True, created=1)
    step = relay.take(_response("whole answer"))
    events = _events(step.frames)
    assert step.headers is not None and events[-1] == "[DONE]"
    text = "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"]
    )
    assert text == "whole answer" and events[-2]["usage"] == {"total_tokens": 9}
    failed = Relay("acme.r1", include_usage=False, created=1).take(_response("", status="error"))
    assert failed.error is not None and failed.error.status == 502 and failed.frames == []


def test_an_answer_overtaking_the_end_finishes_the_stream_it_continues() -> None:
    relay = Relay("acme.r1", include_usage=False, created=1)
    relay.take(stream_delta(0, "Hello"))
    events = _events(relay.take(_response("Hello world")).frames)
    assert events[0]["choices"][0]["delta"] == {"content": " world"}
    assert events[-1] == "[DONE]"
    other = Relay("acme.r1", include_usage=False, created=1)
    other.take(stream_delta(0, "Bonjour"))
    (event,) = _events(other.take(_response("Hello world", attempts=2)).frames)
    assert event["error"]["code"] == STREAM_INTERRUPTED  # another attempt's answer


def test_no_answer_in_time() -> None:
    error = Relay("r", False, 1).timed_out(135.0).error
    assert error is not None and error.status == 504 and error.code == "gateway_timeout"
    assert error.headers()["x-should-retry"] == "true" and error.headers()["Retry-After"] == "1"
    assert "/v1/switchyard/requests/r" in error.message  # where the answer may yet be found
    started = Relay("r", False, 1)
    started.take(stream_delta(0, "x"))
    assert _events(started.timed_out(135.0).frames)[0]["error"]["code"] == STREAM_INTERRUPTED


# --------------------------------------------------------------------------- reassembly


def test_streams_are_reassembled_by_call_with_gaps_and_copies() -> None:
    deltas = [
        stream_delta(0, "Par", call="a1"),
        stream_delta(1, "tial", call="a1", end="failed", error="bad_response"),
        stream_delta(0, "Whole ", call="b1", attempt=2),
        stream_delta(0, "Whole ", call="b1", attempt=2),  # a copy
        stream_delta(2, "answer", call="b1", attempt=2, end="ok", finish_reason="stop"),
        stream_delta(0, "orphan", call="c1", attempt=2),
    ]
    streams = reassemble(deltas)
    by_call = {s.call_id: s for s in streams}
    assert (by_call["a1"].content, by_call["a1"].end) == ("Partial", "failed")
    assert (by_call["b1"].content, by_call["b1"].missing, by_call["b1"].deltas) == (
        "Whole answer",
        [1],
        2,
    )
    assert by_call["c1"].end == "open"
    answer = answer_of(streams, "acme.r1")
    assert answer is not None and answer.call_id == "b1"


# --------------------------------------------------------------------------- simulated faults


@pytest.fixture
async def sim() -> AsyncIterator[SimulatedProviders]:
    async with SimulatedProviders(seed=3, time_scale=0.05) as running:
        for pid in running.provider_ids:
            running.set_success_rate(pid, 1.0)
            running.set_reply_text(pid, TEXT)
        yield running


def _simulated(sim: SimulatedProviders) -> ProviderConfig:
    pid = sim.provider_ids[0]
    return ProviderConfig(id=pid, base_url=sim.base_url(pid), models=[{"name": "m"}])  # type: ignore[list-item]


@pytest.mark.parametrize("fault", ["split_bytes", "split_surrogates"])
async def test_characters_split_across_chunks_arrive_whole(
    sim: SimulatedProviders, fault: str
) -> None:
    sim.set_stream_faults(sim.provider_ids[0], **{fault: True})
    sent = Sent()
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.0)
    async with make_client() as client:
        result = await stream_provider(client, _simulated(sim), "m", REQUEST, 5.0, publisher)
    assert result.status_class is StatusClass.SUCCESS, result.error
    assert result.completion is not None
    assert result.completion["choices"][0]["message"]["content"] == TEXT
    await publisher.finish("ok", finish_reason="stop")
    assert len(sent.deltas) > 2
    (stream,) = reassemble(sent.deltas)
    assert stream.content == TEXT and "\ufffd" not in stream.content


@pytest.mark.parametrize(("cut_after", "status"), [(0, "connection_error"), (2, "bad_response")])
async def test_a_cut_stream_fails_with_or_without_deltas(
    sim: SimulatedProviders, cut_after: int, status: str
) -> None:
    sim.set_stream_faults(sim.provider_ids[0], cut_after=cut_after)
    sent = Sent()
    publisher = DeltaPublisher(_dispatch(), sent, interval_s=0.0)
    async with make_client() as client:
        result = await stream_provider(client, _simulated(sim), "m", REQUEST, 5.0, publisher)
    assert result.status_class.value == status and result.completion is None
    await publisher.finish("failed", error=f"{status}: {result.error}")
    if cut_after == 0:
        assert sent.deltas == []  # nothing the client could have seen: retried invisibly
    else:
        (stream,) = reassemble(sent.deltas)
        assert stream.end == "failed" and TEXT.startswith(stream.content) and stream.content
