"""The live side of ``bench scaleout``: mocks, the stack, publishing, process usage.

``rig`` starts the light mocks (one process each, 127.0.0.1) and stops them on
the way out whatever happened; ``scaleout_stack`` starts the embedded broker with
the routes spread over its partitions and the workers, keeps the workers' logs
and stops every process on exit.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.pacing import paced
from bench.scaleout_metrics import request_body
from bench.throughput.procfs import process_cpu_s, process_memory_mb

if TYPE_CHECKING:  # imported where used: `switchyard` imports the benches at every start
    from app.embedded.brokers import BrokerKind
    from app.embedded.stack import EmbeddedStack
    from bench.throughput.mocks import MockServer

#: Every deployment is on every route; the last one is taken down in the outage.
PROVIDERS = ("mock-a", "mock-b", "mock-c")


def providers_yaml(mocks: dict[str, MockServer], routes: Sequence[str]) -> str:
    import yaml

    from bench.throughput.switchyard import mock_provider

    entries = [mock_provider(pid, mock) for pid, mock in mocks.items()]
    config = {
        "providers": entries,
        "routes": {route: {"providers": list(mocks)} for route in routes},
        "default_route": routes[0],
    }
    return str(yaml.safe_dump(config, sort_keys=False))


@asynccontextmanager
async def rig(latency_ms: int, workdir: Path) -> AsyncIterator[dict[str, MockServer]]:
    """One light mock per provider, each in its own process; all stopped on exit."""
    from bench.throughput.mocks import MockServer

    mocks: dict[str, MockServer] = {}
    try:
        for pid in PROVIDERS:
            mocks[pid] = MockServer("light", latency_ms, workdir)
            mocks[pid].log_path = workdir / f"{pid}.log"
            await asyncio.to_thread(mocks[pid].start)
        yield mocks
    finally:
        for mock in mocks.values():
            mock.stop()


@asynccontextmanager
async def scaleout_stack(
    name: str,
    mocks: dict[str, MockServer],
    routes: Sequence[str],
    *,
    partitions: int,
    env: dict[str, str],
    out: Path,
    broker: BrokerKind = "tansu",
) -> AsyncIterator[EmbeddedStack]:
    """The embedded broker and one worker routing ``routes`` over ``mocks``.

    Workers' logs are copied to ``out/scaleout-<name>-worker-<i>.log`` on exit.
    """
    from app.embedded.stack import EmbeddedStack

    workdir = Path(tempfile.mkdtemp(prefix=f"switchyard-scaleout-{name}-"))
    stack = EmbeddedStack(
        providers_yaml=providers_yaml(mocks, routes),
        partitions=partitions,
        env={"SWITCHYARD_LOG_LEVEL": "warn", **env},
        workdir=workdir,
        broker_kind=broker,
    )
    try:
        async with stack:
            try:
                yield stack
            finally:
                _keep_logs(stack, out, name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _keep_logs(stack: EmbeddedStack, out: Path, name: str) -> None:
    with suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
        for index, worker in enumerate(stack.workers):
            shutil.copyfile(worker.log_path, out / f"scaleout-{name}-worker-{index}.log")


def stalls(stack: EmbeddedStack) -> dict[str, dict[str, Any]]:
    """Rebalance stalls in each worker's log so far."""
    from bench.scaleout_metrics import rebalance_stalls

    found = {}
    for index, worker in enumerate(stack.workers):
        with suppress(OSError):
            text = worker.log_path.read_text(encoding="utf-8", errors="replace")
            found[f"worker-{index}"] = rebalance_stalls(text)
    return found


def live_pids(stack: EmbeddedStack, mocks: dict[str, MockServer]) -> dict[str, list[int]]:
    """Process ids by role: each live worker, the broker, the mocks (as one role)."""
    pids: dict[str, list[int]] = {}
    for index, worker in enumerate(stack.workers):
        if worker.running and worker.process is not None:
            pids[f"worker-{index}"] = [worker.process.pid]
    broker = getattr(stack.broker, "_process", None)  # no public pid
    if broker is not None:
        pids["broker"] = [broker.pid]
    pids["mocks"] = [m.pid for m in mocks.values() if m.process is not None]
    return pids


def cpu_now(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far of each role (the sum of its processes); the driver is this one."""
    from bench.throughput.procfs import self_cpu_s

    used = {"driver": self_cpu_s()}
    for role, numbers in pids.items():
        total = 0.0
        for pid in numbers:
            with suppress(OSError):
                total += process_cpu_s(pid)
        used[role] = total
    return used


def peak_rss(pids: dict[str, list[int]]) -> dict[str, float | None]:
    """Peak RSS (VmHWM, MB) of each worker."""
    return {
        role: process_memory_mb(numbers[0], "VmHWM")
        for role, numbers in pids.items()
        if role.startswith("worker")
    }


async def publish(
    stack: EmbeddedStack, items: Sequence[tuple[str, str]], rate: float | None = None
) -> dict[str, float]:
    """Publish (request id, route) pairs, at ``rate`` per second or back to back (None);
    returns when each was handed to the producer (epoch s)."""
    from app.client import RequestPublisher

    sent: dict[str, float] = {}
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        async for _, (request_id, route) in paced(items, rate):
            sent[request_id] = time.time()
            await publisher.publish(request_body(request_id, route))
        await publisher.flush()
    finally:
        await publisher.stop()
    return sent


async def warm_up(stack: EmbeddedStack, routes: Sequence[str], tag: str, wait_s: float) -> bool:
    """One request per route, answered: every route's partition has a working owner."""
    from app.client import all_answered, read_topics

    ids = [f"warm-{tag}-{route}" for route in routes]
    await publish(stack, list(zip(ids, routes, strict=True)))
    topic = stack.topics.responses
    done = all_answered(ids, topic)
    return done(await read_topics(stack.broker.bootstrap, [topic], done, wait_s, linger_s=0.0))
