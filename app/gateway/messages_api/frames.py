"""A streamed answer as Anthropic's server-sent events: the relay's ``Frames`` for
``POST /v1/messages`` with ``stream: true`` (pure).

The relay (app/gateway/relay.py) decides what the client gets — the call it commits to,
a mid-stream failover that goes on from the text sent, the end, an error — exactly as
for chat completions; this writes it, in Anthropic's order: ``message_start``; for each
content block ``content_block_start`` (a ``ping`` after the first), its
``content_block_delta`` events (``text_delta``; ``input_json_delta`` for a tool call's
arguments, as the provider streams them) and ``content_block_stop``; then
``message_delta`` (stop reason and usage) and ``message_stop``. A stream that cannot end
as an answer ends with an ``error`` event (the Anthropic SDKs raise it).

Every event carries its ``event:`` line (the SDKs skip events without one) and no
``id:``: a Messages stream is not resumed (``Last-Event-ID`` is chat completions').
"""

from __future__ import annotations

import json
from typing import Any

from app.contract import Response
from app.execution.pieces import merge_tool_call
from app.gateway import shape
from app.gateway.messages_api.errors import error_body
from app.gateway.messages_api.message import message_id, stop_reason_of, tool_use_id, usage_of


def event(name: str, data: dict[str, Any]) -> bytes:
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {text}\n\n".encode()


class MessageEvents:
    def __init__(self, request_id: str, stops: list[str]) -> None:
        self.request_id = request_id
        #: The request's stop sequences (a finish reason names none of them: ``end_turn``).
        self.stops = stops
        self.model = ""
        self._index = -1  # the last content block's index
        self._open: str | None = None  # the open block's type
        self._tool: Any = None  # the OpenAI index of the open tool call
        self._tools = 0  # tool_use blocks started
        self._pinged = False
        self._refused = False

    def begin(self, model: str) -> list[bytes]:
        self.model = model
        message: dict[str, Any] = {
            "id": message_id(self.request_id),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [event("message_start", {"type": "message_start", "message": message})]

    def rename(self, model: str) -> None:
        self.model = model  # message_start named the first; no later event names one

    def adopt(self, response: Response) -> None:
        self.model = shape.model_of(response)

    def text(self, text: str, pos: int) -> list[bytes]:
        frames = [] if self._open == "text" else self._start({"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": text}
        return [*frames, self._delta(delta)]

    def tool_calls(self, calls: list[dict[str, Any]], pos: int) -> list[bytes]:
        """A ``tool_use`` block per call begun (its id and name from the fragments that
        came with it), an ``input_json_delta`` per run of its arguments."""
        frames: list[bytes] = []
        for index, call in _runs(calls):
            function = call["function"]
            if self._open != "tool_use" or index != self._tool:
                self._tool = index
                block = {
                    "type": "tool_use",
                    "id": tool_use_id(call, self._tools, self.request_id),
                    "name": function["name"],
                    "input": {},
                }
                self._tools += 1
                frames += self._start(block)
            if function["arguments"]:
                delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
                frames.append(self._delta(delta))
        return frames

    def refusal(self, refusal: str, pos: int) -> list[bytes]:
        self._refused = True
        return self.text(refusal, pos)

    def finish(self, finish_reason: str | None, usage: Any, pos: int) -> list[bytes]:
        return self._end({"finish_reason": finish_reason}, usage)

    def error(self, message: str, pos: int) -> bytes:
        return event("error", error_body(500, message))

    def whole(self, response: Response) -> tuple[list[bytes], int]:
        """The events of an answer that came whole: its text in one delta, each tool call
        with its arguments in one, the end."""
        completion = shape.completion_of(response)
        choice = (completion.get("choices") or [{}])[0]
        choice = choice if isinstance(choice, dict) else {}
        message = choice.get("message") or {}
        text = shape.text_of(message.get("content"))
        frames = self.begin(completion["model"])
        if text:
            frames += self.text(text, len(text))
        if message.get("refusal"):
            frames += self.refusal(str(message["refusal"]), len(text))
        for index, call in enumerate(message.get("tool_calls") or []):
            frames += self.tool_calls([{"index": index, **call}], len(text))
        return [*frames, *self._end(choice, completion.get("usage"))], len(text)

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        frames = self._stop_block()
        self._index += 1
        self._open = str(block["type"])
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        frames.append(event("content_block_start", start))
        if not self._pinged:
            self._pinged = True
            frames.append(event("ping", {"type": "ping"}))
        return frames

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return event("content_block_delta", data)

    def _stop_block(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [event("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _end(self, choice: dict[str, Any], usage: Any) -> list[bytes]:
        frames = self._stop_block()
        reason, sequence = stop_reason_of(choice, self.stops, refused=self._refused)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        data = {"type": "message_delta", "delta": delta, "usage": usage_of(usage)}
        frames.append(event("message_delta", data))
        return [*frames, event("message_stop", {"type": "message_stop"})]


def _runs(calls: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Consecutive ``tool_calls`` fragments of one call put together: (index, call)."""
    runs: list[tuple[int, dict[int, dict[str, Any]]]] = []
    for fragment in calls:
        index = fragment.get("index", 0)
        if not runs or runs[-1][0] != index:
            runs.append((index, {}))
        merge_tool_call(runs[-1][1], {**fragment, "index": 0})
    return [(index, call[0]) for index, call in runs]
