"""The loads of ``switchyard bench gateway``, the same for every side, with the official
``openai.AsyncOpenAI`` client: sequential calls, 20 req/s, sequential streams (time to
first token) and a closed-loop saturation, with the CPU of the side's processes."""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.gateway_sides import Side
from bench.throughput.loads import Call, LoadRun, closed_loop, fixed_rate, measured
from bench.throughput.stats import percentile

MESSAGES = [{"role": "user", "content": "Say hello."}]
#: No single call may take longer.
CALL_TIMEOUT_S = 30.0


class Client:
    """One side's calls: a completion, and a stream whose time to first token is kept."""

    def __init__(self, side: Side) -> None:
        import openai

        self.side = side
        self.sdk = openai.AsyncOpenAI(base_url=side.base_url, api_key=side.api_key, max_retries=0)
        self.ttft_ms: list[float] = []

    async def call(self) -> None:
        await self.sdk.chat.completions.create(**self._asked())

    async def stream(self) -> None:
        started = time.perf_counter()
        first = None
        stream = await self.sdk.chat.completions.create(
            **self._asked(), stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = (time.perf_counter() - started) * 1000.0
        if first is None:
            raise RuntimeError("a stream without content")
        self.ttft_ms.append(first)

    def _asked(self) -> dict[str, Any]:
        return {"model": self.side.model, "messages": MESSAGES, "max_tokens": 16}

    async def close(self) -> None:
        await self.sdk.close()


async def ready(client: Client, attempts: int = 120) -> None:
    """Until one call succeeds (the stack's worker joining takes a while)."""
    import asyncio

    for _ in range(attempts):
        try:
            await client.call()
            return
        except Exception:
            await asyncio.sleep(0.5)
    raise TimeoutError(f"{client.side.name} never answered")


async def measure(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase against one side."""
    client = Client(side)
    try:
        await ready(client)
        await _closed(client.call, 4, 40)  # warm-up
        await _closed(client.stream, 1, 10)
        client.ttft_ms.clear()
        figures: dict[str, Any] = {"c1": figures_of(await _closed(client.call, 1, args.requests))}
        run, _, used = await measured(
            fixed_rate(
                client.call,
                rate=20.0,
                count=args.requests,
                max_seconds=120,
                timeout_s=CALL_TIMEOUT_S,
            ),
            side.pids,
        )
        figures["rate20"] = {**figures_of(run), "cpu_ms": _cpu_per_request(used, run)}
        streams = await _closed(client.stream, 1, args.requests)
        figures["ttft"] = {
            **_percentiles(client.ttft_ms),
            "errors": streams.errors + streams.timeouts,
        }
        run, _, used = await measured(
            closed_loop(
                client.call,
                concurrency=args.concurrency,
                count=10**9,
                max_seconds=args.seconds,
                timeout_s=CALL_TIMEOUT_S,
            ),
            side.pids,
        )
        figures["saturation"] = {**figures_of(run), "cpu_ms": _cpu_per_request(used, run)}
        return figures
    finally:
        await client.close()


async def _closed(call: Call, concurrency: int, count: int) -> LoadRun:
    return await closed_loop(
        call, concurrency=concurrency, count=count, max_seconds=120, timeout_s=CALL_TIMEOUT_S
    )


def figures_of(load: LoadRun) -> dict[str, Any]:
    return {
        "done": load.done,
        "errors": load.errors + load.timeouts,
        "first_error": load.first_error,
        "rps": round(load.rps, 1),
        **_percentiles(load.latencies_ms),
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    return {
        "p50_ms": round(percentile(values, 0.5), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
    }


def _cpu_per_request(used: dict[str, float], run: LoadRun) -> dict[str, float]:
    """CPU milliseconds per answered request, per process of the side."""
    if not run.done:
        return {}
    return {
        name: round(seconds * 1000.0 / run.done, 3)
        for name, seconds in used.items()
        if not name.endswith(".wait")
    }
