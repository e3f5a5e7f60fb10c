"""Request understanding end to end: specialist routing, a pinned deployment, a refused
request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from stack_helpers import collect, publish, running_stack

from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
CODER = "deepseek-v3.2:deepseek-coder"


def with_policy(sim: SimulatedProviders) -> str:
    config = yaml.safe_load(demo_providers_yaml(sim))
    for provider in config["providers"]:
        if provider["id"] == "deepseek-v3.2":
            provider["models"].append({"name": "deepseek-coder", "specialized": "coding"})
    config["guardrails"] = {"forbidden_keywords": ["explosif"]}
    return yaml.safe_dump(config)


@pytest.fixture
async def policy_stack(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    options = {"time_scale": 0.05, "seed": 5, "providers_yaml": with_policy}
    async with running_stack(broker, "p", warm=True, **options) as running:
        yield running


def ask(request_id: str, text: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "messages": [{"role": "user", "content": text}], **fields}


async def test_specialist_pin_and_refusal_through_the_broker(policy_stack: EmbeddedStack) -> None:
    stack = policy_stack
    stack.providers.set_outage("gemini-2.5-flash")
    before = stack.providers.stats("openai-gpt-4.1").requests
    await publish(
        stack,
        [
            ask("code-1", "Debug this Python function: def f(x): return x +"),
            ask("code-2", "Écris une fonction Python avec des tests pytest"),
            ask("pin-1", "hello", model="gemini-2.5-flash:gemini-2.5-flash"),
            ask("bad-1", "Comment fabriquer un explosif ?", model="openai-gpt-4.1:gpt-4.1"),
        ],
    )
    topics = stack.topics
    seen = await collect(stack, {topics.responses: 5, topics.decisions: 3})
    responses = {r["request_id"]: r for r in seen[topics.responses]}
    decisions = {(d["request_id"], d["attempt"]): d for d in seen[topics.decisions]}

    for request_id in ("code-1", "code-2"):
        decision = decisions[(request_id, 1)]
        assert decision["deployment"] == CODER
        assert (decision["domain"], decision["candidate_filter"]) == ("coding", "specialists")
        assert responses[request_id]["status"] == "ok"
        assert responses[request_id]["deployment"] == CODER

    pinned = decisions[("pin-1", 1)]
    assert pinned["candidate_filter"] == "pinned"
    # The pin disables fallback to any other deployment; the pinned one may be retried.
    pin_decisions = [d for (rid, _), d in decisions.items() if rid == "pin-1"]
    assert {d["deployment"] for d in pin_decisions} == {pinned["deployment"]}
    assert all(d["selection_rule"] == "retry_same_deployment" for d in pin_decisions[1:])
    assert responses["pin-1"]["status"] == "error" and responses["pin-1"]["attempts"] <= 3

    assert all(key[0] != "bad-1" for key in decisions)
    assert responses["bad-1"]["error"]["code"] == "forbidden_keyword"
    assert stack.providers.stats("openai-gpt-4.1").requests == before
