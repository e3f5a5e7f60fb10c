"""``switchyard bench throughput``: one worker's throughput and overhead, side by side with LiteLLM.

One run, every number measured on this machine in this run:

1. **Mocks.** OpenAI-compatible servers with a fixed latency (``--latency-ms``,
   default 20), each in its own process on 127.0.0.1: ``llmock`` (FastAPI on
   uvicorn, what the issue asks for) and ``light``, a tiny aiohttp server
   (``python -m bench.throughput serve-light``) for when llmock itself is the bottleneck. Each
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
   ucb1, thompson (its propensity integrated at every decision: the bench clears
   the propensity's cache) and composite,
   plus the router's whole per-event codec path (row JSON in, fold, row JSON
   out, decision and dispatch JSON). When a p99 misses its target, the top cProfile
   entries are printed.
6. ``--profile-seconds N`` (default 15; 0: off) records the worker with
   ``py-spy`` under saturation after the measured phases and prints where its
   samples are (``results/throughput-worker.svg`` and the raw stacks).

Every load stops by itself after its count or its time cap; the whole run
takes about five minutes. Output: the markdown tables, and
``results/throughput.json``. The machine's load average is printed with them:
the driver, mocks, broker and worker share the machine's cores.

This package: ``mocks`` (1), ``clients`` (2 and 4, in spawned processes),
``switchyard`` and ``driver`` (3), ``decisions`` (5), ``pyspy`` (6), ``report``
(the tables); under them ``loads`` (open and closed loops), ``procfs`` (CPU,
memory), ``stats`` (percentiles) and ``workload`` (the request, the targets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.throughput.clients import Plan, run_client_process
from bench.throughput.decisions import run_decisions
from bench.throughput.mocks import MockServer
from bench.throughput.procfs import load_average
from bench.throughput.report import render
from bench.throughput.switchyard import run_switchyard


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.embedded.brokers import add_broker_flag

    add_broker_flag(parser)
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
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="the worker writes in transactions (SWITCHYARD_EXACTLY_ONCE; Apache Kafka only)",
    )
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
            "exactly_once": args.exactly_once,
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
