"""The loads (open loop at a fixed rate, closed loop), and a load's figures with its CPU."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.throughput.procfs import process_cpu_s, process_wait_s, self_cpu_s
from bench.throughput.stats import latency_dict

Call = Callable[[], Awaitable[None]]


@dataclass
class LoadRun:
    """One load: ``done`` answered, latencies (ms) of those, over ``seconds`` of wall time."""

    mode: str
    issued: int
    done: int
    errors: int
    timeouts: int
    seconds: float
    latencies_ms: list[float] = field(repr=False)
    first_error: str = ""
    #: Requests issued per second while issuing (open loop: the arrival rate achieved; a
    #: driver sharing a saturated event loop falls behind the rate it was asked for).
    offered_rps: float | None = None

    @property
    def rps(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0


class _Outcomes:
    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.errors = 0
        self.timeouts = 0
        self.first_error = ""

    async def timed(self, call: Call, timeout_s: float) -> None:
        started = time.perf_counter()
        try:
            await asyncio.wait_for(call(), timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return
        except Exception as exc:
            self.errors += 1
            self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"[:200]
            return
        self.latencies_ms.append((time.perf_counter() - started) * 1000.0)

    def run(
        self, mode: str, issued: int, seconds: float, offered_rps: float | None = None
    ) -> LoadRun:
        return LoadRun(
            mode,
            issued,
            len(self.latencies_ms),
            self.errors,
            self.timeouts,
            seconds,
            self.latencies_ms,
            self.first_error,
            offered_rps,
        )


async def fixed_rate(
    call: Call, *, rate: float, count: int, max_seconds: float, timeout_s: float
) -> LoadRun:
    """Open loop: call *i* starts at *i / rate* s whether or not earlier ones came back."""
    outcomes = _Outcomes()
    tasks: set[asyncio.Task[None]] = set()
    started = time.perf_counter()
    issued = 0
    while issued < count:
        now = time.perf_counter()
        if now - started >= max_seconds:
            break
        due = started + issued / rate
        if due > now:
            await asyncio.sleep(due - now)
        task = asyncio.create_task(outcomes.timed(call, timeout_s))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        issued += 1
    issuing_s = time.perf_counter() - started
    offered = (issued - 1) / issuing_s if issued > 1 and issuing_s > 0 else None
    if tasks:
        _, late = await asyncio.wait(set(tasks), timeout=timeout_s + 1.0)
        for task in late:
            task.cancel()
    return outcomes.run("fixed", issued, time.perf_counter() - started, offered)


def fixed_count(call: Call, *, rate: float, count: int, timeout_s: float) -> Awaitable[LoadRun]:
    """:func:`fixed_rate` for ``count`` calls, given 5 s more than they take at ``rate``."""
    return fixed_rate(
        call, rate=rate, count=count, max_seconds=count / rate + 5.0, timeout_s=timeout_s
    )


async def closed_loop(
    call: Call, *, concurrency: int, count: int, max_seconds: float, timeout_s: float
) -> LoadRun:
    """``concurrency`` callers, each starting its next call when its last one returns."""
    outcomes = _Outcomes()
    started = time.perf_counter()
    issued = 0

    async def caller() -> None:
        nonlocal issued
        while issued < count and time.perf_counter() - started < max_seconds:
            issued += 1
            await outcomes.timed(call, timeout_s)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return outcomes.run("closed", issued, time.perf_counter() - started)


async def noop() -> None:
    return None


def phase_summary(
    run: LoadRun,
    cpu_s: float | None,
    *,
    baseline_cpu_ms: float = 0.0,
    idle_cpu_ms_per_s: float = 0.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A load's figures, JSON-ready. CPU net of a no-op driver's per-request CPU and of the
    process's idle CPU over the run's wall time."""
    summary: dict[str, Any] = {
        "mode": run.mode,
        "issued": run.issued,
        "done": run.done,
        "errors": run.errors,
        "timeouts": run.timeouts,
        "first_error": run.first_error,
        "seconds": run.seconds,
        "rps": run.rps,
        "offered_rps": run.offered_rps,
        "latency_ms": latency_dict(run.latencies_ms),
    }
    if cpu_s is not None and run.done:
        raw = cpu_s * 1000.0 / run.done
        idle = idle_cpu_ms_per_s * run.seconds / run.done
        summary.update(
            cpu_s=cpu_s,
            cpu_ms_per_request=raw,
            cpu_ms_per_request_net=max(0.0, raw - baseline_cpu_ms - idle),
            cpu_utilisation=cpu_s / run.seconds if run.seconds > 0 else 0.0,
        )
    summary.update(extra or {})
    return summary


async def measured(
    load: Awaitable[LoadRun], pids: dict[str, int]
) -> tuple[LoadRun, float, dict[str, float]]:
    """Run a load; this process's CPU seconds and those of ``pids`` over it (and, as
    ``NAME.wait``, how long each one's main thread waited for a CPU while runnable)."""
    before = {name: (process_cpu_s(pid), process_wait_s(pid)) for name, pid in pids.items()}
    cpu = self_cpu_s()
    run = await load
    cpu = self_cpu_s() - cpu
    used: dict[str, float] = {}
    for name, pid in pids.items():
        used[name] = process_cpu_s(pid) - before[name][0]
        used[f"{name}.wait"] = process_wait_s(pid) - before[name][1]
    return run, cpu, used
