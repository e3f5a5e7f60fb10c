"""``switchyard bench gateway``: what the gateway adds, with the official SDK, beside LiteLLM.

One mock provider (``--latency-ms``, 20 by default; JSON or streamed answers) in its own
process; the embedded stack (one worker) routing to it with ``switchyard gateway`` in
its own process; the LiteLLM proxy (``litellm --config``, ``litellm[proxy]``, local cost
map, no network) in its own process, routing to the same mock. The same
``openai.AsyncOpenAI`` client calls the mock directly, the gateway and the proxy:

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
import shutil
import tempfile
from pathlib import Path
from typing import Any

from app.embedded.broker import free_port
from app.embedded.stack import EmbeddedStack
from bench.gateway_load import measure
from bench.gateway_sides import (
    Process,
    Side,
    allow_local_key,
    litellm_unavailable,
    providers_yaml,
    start_gateway,
    start_litellm,
    start_mock,
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
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-gateway-"))
    processes: list[Process] = []
    stack: EmbeddedStack | None = None
    try:
        mock, mock_url = start_mock(args.latency_ms, workdir)
        processes.append(mock)
        results: dict[str, Any] = {"latency_ms": args.latency_ms, "requests": args.requests}
        results["direct"] = await measure(Side("direct", mock_url, "bench-model", "sk-x"), args)
        (workdir / "stack").mkdir()
        stack = EmbeddedStack(workdir=workdir / "stack", providers_yaml=providers_yaml(mock_url))
        await stack.start(workers=1)
        allow_local_key(stack)
        port = free_port()
        gateway = start_gateway(stack, workdir, port)
        processes.append(gateway)
        results["switchyard"] = await measure(switchyard_side(stack, gateway, port), args)
        gateway.stop()
        await stack.stop()
        stack = None
        results["litellm"] = await _litellm(mock_url, workdir, processes, args)
        return results
    finally:
        for process in reversed(processes):
            process.stop()
        if stack is not None:
            await stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


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
        return await measure(side, args)
    finally:
        proxy.stop()


# --------------------------------------------------------------------------- report


def report(summary: dict[str, Any]) -> list[str]:
    direct = summary["direct"]
    sides = [n for n in ("switchyard", "litellm") if isinstance(summary.get(n), dict)]
    lines = [
        f"mock latency {summary['latency_ms']} ms; openai.AsyncOpenAI against each; "
        f"{summary['requests']} requests per phase"
    ]
    header = f"{'':34}{'direct':>12}" + "".join(f"{n:>14}" for n in sides)
    lines.append(header)
    for phase, label in (("c1", "concurrency 1"), ("rate20", "20 req/s")):
        lines.append(_row(f"{label} p50 / p99 ms", [direct] + [summary[n] for n in sides], phase))
        added = [_added(summary[n][phase], direct[phase]) for n in sides]
        lines.append(f"{'  added p50 / p99 ms':34}{'':>12}" + "".join(f"{a:>14}" for a in added))
    ttft = [_num(direct["ttft"]["p50_ms"])] + [_num(summary[n]["ttft"]["p50_ms"]) for n in sides]
    lines.append(f"{'stream TTFT p50 ms':34}" + "".join(f"{t:>12}" for t in ttft[:1]))
    lines[-1] += "".join(f"{t:>14}" for t in ttft[1:])
    overhead = [_diff(summary[n]["ttft"]["p50_ms"], direct["ttft"]["p50_ms"]) for n in sides]
    lines.append(f"{'  TTFT overhead p50 ms':34}{'':>12}" + "".join(f"{o:>14}" for o in overhead))
    rps = [_num(direct["saturation"]["rps"])] + [
        _num(summary[n]["saturation"]["rps"]) for n in sides
    ]
    lines.append(f"{'saturation req/s':34}{rps[0]:>12}" + "".join(f"{r:>14}" for r in rps[1:]))
    for name in sides:
        for phase, label in (("rate20", "at 20 req/s"), ("saturation", "at saturation")):
            cpu = summary[name][phase].get("cpu_ms") or {}
            parts = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
            lines.append(f"{name} CPU ms per request {label}: {parts or 'n/a'}")
        errors = {p: summary[name][p]["errors"] for p in ("c1", "rate20", "ttft", "saturation")}
        lines.append(f"{name} errors: {errors}")
    for name in ("switchyard", "litellm"):
        if isinstance(summary.get(name), str):
            lines.append(f"{name}: {summary[name]}")
    return lines


def _row(label: str, sides: list[dict[str, Any]], phase: str) -> str:
    cells = [f"{_num(s[phase]['p50_ms'])} / {_num(s[phase]['p99_ms'])}" for s in sides]
    return f"{label:34}{cells[0]:>12}" + "".join(f"{c:>14}" for c in cells[1:])


def _added(side: dict[str, Any], direct: dict[str, Any]) -> str:
    return f"{_diff(side['p50_ms'], direct['p50_ms'])} / {_diff(side['p99_ms'], direct['p99_ms'])}"


def _diff(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a - b:.1f}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
