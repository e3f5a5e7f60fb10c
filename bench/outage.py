"""``switchyard bench outage``: seed 003's 47-minute outage, time-compressed, on the live stack.

Four real ``llmock`` servers stand in for seed 003's providers (fixed latency per
provider, p50 of the seed's table scaled down); the embedded broker and a
worker process route between them. After a steady phase, the provider the
router favours answers 503 to everything for 47 simulated minutes, then
recovers. Time is compressed ``--compression`` times (default 60: a simulated
minute is a real second); the breaker timeouts are compressed with it, so
the router sees the incident as it would unfold in real time.

Printed per strategy: availability, first-try success, time to detect (first
decision excluding the dead deployment), time to recover (first success on it
after it returns), attempts sent to it during the outage, and probes per
breaker timeout (attempts decided after detection, per breaker timeout).
Simulated seconds = real seconds x compression.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # imported in run(): `switchyard` imports this module at every start
    from llmock.testing import LLMockServer

    from app.embedded.stack import EmbeddedStack

OUTAGE_MIN = 47.0
BEFORE_MIN = 5.0
AFTER_MIN = 10.0
DEAD = "openai-gpt-4.1"


@dataclass(frozen=True)
class OutageResult:
    strategy: str
    requests: int
    availability: float
    first_try_success: float
    detect_s: float | None
    failures_before_detect: int
    recover_s: float | None
    attempts_to_dead: int
    probes_per_breaker_timeout: float | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compression", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per real second")
    parser.add_argument("--strategies", default="ucb1,composite,adaptive")
    parser.add_argument("--out", type=Path, default=Path("results"))


def _providers_yaml(servers: dict[str, LLMockServer]) -> str:
    from app.embedded.simulated import SEED_003_MODELS

    entries = []
    for model in SEED_003_MODELS:
        entries.append(
            {
                "id": model.provider_id,
                "base_url": servers[model.provider_id].base_url("openai"),
                "cost_per_mtok_input": model.cost_per_mtok_input,
                "cost_per_mtok_output": model.cost_per_mtok_output,
                "max_concurrency": model.max_concurrency,
                "p95_latency_baseline_ms": model.p95_latency_baseline_ms / 20,
                "timeout_ms": 2000,
                "models": [{"name": model.model}],
            }
        )
    ids = [m.provider_id for m in SEED_003_MODELS]
    config = {"providers": entries, "routes": {"chat": {"providers": ids}}, "default_route": "chat"}
    return yaml.safe_dump(config, sort_keys=False)


def _env(strategy: str, compression: float) -> dict[str, str]:
    env = {
        "BANDIT_STRATEGY": strategy,
        "CB_TIMEOUT_S": f"{60.0 / compression:g}",
        "CB_EWMA_OPEN_S": f"{30.0 / compression:g}",
        "SWITCHYARD_TICK_INTERVAL_S": "1",
    }
    if strategy == "composite":
        env["CB_MODE"] = "ewma"
    return env


async def _drive(
    stack: EmbeddedStack, servers: dict[str, LLMockServer], rate: float, compression: float
) -> tuple[list[str], float, float]:
    from llmock.scenarios import Fail

    from app.client import RequestPublisher

    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    ids: list[str] = []
    phases = [(BEFORE_MIN, False), (OUTAGE_MIN, True), (AFTER_MIN, False)]
    marks: list[float] = []
    try:
        for minutes, dead in phases:
            if dead:
                servers[DEAD].state.scenarios.add(Fail(503, times=None))
            else:
                servers[DEAD].state.scenarios.clear()
            marks.append(time.time())
            end = time.monotonic() + minutes * 60.0 / compression
            while time.monotonic() < end:
                request_id = f"outage-{len(ids):06d}"
                ids.append(request_id)
                body = {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
                await publisher.publish(body)
                await asyncio.sleep(1.0 / rate)
        await publisher.flush()
    finally:
        await publisher.stop()
    return ids, marks[1], marks[2]


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(
    strategy: str,
    records: dict[str, list[dict[str, Any]]],
    stack: EmbeddedStack,
    ids: list[str],
    outage: tuple[float, float],
    compression: float,
) -> OutageResult:
    start, end = outage
    dead = f"{DEAD}:gpt-4.1"
    wanted = set(ids)
    responses = {
        r["request_id"]: r for r in records[stack.topics.responses] if r["request_id"] in wanted
    }
    ok = [r for r in responses.values() if r["status"] == "ok"]
    decisions = records[stack.topics.decisions]
    outcomes = records[stack.topics.outcomes]
    excluded_at = [
        _seconds(d["occurred_at"])
        for d in decisions
        if _seconds(d["occurred_at"]) >= start
        and any(e["deployment"] == dead and e["reason"] != "already_tried" for e in d["excluded"])
    ]
    detect = min(excluded_at) - start if excluded_at else None
    back = [
        _seconds(o["occurred_at"])
        for o in outcomes
        if o["deployment"] == dead
        and o["status_class"] == "success"
        and _seconds(o["occurred_at"]) >= end
    ]
    recover = min(back) - end if back else None
    during = [
        o for o in outcomes if o["deployment"] == dead and start <= _seconds(o["occurred_at"]) < end
    ]
    before_detect = [
        o for o in during if detect is None or _seconds(o["occurred_at"]) <= start + detect
    ]
    probes = None
    if detect is not None:
        # A probe is an attempt *decided* once the breaker had excluded the deployment;
        # attempts decided before (still in flight at detection) count as detection cost.
        probe_decisions = [
            d
            for d in decisions
            if d["deployment"] == dead and start + detect < _seconds(d["occurred_at"]) < end
        ]
        timeout_s = (60.0 if strategy != "composite" else 30.0) / compression
        windows = max(1.0, (end - start - detect) / timeout_s)
        probes = len(probe_decisions) / windows
    return OutageResult(
        strategy=strategy,
        requests=len(ids),
        availability=len(ok) / len(ids),
        first_try_success=sum(1 for r in ok if r["attempts"] == 1) / len(ids),
        detect_s=None if detect is None else detect * compression,
        failures_before_detect=len(before_detect),
        recover_s=None if recover is None else recover * compression,
        attempts_to_dead=len(during),
        probes_per_breaker_timeout=probes,
    )


async def run_one(strategy: str, args: argparse.Namespace) -> OutageResult:
    from llmock.chaos import ChaosSettings
    from llmock.testing import LLMockServer

    from app.client import read_topics
    from app.embedded.simulated import SEED_003_MODELS
    from app.embedded.stack import EmbeddedStack

    servers = {
        m.provider_id: LLMockServer(chaos=ChaosSettings(latency_ms=round(m.p50_ms / 20)))
        for m in SEED_003_MODELS
    }
    for server in servers.values():
        server.start()
    try:
        stack = EmbeddedStack(
            env=_env(strategy, args.compression), providers_yaml=_providers_yaml(servers)
        )
        async with stack:
            ids, start, end = await _drive(stack, servers, args.rate, args.compression)
            topics = stack.topics
            wanted = set(ids)

            def done(records: dict[str, list[dict[str, Any]]]) -> bool:
                return wanted <= {r["request_id"] for r in records[topics.responses]}

            records = await read_topics(
                stack.broker.bootstrap,
                [topics.responses, topics.decisions, topics.outcomes],
                done,
                timeout_s=120,
            )
            args.out.mkdir(parents=True, exist_ok=True)
            dump = {"outage": [start, end], "records": records}
            (args.out / f"outage-{strategy}-records.json").write_text(json.dumps(dump))
            return measure(strategy, records, stack, ids, (start, end), args.compression)
    finally:
        for server in servers.values():
            server.stop()


def render(results: list[OutageResult]) -> str:
    def fmt(value: float | None, unit: str = "") -> str:
        return "never" if value is None else f"{value:.1f}{unit}"

    lines = [
        "| strategy | requests | availability | first-try success | detect (failures) | recover "
        "| attempts to dead | probes / breaker timeout |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.strategy} | {r.requests} | {r.availability:.2%} | {r.first_try_success:.2%} "
            f"| {fmt(r.detect_s, ' s')} ({r.failures_before_detect}) "
            f"| {fmt(r.recover_s, ' s')} | {r.attempts_to_dead} "
            f"| {fmt(r.probes_per_breaker_timeout)} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    results = [asyncio.run(run_one(s, args)) for s in args.strategies.split(",")]
    print(
        f"seed 003 outage: {DEAD} down {OUTAGE_MIN:g} simulated minutes, "
        f"compression {args.compression:g}x (times below are simulated seconds)"
    )
    print(render(results))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "outage.json"
    path.write_text(json.dumps([asdict(r) for r in results], indent=2), encoding="utf-8")
    print(f"wrote {path}")
    return 0
