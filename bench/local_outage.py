"""``switchyard bench local_outage``: local-first while the local model is down, and back.

The default route asks a local model first (``local_first``, threshold 0.75) and the
simulated cloud providers after it. The local model is a small OpenAI-compatible server
on a fixed loopback port that answers confidently (token log-probabilities of -0.01) in
``--local-ms``; it is stopped for the middle phase and started again on the same port.
Requests arrive at ``--rate`` through the whole run. Per phase (up, down, back) the bench
reports what answered them (the local model or the cloud), the time from the request's
record to its response's (broker timestamps), and the first attempts the router gave
the local model or kept from it (the decision's exclusion reason).

The local model's breaker opens after ``CB_FAILURE_THRESHOLD`` refused connections and
is probed again ``--breaker-timeout-s`` later (``CB_TIMEOUT_S``): the first request after
that on a recovered model finds it back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from app.embedded.simulated import SimulatedProviders

LOCAL = "local-model"
PHASES = ("up", "down", "back")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.embedded.brokers import add_broker_flag

    add_broker_flag(parser)
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second")
    parser.add_argument("--up-s", type=float, default=15.0, help="first phase, model up")
    parser.add_argument("--down-s", type=float, default=30.0, help="the model stopped")
    parser.add_argument("--back-s", type=float, default=30.0, help="the model started again")
    parser.add_argument("--local-ms", type=float, default=20.0, help="the local model's latency")
    parser.add_argument("--breaker-timeout-s", type=float, default=10.0, help="CB_TIMEOUT_S")
    parser.add_argument("--out", type=Path, default=Path("results"))


class LocalModel:
    """A confident OpenAI-compatible chat server on one port, stoppable and restartable."""

    def __init__(self, port: int, latency_s: float) -> None:
        self.port, self.latency_s = port, latency_s
        self.calls = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.Response:
        from aiohttp import web

        self.calls += 1
        await asyncio.sleep(self.latency_s)
        content = [{"token": "ok", "logprob": -0.01}] * 4
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "ok ok ok ok"},
            "finish_reason": "stop",
            "logprobs": {"content": content},
        }
        usage = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
        body = {"id": "local", "object": "chat.completion", "choices": [choice], "usage": usage}
        return web.json_response({**body, "model": "smol", "created": 0})

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def providers_yaml(local: LocalModel) -> Any:
    import yaml

    from app.embedded.simulated import demo_providers_yaml

    def build(sim: SimulatedProviders) -> str:
        config = yaml.safe_load(demo_providers_yaml(sim))
        config["providers"].append(
            {
                "id": LOCAL,
                "base_url": local.base_url,
                "cost_per_mtok": 0.0,
                "max_concurrency": 4,
                "timeout_ms": 10_000,
                "models": [{"name": "smol"}],
            }
        )
        route = config["routes"][config.get("default_route", "chat")]
        route["providers"] = [LOCAL, *route["providers"]]
        route["local_first"] = {"provider": LOCAL, "threshold": 0.75}
        return str(yaml.safe_dump(config))

    return build


async def _publish(publisher: Any, rate: float, until: float, tag: str, sent: list[str]) -> None:
    started, index = time.monotonic(), 0
    while time.monotonic() < until:
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        request_id = f"{tag}-{index:05d}"
        await publisher.publish(
            {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}
        )
        sent.append(request_id)
        index += 1


async def _warm_up(stack: Any, publisher: Any) -> None:
    """One request answered before the phases: the worker is up and the route's row exists."""
    from app.client import all_answered, read_topics

    await publisher.publish(
        {"request_id": "warm-up", "messages": [{"role": "user", "content": "hi"}]}
    )
    await publisher.flush()
    topic = stack.topics.responses
    await read_topics(stack.broker.bootstrap, [topic], all_answered(["warm-up"], topic), 90)


async def local_outage(args: argparse.Namespace) -> dict[str, Any]:
    from app.client import RequestPublisher, all_answered, read_topics
    from app.embedded.broker import free_port
    from app.embedded.stack import EmbeddedStack

    local = LocalModel(free_port(), args.local_ms / 1000)
    await local.start()
    env = {"CB_TIMEOUT_S": f"{args.breaker_timeout_s:g}", "SWITCHYARD_LOG_LEVEL": "warn"}
    stack = EmbeddedStack(
        time_scale=0.05, seed=3, env=env, providers_yaml=providers_yaml(local),
        broker_kind=args.broker,
    )  # fmt: skip
    sent: dict[str, list[str]] = {phase: [] for phase in PHASES}
    calls: dict[str, int] = {}
    async with stack:
        topics = stack.topics
        publisher = await RequestPublisher(stack.broker.bootstrap, topics.requests).start()
        try:
            await _warm_up(stack, publisher)
            for phase, span in zip(PHASES, (args.up_s, args.down_s, args.back_s), strict=True):
                before = local.calls
                if phase == "down":
                    await local.stop()
                if phase == "back":
                    await local.start()
                until = time.monotonic() + span
                await _publish(publisher, args.rate, until, phase, sent[phase])
                calls[phase] = local.calls - before
            await publisher.flush()
        finally:
            await publisher.stop()
        every = [r for ids in sent.values() for r in ids]
        records = await read_topics(
            stack.broker.bootstrap,
            [topics.requests, topics.responses, topics.decisions],
            all_answered(every, topics.responses),
            timeout_s=180,
            stamp=True,
        )
    await local.stop()
    return summarise(records, topics.requests, topics.responses, topics.decisions, sent, calls)


def summarise(
    records: dict[str, list[dict[str, Any]]],
    requests: str,
    responses: str,
    decisions: str,
    sent: dict[str, list[str]],
    calls: dict[str, int],
) -> dict[str, Any]:
    asked = {r["request_id"]: r["_ts"] for r in records[requests]}
    answered = {r["request_id"]: r for r in records[responses]}
    firsts = {d["request_id"]: d for d in records[decisions] if d.get("attempt") == 1}
    result: dict[str, Any] = {}
    for phase, ids in sent.items():
        got = [answered[i] for i in ids if i in answered]
        waits = sorted(1000 * (answered[i]["_ts"] - asked[i]) for i in ids if i in answered)
        kept_from_local = Counter(
            e.get("reason")
            for i in ids
            for e in firsts.get(i, {}).get("excluded", [])
            if str(e.get("deployment", "")).startswith(LOCAL)
        )
        result[phase] = {
            "requests": len(ids),
            "answered": len(got),
            "ok": sum(r["status"] == "ok" for r in got),
            "by_local": sum(str(r.get("deployment", "")).startswith(LOCAL) for r in got),
            "by_cloud": sum(not str(r.get("deployment", "")).startswith(LOCAL) for r in got),
            "first_attempt_local": sum(
                str(firsts.get(i, {}).get("deployment", "")).startswith(LOCAL) for i in ids
            ),
            "local_kept_out": dict(kept_from_local),
            "local_model_calls": calls.get(phase, 0),
            "ms_p50": round(statistics.median(waits), 1) if waits else None,
            "ms_p95": round(waits[int(0.95 * (len(waits) - 1))], 1) if waits else None,
            "ms_max": round(waits[-1], 1) if waits else None,
        }
    return result


def render(result: dict[str, Any]) -> str:
    head = (
        "| phase | requests | answered ok | by local / cloud | 1st attempt local "
        "| kept out (reason) | ms p50 / p95 / max |"
    )
    lines = [head, "|---|---:|---:|---|---:|---|---|"]
    for phase, row in result.items():
        reasons = ", ".join(f"{k} {v}" for k, v in row["local_kept_out"].items()) or "-"
        lines.append(
            f"| {phase} | {row['requests']} | {row['ok']}/{row['answered']} | "
            f"{row['by_local']} / {row['by_cloud']} | {row['first_attempt_local']} | {reasons} | "
            f"{row['ms_p50']} / {row['ms_p95']} / {row['ms_max']} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(local_outage(args))
    print(render(result))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "local_outage.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    every = all(row["answered"] == row["requests"] for row in result.values())
    return 0 if every and all(row["ok"] == row["answered"] for row in result.values()) else 1
