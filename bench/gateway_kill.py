"""``switchyard bench gateway --kill``: SIGKILL the gateway under load; is anything lost?

The embedded stack (one worker) behind ``switchyard gateway`` in its own process, a mock
provider answering in ``--kill-latency-ms`` (500: about ten requests in flight at any
time); ``--kill-requests`` (1,000) requests at ``--kill-rate`` (20 req/s), one in
five streamed, each with its own ``x-switchyard-request-id``, through the official SDK
(``max_retries=0``). A quarter of the way in the gateway is SIGKILLed and a new one
started on the same port and reply partition.

A request refused at connect (no gateway listening) was never sent: the client tries it
again shortly (the recovery any client has). A request cut by the kill may or may not
have been published: the client looks it up by id, and sends it again only if it is on
no gateway's log after 20 s. Then every request must be answered on ``llm.responses``
and retrievable by id (``GET /v1/switchyard/requests/{id}``) from the new gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from app.client import all_answered, read_topics
from app.embedded.broker import free_port
from app.embedded.stack import EmbeddedStack
from app.gateway.run import LOCAL_KEY
from bench.gateway_load import MESSAGES
from bench.gateway_sides import Process, bench_run, start_gateway, wait_healthy

#: How long a refused request keeps being tried again (the new gateway starting).
REFUSED_FOR_S = 30.0
#: How long a cut request is looked for on the log before it is sent again.
CUT_LOOKUP_S = 20.0


def run_kill(args: argparse.Namespace) -> int:
    summary = asyncio.run(_bench(args))
    for line in report(summary):
        print(line)
    if args.json:
        print(json.dumps(summary))
    return 0 if summary["lost"] == 0 else 1


class Load:
    """The requests and what became of each at the client."""

    def __init__(self, url: str, count: int) -> None:
        import openai

        self.url = url
        self.sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=LOCAL_KEY, max_retries=0)
        run = uuid.uuid4().hex[:6]
        self.ids = [f"kill-{run}-{i:04d}" for i in range(count)]
        #: What became of each request the first time it was sent.
        self.fate: dict[str, str] = {}
        #: Of the requests sent again (cut before they were published).
        self.again: dict[str, str] = {}
        self.refused: Counter[str] = Counter()

    async def one(self, index: int, again: bool = False) -> None:
        import openai

        rid = self.ids[index]
        fates = self.again if again else self.fate
        deadline = time.monotonic() + REFUSED_FOR_S
        while True:
            try:
                await self._ask(rid, streamed=index % 5 == 0)
                fates[rid] = "answered"
                return
            except openai.APIConnectionError as exc:
                if _refused(exc) and time.monotonic() < deadline:
                    self.refused[rid] += 1  # nothing was sent: try again
                    await asyncio.sleep(0.2)
                    continue
                fates[rid] = "cut"
                return
            except openai.APIError as exc:
                fates[rid] = f"error {getattr(exc, 'status_code', None) or exc.code}"
                return

    async def _ask(self, rid: str, streamed: bool) -> None:
        asked: dict[str, Any] = {
            "model": "chat",
            "messages": MESSAGES,
            "max_tokens": 16,
            "extra_headers": {"x-switchyard-request-id": rid},
        }
        if not streamed:
            await self.sdk.chat.completions.create(**asked)
            return
        stream = await self.sdk.chat.completions.create(**asked, stream=True)
        async for _ in stream:
            pass


def _refused(exc: BaseException) -> bool:
    """A connection refused: the request was never sent (whichever httpx the SDK uses)."""
    cause = exc.__cause__
    return cause is not None and any(k.__name__ == "ConnectError" for k in type(cause).__mro__)


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    async with bench_run("switchyard-bench-gateway-kill-") as run:
        stack = await run.start_stack(run.mock(args.kill_latency_ms))
        port = free_port()
        run.processes.append(start_gateway(stack, run.workdir, port))
        url = f"http://127.0.0.1:{port}"
        await _ready(url, run.processes[-1])
        return await _measure(args, stack, url, run.workdir, run.processes)


async def _ready(url: str, gateway: Process) -> None:
    await wait_healthy(f"{url}/readyz", gateway)
    load = Load(url, 1)
    try:
        for _ in range(120):  # until the worker has joined
            await load.one(0)
            if load.fate.get(load.ids[0]) == "answered":
                return
            await asyncio.sleep(0.5)
    finally:
        await load.sdk.close()
    raise TimeoutError("the stack never answered")


async def _measure(
    args: argparse.Namespace,
    stack: EmbeddedStack,
    url: str,
    workdir: Path,
    processes: list[Process],
) -> dict[str, Any]:
    load = Load(url, args.kill_requests)
    kill_at = args.kill_requests // 4
    started = time.monotonic()
    tasks = []
    restart = None
    for index in range(args.kill_requests):
        due = started + index / args.kill_rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if index == kill_at:  # the load goes on while the new gateway starts
            restart = asyncio.create_task(_kill_and_restart(stack, url, workdir, processes))
        tasks.append(asyncio.create_task(load.one(index)))
    await asyncio.gather(*tasks)
    load_s = time.monotonic() - started
    downtime = await restart if restart is not None else {}
    cut_on_log, resent = await _recover_cut(load, stack)
    answers = await _responses(stack, load.ids)
    found = await _found_by_id(url, load.ids)
    await load.sdk.close()
    missing = [rid for rid in load.ids if answers.get(rid) != "ok"]
    return {
        "requests": args.kill_requests,
        "rate": args.kill_rate,
        "latency_ms": args.kill_latency_ms,
        "load_s": round(load_s, 1),
        "killed_at_request": kill_at,
        **downtime,
        "client": dict(Counter(load.fate.values())),
        "refused_then_sent": len(load.refused),
        "cut_on_log": cut_on_log,
        "cut_resent": resent,
        "resent": dict(Counter(load.again.values())),
        "on_llm_responses_ok": sum(v == "ok" for v in answers.values()),
        "duplicates_on_llm_responses": answers.get("_duplicates", 0),
        "retrievable_by_id": found,
        "lost": len(missing) + (args.kill_requests - found),
        "missing_sample": missing[:5],
    }


async def _kill_and_restart(
    stack: EmbeddedStack, url: str, workdir: Path, processes: list[Process]
) -> dict[str, float]:
    """SIGKILL the gateway, start a new one on the same port and partition."""
    killed = time.monotonic()
    processes[-1].kill()
    port = int(url.rsplit(":", 1)[1])
    processes.append(start_gateway(stack, workdir, port))
    await wait_healthy(f"{url}/readyz", processes[-1])
    return {"gateway_down_s": round(time.monotonic() - killed, 2)}


async def _recover_cut(load: Load, stack: EmbeddedStack) -> tuple[int, int]:
    """Cut requests: on the log (answered there), or never published (sent again)."""
    cut = [rid for rid, fate in load.fate.items() if fate == "cut"]
    if not cut:
        return 0, 0
    answers = await _responses(stack, cut, timeout_s=CUT_LOOKUP_S)
    again = [rid for rid in cut if rid not in answers]
    await asyncio.gather(*(load.one(load.ids.index(rid), again=True) for rid in again))
    return len(cut) - len(again), len(again)


async def _responses(
    stack: EmbeddedStack, ids: list[str], timeout_s: float = 90.0
) -> dict[str, Any]:
    """Each request's status on ``llm.responses`` (and how many duplicates there were)."""
    topic = stack.topics.responses
    records = await read_topics(
        stack.broker.bootstrap, [topic], all_answered(ids, topic), timeout_s
    )
    wanted = set(ids)
    statuses: dict[str, Any] = {}
    seen: Counter[str] = Counter()
    for record in records[topic]:
        rid = record.get("request_id")
        if rid in wanted:
            seen[record["id"]] += 1
            statuses.setdefault(rid, record.get("status"))
    statuses["_duplicates"] = sum(n - 1 for n in seen.values())
    return statuses


async def _found_by_id(url: str, ids: list[str]) -> int:
    """How many answers the new gateway finds by id (ok answers)."""
    limit = asyncio.Semaphore(8)
    auth = {"Authorization": f"Bearer {LOCAL_KEY}"}

    async def one(http: httpx.AsyncClient, rid: str) -> bool:
        async with limit:
            found = await http.get(f"{url}/v1/switchyard/requests/{rid}", headers=auth)
            return found.status_code == 200 and found.json().get("status") == "ok"

    async with httpx.AsyncClient(timeout=30) as http:
        return sum(await asyncio.gather(*(one(http, rid) for rid in ids)))


def report(summary: dict[str, Any]) -> list[str]:
    return [
        f"{summary['requests']} requests at {summary['rate']:g} req/s over {summary['load_s']} s "
        f"(one in five streamed, {summary['latency_ms']} ms mock); gateway SIGKILLed at "
        f"request {summary['killed_at_request']}, "
        f"a new one ready {summary.get('gateway_down_s')} s later",
        f"client: {summary['client']}; refused at connect then sent: "
        f"{summary['refused_then_sent']}; cut by the kill: {summary['cut_on_log']} on the log "
        f"(published, answered there), {summary['cut_resent']} not (never published: sent "
        f"again, {summary['resent']})",
        f"llm.responses: {summary['on_llm_responses_ok']}/{summary['requests']} ok "
        f"({summary['duplicates_on_llm_responses']} duplicate records); retrievable by id: "
        f"{summary['retrievable_by_id']}/{summary['requests']}",
        f"lost: {summary['lost']}"
        + (f" e.g. {summary['missing_sample']}" if summary["lost"] else ""),
    ]
