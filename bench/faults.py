"""``switchyard bench faults``: how the gateway conducts itself when providers misbehave.

The fault provider (bench/fault_provider.py, its own process) serves one scenario per
deployment; the embedded stack (one worker) routes one route per scenario, each the
target of a dynamic route's model node with ``fallback_models: [fb-ok]`` (a healthy
deployment of the same provider; ``--fallback-prefill`` declares it ``prefill: true``, so
a broken stream is continued from a prefill rather than restarted), and the gateway runs
in front of it. ``rejects_prefill``'s primary cuts its stream like ``stream_cut`` and its
fallback, ``fb-rejects_prefill``, is declared ``prefill: true`` but answers a prefill with
a 400: the continuation must learn that and restart. Every scenario's
requests (``--requests`` streamed and as many not, at most ``--concurrency`` at once;
the scenarios side by side, their starts ``--stagger-s`` apart) go through the gateway
with ``openai.AsyncOpenAI`` (``max_retries=0``, ``--timeout``). ``flapping``'s are spread
over 1.25 × its 503 time, so some arrive after it recovers.

For each scenario and mode: what the client got (bench/faults_client.py's classes),
wall time p50/max, the calls the provider counted for the primary and the fallback, the
attempts' outcomes read back from ``llm.outcomes``, and a verdict (bench/faults_report.py);
then a replay of the whole log (every scenario's decisions and answers re-derived).
A Markdown table is printed; ``--json PATH`` writes every request's record.
Everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.client import TopicFollower
from app.embedded.broker import free_port
from app.embedded.brokers import add_broker_flag
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway
from bench.fault_answer import request_key
from bench.fault_provider import SCENARIOS, FaultOptions, add_options
from bench.faults_client import Result, messages_for, one_request
from bench.faults_report import report, summarise
from bench.gateway_sides import Process

API_KEY = "sk-switchyard-faults"
KEY_NAME = "faults"
FALLBACK = "fb-ok"
#: Scenarios whose primary plays another scenario's fault, and their own fallback model.
PRIMARY_PLAYS = {"rejects_prefill": "stream_cut"}
FALLBACK_OF = {"rejects_prefill": "fb-rejects_prefill"}


def fallback_of(scenario: str) -> str:
    return FALLBACK_OF.get(scenario, FALLBACK)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=4, help="per scenario and mode (4)")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated subset (all)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="client timeout, s (60)")
    parser.add_argument("--concurrency", type=int, default=8, help="per scenario (8)")
    parser.add_argument(
        "--stagger-s", type=float, default=0.5, help="between two scenarios' starts (0.5)"
    )
    parser.add_argument(
        "--error-bound-s", type=float, default=15.0, help="a clean error comes within (15)"
    )
    parser.add_argument(
        "--provider-timeout-ms", type=int, default=30_000, help="each deployment's (30000)"
    )
    parser.add_argument("--json", metavar="PATH", default=None, help="write the records here")
    parser.add_argument(
        "--fallback-prefill",
        action="store_true",
        help="declare fb-ok prefill: true (a broken stream continues from a prefill)",
    )
    add_broker_flag(parser)
    add_options(parser)  # --rate-limited-calls, --slow-first-token-s, --flap-s, --token-ms


def run(args: argparse.Namespace) -> int:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown or not scenarios:
        print(f"switchyard bench faults: unknown scenario(s) {unknown}", file=sys.stderr)
        return 2
    summary = asyncio.run(_bench(args, scenarios))
    for line in report(summary):
        print(line)
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
        print(f"records: {path}")
    return 0


def model_switch(models: dict[str, tuple[str, str]], otherwise: str) -> dict[str, Any]:
    """The nodes of a dynamic route that sends a request for each model of ``models`` to its
    (target route, fallback model), asking ``is-{model}`` one after the other from the first,
    and any other request to ``otherwise`` (node ``plain``)."""
    names = list(models)
    nodes: dict[str, Any] = {}
    for index, name in enumerate(names):
        target, fallback = models[name]
        nodes[f"is-{name}"] = {
            "kind": "condition",
            "when": {"model": name},
            "true": f"to-{name}",
            "false": f"is-{names[index + 1]}" if index + 1 < len(names) else "plain",
        }
        nodes[f"to-{name}"] = {"kind": "model", "target": target, "fallback_models": [fallback]}
    nodes["plain"] = {"kind": "model", "target": otherwise}
    return nodes


def providers_yaml(
    base_url: str, scenarios: list[str], timeout_ms: int, *, fallback_prefill: bool = False
) -> str:
    """One deployment and route per scenario and per fallback, and the dynamic route that
    sends each scenario's model to its route with its fallback model."""

    def provider(provider_id: str, model: str, plays: str, prefill: bool) -> dict[str, Any]:
        return {
            "id": provider_id,
            "base_url": f"{base_url}/{plays}/v1",
            "timeout_ms": timeout_ms,
            "prefill": prefill,
            "models": [{"name": model}],
        }

    fallbacks = sorted({fallback_of(s) for s in scenarios} | {FALLBACK})
    providers = [provider(s, s, PRIMARY_PLAYS.get(s, s), False) for s in scenarios]
    providers += [
        provider(f, f.removeprefix("fb-"), f, fallback_prefill or f != FALLBACK) for f in fallbacks
    ]
    routes = {s: {"providers": [s]} for s in [*scenarios, *fallbacks]}
    nodes = model_switch({s: (s, fallback_of(s)) for s in scenarios}, FALLBACK)
    graph = {"bind": [{"api_key": KEY_NAME}], "start": f"is-{scenarios[0]}", "nodes": nodes}
    document = {
        "providers": providers,
        "routes": routes,
        "default_route": FALLBACK,
        "dynamic_routes": {"faults": graph},
        "gateway_keys": [{"sha256": hash_key(API_KEY), "name": KEY_NAME}],
    }
    return str(yaml.safe_dump(document, sort_keys=False))


def _provider_process(workdir: Path, args: argparse.Namespace) -> tuple[Process, str]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "bench.fault_provider",
        str(port),
        f"--rate-limited-calls={args.rate_limited_calls}",
        f"--slow-first-token-s={args.slow_first_token_s}",
        f"--flap-s={args.flap_s}",
        f"--token-ms={args.token_ms}",
    ]
    return Process("fault-provider", command, dict(os.environ), workdir), f"http://127.0.0.1:{port}"


async def _bench(args: argparse.Namespace, scenarios: list[str]) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-faults-"))
    processes: list[Process] = []
    stack: EmbeddedStack | None = None
    gateway: RunningGateway | None = None
    began = time.monotonic()
    try:
        provider, base_url = _provider_process(workdir, args)
        processes.append(provider)
        async with httpx.AsyncClient(base_url=base_url) as control:
            await _wait_up(control, provider)
            yaml_text = providers_yaml(
                base_url,
                scenarios,
                args.provider_timeout_ms,
                fallback_prefill=args.fallback_prefill,
            )
            (workdir / "stack").mkdir()
            stack = EmbeddedStack(
                workdir=workdir / "stack", providers_yaml=yaml_text, broker_kind=args.broker
            )
            await stack.start(workers=1)
            gateway = await start_gateway(stack.gateway_settings(0))
            results = await _drive(args, scenarios, gateway.url, control)
            calls = (await control.get("/_faults/calls")).json()
        outcomes = await _outcomes(stack, {r.request_id for r in results})
        summary = _summary(args, scenarios, results, calls, outcomes)
        summary["replay"] = await _replay(stack)
        summary["bench_s"] = round(time.monotonic() - began, 1)
        return summary
    finally:
        if gateway is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(gateway.stop(), timeout=5.0)
        if stack is not None:
            await stack.stop()
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def _wait_up(control: httpx.AsyncClient, provider: Process) -> None:
    for _ in range(100):
        if provider.popen.poll() is not None:
            raise RuntimeError("the fault provider exited; see its log")
        with contextlib.suppress(httpx.TransportError):
            await control.get("/_faults/calls", timeout=1.0)
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the fault provider did not listen within 10 s")


async def _drive(
    args: argparse.Namespace, scenarios: list[str], gateway_url: str, control: httpx.AsyncClient
) -> list[Result]:
    import openai

    client = openai.AsyncOpenAI(
        base_url=f"{gateway_url}/v1", api_key=API_KEY, max_retries=0, timeout=args.timeout
    )
    try:
        await _ready(client)
        await control.post("/_faults/reset")  # counts from zero; flapping's clock starts
        origin = time.monotonic()
        tag = uuid.uuid4().hex[:6]
        runs = [
            _scenario(client, args, s, tag, origin, i * args.stagger_s)
            for i, s in enumerate(scenarios)
        ]
        return [r for rs in await asyncio.gather(*runs) for r in rs]
    finally:
        await client.close()


async def _ready(client: Any, timeout_s: float = 90.0) -> None:
    """Until the healthy route answers (the worker joining takes a while)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.chat.completions.create(
                model=FALLBACK, messages=[{"role": "user", "content": "warm-up"}], timeout=10.0
            )
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _scenario(
    client: Any, args: argparse.Namespace, scenario: str, tag: str, origin: float, offset: float
) -> list[Result]:
    gate = asyncio.Semaphore(max(1, args.concurrency))
    count = max(1, args.requests) * 2
    spread = 1.25 * args.flap_s / max(1, count - 1) if scenario == "flapping" else 0.0

    async def one(index: int) -> Result:
        mode = "json" if index % 2 == 0 else "stream"
        request_id = f"faults.{tag}.{scenario}.{mode}.{index // 2}"
        await asyncio.sleep(max(0.0, origin + offset + index * spread - time.monotonic()))
        async with gate:
            result = Result(scenario, mode, index // 2, request_id)
            return await one_request(
                client,
                result,
                timeout_s=args.timeout,
                error_bound_s=args.error_bound_s,
                origin=origin,
            )

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _outcomes(
    stack: EmbeddedStack, request_ids: set[str], idle_s: float = 3.0, max_s: float = 20.0
) -> dict[str, list[dict[str, Any]]]:
    """The attempts' outcomes of ``request_ids`` on ``llm.outcomes``, read until quiet."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    follower = await TopicFollower(stack.broker.bootstrap, [stack.topics.outcomes]).start()
    try:
        deadline, quiet_since = time.monotonic() + max_s, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < idle_s:
            for record in await follower.poll(timeout_ms=500):
                quiet_since = time.monotonic()
                outcome = json.loads(record.value)
                if outcome.get("request_id") in request_ids:
                    found[outcome["request_id"]].append(outcome)
    finally:
        await follower.stop()
    return found


async def _replay(stack: EmbeddedStack) -> dict[str, Any]:
    """Replay the whole log under the stack's policy: decisions and answers re-derived."""
    from app.audit.log import read_broker
    from app.audit.replay import replay
    from app.policy.files import load_config
    from app.routing.policy import Policy

    log = await read_broker(stack.broker.bootstrap, stack.topics)
    report = replay(log, Policy(config=load_config(stack.providers_file)), allow_pending=True)
    return {
        "ok": report.ok,
        "decisions": report.recorded,
        "reproduced": report.reproduced,
        "responses": report.responses_recorded,
        "responses_reproduced": report.responses_reproduced,
        "mismatched": report.mismatched,
    }


def _summary(
    args: argparse.Namespace,
    scenarios: list[str],
    results: list[Result],
    calls: dict[str, Any],
    outcomes: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    counted = {(c["name"], c["key"]): c["calls"] for c in calls["calls"]}
    for result in results:
        key = request_key(messages_for(result.request_id))
        primary = PRIMARY_PLAYS.get(result.scenario, result.scenario)
        result.extra["calls_primary"] = counted.get((primary, key), 0)
        result.extra["calls_fallback"] = counted.get((fallback_of(result.scenario), key), 0)
        seen = sorted(outcomes.get(result.request_id, []), key=lambda o: o.get("attempt", 0))
        result.extra["outcomes"] = [
            {k: o.get(k) for k in ("attempt", "deployment", "status_class", "http_status", "final")}
            for o in seen
        ]
    options = FaultOptions(
        rate_limited_calls=args.rate_limited_calls,
        slow_first_token_s=args.slow_first_token_s,
        flap_s=args.flap_s,
        token_s=args.token_ms / 1000.0,
    )
    flapping_log = [c for c in calls["log"] if c["name"] == "flapping"]
    return {
        "settings": {
            "requests_per_mode": args.requests,
            "concurrency": args.concurrency,
            "stagger_s": args.stagger_s,
            "client_timeout_s": args.timeout,
            "error_bound_s": args.error_bound_s,
            "provider_timeout_ms": args.provider_timeout_ms,
            "fallback_prefill": args.fallback_prefill,
            "broker": args.broker,
            "faults": vars(options),
        },
        "scenarios": summarise(scenarios, results, flapping_log, args.flap_s),
        "requests": [r.as_dict() for r in results],
    }
