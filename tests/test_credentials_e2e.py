"""Bring your own key, end to end: through the gateway with the official ``openai`` SDK,
a tenant's sealed key is the one the provider is called with; a key refused by the
provider falls back to the managed key where the credential says so, and fails where
it does not; the outcome names the credential and whose key answered; and the canary
secret is in no topic, no worker log line and no metric."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import yaml
from aiohttp import web
from aiokafka.admin import AIOKafkaAdminClient
from stack_helpers import provider_and_gateway

from app.client import read_raw, read_topics
from app.credentials import new_master_key, seal
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway

pytestmark = pytest.mark.broker

CANARY = "sk-canary-BYOK-" + uuid.uuid4().hex
MANAGED = "sk-managed-" + "m" * 20
KEYS = {"own": "sk-test-byok-own-" + "o" * 20, "strict": "sk-test-byok-strict-" + "s" * 20}
MASTER = new_master_key()
WORKER_ENV = {"SWITCHYARD_CREDENTIALS_KEY": MASTER, "SWITCHYARD_LOG_LEVEL": "DEBUG"}
#: The Authorization header each provider was called with, in order.
CALLED: list[tuple[str, str]] = []


async def _answer(request: web.Request) -> web.Response:
    provider = request.match_info["provider"]
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    CALLED.append((provider, token))
    if provider == "refusing" and token == CANARY:
        error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)
    message = {"role": "assistant", "content": f"answered by {provider}"}
    return web.json_response(
        {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}
    )  # fmt: skip


def _config(base_url: str) -> str:
    sealed = seal(CANARY, MASTER)
    providers = [
        {"id": p, "base_url": f"{base_url}/{p}/v1", "api_key": MANAGED, "models": [{"name": "m"}]}
        for p in ("accepting", "refusing")
    ]
    document = {
        "providers": providers,
        "routes": {p["id"]: {"providers": [p["id"]]} for p in providers},
        "default_route": "accepting",
        "credentials": [
            {"id": "acme-accepting", "provider": "accepting", "tenant": "acme", "sealed": sealed},
            {"id": "acme-refusing", "provider": "refusing", "tenant": "acme", "sealed": sealed,
             "fallback": "managed"},
            {"id": "strict-refusing", "provider": "refusing", "key": "strict", "sealed": sealed},
        ],
        "gateway_keys": [
            {"sha256": hash_key(KEYS["own"]), "name": "own", "tenant": "acme"},
            {"sha256": hash_key(KEYS["strict"]), "name": "strict", "tenant": "acme"},
        ],
    }  # fmt: skip
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, stack: EmbeddedStack, gateway: RunningGateway) -> None:
        self.stack, self.gateway = stack, gateway

    def client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.gateway.url}/v1", api_key=KEYS[key], max_retries=0, timeout=30
        )


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    async with provider_and_gateway(
        broker,
        [("/{provider}/v1/chat/completions", _answer)],
        _config,
        env={"SWITCHYARD_CREDENTIALS_KEY": MASTER, "SWITCHYARD_LOG_LEVEL": "DEBUG"},
    ) as (stack, gateway):
        yield Env(stack, gateway)


async def _ask(env: Env, key: str, model: str) -> Any:
    return await env.client(key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": uuid.uuid4().hex}]
    )


async def test_a_tenants_key_calls_its_provider_and_never_leaks(env: Env) -> None:
    answer = await _ask(env, "own", "accepting")
    assert answer.choices[0].message.content == "answered by accepting"
    assert CALLED[-1] == ("accepting", CANARY)
    fell_back = await _ask(env, "own", "refusing")  # the own key refused: managed after it
    assert fell_back.choices[0].message.content == "answered by refusing"
    assert CALLED[-2:] == [("refusing", CANARY), ("refusing", MANAGED)]
    with pytest.raises(openai.APIStatusError):  # the key's own credential: no fallback
        await _ask(env, "strict", "refusing")
    assert CALLED[-1] == ("refusing", CANARY)

    t = env.stack.topics
    topics = list(t.model_dump().values())
    records = await read_topics(
        env.stack.broker.bootstrap,
        [t.outcomes, t.responses, t.routing, t.decisions, t.requests],
        lambda found: len(found[t.outcomes]) >= 3,
        timeout_s=30,
    )
    sources = sorted((o["credential"], o["key_source"]) for o in records[t.outcomes])
    assert sources == [
        ("acme-accepting", "own"),
        ("acme-refusing", "managed"),
        ("strict-refusing", "own"),
    ]
    admin = AIOKafkaAdminClient(bootstrap_servers=env.stack.broker.bootstrap)
    await admin.start()
    try:
        names = [n for n in await admin.list_topics() if env.stack.namespace in n]
    finally:
        await admin.close()
    assert set(topics) & set(names) and any("changelog" in n for n in names)
    everything = await read_raw(env.stack.broker.bootstrap, names, idle_s=2.0, timeout_s=60)
    assert len(everything) > 10
    secret = CANARY.encode()
    assert not any(secret in (r.value or b"") or secret in (r.key or b"") for r in everything)
    worker = env.stack.workers[0]
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{worker.web_url}/metrics")).text
    assert CANARY not in metrics
    logs = [path.read_text(errors="replace") for path in env.stack.workdir.glob("*.log")]
    assert logs and not any(CANARY in text for text in logs)
