"""The mock provider of ``switchyard bench gateway``: JSON or ``stream: true`` answers.

``python -m bench.gateway_mock PORT LATENCY_MS``: every ``POST /v1/chat/completions``
answers after ``LATENCY_MS``; a stream then sends its role chunk, the content in
:data:`PIECES` pieces, the finish reason, the usage chunk and ``[DONE]`` at once, so
its time to first token is the latency. Runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

MODEL = "bench-model"
CONTENT = "Hello from the bench mock: a short answer in a few pieces."
PIECES = 8
USAGE = {"prompt_tokens": 12, "completion_tokens": 12, "total_tokens": 24}


def completion_body(
    content: str, usage: dict[str, int], *, created: int = 1_700_000_000, model: str = MODEL
) -> bytes:
    """A chat completion answering ``content`` (JSON), as the benches' mocks send it."""
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
    ).encode()


COMPLETION = completion_body(CONTENT, USAGE)


def stream_events() -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000}
    base["model"] = MODEL
    size = -(-len(CONTENT) // PIECES)
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [{"content": CONTENT[i : i + size]} for i in range(0, len(CONTENT), size)]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": USAGE})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


EVENTS = stream_events()


def build_app(latency_ms: float) -> web.Application:
    delay = latency_ms / 1000.0

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if delay > 0:
            await asyncio.sleep(delay)
        if body.get("stream") is not True:
            return web.Response(body=COMPLETION, content_type="application/json")
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for event in EVENTS:
            await reply.write(event)
        await reply.write_eof()
        return reply

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    return app


def main(argv: list[str]) -> None:
    port, latency_ms = int(argv[0]), float(argv[1])
    web.run_app(
        build_app(latency_ms),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        backlog=2048,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
