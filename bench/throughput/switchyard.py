"""The Switchyard side: the embedded broker and one worker, at every load, CPU and memory."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from bench.throughput.driver import StackDriver
from bench.throughput.loads import LoadRun, closed_loop, fixed_count, measured, phase_summary
from bench.throughput.mocks import MockServer
from bench.throughput.procfs import process_cpu_s, process_memory_mb
from bench.throughput.pyspy import profile_worker
from bench.throughput.stats import latency_dict
from bench.throughput.workload import API_KEY, MOCK_MODEL


def mock_provider(
    provider_id: str, mock: MockServer, max_concurrency: int = 100_000
) -> dict[str, Any]:
    """A providers-file entry for a deployment at ``mock`` (the default ``max_concurrency`` is
    far above any in-flight count: the throughput bench measures speed, not caps)."""
    return {
        "id": provider_id,
        "base_url": mock.base_url,
        "api_key": API_KEY,
        "cost_per_mtok_input": 1.0,
        "cost_per_mtok_output": 3.0,
        "max_concurrency": max_concurrency,
        "p95_latency_baseline_ms": 2.0 * mock.latency_ms,
        "timeout_ms": 10_000,
        "models": [{"name": MOCK_MODEL}],
    }


def providers_yaml(mocks: Sequence[MockServer], deployments: int) -> str:
    """One route per mock (``chat-<kind>``), ``deployments`` providers on it, all at that mock."""
    import yaml

    providers = []
    routes: dict[str, dict[str, list[str]]] = {}
    for mock in mocks:
        ids = [f"mock{i}-{mock.kind}" for i in range(deployments)]
        routes[f"chat-{mock.kind}"] = {"providers": ids}
        providers += [mock_provider(pid, mock) for pid in ids]
    config = {"providers": providers, "routes": routes, "default_route": f"chat-{mocks[0].kind}"}
    return str(yaml.safe_dump(config, sort_keys=False))


async def run_switchyard(mocks: Sequence[MockServer], args: argparse.Namespace) -> dict[str, Any]:
    from app.embedded.stack import EmbeddedStack

    stack = EmbeddedStack(
        providers_yaml=providers_yaml(mocks, args.deployments),
        env={
            "BANDIT_STRATEGY": args.strategy,
            "SWITCHYARD_LOG_LEVEL": "warn",
            **({"SWITCHYARD_EXACTLY_ONCE": "1"} if args.exactly_once else {}),
        },
        broker_kind=args.broker,
    )
    result: dict[str, Any] = {"strategy": args.strategy, "mocks": {}}
    started = time.perf_counter()
    async with stack:
        worker = stack.workers[0].process
        assert worker is not None
        broker_process = getattr(stack.broker, "_process", None)  # no public pid yet
        pids = {"worker": worker.pid}
        if broker_process is not None:
            pids["broker"] = broker_process.pid
        result["worker_pid"] = worker.pid
        driver = await StackDriver(stack).start()
        try:
            # Warm-up: the worker joins its group, opens connections, seeds every arm.
            for mock in mocks:
                warm = await closed_loop(
                    driver.call(f"chat-{mock.kind}"),
                    concurrency=4,
                    count=8 * args.deployments,
                    max_seconds=90.0,
                    timeout_s=60.0,
                )
                if warm.done == 0:
                    raise RuntimeError(f"the worker answered no warm-up request: {warm}")
            result["ready_s"] = time.perf_counter() - started
            result["worker_rss_ready_mb"] = process_memory_mb(worker.pid, "VmRSS")
            await asyncio.sleep(1.0)  # let the warm-up's trailing records go by
            idle_cpu = process_cpu_s(worker.pid)
            idle_broker = process_cpu_s(pids["broker"]) if "broker" in pids else 0.0
            await asyncio.sleep(3.0)
            idle = {
                "worker_cpu_ms_per_s": (process_cpu_s(worker.pid) - idle_cpu) * 1000.0 / 3.0,
                "broker_cpu_ms_per_s": (
                    (process_cpu_s(pids["broker"]) - idle_broker) * 1000.0 / 3.0
                    if "broker" in pids
                    else None
                ),
            }
            result["idle"] = idle
            for mock in mocks:
                pids_here = {**pids, "mock": mock.pid}
                call = driver.call(f"chat-{mock.kind}")
                mark = driver.issued
                low = await fixed_count(
                    call, rate=args.low_rate, count=args.low_requests, timeout_s=30.0
                )
                await asyncio.sleep(0.5)
                low_added, low_stages = driver.added_ms(mark), driver.stages(mark)
                mark = driver.issued
                fixed, driver_cpu, cpus = await measured(
                    fixed_count(call, rate=args.rate, count=args.requests, timeout_s=30.0),
                    pids_here,
                )
                await asyncio.sleep(0.5)  # outcomes may trail their responses
                fixed_added, fixed_stages = driver.added_ms(mark), driver.stages(mark)
                mark = driver.issued
                saturated, sat_driver_cpu, sat_cpus = await measured(
                    closed_loop(
                        call,
                        concurrency=args.concurrency,
                        count=args.saturation_requests,
                        max_seconds=args.saturation_seconds,
                        timeout_s=30.0,
                    ),
                    pids_here,
                )
                await asyncio.sleep(0.5)
                result["mocks"][mock.kind] = {
                    "low": phase_summary(
                        low,
                        None,
                        extra={"added_ms": latency_dict(low_added), "stages_ms": low_stages},
                    ),
                    "fixed": {
                        **_stack_phase(fixed, cpus, driver_cpu, idle, fixed_added),
                        "stages_ms": fixed_stages,
                    },
                    "saturation": _stack_phase(
                        saturated, sat_cpus, sat_driver_cpu, idle, driver.added_ms(mark)
                    ),
                }
            if args.profile_seconds > 0:
                result["profile"] = await profile_worker(
                    driver, worker.pid, mocks, args, result["mocks"]
                )
            result["worker_peak_rss_mb"] = process_memory_mb(worker.pid, "VmHWM")
            result["worker_rss_end_mb"] = process_memory_mb(worker.pid, "VmRSS")
            if "broker" in pids:
                result["broker_peak_rss_mb"] = process_memory_mb(pids["broker"], "VmHWM")
        finally:
            await driver.stop()
    return result


def _stack_phase(
    run: LoadRun,
    cpus: dict[str, float],
    driver_cpu: float,
    idle: dict[str, Any],
    added: list[float],
) -> dict[str, Any]:
    done = max(1, run.done)
    broker_idle = idle["broker_cpu_ms_per_s"] or 0.0
    extra: dict[str, Any] = {
        "added_ms": latency_dict(added),
        "driver_cpu_ms_per_request": driver_cpu * 1000.0 / done,
        "mock_cpu_utilisation": cpus["mock"] / run.seconds,
        # Runnable but not running (other processes had the cores): a CPU-bound worker
        # shows cpu_utilisation + this close to 1.
        "worker_cpu_wait_share": cpus["worker.wait"] / run.seconds,
    }
    if "broker" in cpus:
        extra["broker_cpu_ms_per_request"] = cpus["broker"] * 1000.0 / done
        extra["broker_cpu_ms_per_request_net"] = max(
            0.0, (cpus["broker"] * 1000.0 - broker_idle * run.seconds) / done
        )
        extra["broker_cpu_utilisation"] = cpus["broker"] / run.seconds
    return phase_summary(
        run, cpus["worker"], idle_cpu_ms_per_s=idle["worker_cpu_ms_per_s"], extra=extra
    )
