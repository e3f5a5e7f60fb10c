"""``switchyard bench gateway``: what the gateway adds, with the official SDK, vs calling the mock.

One light aiohttp mock (``--latency-ms``, 20 by default) in its own process; the embedded
stack (one worker) routing to it; ``switchyard gateway`` in its own process. The same
``openai.AsyncOpenAI`` client calls the mock directly and the gateway: added latency
p50/p99 at concurrency 1 and at 20 req/s, and saturation requests/s (closed loop,
``--concurrency`` callers). The LiteLLM proxy is run the same way when
``litellm[proxy]`` is installed; otherwise it is skipped with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from app.embedded.broker import free_port
from app.embedded.lifetime import die_with_parent
from app.embedded.stack import EmbeddedStack
from app.gateway.run import LOCAL_KEY, add_local_key
from bench.throughput.loads import Call, LoadRun, closed_loop, fixed_rate
from bench.throughput.mocks import MockServer
from bench.throughput.workload import MOCK_MODEL

MESSAGES = [{"role": "user", "content": "Say hello."}]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency-ms", type=int, default=20, help="the mock's latency")
    parser.add_argument("--requests", type=int, default=100, help="per sequential/rate phase")
    parser.add_argument("--concurrency", type=int, default=32, help="saturation callers")
    parser.add_argument("--seconds", type=float, default=10.0, help="saturation phase length")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")


def run(args: argparse.Namespace) -> int:
    summary = asyncio.run(_bench(args))
    for line in _report(summary):
        print(line)
    if args.json:
        print(json.dumps(summary))
    return 0


def _call(base_url: str, model: str) -> tuple[Call, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key=LOCAL_KEY, max_retries=0)

    async def call() -> None:
        await client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=16)  # type: ignore[arg-type]

    return call, client


async def _phases(call: Call, args: argparse.Namespace) -> dict[str, LoadRun]:
    await closed_loop(call, concurrency=4, count=40, max_seconds=30, timeout_s=30)  # warm-up
    return {
        "c1": await closed_loop(
            call, concurrency=1, count=args.requests, max_seconds=60, timeout_s=30
        ),
        "rate20": await fixed_rate(
            call, rate=20.0, count=args.requests, max_seconds=60, timeout_s=30
        ),
        "saturation": await closed_loop(
            call, concurrency=args.concurrency, count=10**9, max_seconds=args.seconds, timeout_s=30
        ),
    }


def _providers(mock: MockServer) -> str:
    provider = {"id": "mock", "base_url": mock.base_url, "max_concurrency": 1000}
    provider["models"] = [{"name": MOCK_MODEL}]
    return str(
        yaml.safe_dump({"providers": [provider], "routes": {"chat": {"providers": ["mock"]}}})
    )


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-gateway-"))
    mock = MockServer("light", args.latency_ms, workdir).start()
    stack = EmbeddedStack(workdir=workdir, providers_yaml=lambda _sim: _providers(mock))
    gateway: subprocess.Popen[bytes] | None = None
    try:
        await stack.start(workers=1)
        add_local_key(stack.providers_file, LOCAL_KEY)
        port = free_port()
        env = {**stack.worker_env(99), "SWITCHYARD_GATEWAY_PORT": str(port)}
        gateway = _start_gateway(env, workdir)
        results: dict[str, Any] = {"latency_ms": args.latency_ms}
        for name, url, model in (
            ("direct", mock.base_url, MOCK_MODEL),
            ("gateway", f"http://127.0.0.1:{port}/v1", "chat"),
        ):
            call, client = _call(url, model)
            if name == "gateway":
                await _wait_ready(call)
            results[name] = {k: _figures(v) for k, v in (await _phases(call, args)).items()}
            await client.close()
        results["litellm"] = _litellm_skipped()
        return results
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=10)
        await stack.stop()
        mock.stop()


def _start_gateway(env: dict[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    with (workdir / "gateway.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "gateway"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )


async def _wait_ready(call: Call) -> None:
    for _ in range(120):
        try:
            await call()
            return
        except Exception:
            await asyncio.sleep(0.5)
    raise TimeoutError("the gateway did not answer within 60 s")


def _litellm_skipped() -> str | None:
    try:
        import litellm.proxy.proxy_server  # noqa: F401
    except Exception as exc:
        return f"skipped: the LiteLLM proxy cannot run here ({type(exc).__name__}: {exc})"[:200]
    return "skipped: the LiteLLM proxy run is not implemented yet"


def _figures(load: LoadRun) -> dict[str, Any]:
    ordered = sorted(load.latencies_ms)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else None
    return {
        "done": load.done,
        "errors": load.errors + load.timeouts,
        "rps": round(load.rps, 1),
        "p50_ms": round(statistics.median(ordered), 2) if ordered else None,
        "p99_ms": round(p99, 2) if p99 is not None else None,
    }


def _report(summary: dict[str, Any]) -> list[str]:
    lines = [f"mock latency {summary['latency_ms']} ms; openai.AsyncOpenAI against each"]
    direct, gateway = summary["direct"], summary["gateway"]
    for phase in ("c1", "rate20"):
        d, g = direct[phase], gateway[phase]
        added = [round(g[k] - d[k], 1) if g[k] and d[k] else None for k in ("p50_ms", "p99_ms")]
        lines.append(
            f"{phase}: direct p50 {d['p50_ms']} p99 {d['p99_ms']} ms; gateway p50 {g['p50_ms']} "
            f"p99 {g['p99_ms']} ms; added p50 {added[0]} p99 {added[1]} ms; errors {g['errors']}"
        )
    lines.append(
        f"saturation: direct {direct['saturation']['rps']} req/s, "
        f"gateway {gateway['saturation']['rps']} req/s (errors {gateway['saturation']['errors']})"
    )
    lines.append(f"litellm: {summary['litellm']}")
    return lines
