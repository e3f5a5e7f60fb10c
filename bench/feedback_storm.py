"""``switchyard bench feedback``: a feedback storm with live traffic; nothing lost.

On a one-worker embedded stack: ``--base`` requests are answered first; then
``--feedback`` feedback records (default 10,000) go to ``llm.feedback`` at
``--rate`` per second, keyed at random or not at all, while ``--live`` more
requests arrive at ``--live-rate``. Two thirds of the feedback is valid (each a
distinct feedback id on a base request answered ok: graded, or replacing the same
source's grade); of the other third, half is malformed (every kind: not JSON, not an
object, schema violations, both/neither score and label, nesting, huge numbers,
lone surrogates, oversized) and half is for requests that do not exist (unmatched
after ``SWITCHYARD_FEEDBACK_MATCH_GRACE_S``, set to 5 s here).

Reports: valid feedback applied (a ``GradeApplied`` on the routing log with its
feedback id) and lost, malformed dead-lettered with the expected reason,
unmatched dead-lettered as ``unmatched_feedback``, live requests answered and
their latency, crash lines in the worker log, and ``switchyard replay`` of the
whole log (decisions reproduced, grades backed by their feedback). Results go
to ``--out``/feedback_storm.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.pacing import paced

if TYPE_CHECKING:
    from app.embedded.stack import EmbeddedStack

CRASH = ("Crashed", "Traceback", "Restarting")
#: Malformed feedback: (name, expected dead-letter reason, bytes from a seeded index).
MALFORMED: list[tuple[str, str, Any]] = [
    ("not_json", "not_json", lambda i: b"{feedback " + str(i).encode()),
    ("not_object", "not_object", lambda i: json.dumps([i]).encode()),
    ("no_grade", "bad_feedback", lambda i: _fb(f"x-{i}")),
    ("both", "bad_feedback", lambda i: _fb(f"x-{i}", score=1, label="accepted")),
    ("score_range", "schema_violation", lambda i: _fb(f"x-{i}", score=2 + i)),
    ("source", "schema_violation", lambda i: _fb(f"x-{i}", score=1, source="crowd")),
    ("deep", "too_deep", lambda i: b"[" * 80 + b"]" * 80),
    ("big_int", "bad_number", lambda i: b'{"request_id":"x","score":1' + b"0" * 150 + b"}"),
    ("nan", "bad_number", lambda i: b'{"request_id":"x","source":"user","score":NaN}'),
    ("surrogate", "bad_text", lambda i: b'{"request_id":"\\udc00","source":"user","score":1}'),
    ("oversized", "oversized", lambda i: _fb(f"x-{i}", score=1, pad="p" * 20_000)),
]
SOURCES = ("user", "judge", "task", "heuristic")


def _fb(request_id: str, **fields: Any) -> bytes:
    return json.dumps({"request_id": request_id, "source": "user", **fields}).encode()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feedback", type=int, default=10_000, help="feedback records")
    parser.add_argument("--rate", type=float, default=500.0, help="feedback records per second")
    parser.add_argument("--base", type=int, default=1000, help="requests answered before")
    parser.add_argument("--live", type=int, default=600, help="requests during the storm")
    parser.add_argument("--live-rate", type=float, default=30.0, help="live requests per second")
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--time-scale", type=float, default=0.1, help="provider latency scale")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait")
    parser.add_argument("--out", type=Path, default=Path("results"))


def storm(count: int, answered: list[str], seed: int) -> list[tuple[str, str, bytes]]:
    """(kind, expected, value): kind ``valid`` (expected: its feedback id), ``unmatched``
    or a malformed kind (expected: its dead-letter reason); shuffled, seeded."""
    rng = random.Random(seed)
    bad = count // 3
    records: list[tuple[str, str, bytes]] = []
    for i in range(count - bad):
        feedback_id = f"storm-{i:05d}"
        body = _fb(
            answered[i % len(answered)],
            score=round(rng.random(), 3),
            source=SOURCES[(i // len(answered)) % len(SOURCES)],
            feedback_id=feedback_id,
            comment="free text that must go nowhere",
        )
        records.append(("valid", feedback_id, body))
    for i in range(bad - bad // 2):
        records.append(("unmatched", "unmatched_feedback", _fb(f"nobody-{i}", score=0.5)))
    for i in range(bad // 2):
        name, reason, make = MALFORMED[i % len(MALFORMED)]
        records.append((name, reason, make(i)))
    rng.shuffle(records)
    return records


def _chat(request_id: str) -> bytes:
    message = {"role": "user", "content": f"storm {request_id}"}
    return json.dumps({"request_id": request_id, "model": "chat", "messages": [message]}).encode()


async def _send(
    stack: EmbeddedStack, topic: str, values: list[bytes], rate: float, keyed: bool
) -> list[tuple[Any, float]]:
    """Send at ``rate``; (partition/offset metadata, send time) per record."""
    from aiokafka import AIOKafkaProducer

    from app.kafka import client_security

    producer = AIOKafkaProducer(
        bootstrap_servers=stack.broker.bootstrap,
        linger_ms=2,
        max_request_size=1 << 20,
        **client_security(),
    )
    await producer.start()
    rng = random.Random(len(values))
    pending: list[tuple[Any, float]] = []
    try:
        async for index, value in paced(values, rate):
            key = str(rng.random()).encode() if keyed and index % 2 else None
            pending.append((await producer.send(topic, value=value, key=key), time.time()))
        await producer.flush()
        return [(await future, at) for future, at in pending]
    finally:
        await producer.stop()


async def _answers(stack: EmbeddedStack, ids: list[str], timeout_s: float) -> dict[str, Any]:
    from app.client import all_answered, read_topics

    topic = stack.topics.responses
    read = await read_topics(
        stack.broker.bootstrap, [topic], all_answered(ids, topic), timeout_s, 1.0, stamp=True
    )
    return {r["request_id"]: r for r in read[topic]}


def _settled(valid: int, letters: int, topics: Any) -> Any:
    def done(records: dict[str, list[dict[str, Any]]]) -> bool:
        grades = {r.get("feedback_id") for r in records[topics.routing] if "feedback_id" in r}
        return len(grades) >= valid and len(records[topics.deadletter]) >= letters

    return done


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    from app.client import read_topics
    from app.embedded.stack import EmbeddedStack

    env = {"SWITCHYARD_FEEDBACK_MATCH_GRACE_S": "5", "SWITCHYARD_TICK_INTERVAL_S": "2"}
    async with EmbeddedStack(seed=args.seed, time_scale=args.time_scale, env=env) as stack:
        topics = stack.topics
        base = [f"base-{i:05d}" for i in range(args.base)]
        print(f"answering {len(base)} requests first", flush=True)
        await _send(stack, topics.requests, [_chat(i) for i in base], 100.0, keyed=False)
        answered = await _answers(stack, base, args.timeout)
        ok = sorted(i for i, r in answered.items() if r["status"] == "ok")
        records = storm(args.feedback, ok, args.seed)
        live = [f"live-{i:05d}" for i in range(args.live)]
        print(f"storm: {len(records)} feedback records with {len(live)} live requests", flush=True)
        started = time.monotonic()
        live_task = asyncio.create_task(
            _send(stack, topics.requests, [_chat(i) for i in live], args.live_rate, keyed=False)
        )
        sent = await _send(stack, topics.feedback, [r[2] for r in records], args.rate, True)
        live_sent = await live_task
        valid = sum(1 for r in records if r[0] == "valid")
        read = await read_topics(
            stack.broker.bootstrap,
            [topics.routing, topics.deadletter],
            _settled(valid, len(records) - valid, topics),
            args.timeout,
            2.0,
            stamp=True,
        )
        settled_s = time.monotonic() - started
        live_answers = await _answers(stack, live, args.timeout)
        log = stack.workers[0].log_path.read_text(encoding="utf-8", errors="replace")
        result = measure(records, sent, read[topics.routing], read[topics.deadletter])
        result["live"] = _live(live, live_sent, live_answers)
        result["storm_to_settled_s"] = round(settled_s, 1)
        result["worker_crash_lines"] = sum(log.count(word) for word in CRASH)
        result["free_text_in_outputs"] = sum(
            "free text" in json.dumps(r) for r in read[topics.routing] + read[topics.deadletter]
        )
        result["replay"] = await _replay(stack)
    return result


def measure(
    records: list[tuple[str, str, bytes]],
    sent: list[tuple[Any, float]],
    routing: list[dict[str, Any]],
    letters: list[dict[str, Any]],
) -> dict[str, Any]:
    grades = [r for r in routing if r.get("type") == "grade.applied"]
    graded = Counter(g["feedback_id"] for g in grades)
    by_position = {(d["source"]["partition"], d["source"]["offset"]): d for d in letters}
    kinds: dict[str, Counter[str]] = {}
    for (kind, expected, _), (meta, _at) in zip(records, sent, strict=True):
        count = kinds.setdefault(kind, Counter())
        count["records"] += 1
        if kind == "valid":
            count["applied"] += expected in graded
            continue
        letter = by_position.get((meta.partition, meta.offset)) or {}
        count["expected_reason"] += letter.get("reason") == expected
    valid = kinds.get("valid", Counter())
    return {
        "kinds": {name: dict(c) for name, c in sorted(kinds.items())},
        "valid": valid["records"],
        "valid_applied": valid["applied"],
        "valid_lost": valid["records"] - valid["applied"],
        "grade_records": len(grades),
        "grades_distinct": len(graded),
        "replacing": sum(1 for g in grades if g.get("replaces_score") is not None),
        "malformed_or_unmatched": sum(c["records"] for k, c in kinds.items() if k != "valid"),
        "dead_lettered_as_expected": sum(
            c["expected_reason"] for k, c in kinds.items() if k != "valid"
        ),
    }


def _live(ids: list[str], sent: list[tuple[Any, float]], answers: dict[str, Any]) -> dict[str, Any]:
    at = {request_id: when for request_id, (_meta, when) in zip(ids, sent, strict=True)}
    latencies = sorted(answers[i]["_ts"] - at[i] for i in ids if i in answers)
    return {
        "requests": len(ids),
        "answered": sum(1 for i in ids if i in answers),
        "ok": sum(1 for i in ids if answers.get(i, {}).get("status") == "ok"),
        "p50_ms": round(statistics.median(latencies) * 1000) if latencies else None,
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000) if latencies else None,
    }


async def _replay(stack: EmbeddedStack) -> dict[str, Any]:
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "app.cli",
            "replay",
            "--json",
            "--allow-pending",
            "--timeout",
            "300",
        ],
        env=stack.worker_env(0),
        capture_output=True,
        timeout=600,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return {"exit": done.returncode, "error": done.stderr.decode()[-300:]}
    keys = ("ok", "decisions", "reproduced", "mismatched", "grades")
    return {"exit": done.returncode, **{k: report.get(k) for k in keys}}


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(bench(args))
    result["settings"] = {k: str(v) for k, v in vars(args).items() if k != "run"}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "feedback_storm.json"
    path.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "kinds"}, indent=2, default=str))
    live = result["live"]
    ok = (
        result["valid_lost"] == 0
        and result["dead_lettered_as_expected"] == result["malformed_or_unmatched"]
        and live["answered"] == live["requests"]
        and result["worker_crash_lines"] == 0
        and result["replay"].get("exit") == 0
    )
    return 0 if ok else 1
