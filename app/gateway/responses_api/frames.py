"""A relayed stream written as the Responses API's events (pure; the
:class:`app.gateway.relay.Frames` of ``POST /v1/responses`` with ``stream: true``).

The relay (app/gateway/relay.py) decides what the client gets and when: the call it
commits to, a mid-stream failover, the end. This writes it as OpenAI's Responses
events, each with its ``event:`` line and a ``sequence_number`` (0, 1, 2 ...):
``response.created`` and ``response.in_progress`` once the relay commits; then for the
answer's text a ``message`` item (``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ...), for each tool call
a ``function_call`` item (``response.function_call_arguments.delta`` ...), for a
refusal a ``refusal`` part (``response.refusal.delta``); at the end every item's
``.done`` events, then ``response.completed`` (``response.incomplete`` for a ``length``
finish) with the whole object, usage included. A stream that cannot end as an answer
ends with an ``error`` event (code ``stream_interrupted``) and ``response.failed``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.contract import Response
from app.gateway import shape
from app.gateway.chunks import STREAM_INTERRUPTED
from app.gateway.responses_api import ids, objects


@dataclass
class _Message:
    index: int
    #: Content parts in order: ``output_text`` or ``refusal``, and what each holds.
    parts: list[tuple[str, str]] = field(default_factory=list)

    def part(self, kind: str) -> int | None:
        found = [i for i, (k, _) in enumerate(self.parts) if k == kind]
        return found[0] if found else None


@dataclass
class _Call:
    index: int
    #: The call's ``index`` in chat's tool calls.
    chat_index: int
    call_id: str
    name: str
    arguments: str = ""


class ResponsesFrames:
    def __init__(self, request_id: str, skeleton: dict[str, Any]) -> None:
        """``skeleton``: the Response object its request makes (objects.skeleton)."""
        self.request_id = request_id
        self._skeleton = skeleton
        self._model = str(skeleton.get("model") or "")
        self._seq = 0
        self._items: list[_Message | _Call] = []
        self._message: _Message | None = None
        self._calls: dict[int, _Call] = {}

    def name(self, response_id: str) -> None:
        """The response's id, once its request is on the log (before :meth:`begin`)."""
        self._skeleton = {**self._skeleton, "id": response_id}

    def begin(self, model: str) -> list[bytes]:
        self._model = model
        response = self._response("in_progress", [])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def rename(self, model: str) -> None:
        self._model = model

    def adopt(self, response: Response) -> None:
        self._model = shape.model_of(response)

    def text(self, text: str, pos: int) -> list[bytes]:
        return self._add(text, "output_text", "response.output_text.delta")

    def refusal(self, refusal: str, pos: int) -> list[bytes]:
        return self._add(refusal, "refusal", "response.refusal.delta")

    def tool_calls(self, calls: list[dict[str, Any]], pos: int) -> list[bytes]:
        frames = []
        for entry in calls:
            given = entry.get("index")
            chat_index = given if isinstance(given, int) else 0
            function = entry.get("function") or {}
            call = self._calls.get(chat_index)
            if call is None:
                call = _Call(
                    len(self._items),
                    chat_index,
                    str(entry.get("id") or ""),
                    str(function.get("name") or ""),
                )
                self._calls[chat_index] = call
                self._items.append(call)
                item = self._call_item(call, "in_progress")
                frames.append(
                    self._event("response.output_item.added", output_index=call.index, item=item)
                )
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                call.arguments += arguments
                frames.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=ids.function_call_id(self.request_id, chat_index),
                        output_index=call.index,
                        delta=arguments,
                    )
                )
        return frames

    def finish(self, finish_reason: str | None, usage: Any, pos: int) -> list[bytes]:
        status, details = objects.status_of(finish_reason)
        frames = [] if self._items else self._add("", "output_text", None)
        for item in self._items:
            frames += self._close(item, status)
        response = self._response(status, self._output(status))
        response.update(incomplete_details=details, usage=objects.usage_of(usage))
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*frames, self._event(kind, response=response)]

    def error(self, message: str, pos: int) -> bytes:
        response = self._response("failed", self._output("incomplete"))
        response["error"] = {"code": "server_error", "message": message}
        error = self._event("error", code=STREAM_INTERRUPTED, message=message, param=None)
        return error + self._event("response.failed", response=response)

    def whole(self, response: Response) -> tuple[list[bytes], int]:
        """An answer that came whole: its events, as a stream would have had them."""
        completion = shape.completion_of(response)
        first = (completion.get("choices") or [{}])[0]
        message = first.get("message") or {}
        text = shape.text_of(message.get("content"))
        frames = self.begin(shape.model_of(response))
        if text:
            frames += self.text(text, len(text))
        calls = message.get("tool_calls") or []
        if calls:
            frames += self.tool_calls([{"index": i, **c} for i, c in enumerate(calls)], len(text))
        if isinstance(message.get("refusal"), str) and message["refusal"]:
            frames += self.refusal(message["refusal"], len(text))
        usage = completion.get("usage")
        return [*frames, *self.finish(first.get("finish_reason"), usage, len(text))], len(text)

    def _add(self, text: str, kind: str, delta_event: str | None) -> list[bytes]:
        """``text`` added to the message item's part of ``kind`` (both opened if new)."""
        frames = []
        message = self._message
        if message is None:
            message = self._message = _Message(len(self._items))
            self._items.append(message)
            item = objects.message_item(self.request_id, None, None, "in_progress")
            frames.append(
                self._event("response.output_item.added", output_index=message.index, item=item)
            )
        part = message.part(kind)
        if part is None:
            part = len(message.parts)
            message.parts.append((kind, ""))
            frames.append(
                self._event(
                    "response.content_part.added",
                    **self._where(message, part),
                    part=_part(kind, ""),
                )
            )
        message.parts[part] = (kind, message.parts[part][1] + text)
        if delta_event is not None:
            extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
            frames.append(
                self._event(delta_event, **self._where(message, part), delta=text, **extra)
            )
        return frames

    def _close(self, item: _Message | _Call, status: str) -> list[bytes]:
        if isinstance(item, _Call):
            return [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=ids.function_call_id(self.request_id, item.chat_index),
                    output_index=item.index,
                    name=item.name,
                    arguments=item.arguments,
                ),
                self._event(
                    "response.output_item.done",
                    output_index=item.index,
                    item=self._call_item(item, "completed"),
                ),
            ]
        frames = []
        for part, (kind, text) in enumerate(item.parts):
            where = self._where(item, part)
            if kind == "output_text":
                done = self._event("response.output_text.done", **where, text=text, logprobs=[])
            else:
                done = self._event("response.refusal.done", **where, refusal=text)
            frames += [
                done,
                self._event("response.content_part.done", **where, part=_part(kind, text)),
            ]
        frames.append(
            self._event(
                "response.output_item.done",
                output_index=item.index,
                item=self._message_item(item, status),
            )
        )
        return frames

    def _output(self, status: str) -> list[dict[str, Any]]:
        return [
            self._call_item(item, "completed")
            if isinstance(item, _Call)
            else self._message_item(item, status)
            for item in self._items
        ]

    def _message_item(self, message: _Message, status: str) -> dict[str, Any]:
        item = objects.message_item(self.request_id, None, None, status)
        item["content"] = [_part(kind, text) for kind, text in message.parts]
        return item

    def _call_item(self, call: _Call, status: str) -> dict[str, Any]:
        return objects.call_item(
            self.request_id, call.chat_index, call.call_id, call.name, call.arguments, status
        )

    def _where(self, message: _Message, part: int) -> dict[str, Any]:
        return {
            "item_id": ids.message_id(self.request_id),
            "output_index": message.index,
            "content_index": part,
        }

    def _response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {**self._skeleton, "status": status, "model": self._model, "output": output}

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        return f"event: {kind}\ndata: {text}\n\n".encode()


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "output_text":
        return objects.text_part(text)
    return {"type": "refusal", "refusal": text}
