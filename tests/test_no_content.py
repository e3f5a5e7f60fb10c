"""No prompt or completion text outside the log, under waiting traffic.

One worker, every deployment at ``max_concurrency: 1`` and the reference latencies
doubled, gets a burst of requests whose prompt carries a unique marker: most of
them must wait for a deployment. While they wait, and again once every one is
answered, the route-state changelog, the worker's log, ``/metrics`` and every
view the worker serves (as it lists them itself, so a new view is covered) are
searched for the marker and for the simulated completion's text.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml
from aiokafka import TopicPartition
from stack_helpers import new_stack, publish

from app.client import TopicFollower
from app.compat.tansu import fetch_max_wait_ms, true_end_offsets
from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.embedded.stack import EmbeddedStack
from app.kafka import standalone_consumer

pytestmark = pytest.mark.broker

MARKER = f"marker-{uuid.uuid4().hex}"
#: A fragment of the simulated providers' canned completion (openai_format.CANNED_COMPLETION).
COMPLETION_TEXT = "No model was run"
TOKEN = f"admin-{uuid.uuid4().hex}"
REQUESTS = 40
#: Four deployments at max_concurrency 1: at most four calls at once, the rest wait.
CAPACITY = 4
#: Sample values for path parameters; ``request_id`` gets a marker request's id.
SAMPLE_PARAMS = {"name": "route-state", "key": "chat", "topic": "llm.requests"}


def one_at_a_time(sim: SimulatedProviders) -> str:
    config = yaml.safe_load(demo_providers_yaml(sim))
    for provider in config["providers"]:
        provider["max_concurrency"] = 1
    return str(yaml.safe_dump(config))


def ask(request_id: str) -> dict[str, Any]:
    text = f"Please summarise this: {MARKER} (request {request_id})"
    return {"request_id": request_id, "messages": [{"role": "user", "content": text}]}


def bad(request_id: str, tail: str) -> bytes:
    head = f'{{"request_id": "{request_id}", "messages": [{{"role": "user", "content": "{MARKER}'
    return (head + tail).encode()


#: Records that never become requests (malformed, and poison records): dead-lettered,
#: and logged by reason and offset only.
MALFORMED = [
    f'{{"not json {MARKER}'.encode(),
    bad("bad-1", '"}], "max_tokens": "many"}'),
    bad("bad-2", ' \\ud800"}]}'),  # a lone surrogate
    bad("bad-3", '"}], "metadata": ' + "[" * 10_000 + "]" * 10_000 + "}"),
    bad("bad-4", '"}], "max_tokens": 1' + "0" * 5_000 + "}"),
]


@dataclass
class Sweep:
    """What one look found: where the marker or the completion text appeared."""

    changelog_records: int = 0
    changelog: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    views: dict[str, int] = field(default_factory=dict)
    view_leaks: list[str] = field(default_factory=list)
    answered_after: int = 0


@dataclass
class Run:
    stack: EmbeddedStack
    port: str
    waiting: Sweep
    done: Sweep
    decisions: list[dict[str, Any]]
    outcomes: list[dict[str, Any]]
    responses: list[dict[str, Any]]


def leaks(text: str) -> list[str]:
    return [needle for needle in (MARKER, COMPLETION_TEXT) if needle in text]


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def read_raw(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of ``topic``, from its beginning to its end now."""
    consumer = standalone_consumer(bootstrap, fetch_max_wait_ms=fetch_max_wait_ms())
    await consumer.start()
    values: list[bytes] = []
    try:
        await consumer._client.force_metadata_update()
        numbers = consumer.partitions_for_topic(topic)
        assert numbers, f"no topic {topic}"
        partitions = [TopicPartition(topic, n) for n in sorted(numbers)]
        consumer.assign(partitions)
        starts = await consumer.beginning_offsets(partitions)
        ends = await true_end_offsets(bootstrap, await consumer.end_offsets(partitions))
        pending = {tp for tp in partitions if ends[tp] > starts[tp]}
        for tp in pending:
            consumer.seek(tp, starts[tp])
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for tp, records in (await consumer.getmany(*pending, timeout_ms=500)).items():
                values.extend(r.value or b"" for r in records if r.offset < ends[tp])
                if records and records[-1].offset + 1 >= ends[tp]:
                    pending.discard(tp)
        assert not pending, f"could not read {topic} to its end"
    finally:
        await consumer.stop()
    return values


def fill(path: str, request_id: str) -> str:
    params = {**SAMPLE_PARAMS, "request_id": request_id}
    return re.sub(r"\{(\w+)[^}]*\}", lambda m: params.get(m.group(1), "x"), path)


async def get_views(port: str, request_id: str) -> tuple[dict[str, int], list[str]]:
    """GET every path the worker serves, with the token: status by path, and any leaks."""
    statuses: dict[str, int] = {}
    found: list[str] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        listing = await client.get("/admin/routes", headers=auth())
        assert listing.status_code == 200, listing.text
        paths = [r["path"] for r in listing.json()["routes"] if "GET" in r["methods"]]
        for path in paths:
            url = fill(path, request_id)
            reply = await client.get(url, headers=auth())
            statuses[path] = reply.status_code
            found.extend(f"{url}: {needle}" for needle in leaks(reply.text))
    return statuses, found


async def sweep(stack: EmbeddedStack, port: str, request_id: str, answered: int) -> Sweep:
    changelog = await read_raw(
        stack.broker.bootstrap, f"switchyard-{stack.namespace}-route-state-changelog"
    )
    statuses, view_leaks = await get_views(port, request_id)
    log = (stack.workdir / "worker-0.log").read_text(encoding="utf-8", errors="replace")
    return Sweep(
        changelog_records=len(changelog),
        changelog=[n for v in changelog for n in leaks(v.decode("utf-8", errors="replace"))],
        log=leaks(log),
        views=statuses,
        view_leaks=view_leaks,
        answered_after=answered,
    )


async def wait_for_web(stack: EmbeddedStack, port: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                await client.get(f"http://127.0.0.1:{port}/metrics")
                return
            except httpx.HTTPError:
                await asyncio.sleep(0.3)
    log = (stack.workdir / "worker-0.log").read_text(encoding="utf-8", errors="replace")
    raise TimeoutError(f"the worker's web server never came up; its log ends:\n{log[-3000:]}")


async def wait_for_changelog(stack: EmbeddedStack, timeout_s: float) -> None:
    topic = f"switchyard-{stack.namespace}-route-state-changelog"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await read_raw(stack.broker.bootstrap, topic):
            return
        await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
async def run(broker: EmbeddedBroker) -> AsyncIterator[Run]:
    env = {
        "SWITCHYARD_ADMIN_TOKEN": TOKEN,
        "SWITCHYARD_WEB_BUILTIN_VIEWS": "true",  # so /table/* is searched too
        "SWITCHYARD_LOG_LEVEL": "debug",  # the most a worker ever logs
    }
    stack = new_stack(broker, "n", time_scale=2.0, seed=17, providers_yaml=one_at_a_time, env=env)
    await stack.start()
    try:
        port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
        await wait_for_web(stack, port)
        ids = [f"nc-{i:03d}" for i in range(REQUESTS)]
        topics = stack.topics
        follower = await TopicFollower(
            stack.broker.bootstrap, [topics.decisions, topics.outcomes, topics.responses]
        ).start()
        seen: dict[str, list[dict[str, Any]]] = {
            t: [] for t in (topics.decisions, topics.outcomes, topics.responses)
        }

        async def drain(timeout_ms: int = 200) -> None:
            for record in await follower.poll(timeout_ms=timeout_ms):
                seen[record.topic].append(json.loads(record.value or b"{}"))

        async def poll_until(done: int, timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while len(seen[topics.responses]) < done and time.monotonic() < deadline:
                await drain()

        try:
            await publish(stack, [*MALFORMED, *(ask(i) for i in ids)])
            await poll_until(1, timeout_s=90)  # a first answer: the rest are waiting
            # Rows are written once per batch of events: wait for the first one to land.
            await wait_for_changelog(stack, timeout_s=20)
            waiting = await sweep(stack, port, ids[-1], 0)
            await drain()
            waiting.answered_after = len(seen[topics.responses])
            await poll_until(REQUESTS, timeout_s=120)
            await drain(timeout_ms=500)
        finally:
            await follower.stop()
        done = await sweep(stack, port, ids[-1], len(seen[topics.responses]))
        yield Run(
            stack,
            port,
            waiting,
            done,
            seen[topics.decisions],
            seen[topics.outcomes],
            seen[topics.responses],
        )
    finally:
        await stack.stop()


async def test_the_requests_really_waited(run: Run) -> None:
    assert {r["request_id"] for r in run.responses} >= {f"nc-{i:03d}" for i in range(REQUESTS)}
    refused = [r for r in run.responses if r["status"] == "error" and r["attempts"] == 0]
    assert refused == []
    # Decided only once a call had finished: they waited for a deployment.
    first_outcome = min(o["occurred_at"] for o in run.outcomes)
    late = [d for d in run.decisions if d["attempt"] == 1 and d["occurred_at"] >= first_outcome]
    assert len(late) >= REQUESTS - CAPACITY
    # The first look happened while requests were still waiting.
    assert run.waiting.answered_after < REQUESTS - CAPACITY
    assert run.waiting.changelog_records > 0


def builtin(leak_or_path: str) -> bool:
    return leak_or_path.startswith(("/table", "/router"))


async def test_no_http_view_and_no_metric_carries_content(run: Run) -> None:
    for look in (run.waiting, run.done):
        assert {"/metrics", "/admin/bandit/stats", "/admin/trace/{request_id}"} <= set(look.views)
        assert look.views["/admin/trace/{request_id}"] == 200
        assert all(status < 500 for status in look.views.values()), look.views
        assert [leak for leak in look.view_leaks if not builtin(leak)] == []


async def test_faust_table_views_carry_no_content_when_enabled(run: Run) -> None:
    for look in (run.waiting, run.done):
        assert "/table/{name}/{key}/" in look.views and "/router/" in look.views
        assert [leak for leak in look.view_leaks if builtin(leak)] == []


async def test_the_worker_log_carries_no_content(run: Run) -> None:
    log = (run.stack.workdir / "worker-0.log").read_text(encoding="utf-8", errors="replace")
    assert "dead-lettered" in log  # the malformed records were logged (by reason and offset)
    assert "bytes redacted" in log  # Faust's and aiokafka's DEBUG lines about each send
    assert run.waiting.log == [] and run.done.log == []


async def test_the_route_state_changelog_carries_no_content(run: Run) -> None:
    assert run.waiting.changelog == [] and run.done.changelog == []


async def test_faust_builtin_views_are_off_by_default(stack: EmbeddedStack) -> None:
    """The ``stack`` fixture's worker runs with default settings: no views of Faust's, and
    no token, so the admin views answer loopback clients (this test) only."""
    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    await wait_for_web(stack, port)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        for path in ("/table/", "/router/", "/table/route-state/", "/graph/", "/performance/"):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.get("/")).json() == {"status": "OK"}
        assert (await client.get("/admin/bandit/stats")).status_code == 200
        routes = (await client.get("/admin/routes")).json()["routes"]
        assert not [r for r in routes if builtin(r["path"])]


async def test_admin_views_need_the_token_and_metrics_do_not(run: Run) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{run.port}", timeout=10) as client:
        paths = ["/admin/bandit/stats", "/admin/routes", "/admin/trace/nc-000", "/table/"]
        for path in [*paths, "/router/", "/table/route-state/chat/"]:
            assert (await client.get(path)).status_code == 401, path
            wrong = await client.get(path, headers=auth("not-the-token"))
            assert wrong.status_code == 401 and TOKEN not in wrong.text
            basic = await client.get(path, headers={"Authorization": f"Basic {TOKEN}"})
            assert basic.status_code == 401
        assert (await client.get("/admin/bandit/stats", headers=auth())).status_code == 200
        assert (await client.get("/table/", headers=auth())).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
    log = (run.stack.workdir / "worker-0.log").read_text(encoding="utf-8", errors="replace")
    assert TOKEN not in log
