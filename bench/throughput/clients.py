"""The direct and ``litellm.Router`` sides, each measured in its own (spawned) process."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.throughput.loads import (
    Call,
    closed_loop,
    fixed_count,
    fixed_rate,
    measured,
    noop,
    phase_summary,
)
from bench.throughput.procfs import process_memory_mb
from bench.throughput.workload import API_KEY, MAX_TOKENS, MOCK_MODEL, PROMPT

if TYPE_CHECKING:
    from multiprocessing.connection import Connection


@dataclass(frozen=True)
class Plan:
    """What a client process runs (pickled into it)."""

    kind: str  # "direct" or "litellm"
    targets: dict[str, str]  # mock kind -> base URL
    mock_pids: dict[str, int]
    rate: float
    requests: int
    low_rate: float
    low_requests: int
    concurrency: int
    saturation_requests: int
    saturation_seconds: float
    deployments: int
    timeout_s: float = 30.0


async def _direct_calls(plan: Plan) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    from app.execution.http import make_client

    client = make_client(max_connections=max(plan.concurrency, 64))
    body = {
        "model": MOCK_MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    headers = {"Authorization": f"Bearer {API_KEY}", "Accept": "application/json"}

    def make(url: str) -> Call:
        async def call() -> None:
            response = await client.post(url + "/chat/completions", json=body, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}")
            if not response.json()["choices"][0]["message"]["content"]:
                raise RuntimeError("empty completion")

        return call

    return {kind: make(url) for kind, url in plan.targets.items()}, client.aclose


async def _litellm_calls(plan: Plan) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm
    from litellm.router import Router

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    model_list = [
        {
            "model_name": f"chat-{kind}",
            "litellm_params": {
                "model": f"openai/{MOCK_MODEL}",
                "api_base": url,
                "api_key": API_KEY,
            },
            "model_info": {"id": f"{kind}-{i}"},
        }
        for kind, url in plan.targets.items()
        for i in range(plan.deployments)
    ]
    router: Any = Router(model_list=model_list)  # inside the running loop
    messages = [{"role": "user", "content": PROMPT}]

    def make(kind: str) -> Call:
        async def call() -> None:
            response = await router.acompletion(
                model=f"chat-{kind}", messages=messages, max_tokens=MAX_TOKENS
            )
            if not response.choices[0].message.content:
                raise RuntimeError("empty completion")

        return call

    async def close() -> None:
        return None

    return {kind: make(kind) for kind in plan.targets}, close


async def run_client(plan: Plan) -> dict[str, Any]:
    """Everything one client process measures: a no-op driver baseline, then per mock a warm-up,
    the fixed rate and saturation."""
    rss_start = process_memory_mb(os.getpid(), "VmRSS")
    noop_fixed, noop_fixed_cpu, _ = await measured(
        fixed_rate(
            noop,
            rate=plan.rate,
            count=min(plan.requests, 300),
            max_seconds=5.0,
            timeout_s=plan.timeout_s,
        ),
        {},
    )
    noop_closed, noop_closed_cpu, _ = await measured(
        closed_loop(
            noop,
            concurrency=plan.concurrency,
            count=plan.saturation_requests,
            max_seconds=5.0,
            timeout_s=plan.timeout_s,
        ),
        {},
    )
    baseline = {
        "fixed_cpu_ms_per_request": noop_fixed_cpu * 1000.0 / max(1, noop_fixed.done),
        "closed_cpu_ms_per_request": noop_closed_cpu * 1000.0 / max(1, noop_closed.done),
    }
    imported = time.perf_counter()
    calls, close = await (_litellm_calls(plan) if plan.kind == "litellm" else _direct_calls(plan))
    setup_s = time.perf_counter() - imported
    results: dict[str, Any] = {}
    try:
        for kind, call in calls.items():
            mock = {kind: plan.mock_pids[kind]}
            await closed_loop(call, concurrency=8, count=64, max_seconds=10.0, timeout_s=10.0)
            low = await fixed_count(
                call, rate=plan.low_rate, count=plan.low_requests, timeout_s=plan.timeout_s
            )
            fixed, fixed_cpu, fixed_mock = await measured(
                fixed_count(call, rate=plan.rate, count=plan.requests, timeout_s=plan.timeout_s),
                mock,
            )
            saturated, saturated_cpu, saturated_mock = await measured(
                closed_loop(
                    call,
                    concurrency=plan.concurrency,
                    count=plan.saturation_requests,
                    max_seconds=plan.saturation_seconds,
                    timeout_s=plan.timeout_s,
                ),
                mock,
            )
            results[kind] = {
                "low": phase_summary(low, None),
                "fixed": phase_summary(
                    fixed,
                    fixed_cpu,
                    baseline_cpu_ms=baseline["fixed_cpu_ms_per_request"],
                    extra={"mock_cpu_utilisation": fixed_mock[kind] / fixed.seconds},
                ),
                "saturation": phase_summary(
                    saturated,
                    saturated_cpu,
                    baseline_cpu_ms=baseline["closed_cpu_ms_per_request"],
                    extra={"mock_cpu_utilisation": saturated_mock[kind] / saturated.seconds},
                ),
            }
    finally:
        await close()
    return {
        "kind": plan.kind,
        "baseline": baseline,
        "setup_s": setup_s,
        "rss_start_mb": rss_start,
        "peak_rss_mb": process_memory_mb(os.getpid(), "VmHWM"),
        "mocks": results,
    }


def _client_main(plan: Plan, conn: Connection) -> None:
    try:
        result = asyncio.run(run_client(plan))
        conn.send(("ok", result))
    except BaseException as exc:  # report anything to the parent, which prints it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_client_process(plan: Plan, timeout_s: float) -> dict[str, Any]:
    """``run_client`` in a fresh (spawned) process, so its CPU and memory are its own."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_client_main, args=(plan, child), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise TimeoutError(f"{plan.kind} client did not finish in {timeout_s:g}s")
        status, result = parent.recv()
    finally:
        process.join(5.0)
        if process.is_alive():
            process.terminate()
            process.join(5.0)
    if status != "ok":
        raise RuntimeError(f"{plan.kind} client failed: {result}")
    return dict(result)
