"""``switchyard bench poison``: malformed records among valid ones; no crash, nothing lost.

Publishes the 10,030 malformed records of ``bench.poison_records`` (every kind
of poison record: not JSON, not an object, schema violations, unknown routes,
oversized, 10k-level and 65-level nesting, 5,000-digit and 101-digit integers,
NaN, lone surrogates in text, metadata, keys and tenant) with ``--valid`` valid
requests interleaved (three of them 999.7 KB, just under the limit), at
``--rate`` records per second, to a one-worker embedded stack (loopback: Tansu,
simulated providers, a worker process). Then a clean run: the valid requests
alone on a fresh stack, sent at the same moments. Reports the share of malformed
records dead-lettered with the expected reason, ingest crashes (from the worker
log), valid requests answered ok, and their latency against the clean run.
Every process is stopped at the end; results go to ``--out``/poison.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in run(): `switchyard` imports this module at every start
    from app.embedded.stack import EmbeddedStack

#: Lines of a worker log that mean an agent crashed or restarted.
CRASH_LINES = re.compile(r"Crashed|Traceback|Restarting|MessageSizeTooLarge")
LARGE_VALID = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--valid", type=int, default=1000, help="valid requests")
    parser.add_argument("--rate", type=float, default=500.0, help="records per second")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--time-scale", type=float, default=0.1, help="provider latency scale")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait per run")
    parser.add_argument("--out", type=Path, default=Path("results"))


@dataclass(frozen=True)
class Record:
    at_s: float  # when to send it, from the start of the run
    kind: str  # a malformed kind's name, or "valid"
    reason: str  # the dead-letter reason expected ("" for a valid request)
    request_id: str
    value: bytes


def schedule(valid_count: int, rate: float, seed: int) -> list[Record]:
    """Every malformed record (shuffled, seeded) with the valid ones evenly among them."""
    from bench.poison_records import KINDS, valid

    bad = [(k.name, k.reason, k.make(i)) for k in KINDS for i in range(k.count)]
    random.Random(seed).shuffle(bad)
    total = len(bad) + valid_count
    spots = {int((j + 0.5) * total / valid_count): j for j in range(valid_count)}
    large = {valid_count * q // (LARGE_VALID + 1) for q in range(1, LARGE_VALID + 1)}
    records: list[Record] = []
    for index in range(total):
        if index in spots:
            request_id = f"valid-{spots[index]:05d}"
            body = valid(request_id, large=spots[index] in large)
            records.append(Record(index / rate, "valid", "", request_id, body))
        else:
            name, reason, value = bad.pop()
            records.append(Record(index / rate, name, reason, "", value))
    return records


async def _warm_up(stack: EmbeddedStack, timeout_s: float) -> None:
    """Answered requests before the measured ones: the worker has joined and routes."""
    from app.client import RequestPublisher, all_answered, read_topics
    from bench.poison_records import valid

    ids = [f"warm-{i}" for i in range(5)]
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    try:
        for request_id in ids:
            await publisher.publish(valid(request_id))
        await publisher.flush()
    finally:
        await publisher.stop()
    topics = [stack.topics.responses]
    await read_topics(stack.broker.bootstrap, topics, all_answered(ids, topics[0]), timeout_s, 0)


async def _publish(stack: EmbeddedStack, records: list[Record]) -> list[tuple[Record, Any, float]]:
    """Send each record at its moment; (record, its partition and offset, send time)."""
    from aiokafka import AIOKafkaProducer

    from app.kafka import client_security

    producer = AIOKafkaProducer(
        bootstrap_servers=stack.broker.bootstrap,
        linger_ms=2,
        max_request_size=8 << 20,
        **client_security(),
    )
    await producer.start()
    sent: list[tuple[Record, Any, float]] = []
    started = time.monotonic()
    try:
        for record in records:
            delay = started + record.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            future = await producer.send(stack.topics.requests, value=record.value)
            sent.append((record, future, time.time()))
        await producer.flush()
        return [(record, await future, at) for record, future, at in sent]
    finally:
        await producer.stop()


def _done(valid_ids: set[str], malformed: int, topics: Any) -> Any:
    def done(records: dict[str, list[dict[str, Any]]]) -> bool:
        answered = {r.get("request_id") for r in records[topics.responses]}
        return valid_ids <= answered and len(records[topics.deadletter]) >= malformed

    return done


async def one_run(records: list[Record], args: argparse.Namespace, label: str) -> dict[str, Any]:
    from app.client import read_topics
    from app.embedded.stack import EmbeddedStack

    print(f"{label}: starting the stack", flush=True)
    async with EmbeddedStack(seed=args.seed, time_scale=args.time_scale) as stack:
        await _warm_up(stack, timeout_s=120)
        print(f"{label}: publishing {len(records)} records", flush=True)
        sent = await _publish(stack, records)
        valid_ids = {r.request_id for r in records if r.kind == "valid"}
        malformed = len(records) - len(valid_ids)
        topics = stack.topics
        read = await read_topics(
            stack.broker.bootstrap,
            [topics.responses, topics.deadletter],
            _done(valid_ids, malformed, topics),
            timeout_s=args.timeout,
            linger_s=2.0,
            stamp=True,
        )
        worker = stack.workers[0]
        log = worker.log_path.read_text(encoding="utf-8", errors="replace")
        result = measure(sent, read[topics.responses], read[topics.deadletter])
        result["worker_running_at_end"] = worker.running
        result["worker_log_crash_lines"] = len(CRASH_LINES.findall(log))
        result["worker_log_marker_hits"] = log.count("POISON-MARKER")
    return result


def measure(
    sent: list[tuple[Record, Any, float]],
    responses: list[dict[str, Any]],
    letters: list[dict[str, Any]],
) -> dict[str, Any]:
    by_position = {(d["source"]["partition"], d["source"]["offset"]): d for d in letters}
    kinds: dict[str, Counter[str]] = {}
    sent_at: dict[str, float] = {}
    for record, meta, at in sent:
        if record.kind == "valid":
            sent_at[record.request_id] = at
            continue
        letter = by_position.get((meta.partition, meta.offset))
        count = kinds.setdefault(record.kind, Counter())
        count["records"] += 1
        count["dead_lettered"] += bool(letter and letter.get("reason"))
        count["expected_reason"] += bool(letter and letter.get("reason") == record.reason)
    final = {r["request_id"]: r for r in responses if r["request_id"] in sent_at}
    latencies = sorted(final[i]["_ts"] - sent_at[i] for i in final if final[i]["status"] == "ok")
    malformed = sum(c["records"] for c in kinds.values())
    return {
        "kinds": {name: dict(count) for name, count in kinds.items()},
        "malformed": malformed,
        "dead_lettered": sum(c["dead_lettered"] for c in kinds.values()),
        "expected_reason": sum(c["expected_reason"] for c in kinds.values()),
        "valid": len(sent_at),
        "valid_answered": len(final),
        "valid_ok": len(latencies),
        "valid_errors": Counter(
            (r.get("error") or {}).get("code") for r in final.values() if r["status"] != "ok"
        ),
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))] * 1000 if latencies else None,
    }


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


def markdown(poison: dict[str, Any], clean: dict[str, Any]) -> str:
    lines = [_row("kind", "records", "dead-lettered", "expected reason"), "|---|---:|---:|---:|"]
    for name, c in poison["kinds"].items():
        lines.append(_row(name, c["records"], c["dead_lettered"], c["expected_reason"]))
    bad = poison["malformed"]
    share = 100.0 * poison["dead_lettered"] / max(1, bad)
    ratio = (poison["p50_ms"] or 0) / (clean["p50_ms"] or 1)
    p, c = poison, clean
    lines += [
        "",
        _row("measure", "poison run", "clean run"),
        "|---|---:|---:|",
        _row("malformed dead-lettered", f"{p['dead_lettered']}/{bad} ({share:.2f} %)", "–"),
        _row("… with the expected reason", f"{p['expected_reason']}/{bad}", "–"),
        _row(
            "crash/restart lines in the worker log",
            p["worker_log_crash_lines"],
            c["worker_log_crash_lines"],
        ),
        _row("worker running at the end", p["worker_running_at_end"], c["worker_running_at_end"]),
        _row("record text in the worker log", p["worker_log_marker_hits"], "–"),
        _row("valid requests ok", f"{p['valid_ok']}/{p['valid']}", f"{c['valid_ok']}/{c['valid']}"),
        _row("valid p50 latency", _ms(p["p50_ms"]), _ms(c["p50_ms"])),
        _row("valid p95 latency", _ms(p["p95_ms"]), _ms(c["p95_ms"])),
        _row("p50 poison / clean (goal ≤ 2)", f"{ratio:.2f}", "–"),
    ]
    return "\n".join(lines)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    records = schedule(args.valid, args.rate, args.seed)
    clean_records = [r for r in records if r.kind == "valid"]  # the same moments
    poison = await one_run(records, args, "poison run")
    clean = await one_run(clean_records, args, "clean run")
    return {
        "settings": {k: str(v) for k, v in vars(args).items() if k != "run"},
        "poison": poison,
        "clean": clean,
    }


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(bench(args))
    poison, clean = result["poison"], result["clean"]
    print(markdown(poison, clean))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "poison.json").write_text(
        json.dumps(result, indent=2, default=str), encoding="utf-8"
    )
    ok = (
        poison["dead_lettered"] == poison["malformed"]
        and poison["worker_log_crash_lines"] == 0
        and poison["valid_ok"] == poison["valid"]
        and poison["worker_log_marker_hits"] == 0
    )
    return 0 if ok else 1
