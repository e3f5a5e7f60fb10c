"""``switchyard bench gateway``: what the gateway adds, with the official SDKs, beside LiteLLM.

One mock provider (``--latency-ms``, 20 by default; JSON or streamed chat completions) in
its own process; the embedded stack (one worker) routing to it with ``switchyard gateway``
in its own process; the LiteLLM proxy (``litellm --config``, ``litellm[proxy]``, local cost
map, no network) in its own process, routing to the same mock. The same
``openai.AsyncOpenAI`` client calls the mock directly; the gateway and the proxy are called
through each API of ``--apis`` (bench/gateway_apis.py: chat completions, the Responses API,
Anthropic's Messages API, each with its official SDK; the gateways translate the last two
to chat completions for the mock):

* added latency p50/p99 at concurrency 1 and at 20 req/s (vs the mock called directly);
* streaming time-to-first-token overhead p50 (sequential streams);
* saturation requests/s (closed loop, ``--concurrency`` callers, ``--seconds``);
* CPU milliseconds per request of the gateway and the worker (LiteLLM: its proxy), at
  20 req/s and at saturation.

Every process is stopped at the end (and dies with this one). ``--kill`` runs the
crash bench instead (bench/gateway_kill.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from app.embedded.broker import free_port
from bench.gateway_apis import APIS, parse_apis
from bench.gateway_load import measure_apis
from bench.gateway_report import report
from bench.gateway_sides import (
    Process,
    Side,
    bench_run,
    litellm_unavailable,
    start_gateway,
    start_litellm,
    switchyard_side,
    wait_healthy,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency-ms", type=int, default=20, help="the mock's latency")
    parser.add_argument("--requests", type=int, default=100, help="per c1/rate/stream phase")
    parser.add_argument("--concurrency", type=int, default=32, help="saturation callers")
    parser.add_argument("--seconds", type=float, default=10.0, help="saturation phase length")
    parser.add_argument("--skip-litellm", action="store_true", help="no LiteLLM side")
    parser.add_argument(
        "--apis",
        type=parse_apis,
        default=APIS,
        help=f"the APIs to measure the gateways through (default {','.join(APIS)})",
    )
    parser.add_argument(
        "--kill", action="store_true", help="SIGKILL the gateway under load instead"
    )
    parser.add_argument("--kill-requests", type=int, default=1000, help="--kill: requests")
    parser.add_argument("--kill-rate", type=float, default=20.0, help="--kill: req/s")
    parser.add_argument(
        "--kill-latency-ms", type=int, default=500, help="--kill: the mock's latency (in flight)"
    )
    parser.add_argument("--json", action="store_true", help="also print one JSON line")


def run(args: argparse.Namespace) -> int:
    if args.kill:
        from bench.gateway_kill import run_kill

        return run_kill(args)
    summary = asyncio.run(_bench(args))
    for line in report(summary):
        print(line)
    if args.json:
        print(json.dumps(summary))
    return 0


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    async with bench_run("switchyard-bench-gateway-") as run:
        mock_url = run.mock(args.latency_ms)
        results: dict[str, Any] = {"latency_ms": args.latency_ms, "requests": args.requests}
        direct = Side("direct", mock_url, "bench-model", "sk-x")
        results["direct"] = await measure_apis(direct, args, ("chat",))
        stack = await run.start_stack(mock_url)
        port = free_port()
        gateway = start_gateway(stack, run.workdir, port)
        run.processes.append(gateway)
        side = switchyard_side(stack, gateway, port)
        results["switchyard"] = await measure_apis(side, args, args.apis)
        gateway.stop()
        await stack.stop()
        run.stack = None
        results["litellm"] = await _litellm(mock_url, run.workdir, run.processes, args)
        return results


async def _litellm(
    mock_url: str, workdir: Path, processes: list[Process], args: argparse.Namespace
) -> dict[str, Any] | str:
    why = "skipped (--skip-litellm)" if args.skip_litellm else litellm_unavailable()
    if why is not None:
        return why
    proxy, side = start_litellm(mock_url, workdir)
    processes.append(proxy)
    await wait_healthy(side.base_url.removesuffix("/v1") + "/health/liveliness", proxy)
    try:
        return await measure_apis(side, args, args.apis)
    finally:
        proxy.stop()
