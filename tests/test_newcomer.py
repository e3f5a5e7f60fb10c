"""A newcomer's first hour, on ``switchyard up`` with no file of theirs: the OpenAI SDK
through the gateway with ``model="auto"`` is answered and its decision says why that
model (the auto trace); the ``model`` an answer reports, sent back, is answered; three
conversations of eight turns sharing a long system prompt stay on the deployment that
cached it (cache affinity) for at least 80 % of their turns after the first."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from up_helpers import Command

from app.client import TopicFollower

pytestmark = pytest.mark.broker
CONVERSATIONS, TURNS = 3, 8
#: A long system prompt every conversation shares (about 1,500 tokens): what a provider's
#: prompt cache holds once it has answered it.
SYSTEM = "You are the assistant of a bicycle repair shop.\n" + "\n".join(
    f"Rule {n}: when a customer asks about part {n}, give its price, its stock and the "
    "time a fit takes, in one short paragraph, and never invent a discount."
    for n in range(1, 41)
)


@pytest.fixture(scope="module")
def up() -> Iterator[dict[str, str]]:
    command = Command("up")
    try:
        found = {name: command.value(name) for name in ("broker", "gateway", "api_key")}
        command.wait_for("worker running", timeout_s=180)
        yield found
    finally:
        command.stop()


def client(up: dict[str, str]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=up["gateway"], api_key=up["api_key"], max_retries=2)


async def decisions(broker: str, request_ids: set[str], timeout_s: float = 60.0) -> list[Any]:
    """The decisions of ``request_ids`` on ``llm.decisions``, once each has one."""
    follower = await TopicFollower(broker, ["llm.decisions"]).start()
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not request_ids <= {d["request_id"] for d in found}:
            for record in await follower.poll():
                decision = json.loads(record.value or b"{}")
                if decision.get("request_id") in request_ids:
                    found.append(decision)
    finally:
        await follower.stop()
    return found


async def test_auto_answers_with_its_trace_and_the_model_it_reports_is_answered(
    up: dict[str, str],
) -> None:
    sdk = client(up)
    try:
        answer = await sdk.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": "Write a Python function that reverses a list."}],
        )
        completion = answer.parse()
        assert completion.choices[0].message.content
        request_id = answer.headers["x-switchyard-request-id"]
        again = await sdk.chat.completions.create(
            model=completion.model, messages=[{"role": "user", "content": "And in Go?"}]
        )
        assert again.choices[0].message.content
        assert again.model == completion.model
    finally:
        await sdk.close()
    (decision,) = [d for d in await decisions(up["broker"], {request_id}) if d["attempt"] == 1]
    auto = decision["auto"]
    assert auto is not None, decision
    assert auto["workload"] == "code" and auto["model"] == completion.model
    assert decision["selection_rule"] == "auto"
    assert decision["deployment"] in auto["inputs"]  # each ranked model's factor inputs
    assert decision["candidates"], decision  # their scores, factor by factor


async def converse(sdk: openai.AsyncOpenAI, number: int) -> list[str]:
    """One conversation: each turn sends the whole conversation so far; its request ids."""
    messages: list[Any] = [{"role": "system", "content": SYSTEM}]
    ids = []
    for turn in range(1, TURNS + 1):
        request_id = f"newcomer-c{number}-t{turn}"
        question = f"Customer {number}, turn {turn}: how much for part {turn + number}?"
        messages.append({"role": "user", "content": question})
        answer = await sdk.chat.completions.create(
            model="chat",
            messages=messages,
            max_tokens=60,
            extra_headers={"x-switchyard-request-id": request_id},
        )
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        ids.append(request_id)
    return ids


async def test_conversations_stay_on_the_deployment_that_cached_their_prompt(
    up: dict[str, str],
) -> None:
    sdk = client(up)
    try:
        talks = await asyncio.gather(*(converse(sdk, n) for n in range(CONVERSATIONS)))
    finally:
        await sdk.close()
    later = {rid for ids in talks for rid in ids[1:]}
    found = await decisions(up["broker"], later)
    firsts = {d["request_id"]: d for d in found if d["attempt"] == 1}
    assert set(firsts) == later
    pinned = [d for d in firsts.values() if d["selection_rule"] == "affinity"]
    share = len(pinned) / len(later)
    print(f"affinity: {len(pinned)} of {len(later)} turns after the first ({share:.0%})")
    assert share >= 0.8, sorted((d["request_id"], d["selection_rule"]) for d in firsts.values())
