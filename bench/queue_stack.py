"""The live side of ``bench burst`` and ``bench backlog``: the stack, its responses, its changelog.

``queue_stack`` starts two light mocks (their own processes, 127.0.0.1) and the
embedded stack (Tansu, one worker process) routing one route over both, and
stops every process on the way out, whatever happened (error, Ctrl-C,
SIGTERM). ``ResponseLog`` follows ``llm.responses`` in the background;
``scan_changelog`` streams the route-state changelog without keeping it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.queue_fates import ChangelogStats
from bench.throughput.procfs import process_cpu_s, process_memory_mb

if TYPE_CHECKING:  # imported where used: `switchyard` imports the benches at every start
    from app.client import TopicFollower
    from app.embedded.stack import EmbeddedStack
    from bench.throughput.mocks import MockServer

ROUTE = "chat"
PROVIDERS = ("mock-a", "mock-b")
Report = dict[str, Any]


def providers_yaml(mocks: list[MockServer], max_concurrency: int) -> str:
    """One route, one deployment per mock, each capped at ``max_concurrency`` calls."""
    import yaml

    from bench.throughput.switchyard import mock_provider

    entries = [mock_provider(p, m, max_concurrency) for p, m in zip(PROVIDERS, mocks, strict=True)]
    config = {"providers": entries, "routes": {ROUTE: {"providers": list(PROVIDERS)}}}
    return str(yaml.safe_dump({**config, "default_route": ROUTE}, sort_keys=False))


@asynccontextmanager
async def queue_stack(
    name: str, latency_ms: int, max_concurrency: int, env: dict[str, str], out: Path
) -> AsyncIterator[EmbeddedStack]:
    """Two light mocks and a one-worker embedded stack; every process stopped on exit.

    The worker's log is copied to ``out/<name>-worker.log`` (it is in a temporary
    directory removed with the stack).
    """
    from app.embedded.stack import EmbeddedStack
    from bench.throughput.mocks import MockServer

    workdir = Path(tempfile.mkdtemp(prefix=f"switchyard-{name}-"))
    mocks = [MockServer("light", latency_ms, workdir) for _ in PROVIDERS]
    stack = EmbeddedStack(
        providers_yaml=providers_yaml(mocks, max_concurrency),
        env={"SWITCHYARD_LOG_LEVEL": "warn", **env},
        workdir=workdir,
    )
    try:
        for mock in mocks:
            mock.start()
        async with stack:
            try:
                yield stack
            finally:
                _keep_worker_log(stack, out / f"{name}-worker.log")
    finally:
        for mock in mocks:
            mock.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _keep_worker_log(stack: EmbeddedStack, target: Path) -> None:
    with suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stack.workers[0].log_path, target)


def run_stopping_on_sigterm(main: Callable[[], Awaitable[Report]]) -> Report:
    """``asyncio.run(main())``, with SIGTERM cancelling it like Ctrl-C does, so that every
    ``finally`` (and with it every child process's stop) runs."""

    async def guarded() -> Report:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await main()

    return asyncio.run(guarded())


def run_and_write(
    main: Callable[[], Awaitable[Report]], render: Callable[[Report], str], path: Path
) -> Report:
    """Run a bench, print its tables, write its report as JSON to ``path``."""
    started = time.monotonic()
    try:
        report = run_stopping_on_sigterm(main)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; every process of the run was stopped", file=sys.stderr)
        raise SystemExit(130) from None
    report["seconds"] = time.monotonic() - started
    print(render(report))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print(f"wrote {path} ({report['seconds']:.0f} s; 2 shared cores: numbers are noisy)")
    return report


def progress(bench: str, message: str) -> None:
    print(f"[{bench}] {message}", file=sys.stderr, flush=True)


def worker_pid(stack: EmbeddedStack) -> int:
    process = stack.workers[0].process
    assert process is not None
    return process.pid


def worker_usage(pid: int, cpu_at_start: float = 0.0) -> dict[str, float | None]:
    """Peak and current RSS (MB) and CPU seconds (since ``cpu_at_start``) of a live process."""
    try:
        cpu: float | None = process_cpu_s(pid) - cpu_at_start
    except OSError:
        cpu = None
    return {
        "peak_rss_mb": process_memory_mb(pid, "VmHWM"),
        "rss_mb": process_memory_mb(pid, "VmRSS"),
        "cpu_s": cpu,
    }


async def publish_one(stack: EmbeddedStack, request_id: str, wait_s: float = 90.0) -> bool:
    """Publish one request and wait for its answer: the worker is up and routing."""
    from app.client import RequestPublisher, all_answered, read_topics

    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        await publisher.publish(request_body(request_id))
        await publisher.flush()
    finally:
        await publisher.stop()
    topic = stack.topics.responses
    done = all_answered([request_id], topic)
    records = await read_topics(stack.broker.bootstrap, [topic], done, wait_s, linger_s=0.0)
    return done(records)


def request_body(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class ResponseLog:
    """Every ``llm.responses`` record from the start of the topic, in the background.

    ``first[id]``: the first response of a request, with ``_ts`` (its broker
    timestamp, epoch s) and ``_received`` (when this reader got it); ``copies``
    counts every response per request (duplicates show as > 1).
    """

    bootstrap: str
    topic: str
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    copies: dict[str, int] = field(default_factory=dict)
    _follower: TopicFollower | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> ResponseLog:
        from app.client import TopicFollower

        self._follower = await TopicFollower(self.bootstrap, [self.topic]).start()
        self._task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._follower is not None
        while True:
            for record in await self._follower.poll(timeout_ms=200):
                value = json.loads(record.value or b"{}")
                request_id = str(value.get("request_id", ""))
                self.copies[request_id] = self.copies.get(request_id, 0) + 1
                if request_id not in self.first:
                    value["_ts"], value["_received"] = record.timestamp / 1000.0, time.time()
                    self.first[request_id] = value

    async def wait_for(self, ids: list[str], timeout_s: float) -> bool:
        """Until every one of ``ids`` is answered (True) or ``timeout_s`` passed (False)."""
        until = time.monotonic() + timeout_s
        while time.monotonic() < until:
            if self._task is not None and self._task.done():
                self._task.result()  # the reader failed: say why
            if all(i in self.first for i in ids):
                return True
            await asyncio.sleep(0.25)
        return all(i in self.first for i in ids)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._follower is not None:
            await self._follower.stop()


async def scan_changelog(
    stack: EmbeddedStack, *, idle_s: float = 3.0, timeout_s: float = 240.0
) -> ChangelogStats:
    """Stream the route-state changelog (``<app id>-route-state-changelog``) once, from the
    start, until nothing new came for ``idle_s``: record count and sizes, and each
    deployment's breaker states, without keeping the records."""
    from app.client import TopicFollower
    from bench.crash import changelog_topic

    stats = ChangelogStats()
    follower = await TopicFollower(
        stack.broker.bootstrap, [changelog_topic(stack)], max_partition_fetch_bytes=64 << 20
    ).start()
    loop = asyncio.get_running_loop()
    deadline, quiet_since = loop.time() + timeout_s, loop.time()
    try:
        while loop.time() < deadline and loop.time() - quiet_since < idle_s:
            batch = await follower.poll(timeout_ms=200)
            for record in batch:
                stats.add(record.key, record.value, record.timestamp / 1000.0)
            if batch:
                quiet_since = loop.time()
    finally:
        await follower.stop()
    stats.complete = loop.time() - quiet_since >= idle_s
    return stats


async def bandit_stats(stack: EmbeddedStack) -> dict[str, Any] | None:
    """The worker's ``GET /admin/bandit/stats`` (None when it does not answer)."""
    import httpx

    worker = stack.workers[0]
    url = f"{worker.web_url}/admin/bandit/stats"
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(url, headers=worker.admin_headers, timeout=5)
            return dict(response.json()) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
