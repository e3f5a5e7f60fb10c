"""Benchmark: httpx's own transport against httpx-aiohttp's, through ``make_client()``.

    python -m bench.http_transport            # from the repository root
    python -m bench.http_transport --requests 3000 --concurrency 50 200 --rounds 2

Starts a small aiohttp server on 127.0.0.1 that answers every POST with the
same OpenAI chat completion, then sends the same load through each transport
and prints requests/s, client latency p50/p99 and client CPU ms per request
side by side. A run stops after ``--requests`` requests or ``--run-seconds``
seconds, whichever comes first ("done" is the count actually sent): httpx's
pool slows down so much with concurrency that a fixed count would not finish
in a minute.

The server runs in a child process started here, so the client's CPU time
(``time.process_time()`` of this process) is the client's alone and the two
do not share one GIL or event loop. Rounds alternate the order of the
transports; figures are the mean over rounds (latency percentiles over all
requests of all rounds). Each run first sends one warm-up request per worker,
to open the connections. Bounded: the whole benchmark is cancelled after
``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import get_args

import httpx
from aiohttp import web

from app.execution.http import Transport, client_lifespan
from bench.gateway_mock import completion_body

COMPLETION = completion_body(
    "Hello from the benchmark server.",
    {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    created=0,
)

REQUEST = {"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}]}


# --------------------------------------------------------------------------- server


async def _answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=COMPLETION, content_type="application/json")


async def _serve(conn: Connection) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    conn.send(runner.addresses[0][1])
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # wait for "stop"
    await runner.cleanup()


def _server_main(conn: Connection) -> None:
    asyncio.run(_serve(conn))


# --------------------------------------------------------------------------- client


@dataclass(frozen=True)
class Run:
    transport: Transport
    concurrency: int
    requests: int
    seconds: float
    cpu_seconds: float
    latencies_ms: list[float]
    errors: int


@dataclass
class _Load:
    """Shared by the workers of one run: stop after ``limit`` requests or at ``deadline``."""

    limit: int
    deadline: float
    issued: int = 0
    errors: int = 0

    def take(self) -> bool:
        if self.issued >= self.limit or time.perf_counter() >= self.deadline:
            return False
        self.issued += 1
        return True


async def _drive(client: httpx.AsyncClient, url: str, load: _Load, latencies: list[float]) -> None:
    while load.take():
        started = time.perf_counter()
        response = await client.post(url, json=REQUEST)
        if response.status_code != 200 or not response.content:
            load.errors += 1
        latencies.append((time.perf_counter() - started) * 1000.0)


async def _one_run(
    url: str, transport: Transport, concurrency: int, requests: int, run_seconds: float
) -> Run:
    async with client_lifespan(transport=transport, max_connections=concurrency) as client:
        # Warm-up: open the connections (one request per worker, time-capped).
        warmup = _Load(limit=concurrency, deadline=time.perf_counter() + run_seconds / 4)
        await asyncio.gather(*(_drive(client, url, warmup, []) for _ in range(concurrency)))

        latencies: list[float] = []
        load = _Load(limit=requests, deadline=time.perf_counter() + run_seconds)
        cpu_started, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(_drive(client, url, load, latencies) for _ in range(concurrency)))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return Run(transport, concurrency, len(latencies), seconds, cpu, latencies, load.errors)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(runs: list[Run]) -> str:
    first = runs[0]
    latencies = [v for run in runs for v in run.latencies_ms]
    rps = statistics.mean(run.requests / run.seconds for run in runs)
    cpu_ms = statistics.mean(run.cpu_seconds * 1000.0 / run.requests for run in runs)
    errors = sum(run.errors for run in runs)
    done = sum(run.requests for run in runs)
    return (
        f"{first.transport:<9} {first.concurrency:>5} {done:>6} {rps:>9.0f} "
        f"{_percentile(latencies, 0.50):>9.2f} {_percentile(latencies, 0.99):>9.2f} "
        f"{cpu_ms:>8.3f} {errors:>6}"
    )


async def _bench(url: str, args: argparse.Namespace) -> None:
    transports: list[Transport] = list(get_args(Transport))
    print(
        f"up to {args.requests} requests or {args.run_seconds:g}s per run, "
        f"{args.rounds} round(s), Python {sys.version.split()[0]}, "
        f"{multiprocessing.cpu_count()} CPU(s)",
        flush=True,
    )
    print(
        f"{'transport':<9} {'conc':>5} {'done':>6} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9} "
        f"{'cpu ms/r':>8} {'errors':>6}",
        flush=True,
    )
    for concurrency in args.concurrency:
        runs: dict[Transport, list[Run]] = {t: [] for t in transports}
        for round_ in range(args.rounds):
            order = transports if round_ % 2 == 0 else transports[::-1]
            for transport in order:
                run = await _one_run(url, transport, concurrency, args.requests, args.run_seconds)
                runs[transport].append(run)
        for transport in transports:
            print(_row(runs[transport]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--run-seconds", type=float, default=5.0, help="cap per run; the slow transport hits it"
    )
    parser.add_argument("--deadline", type=float, default=58.0, help="seconds, whole benchmark")
    args = parser.parse_args()

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_server_main, args=(child,), daemon=True)
    server.start()
    try:
        if not parent.poll(10.0):
            raise SystemExit("benchmark server did not start")
        url = f"http://127.0.0.1:{parent.recv()}/v1/chat/completions"
        asyncio.run(asyncio.wait_for(_bench(url, args), timeout=args.deadline))
    except TimeoutError:
        raise SystemExit(f"benchmark cut at its {args.deadline:g}s deadline") from None
    finally:
        parent.send("stop")
        server.join(5.0)
        if server.is_alive():
            server.terminate()


if __name__ == "__main__":
    main()
