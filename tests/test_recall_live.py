"""The live router past its memory bound: waiting requests are read back from the log.

One worker whose router may keep only a few kilobytes of waiting requests per
route, four deployments at ``max_concurrency: 1``, a burst of requests: most
of them wait in the routing log, the router reads them back from the topic
when their turn comes (``switchyard_router_recalls_total``), and every one is
answered ok — none refused for capacity.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
import yaml
from stack_helpers import chat, collect, publish, running_stack, warm_up

from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
REQUESTS = 60


def one_at_a_time(sim: SimulatedProviders) -> str:
    config = yaml.safe_load(demo_providers_yaml(sim))
    for provider in config["providers"]:
        provider["max_concurrency"] = 1
    return str(yaml.safe_dump(config))


@pytest.fixture
async def small_memory(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    env = {"SWITCHYARD_RECALL_MEMORY_BYTES": "2000"}  # about three requests
    options = {"time_scale": 0.05, "seed": 3, "providers_yaml": one_at_a_time, "env": env}
    async with running_stack(broker, "r", **options) as stack:
        yield stack


async def recalls(port: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5)).text
    found = re.findall(r'^switchyard_router_recalls_total\{kind="line"\} (\S+)$', text, re.M)
    return float(found[0]) if found else 0.0


async def test_a_burst_past_the_memory_bound_is_read_back_and_answered(
    small_memory: EmbeddedStack,
) -> None:
    stack = small_memory
    await warm_up(stack)
    ids = [f"burst-{i:03d}" for i in range(REQUESTS)]
    await publish(stack, [chat(i) for i in ids])
    seen = await collect(stack, {stack.topics.responses: REQUESTS + 1}, timeout_s=180)
    answers = {r["request_id"]: r for r in seen[stack.topics.responses]}
    missing = [i for i in ids if i not in answers]
    assert not missing, f"unanswered: {missing[:5]}"
    errors = {i: answers[i]["error"] for i in ids if answers[i]["status"] != "ok"}
    assert not errors, f"{len(errors)} errors, e.g. {next(iter(errors.items()))}"
    worker_port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    assert await recalls(worker_port) > 0
