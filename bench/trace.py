"""``switchyard bench trace``: ``GET /admin/trace/{id}`` latency with 1,000 and 100,000
requests in the analytics store (goal: p99 <= 20 ms, flat in the size of the log).

For each size, a store file is filled the way the sink fills it (:meth:`Store.apply`)
with sample logs (bench/logs/sample.py: the live fold against simulated providers,
with retries, tenants, grades; 10,000 requests per chunk, each chunk its own request
ids, times and offsets), then ``switchyard console``'s app serves it on loopback and one
client asks for the traces of ``--lookups`` random requests, one at a time, the sizes in
turns (a busy machine slows them alike): latency percentiles over HTTP (client and
server in one process) and of the store query alone.
(The worker's own ``/admin/trace`` reads the topics on every call: its cost grows with
the log.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

CHUNK = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes", default="1000,100000", help="requests in the store, comma-separated"
    )
    parser.add_argument("--lookups", type=int, default=500, help="traces asked per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")


def run(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = asyncio.run(_measure(sizes, args.lookups, args.seed))
    for line in _report(results):
        print(line)
    if args.json:
        print(json.dumps(results))
    return 0


def fill(path: Path, requests: int, seed: int = 0) -> tuple[Any, list[str], float]:
    """A store file with ``requests`` sample requests; its request ids; seconds taken."""
    from app.analytics.load import fold_log
    from app.analytics.store import Store
    from app.settings import Topics
    from bench.logs.sample import sample_log

    store = Store(path)
    ids: list[str] = []
    started = time.perf_counter()
    for chunk, first in enumerate(range(0, requests, CHUNK)):
        count = min(CHUNK, requests - first)
        log = sample_log(count, seed=seed * 1000 + chunk, start=1_700_000_000.0 + first * 0.05)
        fold_log(store, log, Topics(), offset_base=chunk * 10**8)
        ids += sorted({e.event.request_id for e in log.responses if e.event})
    return store, ids, time.perf_counter() - started


async def _measure(sizes: list[int], lookups: int, seed: int) -> list[dict[str, Any]]:
    """Fill one store per size, then ask them in turns (each lookup of one size followed by
    one of the next): a busy machine slows every size alike."""
    import aiohttp

    from app.analytics.trace import store_trace
    from app.console.server import start_console
    from app.settings import Settings

    with tempfile.TemporaryDirectory(prefix="switchyard-bench-trace-") as workdir:
        runs = []
        for size in sizes:
            path = Path(workdir) / f"analytics-{size}.duckdb"
            store, ids, fill_s = await asyncio.to_thread(fill, path, size, seed)
            console = await start_console(Settings(), store=store, sink=False, port=0)
            chosen = random.Random(seed).choices(ids, k=lookups)
            counts = {k: v for k, v in store.counts().items() if k in ("requests", "decisions")}
            runs.append({"path": path, "store": store, "ids": ids, "counts": counts,
                         "fill_s": fill_s, "console": console, "chosen": chosen,
                         "http": [], "query": []})  # fmt: skip
        try:
            async with aiohttp.ClientSession() as session:
                for i in range(-20, lookups):  # 20 warm-up rounds, not counted
                    for run in runs:
                        url = f"{run['console'].url}admin/trace/{run['chosen'][max(i, 0)]}"
                        started = time.perf_counter()
                        async with session.get(url) as reply:
                            body = await reply.read()
                        assert reply.status == 200 and body
                        if i >= 0:
                            run["http"].append(1000 * (time.perf_counter() - started))
            for i in range(lookups):
                for run in runs:
                    started = time.perf_counter()
                    assert store_trace(run["store"], run["chosen"][i]) is not None
                    run["query"].append(1000 * (time.perf_counter() - started))
        finally:
            for run in runs:
                await run["console"].stop()
        return [
            {
                "requests": len(run["ids"]),
                "rows": run["counts"],
                "store_mb": round(run["path"].stat().st_size / 1e6, 1),
                "fill_s": round(run["fill_s"], 1),
                "http_ms": _percentiles(run["http"]),
                "query_ms": _percentiles(run["query"]),
            }
            for run in runs
        ]


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "p50": at(0.5),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def _report(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "requests  decisions  store MB  fill s | HTTP p50   p95   p99   max ms | query p50   p99 ms"
    ]
    for r in results:
        h, q = r["http_ms"], r["query_ms"]
        lines.append(
            f"{r['requests']:>8,} {r['rows']['decisions']:>10,} {r['store_mb']:>9} "
            f"{r['fill_s']:>7} | {h['p50']:>8} {h['p95']:>5} {h['p99']:>5} {h['max']:>5}    | "
            f"{q['p50']:>9} {q['p99']:>5}"
        )
    worst = max(r["http_ms"]["p99"] for r in results)
    lines.append(f"p99 over HTTP, worst size: {worst} ms (goal <= 20 ms)")
    return lines
