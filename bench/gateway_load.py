"""The loads of ``switchyard bench gateway``, the same for every side and every API (the
official SDKs: bench/gateway_apis.py): sequential calls, 20 req/s, sequential streams (time
to first token) and a closed-loop saturation, with the CPU of the side's processes."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from bench.gateway_apis import MESSAGES as MESSAGES
from bench.gateway_apis import ApiClient, client_for
from bench.gateway_sides import Side
from bench.throughput.loads import Call, LoadRun, closed_loop, fixed_rate, measured
from bench.throughput.stats import percentile

#: No single call may take longer.
CALL_TIMEOUT_S = 30.0


async def ready(client: ApiClient, attempts: int = 120) -> None:
    """Until one call succeeds (the stack's worker joining takes a while)."""
    last = ""
    for _ in range(attempts):
        try:
            await client.call()
            return
        except Exception as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
            await asyncio.sleep(0.5)
    raise TimeoutError(f"{client.side.name} never answered (last: {last})")


async def measure_apis(
    side: Side, args: argparse.Namespace, apis: Sequence[str]
) -> dict[str, dict[str, Any] | str]:
    """Every phase against one side, API after API; an API the side never answers is the
    reason instead of figures (the other APIs are measured all the same)."""
    figures: dict[str, dict[str, Any] | str] = {}
    for api in apis:
        try:
            figures[api] = await measure(client_for(api, side), args)
        except TimeoutError as exc:
            figures[api] = str(exc)
    return figures


async def measure(client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase against one side through one API (``client``, closed at the end)."""
    side = client.side
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
            "first_error": streams.first_error,
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
