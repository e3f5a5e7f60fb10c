"""``switchyard bench record_cost``: what one Kafka record costs a Faust worker here.

Why: the performance targets ask for <= 1.5 ms of worker CPU per request. A request is a fixed
number of record operations (records the worker consumes and produces, changelog
records included), each paid in the Faust/aiokafka stack before any routing
work. This bench measures those two prices on this machine, with the worker's own
Faust settings (bench/record_cost_app.py), so the floor they put under the CPU
per request is a number, not a guess.

For each ``--sends`` value (default 0, 1, 3): ``--records`` records of
``--size`` bytes are published to a fresh topic, a one-agent Faust app consumes
them and sends that many records per record consumed, with Faust's
``Topic.send`` and with the producer directly; its CPU (``/proc``, net of its
idle CPU measured just before) divided by the records gives microseconds per
consumed record (sends 0) and, from the slope, per sent record.

    switchyard bench record_cost [--records 20000] [--size 400]

The app carries the worker's monitor (app/worker/quiet_monitor.py); ``RC_MONITOR=faust``
in the environment gives it Faust's own, to measure what that one costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from app.client import TopicFollower
from app.embedded.broker import EmbeddedBroker
from app.embedded.child_env import child_env
from app.kafka import client_security
from app.lifetime import stop_process
from app.settings import Settings
from bench.throughput.procfs import process_cpu_s

#: Record operations per successful request in a worker (docs/flow.md), by kind.
CONSUMED_PER_REQUEST = {
    "llm.requests": 1,
    "routing: request.accepted": 1,
    "routing: attempt.finished": 1,
    "switchyard.dispatch (read back)": 1,
    "llm.outcomes (feedback matcher)": 1,
}
SENT_PER_REQUEST = {
    "routing: request.accepted": 1,
    "llm.decisions": 1,
    "switchyard.dispatch": 1,
    "llm.outcomes": 1,
    "routing: attempt.finished": 1,
    "llm.responses": 1,
    "answers table changelog (the row; its expiry index and pruning are local)": 1,
}


#: How the app sends: Faust's ``Topic.send``, or its producer directly (agents/app.py's
#: ``Publisher``, what the worker's agents use); ``raw``: no Faust at all, an aiokafka
#: consumer and producer (bench/record_cost_raw.py), what Faust's layers are measured against.
SEND_WAYS = {
    "topic": "Faust's Topic.send",
    "producer": "the producer (Publisher)",
    "raw": "aiokafka alone, no Faust",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=400, help="bytes per record")
    parser.add_argument("--sends", default="0,1,3", help="records sent per record consumed")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Path("results"))


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(measure(args))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "record_cost.json"
    path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print_report(result)
    print(f"wrote {path}")
    return 0


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    sends = [int(n) for n in args.sends.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        base = await _one(broker, 0, args, Path(workdir), "topic")
        raw_base = await _one(broker, 0, args, Path(workdir), "raw")
        for way in SEND_WAYS:
            runs[way] = [raw_base if way == "raw" else base] + [
                await _one(broker, n, args, Path(workdir), way) for n in sends if n > 0
            ]
    per_consumed = {way: found[0]["cpu_us_per_record"] for way, found in runs.items()}
    per_sent = {
        way: _slope([(r["sends"], r["cpu_us_per_record"]) for r in found])
        for way, found in runs.items()
    }
    consumed = sum(CONSUMED_PER_REQUEST.values())
    sent = sum(SENT_PER_REQUEST.values())
    return {
        "records": args.records,
        "size": args.size,
        "runs": runs,
        "cpu_us_per_consumed_record": per_consumed,
        "cpu_us_per_sent_record": per_sent,
        "consumed_per_request": CONSUMED_PER_REQUEST,
        "sent_per_request": SENT_PER_REQUEST,
        "floor_cpu_ms_per_request": {
            way: (consumed * per_consumed[way] + sent * cost) / 1000.0
            for way, cost in per_sent.items()
        },
    }


async def _one(
    broker: EmbeddedBroker, sends: int, args: argparse.Namespace, workdir: Path, way: str
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    names = {key: f"rc-{key}-{tag}" for key in ("in", "out", "done")}
    process = _start_app(broker, names, sends, workdir / tag, way)
    try:
        await _publish(broker.bootstrap, names["in"], [b"warm"])
        await _wait_for(
            process, broker.bootstrap, names["out"] if sends else None, 1 if sends else 0, 60
        )
        await asyncio.sleep(2.0)  # joined, first fetches done
        idle_from, idle_at = process_cpu_s(process.pid), time.monotonic()
        await asyncio.sleep(args.idle_seconds)
        idle_rate = (process_cpu_s(process.pid) - idle_from) / (time.monotonic() - idle_at)
        value = b"x" * args.size
        started_cpu, started = process_cpu_s(process.pid), time.monotonic()
        await _publish(broker.bootstrap, names["in"], [value] * (args.records - 1) + [b"last"])
        await _wait_for(process, broker.bootstrap, names["done"], 1, 300)
        elapsed = time.monotonic() - started
        cpu = process_cpu_s(process.pid) - started_cpu - idle_rate * elapsed
    finally:
        stop_process(process, 15)
    return {
        "sends": sends,
        "way": way,
        "seconds": elapsed,
        "records_per_s": args.records / elapsed,
        "idle_cpu_ms_per_s": idle_rate * 1000.0,
        "cpu_s_net": cpu,
        "cpu_us_per_record": cpu / args.records * 1e6,
    }


def _start_app(
    broker: EmbeddedBroker, names: dict[str, str], sends: int, datadir: Path, way: str
) -> subprocess.Popen[bytes]:
    # A Faust app of ours: the caller's transport tuning and Kafka security, as a worker's.
    env = child_env(
        Settings(),
        {
            "RC_BROKER": broker.url,
            "RC_BOOTSTRAP": broker.bootstrap,
            "RC_APP_ID": f"record-cost-{names['in']}",
            "RC_PARTITIONS": "1",
            "RC_SENDS": str(sends),
            "RC_IN": names["in"],
            "RC_OUT": names["out"],
            "RC_DONE": names["done"],
            "RC_DATADIR": str(datadir),
            "RC_DIRECT": "1" if way == "producer" else "0",
        },
    )
    datadir.mkdir(parents=True)
    command = [sys.executable, "-m", "bench.record_cost_app", "worker", "-l", "warn"]
    if way == "raw":
        command = [sys.executable, "-m", "bench.record_cost_raw"]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=os.getcwd()
    )


async def _publish(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **client_security())
    await producer.start()
    try:
        for value in values:
            await producer.send(topic, value=value, key=b"k")
        await producer.flush()
    finally:
        await producer.stop()


async def _wait_for(
    process: subprocess.Popen[bytes],
    bootstrap: str,
    topic: str | None,
    count: int,
    timeout_s: float,
) -> None:
    """Until ``topic`` has ``count`` records (None: a few seconds for the app to join)."""
    if topic is None:
        await asyncio.sleep(8.0)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the measured app exited ({process.returncode})")
        try:
            follower = await TopicFollower(bootstrap, [topic]).start()
        except LookupError:
            await asyncio.sleep(0.5)
            continue
        try:
            seen = 0
            while time.monotonic() < deadline and seen < count:
                seen += len(await follower.poll())
            return
        finally:
            await follower.stop()
    raise TimeoutError(f"{topic}: fewer than {count} records after {timeout_s:g}s")


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of cost against sends per record."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def print_report(result: dict[str, Any]) -> None:
    print(f"\n{result['records']:,} records of {result['size']} bytes, one agent")
    print("| sent with | sends per record consumed | records/s | CPU µs per record consumed |")
    print("|---|---:|---:|---:|")
    for way, runs in result["runs"].items():
        for run in runs:
            rate, cost = run["records_per_s"], run["cpu_us_per_record"]
            print(f"| {way} | {run['sends']} | {rate:,.0f} | {cost:.0f} |")
    consumed = sum(result["consumed_per_request"].values())
    sent = sum(result["sent_per_request"].values())
    for way, cost in result["cpu_us_per_sent_record"].items():
        floor = result["floor_cpu_ms_per_request"][way]
        reading = result["cpu_us_per_consumed_record"][way]
        print(
            f"{SEND_WAYS[way]}: {reading:.0f} µs per record consumed, {cost:.0f} µs per record "
            f"sent; a request's {consumed} consumed and {sent} sent records: {floor:.2f} ms of CPU"
        )
