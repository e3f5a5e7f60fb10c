"""``switchyard bench throughput``: one worker's throughput and overhead, side by side with LiteLLM.

One run, every number measured on this machine in this run:

1. **Mocks.** OpenAI-compatible servers with a fixed latency (``--latency-ms``,
   default 20), each in its own process on 127.0.0.1: ``llmock`` (FastAPI on
   uvicorn, what the issue asks for) and ``light``, a tiny aiohttp server (this
   module's ``serve-light``) for when llmock itself is the bottleneck. Each
   mock's ceiling is measured first: direct calls through the pooled client the
   worker uses (``app.execution.http.make_client()``), ``--concurrency`` in flight.
2. **Direct.** The same client, in its own process, at a fixed arrival rate
   (``--rate``, default 100 requests/s; open loop: request *i* leaves at
   *i / rate* whatever came back) and at a light one (``--low-rate``, 20/s):
   latency p50/p95/p99, the baseline every "added" figure is taken against.
3. **Switchyard.** The embedded stack (Tansu broker, one worker process) routing
   a route of ``--deployments`` deployments on each mock. The driver publishes
   to ``llm.requests`` and waits for the request's record on ``llm.responses``.
   At both fixed rates: end-to-end latency, added latency (end-to-end minus the
   provider call time of the same request, from its ``llm.outcomes`` record, and
   end-to-end minus the direct percentile), and the time per stage from the
   records' timestamps (decision, outcome, response). At saturation (closed
   loop, ``--concurrency`` requests outstanding): requests/s of the one worker.
   Worker CPU ms per request from ``/proc/<pid>/stat`` (utime + stime), also net
   of the worker's idle CPU (its consumers poll every 10 ms); the time it was
   runnable but had no core (``/proc/<pid>/schedstat``); the broker's CPU too;
   peak RSS from ``VmHWM``.
4. **LiteLLM.** ``litellm.Router`` over the same deployments (created inside the
   running event loop, ``LITELLM_LOCAL_MODEL_COST_MAP=True``), same loads, in
   its own process: CPU ms per request of that process (``getrusage``) minus an
   empty driver doing the same loop with a no-op call; peak RSS.
5. **Decision function.** ``app.routing.fold.handle`` on a ``RequestAccepted``
   against a 16-provider policy whose arms all have pulls: p50/p99 µs for
   ucb1, thompson (includes its 200-draw propensity estimate) and composite,
   plus the router's whole per-event codec path (row JSON in, fold, row JSON
   out, decision and dispatch JSON). When a p99 misses 50 µs, the top cProfile
   entries are printed.
6. ``--profile-seconds N`` (default 15; 0: off) records the worker with
   ``py-spy`` under saturation after the measured phases and prints where its
   samples are (``results/throughput-worker.svg`` and the raw stacks).

Every load stops by itself after its count or its time cap; the whole run
takes about five minutes. Output: the markdown tables, and
``results/throughput.json``. The machine's load average is printed with them:
the driver, mocks, broker and worker share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `switchyard` imports this module at every start
    from multiprocessing.connection import Connection

    from app.client import RequestPublisher, TopicFollower
    from app.embedded.stack import EmbeddedStack
    from app.events import RequestAccepted
    from app.routing.policy import Policy
    from app.routing.state import RouteState

#: The issue's targets for one worker process.
TARGET_RPS = 1000.0
TARGET_CPU_MS = 1.0
TARGET_ADDED_P50_MS = 5.0
TARGET_ADDED_P99_MS = 20.0
TARGET_RSS_MB = 150.0
TARGET_DECISION_P99_US = 50.0

PROMPT = "Summarise the attached meeting notes in three bullet points."
MAX_TOKENS = 250
API_KEY = "sk-bench-not-a-secret"
MOCK_MODEL = "bench-model"

Call = Callable[[], Awaitable[None]]

MOCK_KINDS = {"llmock": "llmock (FastAPI/uvicorn)", "light": "light (aiohttp)"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mocks", default="llmock,light", help="llmock, light or both")
    parser.add_argument("--latency-ms", type=int, default=20, help="fixed latency of the mocks")
    parser.add_argument("--rate", type=float, default=100.0, help="fixed arrival rate, req/s")
    parser.add_argument("--requests", type=int, default=1000, help="requests at the fixed rate")
    parser.add_argument(
        "--low-rate", type=float, default=20.0, help="a light fixed rate: latency without queueing"
    )
    parser.add_argument("--low-requests", type=int, default=100)
    parser.add_argument(
        "--concurrency", type=int, default=64, help="requests outstanding at saturation"
    )
    parser.add_argument("--saturation-requests", type=int, default=3000)
    parser.add_argument(
        "--saturation-seconds", type=float, default=10.0, help="time cap of a saturation run"
    )
    parser.add_argument("--deployments", type=int, default=4, help="deployments per mock")
    parser.add_argument("--strategy", default="ucb1", help="BANDIT_STRATEGY of the worker")
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument(
        "--decision-seconds", type=float, default=10.0, help="time cap per strategy"
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=15.0, help="py-spy the worker (0: off)"
    )
    parser.add_argument(
        "--skip", default="", help="comma list of parts to skip: litellm, switchyard, decisions"
    )
    parser.add_argument("--out", type=Path, default=Path("results"))


# --------------------------------------------------------------------------- pure helpers


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Latency:
    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency | None:
        """The summary of ``values``, or None when there are none."""
        if not values:
            return None
        return cls(
            n=len(values),
            p50=percentile(values, 0.50),
            p95=percentile(values, 0.95),
            p99=percentile(values, 0.99),
            mean=sum(values) / len(values),
            max=max(values),
        )


def latency_dict(values: Sequence[float]) -> dict[str, float] | None:
    """``Latency.of(values)`` as a JSON-ready dict (None for no values)."""
    summary = Latency.of(values)
    return None if summary is None else asdict(summary)


def parse_proc_stat_cpu_s(text: str, ticks_per_s: int) -> float:
    """utime + stime, in seconds, from the text of ``/proc/<pid>/stat``.

    The command name (field 2) is in parentheses and may hold spaces or
    parentheses itself, so fields are counted after the last ``)``: there the
    state is field 3, utime field 14 and stime field 15.
    """
    after = text[text.rindex(")") + 1 :].split()
    utime, stime = int(after[11]), int(after[12])
    return (utime + stime) / ticks_per_s


def parse_proc_status_kb(text: str, name: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``), or None when absent."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            number = value.split()
            return int(number[0]) if number else None
    return None


def parse_schedstat_wait_s(text: str) -> float:
    """Seconds spent runnable but waiting for a CPU, from ``/proc/<pid>/schedstat``
    (``run_ns wait_ns timeslices``; the process's main thread)."""
    return int(text.split()[1]) / 1e9


def process_wait_s(pid: int) -> float:
    try:
        return parse_schedstat_wait_s(Path(f"/proc/{pid}/schedstat").read_text(encoding="utf-8"))
    except (OSError, IndexError, ValueError):
        return 0.0


def process_cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return parse_proc_stat_cpu_s(text, os.sysconf("SC_CLK_TCK"))


def process_memory_mb(pid: int, name: str = "VmHWM") -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    kb = parse_proc_status_kb(text, name)
    return None if kb is None else kb / 1024.0


def self_cpu_s() -> float:
    """CPU seconds of this process, every thread (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "?"


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
    ("router: send decision, dispatch, response", "_publish (agents/router.py"),
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


# --------------------------------------------------------------------------- loads


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


async def _noop() -> None:
    return None


# --------------------------------------------------------------------------- mocks


COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MOCK_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the light mock."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
).encode()


def serve_light(port: int, latency_ms: float) -> None:
    """The light mock: every POST to ``/v1/chat/completions`` answers one completion after
    ``latency_ms``. Runs until killed."""
    from aiohttp import web

    delay = latency_ms / 1000.0

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        if delay > 0:
            await asyncio.sleep(delay)
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=2048)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MockServer:
    """One mock in its own process on 127.0.0.1."""

    def __init__(self, kind: str, latency_ms: int, log_dir: Path) -> None:
        if kind not in MOCK_KINDS:
            raise ValueError(f"unknown mock {kind!r}; expected one of {', '.join(MOCK_KINDS)}")
        self.kind = kind
        self.latency_ms = latency_ms
        self.port = _free_port()
        self.log_path = log_dir / f"throughput-mock-{kind}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        if self.kind == "llmock":
            return [
                sys.executable,
                "-m",
                "uvicorn",
                "llmock.main:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
            ]
        return [
            sys.executable,
            "-m",
            "bench.throughput",
            "serve-light",
            str(self.port),
            str(self.latency_ms),
        ]

    def start(self, timeout_s: float = 20.0) -> MockServer:
        env = {**os.environ, "LLMOCK_LATENCY_MS": str(self.latency_ms)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(), env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mock {self.kind} exited; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"mock {self.kind} did not listen within {timeout_s:g}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --------------------------------------------------------------------------- client processes


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


async def _measured(
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
    noop_fixed, noop_fixed_cpu, _ = await _measured(
        fixed_rate(
            _noop,
            rate=plan.rate,
            count=min(plan.requests, 300),
            max_seconds=5.0,
            timeout_s=plan.timeout_s,
        ),
        {},
    )
    noop_closed, noop_closed_cpu, _ = await _measured(
        closed_loop(
            _noop,
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
            low = await fixed_rate(
                call,
                rate=plan.low_rate,
                count=plan.low_requests,
                max_seconds=plan.low_requests / plan.low_rate + 5.0,
                timeout_s=plan.timeout_s,
            )
            fixed, fixed_cpu, fixed_mock = await _measured(
                fixed_rate(
                    call,
                    rate=plan.rate,
                    count=plan.requests,
                    max_seconds=plan.requests / plan.rate + 5.0,
                    timeout_s=plan.timeout_s,
                ),
                mock,
            )
            saturated, saturated_cpu, saturated_mock = await _measured(
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


# --------------------------------------------------------------------------- Switchyard


def providers_yaml(mocks: Sequence[MockServer], deployments: int) -> str:
    """One route per mock (``chat-<kind>``), ``deployments`` providers on it, all at that mock."""
    import yaml

    providers = []
    routes: dict[str, dict[str, list[str]]] = {}
    for mock in mocks:
        ids = [f"mock{i}-{mock.kind}" for i in range(deployments)]
        routes[f"chat-{mock.kind}"] = {"providers": ids}
        for pid in ids:
            providers.append(
                {
                    "id": pid,
                    "base_url": mock.base_url,
                    "api_key": API_KEY,
                    "cost_per_mtok_input": 1.0,
                    "cost_per_mtok_output": 3.0,
                    # Far above any in-flight count here: the bench measures speed, not caps.
                    "max_concurrency": 100_000,
                    "p95_latency_baseline_ms": 2.0 * mock.latency_ms,
                    "timeout_ms": 10_000,
                    "models": [{"name": MOCK_MODEL}],
                }
            )
    config = {"providers": providers, "routes": routes, "default_route": f"chat-{mocks[0].kind}"}
    return str(yaml.safe_dump(config, sort_keys=False))


@dataclass
class Trace:
    """One request through the stack: wall-clock times (epoch s) and record timestamps."""

    published: float = 0.0
    #: ``CreateTime`` of its first decision, outcome(s) and response records (epoch s).
    decision_at: float | None = None
    outcome_at: float | None = None
    response_at: float | None = None
    received: float | None = None
    provider_ms: float = 0.0
    outcomes: int = 0
    e2e_ms: float | None = None


#: Stages of a one-attempt request, as differences of the record timestamps.
STAGES = (
    "publish → decision (requests hop, ingest, routing hop, router)",
    "decision → call start (dispatch hop, executor)",
    "provider call (the mock, client side)",
    "outcome → response (routing hop, router)",
    "response → client (responses hop)",
)


def stage_breakdown(traces: Sequence[Trace]) -> dict[str, list[float]]:
    """Milliseconds per stage for the answered one-attempt requests of ``traces``.

    Record timestamps are the producer's ``CreateTime`` (ms resolution), on the same
    machine as the driver's clock, so the stages add up to the end-to-end time.
    """
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    for t in traces:
        if t.outcomes != 1 or None in (t.decision_at, t.outcome_at, t.response_at, t.received):
            continue
        assert t.decision_at is not None and t.outcome_at is not None
        assert t.response_at is not None and t.received is not None
        values = (
            t.decision_at - t.published,
            t.outcome_at - t.decision_at - t.provider_ms / 1000.0,
            t.provider_ms / 1000.0,
            t.response_at - t.outcome_at,
            t.received - t.response_at,
        )
        for name, value in zip(STAGES, values, strict=True):
            stages[name].append(value * 1000.0)
    return stages


class StackDriver:
    """Publishes requests and resolves each with its ``llm.responses`` record; follows the
    decisions and outcomes too, to split each request's time into stages."""

    def __init__(self, stack: EmbeddedStack) -> None:
        self.stack = stack
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.traces: dict[str, Trace] = {}
        self._publisher: RequestPublisher | None = None
        self._follower: TopicFollower | None = None
        self._reader: asyncio.Task[None] | None = None
        self._count = 0

    async def start(self) -> StackDriver:
        from app.client import RequestPublisher, TopicFollower

        topics = self.stack.topics
        bootstrap = self.stack.broker.bootstrap
        self._publisher = await RequestPublisher(bootstrap, topics.requests).start()
        self._follower = await TopicFollower(
            bootstrap, [topics.responses, topics.outcomes, topics.decisions]
        ).start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._publisher is not None:
            await self._publisher.stop()
        if self._follower is not None:
            await self._follower.stop()

    async def _read(self) -> None:
        assert self._follower is not None
        topics = self.stack.topics
        while True:
            records = await self._follower.poll(timeout_ms=100)
            now = time.time()
            for record in records:
                value = json.loads(record.value or b"{}")
                trace = self.traces.get(value.get("request_id", ""))
                if trace is None:
                    continue
                stamp = record.timestamp / 1000.0
                if record.topic == topics.responses:
                    if trace.response_at is None:
                        trace.response_at, trace.received = stamp, now
                    future = self.pending.get(value["request_id"])
                    if future is not None and not future.done():
                        future.set_result(value)
                elif record.topic == topics.outcomes:
                    trace.outcomes += 1
                    trace.outcome_at = trace.outcome_at or stamp
                    trace.provider_ms += float(value.get("latency_ms", 0.0))
                elif value.get("attempt") == 1:
                    trace.decision_at = stamp

    def call(self, route: str) -> Call:
        async def call() -> None:
            assert self._publisher is not None
            self._count += 1
            request_id = f"bench-{self._count:07d}"
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self.pending[request_id] = future
            trace = self.traces[request_id] = Trace(published=time.time())
            started = time.perf_counter()
            try:
                await self._publisher.publish(
                    {
                        "request_id": request_id,
                        "model": route,
                        "messages": [{"role": "user", "content": PROMPT}],
                        "max_tokens": MAX_TOKENS,
                    }
                )
                response = await future
            finally:
                self.pending.pop(request_id, None)
            trace.e2e_ms = (time.perf_counter() - started) * 1000.0
            if response.get("status") != "ok":
                raise RuntimeError(f"error response: {json.dumps(response.get('error'))[:160]}")

        return call

    def since(self, mark: int) -> list[Trace]:
        """The traces of the requests issued after ``issued`` was ``mark``."""
        return [self.traces[f"bench-{n:07d}"] for n in range(mark + 1, self._count + 1)]

    def added_ms(self, mark: int) -> list[float]:
        """End-to-end minus the request's own provider call time (every attempt)."""
        return [
            t.e2e_ms - t.provider_ms
            for t in self.since(mark)
            if t.e2e_ms is not None and t.outcomes
        ]

    def stages(self, mark: int) -> dict[str, dict[str, float] | None]:
        return {k: latency_dict(v) for k, v in stage_breakdown(self.since(mark)).items()}

    @property
    def issued(self) -> int:
        return self._count


async def run_switchyard(mocks: Sequence[MockServer], args: argparse.Namespace) -> dict[str, Any]:
    from app.embedded.stack import EmbeddedStack

    stack = EmbeddedStack(
        providers_yaml=providers_yaml(mocks, args.deployments),
        env={"BANDIT_STRATEGY": args.strategy, "SWITCHYARD_LOG_LEVEL": "warn"},
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
                low = await fixed_rate(
                    call,
                    rate=args.low_rate,
                    count=args.low_requests,
                    max_seconds=args.low_requests / args.low_rate + 5.0,
                    timeout_s=30.0,
                )
                await asyncio.sleep(0.5)
                low_added, low_stages = driver.added_ms(mark), driver.stages(mark)
                mark = driver.issued
                fixed, driver_cpu, cpus = await _measured(
                    fixed_rate(
                        call,
                        rate=args.rate,
                        count=args.requests,
                        max_seconds=args.requests / args.rate + 5.0,
                        timeout_s=30.0,
                    ),
                    pids_here,
                )
                await asyncio.sleep(0.5)  # outcomes may trail their responses
                fixed_added, fixed_stages = driver.added_ms(mark), driver.stages(mark)
                mark = driver.issued
                saturated, sat_driver_cpu, sat_cpus = await _measured(
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


# --------------------------------------------------------------------------- decision function


def bench_policy(strategy: str, providers: int = 16) -> Policy:
    from app.config import parse_config
    from app.routing.policy import Policy
    from app.settings import RoutingParams

    ids = [f"prov{i:02d}-bench" for i in range(providers)]
    config = {
        "providers": [
            {
                "id": pid,
                "base_url": f"https://{pid}.example.test/v1",
                "cost_per_mtok_input": 0.2 + 0.35 * i,
                "cost_per_mtok_output": 0.6 + 1.05 * i,
                "p95_latency_baseline_ms": 800.0 + 90.0 * i,
                "models": [{"name": "m1"}],
            }
            for i, pid in enumerate(ids)
        ],
        "routes": {"chat": {"providers": ids}},
        "default_route": "chat",
    }
    params = RoutingParams(BANDIT_STRATEGY=strategy)  # type: ignore[call-arg]
    return Policy(parse_config(config, env={}), params)


T0 = 1_700_000_000.0


def bench_state(policy: Policy, open_attempts: int) -> RouteState:
    """A route that has run a while: every arm pulled, some in flight, breakers closed."""
    from app.routing.state import ArmState, OpenAttempt, RouteState

    arms = {}
    deployments = [arm.deployment for arm in policy.arms("chat")]
    for i, deployment in enumerate(deployments):
        pulls = 150 + 37 * i
        successes = round(pulls * (0.80 + 0.012 * i))
        arms[deployment] = ArmState(
            pulls=pulls,
            total_reward=float(successes),
            alpha=1.0 + successes,
            beta=1.0 + pulls - successes,
            avg_latency_s=0.4 + 0.05 * i,
            latency_samples=pulls,
            ewma_failure=0.05 + 0.01 * i,
            ewma_latency_ms=400.0 + 50.0 * i,
            observations=pulls,
        )
    attempts = {}
    for n in range(open_attempts):
        deployment = deployments[n % len(deployments)]
        attempts[f"open-{n:05d}#1"] = OpenAttempt(
            deployment=deployment, decided_at=T0 - 1.0, deadline=T0 + 119.0
        )
        arms[deployment] = arms[deployment].model_copy(
            update={"in_flight": arms[deployment].in_flight + 1}
        )
    return RouteState(
        clock=T0,
        position=10_000,
        arms=arms,
        open_attempts=attempts,
        accepted_through={f"llm.requests:{p}": 2_500 for p in range(4)},
    )


def bench_requests(policy: Policy, count: int) -> list[RequestAccepted]:
    from datetime import UTC, datetime

    from app.events import LogPosition, RequestAccepted
    from app.ingest import accept

    prompts = (
        PROMPT,
        "Write a Python function that checks whether a string is a palindrome.",
        "Traduis en anglais : le routeur choisit le meilleur fournisseur.",
        "Explain step by step why the sky is blue.",
    )
    events = []
    for n in range(count):
        raw = json.dumps(
            {
                "request_id": f"decide-{n:06d}",
                "model": "chat",
                "messages": [{"role": "user", "content": prompts[n % len(prompts)]}],
                "max_tokens": MAX_TOKENS,
            }
        ).encode()
        when = datetime.fromtimestamp(T0 + n * 0.001, tz=UTC)
        position = LogPosition(topic="llm.requests", partition=n % 4, offset=3_000 + n)
        event = accept(
            raw,
            position,
            when,
            policy.config,
            max_request_bytes=1_000_000,
            deadletter_max_bytes=4096,
        )
        assert isinstance(event, RequestAccepted), event
        events.append(event)
    return events


def _time_decisions(work: Callable[[int], object], count: int, max_seconds: float) -> list[float]:
    import gc

    gc.collect()
    timings = []
    deadline = time.perf_counter() + max_seconds
    for n in range(count):
        started = time.perf_counter_ns()
        work(n)
        timings.append((time.perf_counter_ns() - started) / 1000.0)
        if time.perf_counter() > deadline:
            break
    return timings


def _top_costs(work: Callable[[int], object], count: int) -> list[dict[str, Any]]:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for n in range(count):
        work(n)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{name} ({Path(filename).name}:{line})",
                "calls_per_decision": calls / count,
                "self_us_per_decision": tottime * 1e6 / count,
                "cum_us_per_decision": cumtime * 1e6 / count,
            }
        )
    rows.sort(key=lambda row: row["self_us_per_decision"], reverse=True)
    return rows[:12]


def run_decisions(args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 of ``handle`` per strategy, and the router's whole per-event codec path."""
    from app.routing.fold import handle

    results: dict[str, Any] = {}
    for strategy in ("ucb1", "thompson", "composite"):
        policy = bench_policy(strategy)
        state = bench_state(policy, open_attempts=0)
        events = bench_requests(policy, min(args.decisions, 20_000))

        def decide(
            n: int, state: RouteState = state, events: list[Any] = events, policy: Policy = policy
        ) -> object:
            step = handle(state, events[n % len(events)], state.position + 1 + n, policy)
            return step

        check = handle(state, events[0], state.position + 1, policy)
        assert check.dispatches, "the bench decision dispatched nothing"
        candidates = len(check.dispatches[0].decision.candidates)
        timings = _time_decisions(decide, args.decisions, args.decision_seconds)
        entry: dict[str, Any] = {
            "candidates": candidates,
            "rule": check.dispatches[0].decision.selection_rule,
            "latency_us": latency_dict(timings),
        }
        if percentile(timings, 0.99) > TARGET_DECISION_P99_US:
            # cProfile triples the cost: profile about two seconds' worth of decisions.
            mean_s = sum(timings) / len(timings) / 1e6
            entry["top_costs"] = _top_costs(decide, max(20, min(1000, int(2.0 / mean_s))))
        results[strategy] = entry
    results["router_event_ucb1"] = _codec_path(args)
    return results


def _codec_path(args: argparse.Namespace) -> dict[str, Any]:
    """What the router agent does per request besides Faust: parse the routing-log record,
    load the row from its JSON, fold, dump the row, dump the decision and the dispatch."""
    from pydantic import TypeAdapter

    from app.events import RoutingLogEvent
    from app.routing.fold import handle
    from app.routing.state import RouteState

    adapter: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)
    policy = bench_policy("ucb1")
    out: dict[str, Any] = {}
    for open_attempts in (0, args.concurrency):
        state = bench_state(policy, open_attempts)
        row = json.dumps(state.model_dump(mode="json")).encode()
        events = [e.model_dump_json().encode() for e in bench_requests(policy, 2000)]

        def event_path(
            n: int, row: bytes = row, events: list[bytes] = events, base: int = state.position
        ) -> object:
            parsed = adapter.validate_json(events[n % len(events)])
            loaded = RouteState.model_validate(json.loads(row))
            step = handle(loaded, parsed, base + 1 + n, policy)
            written = json.dumps(step.state.model_dump(mode="json"))
            sent = [(d.decision.model_dump_json(), d.model_dump_json()) for d in step.dispatches]
            return written, sent

        timings = _time_decisions(event_path, min(args.decisions, 5000), args.decision_seconds / 2)
        out[f"open_attempts_{open_attempts}"] = {
            "row_bytes": len(row),
            "latency_us": latency_dict(timings),
        }
    return out


# --------------------------------------------------------------------------- report


def _get(data: dict[str, Any] | None, *path: str) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "–"
    return f"{ours / theirs:.2f}×"


def _check(value: float | None, target: float, at_least: bool = False) -> str:
    if value is None:
        return "–"
    met = value >= target if at_least else value <= target
    return ("met" if met else "missed") + (f" (≥ {target:g})" if at_least else f" (≤ {target:g})")


QS = ("p50", "p95", "p99")


def _triple(values: Sequence[float | None], digits: int = 1) -> str:
    return " / ".join(_num(v, digits) for v in values)


def _ratios(ours: Sequence[float | None], theirs: Sequence[float | None]) -> str:
    return " / ".join(_ratio(a, b) for a, b in zip(ours, theirs, strict=True))


def _added_check(p50: float | None, p99: float | None) -> str:
    return (
        f"p50 {_check(p50, TARGET_ADDED_P50_MS)}, p99 {_check(p99, TARGET_ADDED_P99_MS)}"
        if p50 is not None and p99 is not None
        else "–"
    )


def render_mock_table(kind: str, report: dict[str, Any]) -> str:
    """One mock: direct, Switchyard and LiteLLM side by side, latencies as p50 / p95 / p99."""
    config = report["config"]
    sides = [_get(report, side, "mocks", kind) for side in ("direct", "switchyard", "litellm")]
    ours = sides[1]
    lines = [
        f"| {MOCK_KINDS[kind]}, {config['latency_ms']} ms | direct | Switchyard | LiteLLM "
        "| Switchyard ÷ LiteLLM | Switchyard target |",
        "|---|---:|---:|---:|---:|---|",
    ]

    def cells(path: tuple[str, ...], digits: int = 1) -> list[str]:
        values = [_get(side, *path) for side in sides]
        return [_num(v, digits) for v in values] + [_ratio(values[1], values[2])]

    for phase, rate in (("low", config["low_rate"]), ("fixed", config["rate"])):
        lat = [[_get(side, phase, "latency_ms", q) for q in QS] for side in sides]
        lines.append(
            f"| latency p50 / p95 / p99 at {rate:g} req/s (ms) | {_triple(lat[0])} "
            f"| {_triple(lat[1])} | {_triple(lat[2])} | {_ratios(lat[1], lat[2])} | |"
        )
        added = [
            [None if v is None or d is None else v - d for v, d in zip(side, lat[0], strict=True)]
            for side in lat[1:]
        ]
        check = _added_check(added[0][0], added[0][2]) if phase == "fixed" else ""
        lines.append(
            f"| added vs direct at {rate:g} req/s (ms) | – | {_triple(added[0])} "
            f"| {_triple(added[1])} | {_ratios(added[0], added[1])} | {check} |"
        )
        same = [_get(ours, phase, "added_ms", q) for q in QS]
        check = _added_check(same[0], same[2]) if phase == "fixed" else ""
        lines.append(
            f"| added, e2e − the request's own provider call, at {rate:g} req/s (ms) | – "
            f"| {_triple(same)} | – | – | {check} |"
        )
    lines.append(
        f"| arrival rate achieved at {config['rate']:g} req/s (issued per s) | "
        + " | ".join(cells(("fixed", "offered_rps"), 1))
        + " | |"
    )
    rps = cells(("saturation", "rps"), 0)
    lines.append(
        f"| requests/s at saturation ({config['concurrency']} outstanding) | "
        + " | ".join(rps)
        + f" | {_check(_get(ours, 'saturation', 'rps'), TARGET_RPS, at_least=True)} |"
    )
    lat = [[_get(side, "saturation", "latency_ms", q) for q in QS] for side in sides]
    lines.append(
        f"| latency p50 / p95 / p99 at saturation (ms) | {_triple(lat[0])} | {_triple(lat[1])} "
        f"| {_triple(lat[2])} | {_ratios(lat[1], lat[2])} | |"
    )
    rate = f"{config['rate']:g} req/s"
    lines.append(
        f"| CPU ms/request at {rate}, whole process | "
        + " | ".join(cells(("fixed", "cpu_ms_per_request"), 2))
        + " | |"
    )
    for label, phase in ((f"at {rate}", "fixed"), ("at saturation", "saturation")):
        net = _get(ours, phase, "cpu_ms_per_request_net")
        lines.append(
            f"| CPU ms/request {label}, net of idle / no-op driver | "
            + " | ".join(cells((phase, "cpu_ms_per_request_net"), 2))
            + f" | {_check(net, TARGET_CPU_MS)} |"
        )
    lines.append(
        "| CPU use at saturation (cores) | "
        + " | ".join(cells(("saturation", "cpu_utilisation"), 2))
        + " | |"
    )
    lines.append(
        "| mock CPU use at saturation (cores) | "
        + " | ".join(cells(("saturation", "mock_cpu_utilisation"), 2))
        + " | |"
    )
    wait = _get(ours, "saturation", "worker_cpu_wait_share")
    lines.append(
        f"| worker runnable but waiting for a CPU at saturation (share of time) | – "
        f"| {_num(wait, 2)} | – | – | |"
    )
    broker = [_get(ours, p, "broker_cpu_utilisation") for p in ("fixed", "saturation")]
    lines.append(
        f"| broker CPU use (cores) at {rate} / saturation | – | {_triple(broker, 2)} | – | – | |"
    )
    errors = [
        None
        if side is None
        else sum(
            (_get(side, phase, k) or 0)
            for phase in ("low", "fixed", "saturation")
            for k in ("errors", "timeouts")
        )
        for side in sides
    ]
    lines.append(f"| errors + timeouts | {_triple(errors, 0).replace(' / ', ' | ')} | | |")
    over = [
        name
        for name, side in zip(("direct", "Switchyard", "LiteLLM"), sides, strict=True)
        if (_get(side, "saturation", "rps") or math.inf) < 1.25 * config["rate"]
    ]
    if over:
        lines += [
            "",
            f"{config['rate']:g} req/s is above 80 % of the saturation throughput of "
            f"{' and '.join(over)} here: latency at that rate is mostly queueing.",
        ]
    if _get(ours, "low", "stages_ms") is not None:
        lines += [
            "",
            f"Switchyard, {MOCK_KINDS[kind]}: where a request's time goes (ms, p50 / p99, "
            "from record timestamps)",
            "",
            f"| stage | at {config['low_rate']:g} req/s | at {config['rate']:g} req/s |",
            "|---|---:|---:|",
        ]
        for stage in STAGES:
            cols = [
                _triple([_get(ours, phase, "stages_ms", stage, q) for q in ("p50", "p99")])
                for phase in ("low", "fixed")
            ]
            lines.append(f"| {stage} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    config = report["config"]
    out = [
        f"## switchyard bench throughput — {config['cpus']} CPUs, load average "
        f"{report['load_start']} at start, {report.get('load_end', '?')} at end",
        "",
    ]
    ceilings = []
    for kind in config["mocks"]:
        rps = _get(report, "direct", "mocks", kind, "saturation", "rps")
        cpu = _get(report, "direct", "mocks", kind, "saturation", "mock_cpu_utilisation")
        ceilings.append(
            f"{MOCK_KINDS[kind]} {_num(rps, 0)} req/s (mock process at {_num(cpu, 2)} cores)"
        )
    if ceilings:
        out += [
            f"Mock ceilings (direct, `make_client()`, {config['concurrency']} in flight, "
            f"{config['latency_ms']} ms latency; the no-wait ceiling is "
            f"{config['concurrency'] * 1000 / max(1, config['latency_ms']):,.0f} req/s): "
            + "; ".join(ceilings)
            + ".",
            "",
        ]
    for kind in config["mocks"]:
        out += [render_mock_table(kind, report), ""]
    sy = report.get("switchyard")
    if sy:
        litellm_rss = _get(report, "litellm", "peak_rss_mb")
        out += [
            f"Worker peak RSS (VmHWM) {_num(sy.get('worker_peak_rss_mb'), 0)} MB "
            f"({_check(sy.get('worker_peak_rss_mb'), TARGET_RSS_MB)}; "
            f"{_num(sy.get('worker_rss_ready_mb'), 0)} MB after the warm-up); LiteLLM process "
            f"{_num(litellm_rss, 0)} MB; direct client process "
            f"{_num(_get(report, 'direct', 'peak_rss_mb'), 0)} MB. Worker idle CPU "
            f"{_num(_get(sy, 'idle', 'worker_cpu_ms_per_s'), 0)} ms/s, broker idle "
            f"{_num(_get(sy, 'idle', 'broker_cpu_ms_per_s'), 0)} ms/s. "
            f"Strategy {sy['strategy']}, {config['deployments']} deployments per mock.",
            "",
        ]
    decisions = report.get("decisions")
    if decisions:
        out += [
            "| decision, 16 candidates | decisions | p50 µs | p99 µs | mean µs | target p99 |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for strategy in ("ucb1", "thompson", "composite"):
            lat = decisions[strategy]["latency_us"]
            out.append(
                f"| `handle` {strategy} | {lat['n']:,} | {lat['p50']:,.0f} | {lat['p99']:,.0f} "
                f"| {lat['mean']:,.0f} | {_check(lat['p99'], TARGET_DECISION_P99_US)} |"
            )
        for name, entry in decisions["router_event_ucb1"].items():
            lat = entry["latency_us"]
            out.append(
                f"| router event ucb1 (parse, row in, fold, row out, sends), "
                f"{name.replace('_', ' ')}, row {entry['row_bytes']:,} B | {lat['n']:,} "
                f"| {lat['p50']:,.0f} | {lat['p99']:,.0f} | {lat['mean']:,.0f} | |"
            )
        out.append("")
        for strategy in ("ucb1", "thompson", "composite"):
            top = decisions[strategy].get("top_costs")
            if top:
                costs = ", ".join(
                    f"{r['function']} {r['self_us_per_decision']:.0f}" for r in top[:5]
                )
                out.append(f"{strategy} top self time (µs per decision, cProfile): {costs}")
        out.append("")
    profile = _get(report, "switchyard", "profile")
    if profile and "samples" in profile:
        out += [
            f"py-spy, worker saturated on the {profile['mock']} mock "
            f"({profile['rps_while_profiled']:.0f} req/s while sampled, "
            f"{profile['samples']:,} samples): self time by innermost frame, and inclusive",
            "",
            "| event-loop task | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["by_task"].items()),
            "",
            "| where (self) | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["self_by_category"].items()),
            "",
            "| inclusive | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["inclusive"].items()),
            "",
        ]
    elif profile:
        out += [f"py-spy: {profile.get('skipped')}", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- entry point


def run(args: argparse.Namespace) -> int:
    kinds = [k.strip() for k in args.mocks.split(",") if k.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "config": {
            "mocks": kinds,
            "latency_ms": args.latency_ms,
            "rate": args.rate,
            "requests": args.requests,
            "low_rate": args.low_rate,
            "low_requests": args.low_requests,
            "concurrency": args.concurrency,
            "saturation_requests": args.saturation_requests,
            "saturation_seconds": args.saturation_seconds,
            "deployments": args.deployments,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "load_start": load_average(),
    }
    started = time.perf_counter()
    mocks = [MockServer(kind, args.latency_ms, args.out) for kind in kinds]
    try:
        for mock in mocks:
            mock.start()
        plan = Plan(
            kind="direct",
            targets={m.kind: m.base_url for m in mocks},
            mock_pids={m.kind: m.pid for m in mocks},
            rate=args.rate,
            requests=args.requests,
            low_rate=args.low_rate,
            low_requests=args.low_requests,
            concurrency=args.concurrency,
            saturation_requests=args.saturation_requests,
            saturation_seconds=args.saturation_seconds,
            deployments=args.deployments,
        )
        budget = 60.0 + len(mocks) * (args.requests / args.rate + args.saturation_seconds + 30.0)
        _progress("direct calls: mock ceilings and the fixed-rate baseline")
        report["direct"] = run_client_process(plan, budget)
        if "litellm" not in skip:
            _progress("litellm.Router")
            litellm_plan = Plan(**{**asdict(plan), "kind": "litellm"})
            try:
                report["litellm"] = run_client_process(litellm_plan, budget + 60.0)
            except (RuntimeError, TimeoutError) as exc:
                report["litellm"] = {"error": str(exc)}
                _progress(f"litellm skipped: {exc}")
        if "switchyard" not in skip:
            _progress("Switchyard: embedded broker + one worker")
            deadline = 240.0 + len(mocks) * budget + args.profile_seconds
            report["switchyard"] = asyncio.run(
                asyncio.wait_for(run_switchyard(mocks, args), deadline)
            )
    finally:
        for mock in mocks:
            mock.stop()
    if "decisions" not in skip:
        _progress("decision function")
        report["decisions"] = run_decisions(args)
    report["load_end"] = load_average()
    report["seconds"] = time.perf_counter() - started
    print(render(report))
    path = args.out / "throughput.json"
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    print(f"wrote {path} ({report['seconds']:.0f} s)")
    return 0


def _progress(message: str) -> None:
    print(f"[throughput] {message} (load {load_average()})", file=sys.stderr, flush=True)


if __name__ == "__main__":  # the light mock's process: python -m bench.throughput serve-light P MS
    if len(sys.argv) == 4 and sys.argv[1] == "serve-light":
        serve_light(int(sys.argv[2]), float(sys.argv[3]))
    else:
        sys.exit("usage: python -m bench.throughput serve-light PORT LATENCY_MS")
