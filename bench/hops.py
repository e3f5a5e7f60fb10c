"""``switchyard bench hops``: where a request's added time goes, stage by stage.

Why: ``bench throughput`` splits a request's time with the records' timestamps, which
are whole milliseconds and say nothing of what happens inside the worker. This bench
puts a clock on each stage (bench/hop_clock: the worker's own functions, wrapped in the
bench's worker only) and drives one worker at a light fixed rate, so each stage is
measured in microseconds, and beside them what the broker's round trips cost alone on
the same broker in the same run: a plain producer's acknowledged send, and a record
from a plain producer to a plain consumer (the clients the driver uses).

    switchyard bench hops --broker kafka [--requests 300] [--rate 20]

The stages of a one-attempt request, as :data:`STAGES` names them; three are the
broker's round trips (the request hop, the routing record's acknowledgement, the
response hop), the others the worker's own work. A request whose call started ahead of
its fold (app/router/ahead.py) takes the way :data:`AHEAD_STAGES` names instead: its
routing record's acknowledgement and the fold run beside the provider call, and the
outcome waits for the fold's verdict only when the call ended first. Each way gets its
own table. ``added`` is what ``bench throughput`` calls it: end to end less the provider
call the outcome reports.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import glob
import json
import os
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.hop_clock import SITE_DIR, STAMPS_ENV
from bench.throughput.driver import StackDriver, Trace
from bench.throughput.loads import closed_loop, fixed_count
from bench.throughput.mocks import MockServer
from bench.throughput.stats import latency_dict
from bench.throughput.switchyard import providers_yaml

#: ``(name, from, to, whose)``: a stage runs from one stamp to the next; ``published`` and
#: ``received`` are the driver's, the others the worker's (bench/hop_clock).
STAGES: tuple[tuple[str, str, str, str], ...] = (
    ("request hop: publish, broker, fetch", "published", "fetched", "broker"),
    ("aiokafka's records leave the consumer thread", "fetched", "thread_returned", "worker"),
    ("the consumer thread hands them to the loop", "thread_returned", "main_loop_got", "worker"),
    ("Faust's streams bring the request to ingest", "main_loop_got", "ingest", "worker"),
    ("ingest: validate, understand, send", "ingest", "routing_sent", "worker"),
    ("routing record acknowledged", "routing_sent", "routing_acked", "broker"),
    ("local fold, decision, hand-off", "routing_acked", "launched", "worker"),
    ("hand-off to the call", "launched", "call_started", "worker"),
    ("provider call (the mock)", "call_started", "call_ended", "provider"),
    ("outcome sealed", "call_ended", "publishing", "worker"),
    ("response hop: publish, broker, fetch", "publishing", "received", "broker"),
)  # fmt: skip
#: The way of a request whose call started ahead of its fold: the routing record's
#: acknowledgement (:data:`BESIDE`) runs beside the call.
AHEAD_STAGES: tuple[tuple[str, str, str, str], ...] = (
    *STAGES[:4],
    ("ingest: validate, understand, send, foresee the fold", "ingest", "launched_ahead", "worker"),
    ("hand-off to the call", "launched_ahead", "call_started", "worker"),
    *STAGES[8:9],
    ("outcome sealed, the fold's verdict", "call_ended", "publishing", "worker"),
    *STAGES[10:],
)  # fmt: skip
#: Not on the way of a call ahead, timed beside it.
BESIDE: tuple[tuple[str, str, str, str], ...] = (
    ("routing record acknowledged, beside the call", "routing_sent", "routing_acked", "broker"),
)
#: Each way a request takes, by name: the stages timed.
WAYS = {"fold": STAGES, "ahead": AHEAD_STAGES + BESIDE}
#: Stamps of the records the worker fetched, by topic, partition and first offset.
FETCH_STAMPS = ("fetched", "thread_returned", "main_loop_got")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.embedded.brokers import add_broker_flag

    add_broker_flag(parser)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--latency-ms", type=int, default=20, help="the mock's latency")
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="the worker in exactly-once mode (Kafka): the decision's stage then holds the "
        "router's commit, the response hop the call's",
    )
    parser.add_argument("--out", type=Path, default=Path("results"))


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(measure(args))
    args.out.mkdir(parents=True, exist_ok=True)
    mode = "-exactly-once" if args.exactly_once else ""
    path = args.out / f"hops-{args.broker}{mode}.json"
    path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print_report(result)
    print(f"wrote {path}")
    return 0


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from app.embedded.stack import EmbeddedStack

    with tempfile.TemporaryDirectory(prefix="switchyard-hops-") as work:
        mock = MockServer("light", args.latency_ms, Path(work)).start()
        try:
            stack = EmbeddedStack(
                providers_yaml=providers_yaml([mock], 2),
                env={
                    "SWITCHYARD_LOG_LEVEL": "warn",
                    **({"SWITCHYARD_EXACTLY_ONCE": "1"} if args.exactly_once else {}),
                    STAMPS_ENV: work,
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (str(SITE_DIR), os.environ.get("PYTHONPATH", "")) if p
                    ),
                },
                broker_kind=args.broker,
            )
            async with stack:
                traces, requests_topic = await _drive(stack, args)
                verdicts = await calls_ahead(stack.workers[0].web_url)
                floor = await broker_floor(stack.broker.bootstrap, args.requests, args.rate)
        finally:
            mock.stop()
        stamps = read_stamps(glob.glob(os.path.join(work, "stamps-*.tsv")), requests_topic)
    ways = {way: stage_times(traces, stamps, way) for way in WAYS}
    every_added = [ms for _, added in ways.values() for ms in added]
    if not every_added:
        raise RuntimeError("no request had every stamp: is the clock installed in the worker?")
    return {
        "broker": args.broker,
        "exactly_once": args.exactly_once,
        "requests": args.requests,
        "rate": args.rate,
        "date": time.strftime("%Y-%m-%d"),
        "ways": {
            way: {
                "requests": len(added),
                "stages_ms": {name: latency_dict(v) for name, v in stages.items()},
                "added_ms": latency_dict(added),
            }
            for way, (stages, added) in ways.items()
            if added
        },
        "added_ms": latency_dict(every_added),
        "calls_ahead": verdicts,
        "floor_ms": {name: latency_dict(v) for name, v in floor.items()},
    }


async def _drive(stack: Any, args: argparse.Namespace) -> tuple[list[Trace], str]:
    driver = await StackDriver(stack).start()
    try:
        call = driver.call("chat-light")
        await closed_loop(call, concurrency=4, count=16, max_seconds=90.0, timeout_s=60.0)
        await asyncio.sleep(1.5)  # the warm-up's trailing records go by
        mark = driver.issued
        await fixed_count(call, rate=args.rate, count=args.requests, timeout_s=30.0)
        await asyncio.sleep(1.0)  # outcomes may trail their responses
        return driver.since(mark), stack.topics.requests
    finally:
        await driver.stop()


async def calls_ahead(web_url: str) -> dict[str, float]:
    """The worker's calls ahead by verdict (``switchyard_calls_ahead_total``): claimed, and
    taken back (made for nothing)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{web_url}/metrics", timeout=10)).text
    found = {"claimed": 0.0, "taken_back": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "switchyard_calls_ahead":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    found[sample.labels["verdict"]] = sample.value
    return found


class WorkerStamps:
    """The worker's stamps: per request id, and per fetched partition batch."""

    def __init__(self) -> None:
        self.by_request: dict[str, dict[str, float]] = {}
        self.position: dict[str, tuple[int, int]] = {}
        #: ``(stamp, partition)``: sorted ``(first offset, time)`` of each fetched batch.
        self.batches: dict[tuple[str, int], list[tuple[int, float]]] = {}

    def fetch_time(self, stamp: str, partition: int, offset: int) -> float | None:
        """When the batch holding ``offset`` passed ``stamp``: the last batch that starts
        at or before it (a request is in the newest batch begun before its offset)."""
        batches = self.batches.get((stamp, partition), [])
        at = bisect.bisect_right(batches, (offset, float("inf")))
        return batches[at - 1][1] if at else None


def read_stamps(paths: Sequence[str], requests_topic: str) -> WorkerStamps:
    stamps = WorkerStamps()
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                when, what, *fields = line.rstrip("\n").split("\t")
                if what in FETCH_STAMPS:
                    topic, partition, offset = fields
                    if topic == requests_topic:
                        batch = stamps.batches.setdefault((what, int(partition)), [])
                        batch.append((int(offset), float(when)))
                    continue
                request_id = fields[0]
                stamps.by_request.setdefault(request_id, {}).setdefault(what, float(when))
                if what == "ingest":
                    stamps.position[request_id] = (int(fields[1]), int(fields[2]))
    for batch in stamps.batches.values():
        batch.sort()
    return stamps


def stage_times(
    traces: Sequence[Trace], stamps: WorkerStamps, way: str = "fold"
) -> tuple[dict[str, list[float]], list[float]]:
    """Milliseconds per stage of ``way`` (:data:`WAYS`), and the added time, of each
    one-attempt answered request that took it and has every stamp."""
    timed = WAYS[way]
    stages: dict[str, list[float]] = {name: [] for name, *_ in timed}
    added: list[float] = []
    for trace in traces:
        request_id = trace.request_id
        own = stamps.by_request.get(request_id)
        position = stamps.position.get(request_id)
        if trace.outcomes != 1 or trace.received is None or trace.e2e_ms is None:
            continue
        if own is None or position is None:
            continue
        times = {**own, "published": trace.published, "received": trace.received}
        for stamp in FETCH_STAMPS:
            found = stamps.fetch_time(stamp, *position)
            if found is not None:
                times[stamp] = found
        ahead = "launched_ahead" in times
        if ahead != (way == "ahead") or (ahead and "launched" in times):
            continue  # another way, or both (a call ahead taken back, then the fold's)
        if not all(start in times and end in times for _, start, end, _ in timed):
            continue
        for name, start, end, _ in timed:
            stages[name].append((times[end] - times[start]) * 1000.0)
        added.append(trace.e2e_ms - trace.provider_ms)
    return stages, added


async def broker_floor(bootstrap: str, count: int, rate: float) -> dict[str, list[float]]:
    """What the broker's round trips cost alone, at ``rate``: a plain producer's send until
    acknowledged (``acks=all``, as the worker's), and a record from that producer to a
    plain consumer (the driver's :class:`~app.client.TopicFollower`), ms."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from app.client import TopicFollower
    from app.kafka import DURABLE_PRODUCER, client_security

    topic = f"bench-hops-floor-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_security())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=0, **DURABLE_PRODUCER, **client_security()
    )
    await producer.start()
    follower = await TopicFollower(bootstrap, [topic]).start()
    acked: list[float] = []
    hop: list[float] = []
    held: list[Any] = []

    async def next_record() -> None:
        while not held:
            held.extend(await follower.poll(timeout_ms=1000))
        held.pop(0)

    try:
        await (await producer.send(topic, b"warm"))
        await next_record()
        for n in range(count):
            started = time.perf_counter()
            await (await producer.send(topic, b"x" * 300, key=str(n).encode()))
            acked.append((time.perf_counter() - started) * 1000.0)
            await asyncio.sleep(0.5 / rate)
            started = time.perf_counter()
            await producer.send(topic, b"y" * 300, key=str(n).encode())
            await next_record()  # the acknowledged record's copy
            await next_record()
            hop.append((time.perf_counter() - started) * 1000.0)
            await asyncio.sleep(0.5 / rate)
    finally:
        await follower.stop()
        await producer.stop()
    return {"acknowledged send": acked, "record from producer to consumer": hop}


def print_report(result: Mapping[str, Any]) -> None:
    """Markdown: each stage's p50 / p95, the added time, the broker's round trips alone."""
    mode = ", exactly once" if result.get("exactly_once") else ""
    print(
        f"\n### bench hops on {result['broker']}{mode}: {result['requests']} requests at "
        f"{result['rate']:g}/s, one worker\n"
    )
    for way, timed in result["ways"].items():
        _print_way(way, timed)
    ahead = result["calls_ahead"]
    print(f"\nCalls ahead: {ahead['claimed']:.0f} claimed by their fold, "
          f"{ahead['taken_back']:.0f} taken back (made for nothing).")  # fmt: skip
    added = result["added_ms"]
    print(f"\nAdded, every request: p50 {added['p50']:.2f} ms, p95 {added['p95']:.2f} ms. "
          "The broker alone: " + "; ".join(
              f"{name} p50 {summary['p50']:.2f} ms, p95 {summary['p95']:.2f} ms"
              for name, summary in result["floor_ms"].items()))  # fmt: skip


def _print_way(way: str, timed: Mapping[str, Any]) -> None:
    title = {"fold": "the call started by the fold", "ahead": "the call started ahead"}[way]
    print(f"\n{title}: {timed['requests']} requests\n")
    print("| stage | whose | p50 ms | p95 ms |\n|---|---|---:|---:|")
    whose = {name: owner for name, _, _, owner in WAYS[way]}
    beside = {name for name, *_ in BESIDE}
    totals: dict[str, float] = {}
    for name, summary in timed["stages_ms"].items():
        if summary is None:
            continue
        if name not in beside:
            totals[whose[name]] = totals.get(whose[name], 0.0) + summary["p50"]
        print(f"| {name} | {whose[name]} | {summary['p50']:.2f} | {summary['p95']:.2f} |")
    added = timed["added_ms"]
    print(f"| **added** (end to end less the provider call) | | {added['p50']:.2f} | "
          f"{added['p95']:.2f} |")  # fmt: skip
    sums = ", ".join(f"{k} {v:.2f} ms" for k, v in totals.items())
    print(f"\nSums of the p50s of the stages on the way: {sums}")
