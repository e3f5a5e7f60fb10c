"""``stream: true`` answers of the simulated providers, and their stream faults.

A streamed answer is OpenAI's server-sent ``chat.completion.chunk`` events: a role
chunk, the content in pieces of :data:`CHUNK_CHARS`, the finish reason, a usage chunk
when ``stream_options.include_usage`` asks, then ``data: [DONE]``. The pieces are spread
evenly over the time the answer takes after its first token.

Faults, per provider (:class:`StreamFaults`): ``cut_after`` closes the connection after
that many content pieces (0: right after the role chunk, before any content);
``split_bytes`` writes each event in two TCP writes cut inside its first multi-byte
UTF-8 character; ``split_surrogates`` cuts the text in UTF-16 code units, so a character
outside the BMP is sent as two escaped halves in two chunks.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: Characters (or UTF-16 code units with ``split_surrogates``) per content piece.
CHUNK_CHARS = 12
#: The share of an answer's latency spent before its first token.
FIRST_TOKEN_SHARE = 0.4
#: Pause between the two writes of a split event (long enough to be two reads).
SPLIT_PAUSE_S = 0.005


@dataclass
class StreamFaults:
    cut_after: int | None = None
    split_bytes: bool = False
    split_surrogates: bool = False


@dataclass(frozen=True)
class StreamedAnswer:
    model: str
    content: str
    finish_reason: str
    usage: dict[str, Any]
    include_usage: bool
    #: Seconds from the first content piece to the last (already time-scaled).
    spread_s: float


def pieces(content: str, split_surrogates: bool) -> list[str]:
    """The content in pieces; with ``split_surrogates`` cut in UTF-16 code units."""
    if not split_surrogates:
        return [content[i : i + CHUNK_CHARS] for i in range(0, len(content), CHUNK_CHARS)]
    units = content.encode("utf-16-le")
    step = CHUNK_CHARS * 2
    return [
        units[i : i + step].decode("utf-16-le", "surrogatepass") for i in range(0, len(units), step)
    ]


def event_bytes(data: dict[str, Any] | str, ascii_only: bool) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=ascii_only)
    return f"data: {text}\n\n".encode("utf-8", "surrogatepass" if ascii_only else "strict")


async def stream_answer(
    request: web.Request, answer: StreamedAnswer, faults: StreamFaults
) -> web.StreamResponse:
    """Write ``answer`` as server-sent events, with ``faults``."""
    reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await reply.prepare(request)
    base = {
        "id": f"chatcmpl-sim-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": answer.model,
    }
    writer = _Writer(reply, faults.split_bytes)
    await writer.event(_chunk(base, {"role": "assistant", "content": ""}))
    parts = pieces(answer.content, faults.split_surrogates)
    gap = answer.spread_s / max(1, len(parts) - 1)
    for index, part in enumerate(parts):
        if faults.cut_after is not None and index >= faults.cut_after:
            return _cut(request, reply)
        if index:
            await asyncio.sleep(gap)
        await writer.event(_chunk(base, {"content": part}))
    if faults.cut_after is not None and faults.cut_after >= len(parts):
        return _cut(request, reply)
    await writer.event(_chunk(base, {}, answer.finish_reason))
    if answer.include_usage:
        await writer.event({**base, "choices": [], "usage": answer.usage})
    await writer.event("[DONE]")
    await reply.write_eof()
    return reply


class _Writer:
    def __init__(self, reply: web.StreamResponse, split_bytes: bool) -> None:
        self.reply = reply
        self.split_bytes = split_bytes

    async def event(self, data: dict[str, Any] | str) -> None:
        raw = event_bytes(data, ascii_only=not self.split_bytes)
        cut = _inside_a_character(raw) if self.split_bytes else None
        if cut is None:
            await self.reply.write(raw)
            return
        await self.reply.write(raw[:cut])
        await asyncio.sleep(SPLIT_PAUSE_S)
        await self.reply.write(raw[cut:])


def _inside_a_character(raw: bytes) -> int | None:
    """The offset just after the first byte of the first multi-byte character, if any."""
    for offset, byte in enumerate(raw):
        if byte >= 0xC0:  # a UTF-8 lead byte
            return offset + 1
    return None


def _chunk(
    base: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return {**base, "choices": [choice]}


def _cut(request: web.Request, reply: web.StreamResponse) -> web.StreamResponse:
    """Drop the connection mid-stream (no last chunk: the client sees a broken stream)."""
    if request.transport is not None:
        request.transport.abort()
    return reply
