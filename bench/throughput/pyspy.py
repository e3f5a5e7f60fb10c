"""The worker's py-spy profile under saturation, and its summary by category, task and stack."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.throughput.loads import closed_loop

if TYPE_CHECKING:
    from bench.throughput.driver import StackDriver
    from bench.throughput.mocks import MockServer


#: Where a py-spy sample's innermost frame is, by file path; the first match wins.
PROFILE_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("routing fold (app/routing)", ("app/routing/",)),
    ("request understanding (app/understanding)", ("app/understanding/",)),
    ("table store (faust/stores, rocksdb)", ("faust/stores/", "rocksdict")),
    ("pydantic (validate, dump)", ("pydantic",)),
    ("json (stdlib)", ("json/",)),
    ("aiokafka (client, protocol, batches)", ("aiokafka/", "kafka/")),
    ("faust + mode (streams, agents, topics)", ("faust/", "mode/", "venusian", "croniter")),
    ("HTTP client (httpx, aiohttp)", ("httpx", "aiohttp", "httpcore", "yarl", "multidict")),
    ("metrics (prometheus_client)", ("prometheus_client",)),
    ("logging", ("logging/",)),
    ("asyncio loop, socket writes, epoll", ("asyncio/", "selectors.py")),
    ("switchyard agents, events, ingest", ("/agents/", "/tables/", "/app/")),
    ("uuid, datetime, hashlib", ("uuid.py", "datetime.py", "hashlib")),
)

#: Which task the event loop was running: the first of these found in the stack.
PROFILE_TASKS: tuple[tuple[str, str], ...] = (
    ("router agent", "agents/router.py"),
    ("executor agent", "agents/executor.py"),
    ("ingest agent", "agents/ingest.py"),
    ("aiokafka producer (sender)", "aiokafka/producer/"),
    ("aiokafka consumer (fetcher)", "aiokafka/consumer/"),
    ("aiokafka connections", "aiokafka/"),
    ("faust/mode services (fetcher, conductor, producer buffer, tables)", "faust/"),
    ("faust/mode services (fetcher, conductor, producer buffer, tables)", "mode/"),
    ("HTTP client I/O (aiohttp)", "aiohttp/"),
    ("epoll wait", "EpollSelector.select"),
)


def _task_frames(frames: list[str]) -> list[str]:
    """The frames of the task the event loop was running: those after the last
    ``Handle._run``, or after ``_run_once`` when py-spy lost the handle frame."""
    for marker in ("Handle._run (", "BaseEventLoop._run_once ("):
        found = [i for i, frame in enumerate(frames) if frame.startswith(marker)]
        if found:
            return frames[found[-1] + 1 :] or frames[found[-1] :]
    return frames


#: Share of samples whose stack holds one of these (inclusive time).
PROFILE_INCLUSIVE: tuple[tuple[str, str], ...] = (
    ("router: parse the routing-log record", "validate_json (pydantic/type_adapter.py"),
    ("router: load the route row (JSON -> RouteState)", "load_route_state (tables/routing.py"),
    ("router: fold.handle (the decision, state update)", "handle (app/routing/fold.py"),
    ("router: save the route row (RouteState -> JSON, store)", "save_route_state (tables/routing"),
    ("router: send decision, dispatch, response", "publish (app/router/outbox.py"),
    ("executor: provider call (httpx over aiohttp)", "call_provider (app/execution/call.py"),
    ("executor: send outcome and feedback", "_publish (agents/executor.py"),
    ("ingest: accept (validate, features, domain)", "accept (app/ingest.py"),
    ("metrics (prometheus_client)", "prometheus_client/"),
    ("pydantic anywhere", "pydantic/"),
    ("aiokafka anywhere", "aiokafka/"),
)


def _frame_file(frame: str) -> str:
    """``function (path/file.py:12)`` -> ``path/file.py``."""
    inside = frame[frame.rfind("(") + 1 :].rstrip(")")
    return inside.rsplit(":", 1)[0]


def parse_collapsed(text: str) -> Iterator[tuple[list[str], int]]:
    """Stacks of a collapsed profile (py-spy ``--format raw``): ``a;b;c COUNT`` per line."""
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def summarize_collapsed(text: str) -> dict[str, Any]:
    """Self time by category of the innermost frame, inclusive shares, top leaf functions."""
    total = 0
    by_category: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    tasks: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for frames, count in parse_collapsed(text):
        total += count
        leaf = frames[-1]
        leaves[leaf] += count
        path = _frame_file(leaf)
        category = next(
            (name for name, needles in PROFILE_CATEGORIES if any(n in path for n in needles)),
            "other (stdlib, C)",
        )
        by_category[category] += count
        joined = ";".join(frames)
        task = ";".join(_task_frames(frames))
        tasks[next((n for n, needle in PROFILE_TASKS if needle in task), "event loop itself")] += (
            count
        )
        for name, needle in PROFILE_INCLUSIVE:
            if needle in joined:
                inclusive[name] += count
    share = (lambda n: n / total) if total else (lambda n: 0.0)
    return {
        "samples": total,
        "self_by_category": {k: share(v) for k, v in by_category.most_common()},
        "by_task": {k: share(v) for k, v in tasks.most_common()},
        "inclusive": {name: share(inclusive[name]) for name, _ in PROFILE_INCLUSIVE},
        "top_leaves": {k: share(v) for k, v in leaves.most_common(15)},
    }


async def profile_worker(
    driver: StackDriver,
    pid: int,
    mocks: Sequence[MockServer],
    args: argparse.Namespace,
    measured: dict[str, Any],
) -> dict[str, Any]:
    """py-spy the worker while it is saturated (a closed loop on the lightest mock)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    mock = next((m for m in mocks if m.kind == "light"), mocks[0])
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "throughput-worker-pyspy.txt"
    svg = args.out / "throughput-worker.svg"
    seconds = str(int(args.profile_seconds))
    common = ["record", "--nonblocking", "-d", seconds, "-p", str(pid)]
    spies = [
        await asyncio.create_subprocess_exec(
            spy, *common, "-f", fmt, "-o", str(path),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        for fmt, path in (("raw", raw), ("flamegraph", svg))
    ]  # fmt: skip
    rps = measured[mock.kind]["saturation"]["rps"] or 100.0
    run = await closed_loop(
        driver.call(f"chat-{mock.kind}"),
        concurrency=args.concurrency,
        count=int(rps * (args.profile_seconds + 5)) + 100,
        max_seconds=args.profile_seconds + 2.0,
        timeout_s=30.0,
    )
    errors = []
    for process in spies:
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), args.profile_seconds + 30)
        except TimeoutError:
            process.kill()
            errors.append("py-spy did not stop")
            continue
        if process.returncode != 0:
            errors.append(stderr.decode(errors="replace").strip()[-300:])
    if not raw.exists():
        return {"skipped": "; ".join(errors) or "py-spy wrote nothing"}
    summary = summarize_collapsed(raw.read_text(encoding="utf-8"))
    summary.update(
        mock=mock.kind,
        rps_while_profiled=run.rps,
        raw=str(raw),
        svg=str(svg) if svg.exists() else None,
        errors=errors,
    )
    return summary
