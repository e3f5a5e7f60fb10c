"""A provider much slower than the header timeout, through ``switchyard gateway`` in front of
the embedded stack: every request the gateway accepted is answered 200 with the provider's
answer, none gets the header timeout's 408, and the gateway logs no exception.

The header clock measures only the time to receive a request's line and headers; a
request whose head has arrived (its body being read, its handler waiting for the log)
is never timed by it. The failure this guards against: a body that arrived on its own,
just after its head, between aiohttp taking the parsed request off its queue and
starting its handler, started the clock, which fired while the handler waited for the
answer (a 408 ``header_timeout`` with ``x-should-retry: false`` to a request answered
``ok`` in the log, an ``AttributeError`` in the gateway's log). Whether a body lands in
that moment depends on the machine's timing, so here it happens to some requests of
some runs; tests/test_gateway_head_timeout.py puts a body there every time.

Scaling: in production the header timeout is 10 s and a provider may take 20 s; what
matters is provider time >> header timeout (the clock, started wrongly, fires long
before the answer), not the absolute times. Here the header timeout is 2 s and the
provider takes 8 s (four header timeouts), so the test waits about 8 s rather than 20.
50 clients of the official SDK, each with its own connection (its own ``httpx`` pool),
30 plain and 20 streamed, all at once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from aiohttp import web
from stack_helpers import LocalServer, new_stack, wait_ready, warm_up_gateway

from app.embedded.broker import EmbeddedBroker, free_port
from app.embedded.simulated import SimulatedProviders
from app.gateway.keys import hash_key
from app.lifetime import stop_process

pytestmark = pytest.mark.broker

KEY = "sk-test-slow-" + "f" * 20
HEADER_TIMEOUT_S = 2.0
PROVIDER_DELAY_S = 8.0  # four header timeouts
PLAIN, STREAMED = 30, 20
ANSWER = "the slow provider's answer ✓"
WARM = "[warm]"


class SlowProvider(LocalServer):
    """An OpenAI-compatible provider that answers after ``PROVIDER_DELAY_S`` (at once to a
    message containing ``[warm]``), as JSON or, asked ``stream: true``, as SSE chunks."""

    def __init__(self) -> None:
        super().__init__([("/v1/chat/completions", self._chat)])
        self.calls = 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if WARM not in json.dumps(body["messages"]):
            self.calls += 1
            await asyncio.sleep(PROVIDER_DELAY_S)
        base = {"id": "chatcmpl-slow", "created": 1, "model": body["model"]}
        usage = {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
        if not body.get("stream"):
            message = {"role": "assistant", "content": ANSWER}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            completion = {**base, "object": "chat.completion", "choices": [choice]}
            return web.json_response({**completion, "usage": usage})
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        chunk = {**base, "object": "chat.completion.chunk"}
        deltas = [{"role": "assistant", "content": ""}, {"content": ANSWER[:9]}]
        deltas.append({"content": ANSWER[9:]})
        for delta in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            await reply.write(_sse({**chunk, "choices": [choice]}))
        finish = {"index": 0, "delta": {}, "finish_reason": "stop"}
        await reply.write(_sse({**chunk, "choices": [finish]}))
        await reply.write(_sse({**chunk, "choices": [], "usage": usage}))
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def _providers_yaml(provider: SlowProvider) -> Any:
    def make(_sim: SimulatedProviders) -> str:
        entry = {"id": "slow", "base_url": f"{provider.url}/v1", "models": [{"name": "s1"}]}
        entry.update(timeout_ms=60_000, max_concurrency=100)
        config = {
            "providers": [entry],
            "routes": {"slow": {"providers": ["slow"], "max_attempts": 1}},
            "default_route": "slow",
            "gateway_keys": [{"sha256": hash_key(KEY), "name": "slow"}],
        }
        return str(yaml.safe_dump(config))

    return make


class Env:
    def __init__(self, url: str, provider: SlowProvider, log: Path) -> None:
        self.url, self.provider, self.log = url, provider, log


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    """The stack, and ``switchyard gateway`` in a process of its own, as deployed (its
    loop is not the clients')."""
    provider = await SlowProvider().start()
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "60"}
    stack = new_stack(broker, "w", providers_yaml=_providers_yaml(provider), env=env)
    await stack.start(workers=1)
    port = free_port()
    process_env = stack.worker_env(99)
    process_env.update(
        SWITCHYARD_GATEWAY_PORT=str(port),
        SWITCHYARD_GATEWAY_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
    )
    log = stack.workdir / "gateway.log"
    with log.open("wb") as out:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "gateway"], env=process_env, stdout=out, stderr=out
        )
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url, tries=200)
        await _warm_up(url)
        yield Env(url, provider, log)
    finally:
        stop_process(gateway, timeout_s=30)
        await stack.stop()
        await provider.stop()


async def _warm_up(url: str) -> None:
    messages = [{"role": "user", "content": f"{WARM} hello"}]
    await warm_up_gateway(url, KEY, [("slow", messages)], tries=10, timeout=90)


def _one(url: str, index: int, stream: bool, go: threading.Barrier) -> tuple[int, str]:
    """One request with a client of its own (a fresh connection), in a thread as an
    application would: (status, text). The clients are made first, then all ask at once
    (``go``): threads contend with the gateway's loop, so a request's head and body often
    arrive apart, the head at one turn of the loop and the body at a later one (clients in
    the gateway's own loop would write both in one step)."""
    messages = [{"role": "user", "content": f"question {index}"}]
    with httpx.Client(timeout=60) as http:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, http_client=http)
        go.wait(timeout=60)
        try:
            if not stream:
                raw = client.chat.completions.with_raw_response.create(
                    model="slow",
                    messages=messages,  # type: ignore[arg-type]
                )
                return raw.http_response.status_code, raw.parse().choices[0].message.content or ""
            chunks = client.chat.completions.create(
                model="slow",
                messages=messages,  # type: ignore[arg-type]
                stream=True,
            )
            return 200, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        except openai.APIStatusError as error:
            return error.status_code, str(error.code)


async def test_a_provider_slower_than_the_header_timeout_is_answered(env: Env) -> None:
    calls = env.provider.calls
    kinds = [False] * PLAIN + [True] * STREAMED
    go = threading.Barrier(len(kinds))
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        asked = [(env.url, i, stream, go) for i, stream in enumerate(kinds)]
        results = await asyncio.gather(*(loop.run_in_executor(pool, _one, *a) for a in asked))
    took = time.monotonic() - started
    statuses = [status for status, _ in results]
    assert statuses == [200] * len(kinds), f"{statuses.count(408)} got 408: {results}"
    assert all(text == ANSWER for _, text in results), results
    assert env.provider.calls - calls == len(kinds)  # each called once, none retried
    assert took >= PROVIDER_DELAY_S  # the provider's time was waited for, not cut short
    log = env.log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log and "Exception" not in log, log
