"""Mid-stream failover end to end: the official ``openai`` SDK streams through the
gateway and the embedded stack from a provider whose stream breaks after 40 of its 60
tokens (cut, stalled, a malformed chunk); the request goes on on a fallback model and
the client's stream goes on where it stopped. The client reads the whole canonical
answer byte for byte, from a fallback that continues a prefill and from one that
refuses prefills (it restarts and the repeated text is held back)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import yaml

from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway, start_gateway
from bench.fault_answer import canonical_text
from bench.fault_provider import FaultOptions, FaultProvider, start

pytestmark = pytest.mark.broker

KEY = "sk-test-failover-" + "f" * 20
BROKEN = ("stream_cut", "stream_stall", "malformed_chunk")
#: The fallbacks: ``ok`` continues a prefill; ``rejects_prefill`` answers it with a 400
#: (then restarts: the executor learns it), declared ``prefill: true`` to be asked.
FALLBACKS = {"prefill": "ok", "restart": "rejects_prefill"}


def _config(base_url: str) -> str:
    def provider(scenario: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": scenario.replace("_", "-"),
            "base_url": f"{base_url}/{scenario}/v1",
            "timeout_ms": 20_000,
            "stream_idle_timeout_ms": 1_000,  # the stall is noticed in a second
            "models": [{"name": scenario}],
            **extra,
        }

    providers = [provider(s) for s in BROKEN]
    providers += [provider(s, prefill=True) for s in FALLBACKS.values()]
    routes = {p["id"]: {"providers": [p["id"]]} for p in providers}
    nodes: dict[str, Any] = {}
    names = [f"{s}.{kind}" for s in BROKEN for kind in FALLBACKS]
    for index, name in enumerate(names):
        scenario, kind = name.split(".")
        following = f"is-{names[index + 1]}" if index + 1 < len(names) else "plain"
        nodes[f"is-{name}"] = {
            "kind": "condition",
            "when": {"model": name},
            "true": f"to-{name}",
            "false": following,
        }
        nodes[f"to-{name}"] = {
            "kind": "model",
            "target": scenario.replace("_", "-"),
            "fallback_models": [FALLBACKS[kind].replace("_", "-")],
        }
    nodes["plain"] = {"kind": "model", "target": "ok"}
    document = {
        "providers": providers,
        "routes": {**routes, **{name: {"providers": ["ok"]} for name in names}},
        "default_route": "ok",
        "dynamic_routes": {
            "failover": {
                "bind": [{"api_key": "failover"}],
                "start": f"is-{names[0]}",
                "nodes": nodes,
            }
        },
        "gateway_keys": [{"sha256": hash_key(KEY), "name": "failover"}],
    }
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0, timeout=40
        )


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    runner, port = await start(FaultProvider(FaultOptions(token_s=0.002)))
    base_url = f"http://127.0.0.1:{port}"

    def config(_: SimulatedProviders) -> str:
        return _config(base_url)

    stack = EmbeddedStack(
        broker=broker,
        namespace=f"f{uuid.uuid4().hex[:8]}",
        providers_yaml=config,
        env={"SWITCHYARD_REQUEST_DEADLINE_S": "40"},
    )
    try:
        await stack.start(workers=1)
        gateway = await start_gateway(stack.gateway_settings())
        try:
            yield Env(gateway)
        finally:
            await gateway.stop()
    finally:
        await stack.stop()
        await runner.cleanup()


@pytest.mark.parametrize("kind", list(FALLBACKS))
@pytest.mark.parametrize("scenario", BROKEN)
async def test_a_stream_broken_mid_answer_goes_on_byte_for_byte(
    env: Env, scenario: str, kind: str
) -> None:
    messages = [{"role": "user", "content": f"failover {scenario} {kind} {uuid.uuid4().hex}"}]
    raw = await env.client().chat.completions.with_raw_response.create(
        model=f"{scenario}.{kind}",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in raw.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == canonical_text(messages)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert raw.headers["x-switchyard-attempts"] == "1"  # the stream began on the primary
    # The chunks after the failover name the model that answered them.
    assert chunks[-2].model == FALLBACKS[kind]
