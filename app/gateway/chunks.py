"""OpenAI's ``chat.completion.chunk`` server-sent events: how a relayed stream is written
for chat completions (pure; the :class:`app.gateway.relay.Frames` of
``POST /v1/chat/completions``).

The relay (app/gateway/relay.py) decides what the client gets and when (the call it
commits to, failover, held-back text, the end); this module only writes it: the role
chunk, content and tool-call chunks, the finish and usage chunks, ``data: [DONE]``, and
the ``stream_interrupted`` error event. Every event carries the ``id:`` the relay gives
it (the characters of text the client has).
"""

from __future__ import annotations

from typing import Any

from app.contract import Response
from app.gateway import shape

#: The error event's ``code`` when the stream the client saw cannot end as an answer.
STREAM_INTERRUPTED = "stream_interrupted"


class ChatChunks:
    def __init__(self, request_id: str, include_usage: bool, created: int) -> None:
        self.request_id = request_id
        self.include_usage = include_usage
        self.created = created
        self._base: dict[str, Any] = {}

    def begin(self, model: str) -> list[bytes]:
        self._base = {
            "id": f"chatcmpl-{self.request_id}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
        }
        return [self._chunk({"role": "assistant", "content": ""}, 0)]

    def rename(self, model: str) -> None:
        self._base = {**self._base, "model": model}

    def adopt(self, response: Response) -> None:
        completion = shape.completion_of(response)
        self._base = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion.get("created", self.created),
            "model": completion["model"],
        }

    def text(self, text: str, pos: int) -> list[bytes]:
        return [self._chunk({"content": text}, pos)]

    def tool_calls(self, calls: list[dict[str, Any]], pos: int) -> list[bytes]:
        return [self._chunk({"tool_calls": calls}, pos)]

    def refusal(self, refusal: str, pos: int) -> list[bytes]:
        return [self._chunk({"refusal": refusal}, pos)]

    def finish(self, finish_reason: str | None, usage: Any, pos: int) -> list[bytes]:
        frames = [self._chunk({}, pos, finish_reason or "stop")]
        if self.include_usage:
            frames.append(shape.sse({**self._base, "choices": [], "usage": usage}, pos))
        return [*frames, shape.sse("[DONE]", pos)]

    def error(self, message: str, pos: int) -> bytes:
        error = {"message": message, "type": "server_error", "param": None}
        return shape.sse({"error": {**error, "code": STREAM_INTERRUPTED}}, pos)

    def whole(self, response: Response) -> tuple[list[bytes], int]:
        """The chunks of an answer that came whole, and the characters of its text."""
        frames, pos = [], 0
        for chunk in shape.stream_chunks(response, self.include_usage):
            for choice in chunk.get("choices") or []:
                pos += len(shape.text_of((choice.get("delta") or {}).get("content")))
            frames.append(shape.sse(chunk, pos))
        return [*frames, shape.sse("[DONE]", pos)], pos

    def _chunk(self, delta: dict[str, Any], pos: int, finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return shape.sse({**self._base, "choices": [choice]}, pos)
