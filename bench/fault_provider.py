"""A fault-injecting OpenAI-compatible provider for ``switchyard bench faults``.

One aiohttp server on 127.0.0.1 serves every scenario: ``POST /{scenario}/v1/chat/completions``
(the path prefix), else ``POST /v1/chat/completions`` with the scenario as the ``model``.
A healthy answer is :func:`canonical_text` of the request's messages (60 words derived
from them, so a client can check what it received), as JSON or, with ``stream: true``,
as server-sent chunks (role, one chunk per token, the finish reason, the usage chunk
with ``stream_options.include_usage``, ``data: [DONE]``). The scenarios are
:data:`SCENARIOS`; ``fb-ok`` (any ``fb-`` prefix) behaves as the scenario after it but
is counted apart, so a fallback's calls are told from the primary's. An assistant
prefill that begins the answer of the messages before it is a continuation (a router
going on with a broken stream): the answer goes on after it; ``rejects_prefill`` answers
one with a 400 and is healthy otherwise.

Calls are counted per (scenario, request), the request being :func:`request_key` of
the messages: ``GET /_faults/calls``. ``POST /_faults/reset`` forgets them and restarts
the clock ``flapping`` counts from. ``python -m bench.fault_provider PORT [options]``
runs it until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.fault_answer import (
    BREAK_AT,
    DONE,
    MALFORMED,
    canonical_text,
    canonical_tokens,
    chunk,
    completion_body,
    error_body,
    request_key,
    usage_chunk,
)

#: Every scenario, in the bench's order.
SCENARIOS = (
    "ok",
    "429_retry_after",
    "429_no_retry_after",
    "500_once",
    "503_persistent",
    "reset_before_headers",
    "no_response",
    "slow_first_token",
    "stream_cut",
    "stream_stall",
    "malformed_chunk",
    "no_done",
    "context_length",
    "content_filter",
    "rejects_prefill",
    "flapping",
)


# --------------------------------------------------------------------------- the server


@dataclass
class FaultOptions:
    #: Calls of a request answered 429 before it is answered (the two 429 scenarios).
    rate_limited_calls: int = 2
    #: ``Retry-After`` of ``429_retry_after``, in seconds.
    retry_after_s: int = 2
    #: ``slow_first_token``: seconds before the first token.
    slow_first_token_s: float = 20.0
    #: ``flapping``: seconds of 503 after the start (or the last reset).
    flap_s: float = 60.0
    #: Pause between two streamed tokens.
    token_s: float = 0.005


@dataclass
class Call:
    name: str
    key: str
    number: int
    at_s: float
    stream: bool


@dataclass
class FaultProvider:
    options: FaultOptions = field(default_factory=FaultOptions)
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    log: list[Call] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def reset(self) -> None:
        self.calls.clear()
        self.log.clear()
        self.started = time.monotonic()

    def count(self, name: str, key: str, stream: bool) -> int:
        self.calls[(name, key)] += 1
        number = self.calls[(name, key)]
        self.log.append(Call(name, key, number, round(time.monotonic() - self.started, 3), stream))
        return number

    def report(self) -> dict[str, Any]:
        calls = [{"name": n, "key": k, "calls": c} for (n, k), c in sorted(self.calls.items())]
        log = [vars(call) for call in self.log]
        return {"calls": calls, "log": log, "uptime_s": round(time.monotonic() - self.started, 3)}

    def build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._answer)
        app.router.add_post("/{scenario}/v1/chat/completions", self._answer)
        app.router.add_get("/_faults/calls", self._calls)
        app.router.add_post("/_faults/reset", self._reset)
        return app

    async def _calls(self, _: web.Request) -> web.Response:
        return web.json_response(self.report())

    async def _reset(self, _: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"reset": True})

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON", "invalid_request_error", None)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _error(400, "messages: a list of objects", "invalid_request_error", None)
        name = request.match_info.get("scenario") or str(body.get("model"))
        scenario = name.removeprefix("fb-")
        if scenario not in SCENARIOS:
            return _error(404, f"no scenario {name!r}", "invalid_request_error", "model_not_found")
        stream = body.get("stream") is True
        exchange = _Exchange(request, str(body.get("model")), messages, stream, body, self.options)
        number = self.count(name, exchange.key, stream)  # a prefill is the same request
        return await exchange.play(scenario, number, time.monotonic() - self.started)


def _error(status: int, message: str, kind: str, code: str | None, **headers: str) -> web.Response:
    body = error_body(message, kind, code)
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


class _Exchange:
    """One call's answer, as its scenario plays it."""

    def __init__(
        self,
        request: web.Request,
        model: str,
        messages: list[dict[str, Any]],
        stream: bool,
        body: dict[str, Any],
        options: FaultOptions,
    ) -> None:
        self.request = request
        self.model = model
        self.messages = messages
        self.stream = stream
        options_of = body.get("stream_options")
        self.include_usage = (
            isinstance(options_of, dict) and options_of.get("include_usage") is True
        )
        self.options = options
        #: An assistant prefill (the last message) that begins the answer of the messages
        #: before it is a continuation: a healthy answer goes on after it. Any other
        #: prefill (the client's own) is part of the request.
        self.prefill = ""
        if messages and messages[-1].get("role") == "assistant":
            content = messages[-1].get("content")
            self.prefill = content if isinstance(content, str) else ""
        continues = bool(self.prefill) and canonical_text(messages[:-1]).startswith(self.prefill)
        self.asked = messages[:-1] if continues else messages
        #: Characters of the answer the continuation's prefill already holds.
        self.given = len(self.prefill) if continues else 0
        self.key = request_key(self.asked)

    async def play(self, scenario: str, number: int, since_start_s: float) -> web.StreamResponse:
        options = self.options
        if (
            scenario in ("429_retry_after", "429_no_retry_after")
            and number <= options.rate_limited_calls
        ):
            headers = (
                {"Retry-After": str(options.retry_after_s)} if scenario == "429_retry_after" else {}
            )
            return _error(
                429, "Rate limit reached for requests", "requests", "rate_limit_exceeded", **headers
            )
        if scenario == "500_once" and number == 1:
            return _error(
                500, "The server had an error processing your request", "server_error", None
            )
        if scenario == "503_persistent" or (
            scenario == "flapping" and since_start_s < options.flap_s
        ):
            return _error(503, "The engine is currently overloaded", "server_error", "overloaded")
        if scenario == "context_length":
            message = "This model's maximum context length is 8192 tokens; the messages are longer"
            return _error(400, message, "invalid_request_error", "context_length_exceeded")
        if scenario == "content_filter":
            message = "The request was rejected by the content filter"
            return _error(400, message, "invalid_request_error", "content_policy_violation")
        if (
            scenario == "rejects_prefill"
            and self.messages
            and self.messages[-1].get("role") == "assistant"
        ):
            message = "This model does not support assistant message prefill"
            return _error(400, message, "invalid_request_error", "invalid_request_error")
        if scenario == "reset_before_headers":
            return self._reset()
        if scenario == "no_response":
            await asyncio.Event().wait()  # cancelled when the client goes (handler_cancellation)
        if self.stream:
            return await self._stream(scenario)
        return await self._json(scenario)

    # -- non-streamed answers

    async def _json(self, scenario: str) -> web.StreamResponse:
        if scenario == "slow_first_token":
            await asyncio.sleep(self.options.slow_first_token_s)
        answer = completion_body(self.model, self.asked)
        text = canonical_text(self.asked)[self.given :]
        answer["choices"][0]["message"]["content"] = text
        body = json.dumps(answer).encode()
        if scenario in ("stream_cut", "stream_stall", "malformed_chunk"):
            start = body.index(json.dumps(text).encode()) + 1
            cut = start + max(0, len("".join(canonical_tokens(self.asked)[:BREAK_AT])) - self.given)
            if scenario == "malformed_chunk":
                body = body[:cut] + b'"<not json>' + body[cut:]
                return web.Response(body=body, content_type="application/json")
            reply = web.StreamResponse(headers={"Content-Type": "application/json"})
            reply.content_length = len(body)  # the whole body is announced
            await reply.prepare(self.request)
            await reply.write(body[:cut])
            return await self._break(reply, scenario)
        return web.Response(body=body, content_type="application/json")

    # -- streamed answers

    async def _stream(self, scenario: str) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        reply = web.StreamResponse(headers=headers)
        await reply.prepare(self.request)
        await reply.write(chunk(self.model, self.key, {"role": "assistant", "content": ""}))
        if scenario == "slow_first_token":
            await asyncio.sleep(self.options.slow_first_token_s)
        given = 0  # characters of the answer the prefill already holds
        for index, token in enumerate(canonical_tokens(self.asked)):
            if given < self.given:
                given += len(token)
                continue
            if index == BREAK_AT and scenario in ("stream_cut", "stream_stall"):
                return await self._break(reply, scenario)
            if index and self.options.token_s > 0:
                await asyncio.sleep(self.options.token_s)
            if index == BREAK_AT and scenario == "malformed_chunk":
                await reply.write(MALFORMED)
                continue
            await reply.write(chunk(self.model, self.key, {"content": token}))
        await reply.write(chunk(self.model, self.key, {}, "stop"))
        if self.include_usage:
            await reply.write(usage_chunk(self.model, self.key, self.asked))
        if scenario != "no_done":
            await reply.write(DONE)
        await reply.write_eof()
        return reply

    async def _break(self, reply: web.StreamResponse, scenario: str) -> web.StreamResponse:
        """``stream_cut``: close the connection mid-body; ``stream_stall``: keep it open,
        silent, until the client goes."""
        if scenario == "stream_stall":
            await asyncio.Event().wait()
        transport = self.request.transport
        if transport is not None:
            transport.close()  # what was written is flushed first; the body never ends
        return reply

    def _reset(self) -> web.StreamResponse:
        """Close the socket with a reset (SO_LINGER 0) before any byte of an answer."""
        transport = self.request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return web.Response(status=204)  # never sent: the connection is gone


# --------------------------------------------------------------------------- running it


async def start(provider: FaultProvider, port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve ``provider`` on 127.0.0.1 (``port`` 0: any free one); the runner and the port."""
    runner = web.AppRunner(provider.build_app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    return runner, int(runner.addresses[0][1])


def add_options(parser: argparse.ArgumentParser) -> None:
    defaults = FaultOptions()
    parser.add_argument("--rate-limited-calls", type=int, default=defaults.rate_limited_calls)
    parser.add_argument("--slow-first-token-s", type=float, default=defaults.slow_first_token_s)
    parser.add_argument("--flap-s", type=float, default=defaults.flap_s)
    parser.add_argument("--token-ms", type=float, default=defaults.token_s * 1000.0)


def options_of(args: argparse.Namespace) -> FaultOptions:
    return FaultOptions(
        rate_limited_calls=args.rate_limited_calls,
        slow_first_token_s=args.slow_first_token_s,
        flap_s=args.flap_s,
        token_s=args.token_ms / 1000.0,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fault_provider")
    parser.add_argument("port", type=int)
    add_options(parser)
    args = parser.parse_args(argv)

    async def serve() -> None:
        runner, port = await start(FaultProvider(options_of(args)), args.port)
        print(f"fault provider on 127.0.0.1:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
