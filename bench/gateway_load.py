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
from bench.throughput.loads import Call, LoadRun, closed_loop, fixed_count, measured
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
    """Every phase against one side through each API of ``apis``: the latency phases of
    every API (concurrency 1, 20 req/s, streams), then the saturation of each. A saturation
    leaves thousands of requests on the stack's logs, and Switchyard's latency phases run
    after two of them were slower (messages' added p50 at 20 req/s: 18 ms measured alone,
    20-37 ms after the chat and responses saturations), so none runs after one. An API the
    side never answers is the reason instead of figures (the others are measured)."""
    clients = {api: client_for(api, side) for api in apis}
    reasons: dict[str, str] = {}
    try:
        for api, client in clients.items():
            try:
                await _warm(client)
            except TimeoutError as exc:
                reasons[api] = str(exc)
        figures: dict[str, dict[str, Any]] = {api: {} for api in apis if api not in reasons}
        for phase in (_c1, _rate20, _streams, _saturation):
            for api, measured_api in figures.items():
                measured_api.update(await phase(clients[api], args))
        return {api: reasons[api] if api in reasons else figures[api] for api in apis}
    finally:
        for client in clients.values():
            await client.close()


async def _warm(client: ApiClient) -> None:
    await ready(client)
    await _closed(client.call, 4, 40)
    await _closed(client.stream, 1, 10)
    client.ttft_ms.clear()


async def _c1(client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    return {"c1": figures_of(await _closed(client.call, 1, args.requests))}


async def _rate20(client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    load = fixed_count(client.call, rate=20.0, count=args.requests, timeout_s=CALL_TIMEOUT_S)
    run, _, used = await measured(load, client.side.pids)
    return {"rate20": {**figures_of(run), "cpu_ms": _cpu_per_request(used, run)}}


async def _streams(client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    streams = await _closed(client.stream, 1, args.requests)
    errors = {"errors": streams.errors + streams.timeouts, "first_error": streams.first_error}
    return {"ttft": {**_percentiles(client.ttft_ms), **errors}}


async def _saturation(client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    load = closed_loop(
        client.call,
        concurrency=args.concurrency,
        count=10**9,
        max_seconds=args.seconds,
        timeout_s=CALL_TIMEOUT_S,
    )
    run, _, used = await measured(load, client.side.pids)
    return {"saturation": {**figures_of(run), "cpu_ms": _cpu_per_request(used, run)}}


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
